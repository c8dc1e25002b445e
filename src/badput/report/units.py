"""Numbers as people read them, shared by the report formats."""

from __future__ import annotations

__all__ = [
    "NOT_AVAILABLE",
    "elide_middle",
    "format_bytes",
    "format_dtypes",
    "format_ms",
    "format_shapes",
    "format_share",
]

#: What a report shows for a share the trace leaves undefined (JSON: null).
NOT_AVAILABLE = "n/a"


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

    Example:
        >>> elide_middle("Qwen2Model_0/Qwen2DecoderLayer_13/Qwen2MLP_13", 24)
        'Qwen2Model_0…Qwen2MLP_13'
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[: max(width, 0)]
    keep = width - 1
    head = (keep + 1) // 2
    return text[:head] + "…" + text[len(text) - (keep - head) :]


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
