"""Data movement: copies, casts and embedding lookups.

Copies are ``copy_``, ``_to_copy``, ``clone`` and ``contiguous``.

- **copy**: FLOPs = |x| (one conversion per element, TraceLens's convention for ``copy_``,
  counted even when the dtypes agree); bytes = |x|·(size(src) + size(dst)). ``copy_(self,
  src)`` writes self (argument 0) from src (argument 1). Category ``UnaryElementwise``, as
  TraceLens files ``copy_``, so category totals compare.
- **embedding** (``embedding(weight [V, D], indices)``): FLOPs = 0; bytes = |indices|·size(
  indices) + 2·|indices|·D·size(weight) (each looked-up row read once and written once).
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, Unmodellable, numel
from badput.analysis.opmodel.dtypes import scalar_type_dtype

__all__ = ["MEMORY_OPS", "model_memory"]

_COPIES = frozenset({"aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous"})
MEMORY_OPS = frozenset({*_COPIES, "aten::embedding"})


def _copy(call: Call) -> OpModel:
    x, x_dt = call.tensor(0)
    if call.name == "aten::copy_":
        src_shape, src_dt = call.tensor(1)
        if numel(src_shape) > numel(x):
            raise Unmodellable("shape mismatch")  # src broadcasts into self, never the reverse
        src_bytes = numel(src_shape) * src_dt.itemsize
        dst_size = x_dt.itemsize
    else:
        # _to_copy(self, dtype?, ...): the target ScalarType, when given, is argument 1
        target = scalar_type_dtype(call.value(1)) if call.name == "aten::_to_copy" else None
        src_bytes = numel(x) * x_dt.itemsize
        dst_size = (target or x_dt).itemsize
    n = numel(x)
    params = (("op_shape", str(x)), ("dtype", x_dt.name))
    nbytes = src_bytes + n * dst_size
    return OpModel(call.name, "UnaryElementwise", float(n), float(nbytes), x_dt.precision, params)


def _embedding(call: Call) -> OpModel:
    w, w_dt = call.tensor(0, rank=2)
    idx, idx_dt = call.tensor(1)
    n = numel(idx)
    nbytes = n * idx_dt.itemsize + 2 * numel((n, w[1])) * w_dt.itemsize
    params = (("num_embeddings", w[0]), ("embedding_dim", w[1]), ("num_indices", n))
    return OpModel(call.name, "Embedding", 0.0, float(nbytes), w_dt.precision, params)


def model_memory(call: Call) -> OpModel:
    """Model one copy or embedding call; see the module docstring for the formulas.

    Args:
        call: The op call (name in :data:`MEMORY_OPS`).

    Returns:
        The model, category ``UnaryElementwise`` (copies) or ``Embedding``.

    Raises:
        Unmodellable: the shapes or dtypes do not allow a model.
    """
    if call.name == "aten::embedding":
        return _embedding(call)
    return _copy(call)
