"""Reductions: ``sum``, ``mean``, ``amax``, ``max``, ``norm``, ``var``, ``argmax``, ...

FLOPs = |x| (one operation per input element, TraceLens's convention); bytes = |x|·size(x) +
|y|·size(y), where y drops (or keeps as 1) the reduced dims read from ``Concrete Inputs``
(all dims when none are given). TraceLens, given the dims as strings, reduces to a single
element; badput reads them, which differs by |y|·size(y) (0.1 % on the reference traces).
Arg-reductions write int64, ``any``/``all`` bool.
"""

from __future__ import annotations

from badput.analysis.opmodel._core import Call, OpModel, Unmodellable, numel

__all__ = ["REDUCE_OPS", "model_reduce"]

_NAMES = [
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "norm",
    "linalg_vector_norm",
    "var",
    "std",
    "var_mean",
    "std_mean",
    "argmax",
    "argmin",
    "any",
    "all",
    "logsumexp",
    "nansum",
    "count_nonzero",
]
REDUCE_OPS = frozenset(f"aten::{n}" for n in _NAMES)
_OUT_SIZE = {"argmax": 8, "argmin": 8, "count_nonzero": 8, "any": 1, "all": 1}


def _reduced_dims(call: Call, rank: int) -> set[int]:
    # The dim argument is the first int or int list after the input (a `p` of norm is a
    # float, a keepdim a bool, so they are not mistaken for it).
    for i in range(1, min(len(call.concrete), 4)):
        v = call.value(i)
        if isinstance(v, bool) or v is None or isinstance(v, float | str):
            continue
        dims = [v] if isinstance(v, int) else v
        if not isinstance(dims, list | tuple) or not all(isinstance(d, int) for d in dims):
            raise Unmodellable("malformed Concrete Inputs")
        if not dims:
            return set(range(rank))
        out = set()
        for d in dims:
            if not -max(rank, 1) <= d < max(rank, 1):
                raise Unmodellable("malformed Concrete Inputs")
            out.add(d % max(rank, 1))
        return out
    return set(range(rank))


def model_reduce(call: Call) -> OpModel:
    """Model one reduction call; see the module docstring for the formula.

    Args:
        call: The op call (name in :data:`REDUCE_OPS`).

    Returns:
        The model, category ``Reduce``.

    Raises:
        Unmodellable: the shapes or arguments do not allow a model.
    """
    x, x_dt = call.tensor(0)
    reduced = _reduced_dims(call, len(x))
    n_out = numel([d for i, d in enumerate(x) if i not in reduced])
    out_size = _OUT_SIZE.get(call.name.rsplit("::", 1)[-1], x_dt.itemsize)
    n = numel(x)
    nbytes = n * x_dt.itemsize + n_out * out_size
    params = (("num_input_elems", n), ("num_output_elems", n_out), ("dtype", x_dt.name))
    return OpModel(call.name, "Reduce", float(n), float(nbytes), x_dt.precision, params)
