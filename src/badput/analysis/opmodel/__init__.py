"""Per-op performance model: FLOPs and bytes moved of one profiled op call.

Pure functions of what ``torch.profiler`` records with ``record_shapes=True`` (the op name,
``Input Dims``, ``Input type``, ``Concrete Inputs``); no trace reading. One module per op
family, each stating its formula; docs/opmodel.md collects them with the conventions shared
with, and differing from, TraceLens. :func:`model_op` never raises and never makes up a
number: a call it cannot model gets ``flops = bytes = None`` and a short, countable reason.
"""

from __future__ import annotations

from collections.abc import Callable

from badput.analysis.opmodel._core import MAX_ELEMENTS, Call, OpModel, Unmodellable
from badput.analysis.opmodel.attention import ATTENTION_OPS, causal_fraction, model_attention
from badput.analysis.opmodel.conv import CONV_OPS, model_conv
from badput.analysis.opmodel.dtypes import DType, lookup_dtype
from badput.analysis.opmodel.elementwise import (
    BINARY_OPS,
    SOFTMAX_OPS,
    UNARY_OPS,
    model_elementwise,
)
from badput.analysis.opmodel.gemm import GEMM_OPS, model_gemm
from badput.analysis.opmodel.memory import MEMORY_OPS, model_memory
from badput.analysis.opmodel.norm import NORM_OPS, model_norm
from badput.analysis.opmodel.reduce import REDUCE_OPS, model_reduce

__all__ = [
    "CATEGORIES",
    "MAX_ELEMENTS",
    "DType",
    "OpModel",
    "causal_fraction",
    "is_modelled_op",
    "lookup_dtype",
    "model_op",
    "tracelens_category",
]

#: Categories an :class:`OpModel` can carry, named as TraceLens names its sheets/categories.
CATEGORIES: tuple[str, ...] = (
    "GEMM",
    "CONV_fwd",
    "CONV_bwd",
    "SDPA_fwd",
    "SDPA_bwd",
    "NORM_fwd",
    "NORM_bwd",
    "UnaryElementwise",
    "BinaryElementwise",
    "Reduce",
    "Softmax",
    "Embedding",
)

# TraceLens's `op category` (ops_summary_by_category.csv) for each badput category: its
# elementwise sheets roll up into "elementwise", its Reduce sheet into "reduce", and what it
# does not model into "other".
_TRACELENS = {
    "UnaryElementwise": "elementwise",
    "BinaryElementwise": "elementwise",
    "Reduce": "reduce",
    "Softmax": "other",
    "Embedding": "other",
}

_FAMILIES: tuple[tuple[frozenset[str], Callable[[Call], OpModel]], ...] = (
    (GEMM_OPS, model_gemm),
    (CONV_OPS, model_conv),
    (ATTENTION_OPS, model_attention),
    (NORM_OPS, model_norm),
    (MEMORY_OPS, model_memory),
    (REDUCE_OPS, model_reduce),
    (UNARY_OPS | BINARY_OPS | SOFTMAX_OPS, model_elementwise),
)


def _family(name: str) -> Callable[[Call], OpModel] | None:
    for ops, fn in _FAMILIES:
        if name in ops:
            return fn
    return None


def is_modelled_op(name: object) -> bool:
    """Whether badput has a model for op `name` (shapes may still make a call unmodellable)."""
    return isinstance(name, str) and _family(name) is not None


def tracelens_category(category: str | None) -> str:
    """TraceLens's ``op category`` for a badput category (``"other"`` for none)."""
    if category is None:
        return "other"
    return _TRACELENS.get(category, category)


def model_op(
    name: object,
    input_dims: object,
    input_types: object,
    concrete_inputs: object = None,
) -> OpModel:
    """FLOPs and bytes of one op call as the PyTorch profiler records it.

    Args:
        name: The op name (``"aten::addmm"``).
        input_dims: ``Input Dims``: one shape (list of ints) per argument, ``[]`` for scalars.
        input_types: ``Input type``: one dtype string per argument (``"c10::BFloat16"``,
            ``"Scalar"``, ``""`` for an absent optional).
        concrete_inputs: ``Concrete Inputs``: one string per argument (the values of
            non-tensor arguments, ``""`` for tensors), when the trace has them.

    Returns:
        The model; for a call that cannot be modelled ``flops`` and ``bytes`` are ``None``
        and ``reason`` says why (``"unknown op"``, ``"missing Input Dims"``,
        ``"negative size"``, ``"absurd size"``, ``"unknown dtype"``, ...). Never raises.
    """
    if not isinstance(name, str) or len(name) > 256:
        return OpModel(str(name)[:256], None, None, None, reason="unknown op")
    fn = _family(name)
    if fn is None:
        return OpModel(name, None, None, None, reason="unknown op")
    try:
        result = fn(Call.of(name, input_dims, input_types, concrete_inputs))
    except Unmodellable as e:
        return OpModel(name, _category_guess(name), None, None, reason=e.reason)
    except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError, MemoryError):
        # A model bug must not take the analysis down: count it like any unmodelled call.
        return OpModel(name, _category_guess(name), None, None, reason="model error")
    return result


def _category_guess(name: str) -> str | None:
    """The category of an op whose call could not be modelled, for counting by family."""
    if name in GEMM_OPS:
        return "GEMM"
    if name in ATTENTION_OPS:
        return "SDPA_bwd" if "backward" in name else "SDPA_fwd"
    if name in CONV_OPS:
        return "CONV_bwd" if "backward" in name else "CONV_fwd"
    if name in NORM_OPS:
        return "NORM_bwd" if "backward" in name else "NORM_fwd"
    if name in REDUCE_OPS:
        return "Reduce"
    if name in SOFTMAX_OPS:
        return "Softmax"
    if name == "aten::embedding":
        return "Embedding"
    if name in BINARY_OPS:
        return "BinaryElementwise"
    return "UnaryElementwise"
