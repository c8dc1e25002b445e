"""Numbers as people read them, shared by the report formats."""

from __future__ import annotations

import re

__all__ = [
    "ELLIPSIS",
    "NOT_AVAILABLE",
    "elide_middle",
    "fits_numbers",
    "format_bytes",
    "format_dtypes",
    "format_ms",
    "format_shapes",
    "format_share",
    "plural",
    "trim_head",
    "trim_tail",
]

#: What a report shows for a share the trace leaves undefined (JSON: null).
NOT_AVAILABLE = "n/a"
#: What stands for the characters a shortened text leaves out.
ELLIPSIS = "…"

# A number, a run of numbers joined by `x` (a tile, `128x64x32`), or a fragment of one at the
# end (head) or start (tail) of a cut text: what an elision must never cut or touch.
_HEAD_NUMBER = re.compile(r"(?:\d[\d.,]*x?)+[.,]*$|[.,]+$")
_TAIL_NUMBER = re.compile(r"^[.,x]*\d[\dx.,]*|^[.,]+")
# A digit, `,` or `.` beside an ellipsis: a number that may have been cut.
_CUT_NUMBER = re.compile(r"[\d.,]…|…[\d.,]")


def plural(n: int | float, word: str, words: str | None = None) -> str:
    """`n` and `word`, the word plural unless `n` is 1: `1 step`, `6 steps`, `1,024 kernels`.

    Args:
        n: the count; integers get thousands separators.
        word: the singular.
        words: the plural where it is not `word` + `s` (`plural(2, "copy", "copies")`).

    Example:
        >>> plural(1, "step"), plural(6, "step"), plural(2, "rank")
        ('1 step', '6 steps', '2 ranks')
    """
    count = f"{int(n):,}" if float(n).is_integer() else f"{n:,.1f}"
    return f"{count} {word if n == 1 else (words or word + 's')}"


def trim_head(head: str) -> str:
    """The part before an ellipsis without a number (or a piece of one) at its end.

    Example:
        >>> trim_head("tilesize128x12"), trim_head("Layer_0"), trim_head("kernel<a, ")
        ('tilesize', 'Layer_', 'kernel<a, ')
    """
    return _HEAD_NUMBER.sub("", head)


def trim_tail(tail: str) -> str:
    """The part after an ellipsis without a number (or a piece of one) at its start.

    Example:
        >>> trim_tail("x64_warp"), trim_tail("8x64x64_v1"), trim_tail("xmma")
        ('_warp', '_v1', 'xmma')
    """
    return _TAIL_NUMBER.sub("", tail)


def fits_numbers(text: str) -> bool:
    """Whether no digit, `,` or `.` stands beside an ellipsis (no number can have been cut)."""
    return _CUT_NUMBER.search(text) is None


