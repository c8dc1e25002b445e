"""The result type and the defensive argument readers every op family shares."""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass

from badput.analysis.opmodel.dtypes import DType, lookup_dtype

__all__ = [
    "MAX_ELEMENTS",
    "Call",
    "OpModel",
    "Param",
    "Unmodellable",
    "broadcast",
    "numel",
]

#: Largest element count badput accepts for one tensor (2**40, 1 Ti elements, far above any
#: GPU's memory): a bigger number in `Input Dims` is a corrupt or hostile trace, not a model.
MAX_ELEMENTS = 2**40
_MAX_RANK = 16  # PyTorch tensors have at most 64 dims; real ones have far fewer
_MAX_CONCRETE = 256  # longest `Concrete Inputs` string parsed; longer ones are not ours

Param = int | float | bool | str


@dataclass(frozen=True, slots=True)
class OpModel:
    """FLOPs and bytes moved by one op call, or why there is no model.

    Attributes:
        op: The op name as recorded (``"aten::addmm"``).
        category: The op family (``"GEMM"``, ``"SDPA_fwd"``, ...; see :data:`CATEGORIES`), or
            ``None`` for an op badput does not know.
        flops: Floating-point operations of the call, or ``None`` when not modelled.
        bytes: Bytes the call must read and write at least once, or ``None``.
        precision: The roof the math runs against (a name of
            :data:`badput.estimate.hardware.PRECISIONS`), from ``Input type``; ``None`` when
            unknown or when the type has no compute roof.
        params: The parameters read from the call (``("M", 788)``, ...), as evidence.
        reason: Why the call has no model (stable, short, countable), else ``None``.
    """

    op: str
    category: str | None
    flops: float | None
    bytes: float | None
    precision: str | None = None
    params: tuple[tuple[str, Param], ...] = ()
    reason: str | None = None

    @property
    def modelled(self) -> bool:
        """Whether the call has both FLOPs and bytes."""
        return self.flops is not None and self.bytes is not None

    def param(self, key: str) -> Param | None:
        """One parameter read from the call, or ``None`` if the model did not read it."""
        for k, v in self.params:
            if k == key:
                return v
        return None


class Unmodellable(Exception):
    """Raised inside a model to stop with a reason; :func:`model_op` turns it into a result."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def numel(shape: Sequence[int]) -> int:
    """Elements of a tensor of `shape` (1 for a 0-d tensor), guarded against absurd sizes."""
    n = 1
    for d in shape:
        n *= d
        if n > MAX_ELEMENTS:
            raise Unmodellable("absurd size")
    return n


def broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """The broadcast shape of `a` and `b` (NumPy rules), or raise ``shape mismatch``."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise Unmodellable("shape mismatch")
        out.append(x if y == 1 else y)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Call:
    """One profiled op call, its argument lists taken as they came (never trusted)."""

    name: str
    dims: tuple[object, ...]
    types: tuple[object, ...]
    concrete: tuple[object, ...]

    @classmethod
    def of(cls, name: str, dims: object, types: object, concrete: object) -> Call:
        """Wrap the raw arguments; raise ``missing Input Dims``/``...type`` when absent."""
        if not isinstance(dims, list | tuple) or not dims:
            raise Unmodellable("missing Input Dims")
        if not isinstance(types, list | tuple) or not types:
            raise Unmodellable("missing Input type")
        if len(types) != len(dims):
            raise Unmodellable("malformed Input Dims")
        conc = tuple(concrete) if isinstance(concrete, list | tuple) else ()
        return cls(name, tuple(dims), tuple(types), conc)

    def has_tensor(self, i: int) -> bool:
        """Whether argument `i` is a tensor of a known dtype (an absent optional is not)."""
        return i < len(self.types) and lookup_dtype(self.types[i]) is not None

    def dtype(self, i: int) -> DType:
        """The dtype of tensor argument `i`; raise ``unknown dtype`` if it is not one."""
        if i >= len(self.types):
            raise Unmodellable("malformed Input Dims")
        dt = lookup_dtype(self.types[i])
        if dt is None:
            raise Unmodellable("unknown dtype")
        return dt

    def shape(self, i: int, rank: int | None = None, min_rank: int = 0) -> tuple[int, ...]:
        """The shape of argument `i`, validated: ints, none negative, not absurd."""
        if i >= len(self.dims):
            raise Unmodellable("malformed Input Dims")
        raw = self.dims[i]
        if not isinstance(raw, list | tuple) or len(raw) > _MAX_RANK:
            raise Unmodellable("malformed Input Dims")
        if not all(_is_int(d) for d in raw):
            raise Unmodellable("malformed Input Dims")
        shape = tuple(int(d) for d in raw)
        if any(d < 0 for d in shape):
            raise Unmodellable("negative size")
        if any(d > MAX_ELEMENTS for d in shape):
            raise Unmodellable("absurd size")
        if (rank is not None and len(shape) != rank) or len(shape) < min_rank:
            raise Unmodellable("unexpected rank")
        numel(shape)
        return shape

    def tensor(
        self, i: int, rank: int | None = None, min_rank: int = 0
    ) -> tuple[tuple[int, ...], DType]:
        """Shape and dtype of the tensor argument `i`."""
        return self.shape(i, rank, min_rank), self.dtype(i)

    def optional_tensor(self, i: int) -> tuple[tuple[int, ...], DType] | None:
        """Shape and dtype of an optional tensor argument, ``None`` when absent."""
        if i >= len(self.types) or self.types[i] in ("", None):
            return None
        return self.tensor(i)

    def value(self, i: int) -> object:
        """The Python value of ``Concrete Inputs[i]`` (``None`` when empty or unparsable)."""
        if i >= len(self.concrete):
            return None
        raw = self.concrete[i]
        if not isinstance(raw, str):
            return raw if isinstance(raw, int | float | bool) else None
        text = raw.strip()
        if not text or len(text) > _MAX_CONCRETE:
            return None
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            # `Concrete Inputs` of strings (the `approximate` of gelu, ...) are not literals
            return text

    def flag(self, i: int, default: bool = False) -> bool:
        """A bool from ``Concrete Inputs[i]``, `default` when absent."""
        v = self.value(i)
        return v if isinstance(v, bool) else default

    def number(self, i: int, default: float) -> float:
        """A finite number from ``Concrete Inputs[i]``, `default` when absent."""
        v = self.value(i)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
        return default

    def int_list(self, i: int, n: int, default: int) -> tuple[int, ...]:
        """An int list of length `n` from ``Concrete Inputs[i]`` (a single int broadcast)."""
        v = self.value(i)
        if v is None or v == "":
            return (default,) * n
        if _is_int(v):
            return (int(v),) * n  # type: ignore[call-overload]
        if isinstance(v, list | tuple) and all(_is_int(x) for x in v):
            if len(v) == 1:
                return (int(v[0]),) * n
            if len(v) == n:
                return tuple(int(x) for x in v)
        raise Unmodellable("malformed Concrete Inputs")
