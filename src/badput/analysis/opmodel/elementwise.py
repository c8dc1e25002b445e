"""Elementwise ops (unary and binary) and softmax.

- **unary** (``relu``, ``gelu``, ``silu``, ``exp``, ``pow(Tensor, Scalar)``, ...): FLOPs = |x|
  (one operation per element, TraceLens's convention, whatever the function costs in
  instructions); bytes = |x|·(size(x) + size(y)), y of x's dtype. A fill (``fill_``,
  ``zero_``) reads nothing and computes nothing: FLOPs = 0, bytes = |x|·size(x), the write.
- **binary** (``add``, ``mul``, ``sub``, ``div``, comparisons, ...): y has the broadcast shape;
  FLOPs = |y|; bytes = |a|·size(a) + |b|·size(b) + |y|·size(y), each operand counted at its
  recorded size (a broadcast operand is read once). A Python scalar operand moves no bytes.
  size(y) follows type promotion: the larger of the two when both are tensors of rank ≥ 1,
  else a's. In-place forms (``add_``) write y into a and are counted the same way.
- **softmax** (``_softmax``, ``softmax``, ``_log_softmax``, ...): FLOPs = 3·|x| (exp, sum,
  divide, TraceLens's count; the max-subtract is not counted); bytes = |x|·(size(x) +
  size(y)), y fp32 when ``half_to_float`` is set.
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, broadcast, numel
from badput.analysis.opmodel.dtypes import lookup_dtype

__all__ = ["BINARY_OPS", "SOFTMAX_OPS", "UNARY_OPS", "model_elementwise"]

_UNARY_NAMES = [
    "abs",
    "neg",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "relu6",
    "gelu",
    "silu",
    "mish",
    "erf",
    "erfc",
    "erfinv",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "clamp",
    "clamp_min",
    "clamp_max",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "leaky_relu",
    "elu",
    "selu",
    "celu",
    "softplus",
    "logit",
    "nan_to_num",
    "square",
    "threshold",
    "sgn",
    "bitwise_not",
    "logical_not",
    "fill",
    "zero",
    "gelu_backward_unused",
]
_BINARY_NAMES = [
    "add",
    "sub",
    "rsub",
    "mul",
    "div",
    "true_divide",
    "floor_divide",
    "remainder",
    "fmod",
    "maximum",
    "minimum",
    "pow",
    "atan2",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "hypot",
    "copysign",
    "xlogy",
    "threshold_backward",
    "silu_backward",
    "gelu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "masked_fill",
]
UNARY_OPS = frozenset(f"aten::{n}{s}" for n in _UNARY_NAMES for s in ("", "_"))
BINARY_OPS = frozenset(f"aten::{n}{s}" for n in _BINARY_NAMES for s in ("", "_"))
SOFTMAX_OPS = frozenset(
    {"aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::log_softmax"}
)


_FILLS = frozenset({"fill", "zero"})


def _unary(call: Call) -> OpModel:
    x, x_dt = call.tensor(0)
    n = numel(x)
    fill = call.name.removeprefix("aten::").rstrip("_") in _FILLS
    return OpModel(
        call.name,
        "UnaryElementwise",
        0.0 if fill else float(n),
        float(n * (1 if fill else 2) * x_dt.itemsize),
        x_dt.precision,
        (("op_shape", str(x)), ("dtype", x_dt.name)),
    )


def _binary(call: Call) -> OpModel:
    a, a_dt = call.tensor(0)
    b_dt = lookup_dtype(call.types[1]) if len(call.types) > 1 else None
    if b_dt is None:
        # a Tensor-Scalar overload (mul(Tensor, Scalar), masked_fill(.., Scalar)): unary-like
        b: tuple[int, ...] = ()
        b_bytes = 0
        y = a
        out = a_dt
    else:
        b = call.shape(1)
        b_bytes = numel(b) * b_dt.itemsize
        y = broadcast(a, b)
        # torch promotion: a 0-d tensor does not widen a dimensioned one of the same kind
        if not b or not a:
            out = b_dt if not a and b else a_dt
        else:
            out = b_dt if b_dt.itemsize > a_dt.itemsize else a_dt
    if call.name.rstrip("_").rsplit("::", 1)[-1] in {"eq", "ne", "lt", "le", "gt", "ge"}:
        out = lookup_dtype("bool") or out
    n = numel(y)
    nbytes = numel(a) * a_dt.itemsize + b_bytes + n * out.itemsize
    params = (("shape_in1", str(a)), ("shape_in2", str(b)), ("dtype_in1", a_dt.name))
    return OpModel(call.name, "BinaryElementwise", float(n), float(nbytes), a_dt.precision, params)


def _softmax(call: Call) -> OpModel:
    x, x_dt = call.tensor(0)
    n = numel(x)
    # _softmax(self, dim, half_to_float); softmax(self, dim, dtype?): fp32 out when asked.
    out = x_dt.itemsize
    if call.name.startswith("aten::_") and call.flag(2):
        out = 4
    nbytes = n * (x_dt.itemsize + out)
    params = (("op_shape", str(x)), ("dim", str(call.value(1))))
    return OpModel(call.name, "Softmax", float(3 * n), float(nbytes), x_dt.precision, params)


def model_elementwise(call: Call) -> OpModel:
    """Model one unary, binary or softmax call; see the module docstring for the formulas.

    Args:
        call: The op call (name in :data:`UNARY_OPS`, :data:`BINARY_OPS` or
            :data:`SOFTMAX_OPS`).

    Returns:
        The model, category ``UnaryElementwise``, ``BinaryElementwise`` or ``Softmax``.

    Raises:
        Unmodellable: the shapes or dtypes do not allow a model.
    """
    if call.name in SOFTMAX_OPS:
        return _softmax(call)
    if (call.name in BINARY_OPS and call.name.rstrip("_") != "aten::pow") or (
        call.name.startswith("aten::pow") and call.has_tensor(1)
    ):
        return _binary(call)
    return _unary(call)