def format_bytes(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number at or above 1.

    Example:
        >>> format_bytes(3 * 2**20), format_bytes(512)
        ('3.00 MiB', '512 B')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def format_ms(ns: float) -> str:
    """Nanoseconds as milliseconds with two decimals and thousands separators.

    Example:
        >>> format_ms(1_234_567_890)
        '1,234.57'
    """
    return f"{ns / 1e6:,.2f}"


def format_share(share: float | None) -> str:
    """A share (goodput, a part of a window) as a percentage with one decimal.

    None, a share the trace leaves undefined (a zero-length window), is `n/a`: never 0 %,
    which would claim a measurement.

    Example:
        >>> format_share(0.5551), format_share(None)
        ('55.5 %', 'n/a')
    """
    return NOT_AVAILABLE if share is None else f"{100 * share:.1f} %"


def elide_middle(text: str, width: int) -> str:
    """`text` in at most `width` characters: its middle replaced by `…` when it is longer.

    A number is never cut: where the cut would fall inside one (or a tile like `128x64`),
    the whole number goes, so no digit stands beside the `…` (the text may come out shorter).

    Example:
        >>> elide_middle("Qwen2Model_0/Qwen2DecoderLayer_13/Qwen2MLP_13", 24)
        'Qwen2Model_…Qwen2MLP_13'
        >>> elide_middle("sm90_gemm_tilesize128x64x64_warpgroup", 24)
        'sm90_gemm_ti…_warpgroup'
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[: max(width, 0)]
    keep = width - 1
    head = (keep + 1) // 2
    return trim_head(text[:head]) + ELLIPSIS + trim_tail(text[len(text) - (keep - head) :])


# `Input type` spellings (c10 scalar type names as the profiler records them) -> short dtype.
_DTYPES = {
    "c10::BFloat16": "bf16",
    "BFloat16": "bf16",
    "c10::Half": "fp16",
    "Half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8e4m3",
    "c10::Float8_e4m3fnuz": "fp8e4m3fnuz",
    "c10::Float8_e5m2": "fp8e5m2",
    "c10::Float8_e5m2fnuz": "fp8e5m2fnuz",
    "c10::Float8_e8m0fnu": "fp8e8m0",
    "c10::Float4_e2m1fn_x2": "fp4e2m1x2",
    "long int": "i64",
    "long": "i64",
    "int64_t": "i64",
    "int": "i32",
    "short int": "i16",
    "short": "i16",
    "signed char": "i8",
    "unsigned char": "u8",
    "bool": "bool",
    "c10::complex<float>": "c64",
    "c10::complex<double>": "c128",
    "c10::complex<c10::Half>": "c32",
    # Scalar type names (older traces type Python numbers with them).
    "Float": "fp32",
    "Double": "fp64",
    "Int": "i32",
    "Long": "i64",
    "Bool": "bool",
}
# `Input type` entries that are not a tensor's dtype.
_NOT_DTYPES = frozenset(
    {"", "Scalar", "ScalarList", "TensorList", "GenericList", "None", "Device", "Layout"}
)


def format_dtypes(types: list[str], input_dims: object = None) -> str:
    """The dtypes of an op's tensor arguments, compact and each once, joined by `/`.

    Scalars, lists and absent arguments are left out; with `input_dims` (one shape per
    argument, as recorded), so is every argument without a shape (a Python number passed
    to the op, which older traces type as `Double`, `Int` or `Bool`). An unknown spelling
    is shown without its `c10::` namespace. `–` when no argument has a dtype.

    Example:
        >>> format_dtypes(["float", "c10::BFloat16", "Scalar", "float"])
        'fp32/bf16'
        >>> format_dtypes(["float", "Double"], [[32, 64], []])
        'fp32'
    """
    dims = input_dims if isinstance(input_dims, list) and len(input_dims) == len(types) else None
    out: list[str] = []
    for i, t in enumerate(types):
        if t in _NOT_DTYPES or (dims is not None and not dims[i]):
            continue
        short = _DTYPES.get(t) or t.removeprefix("c10::")
        if short not in out:
            out.append(short)
    return "/".join(out) if out else "–"


def _shape(value: object) -> str:
    """One argument's shape: `8944x1024`, a tensor list as `[a, b]` or `[a ×3]`, else ''."""
    if not isinstance(value, list) or not value:
        return "" if isinstance(value, list) or value is None else str(value)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return "x".join(str(v) for v in value)
    parts = [_shape(v) for v in value]
    parts = [p for p in parts if p]
    if not parts:
        return ""
    if len(parts) > 1 and len(set(parts)) == 1:
        return f"[{parts[0]} ×{len(parts)}]"
    return "[" + ", ".join(parts) + "]"


def format_shapes(input_dims: object) -> str:
    """An op's `Input Dims`, compact: `8944x1024 · 1024x2816`; scalars and absent left out.

    `–` without shapes.

    Example:
        >>> format_shapes([[1024], [8944, 1024], [1024, 1024], [], []])
        '1024 · 8944x1024 · 1024x1024'
    """
    if not isinstance(input_dims, list):
        return "–"
    parts = [s for s in (_shape(v) for v in input_dims) if s]
    return " · ".join(parts) if parts else "–"
