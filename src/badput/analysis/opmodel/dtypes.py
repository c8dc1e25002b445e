"""Element sizes and roofline precisions of the dtype strings the PyTorch profiler records.

The profiler writes each tensor argument's dtype into ``Input type`` with the C++ type name
(``c10::BFloat16``, ``float``, ``long int``, ...); non-tensor arguments read ``Scalar``,
``ScalarList``, ``c10::string_view`` and the like, and an absent optional tensor reads ``''``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DType", "lookup_dtype", "scalar_type_dtype"]


@dataclass(frozen=True, slots=True)
class DType:
    """One tensor element type.

    Attributes:
        name: The profiler's spelling, e.g. ``"c10::BFloat16"``.
        itemsize: Bytes per stored element (a packed FP4 pair counts as one element of 1 byte,
            as the profiler counts it).
        precision: The name of the roof in :data:`badput.estimate.hardware.PRECISIONS` that math
            in this type runs against, or ``None`` for types with no compute roof (integers
            wider than 8 bits, bool, complex, scale formats).
    """

    name: str
    itemsize: int
    precision: str | None


# Keys are lower case: the profiler's spelling is stable, but lower-casing costs nothing and
# also accepts the TraceLens-normalised spellings. Precision names are those of
# badput.estimate.hardware.PRECISIONS, so a roofline can ask GpuSpec.peak(precision). FP32
# matmuls report "fp32": whether cuBLAS used TF32 is a process setting the trace does not
# record, so badput never guesses "tf32" from Input type.
_TABLE: dict[str, tuple[int, str | None]] = {
    "c10::bfloat16": (2, "bf16"),
    "c10::half": (2, "fp16"),
    "float": (4, "fp32"),
    "double": (8, "fp64"),
    "c10::float8_e4m3fn": (1, "fp8"),
    "c10::float8_e5m2": (1, "fp8"),
    "c10::float8_e4m3fnuz": (1, "fp8"),
    "c10::float8_e5m2fnuz": (1, "fp8"),
    "c10::float8_e8m0fnu": (1, None),  # an exponent-only block-scale format, not a math type
    "c10::float4_e2m1fn_x2": (1, "fp4"),  # two FP4 values packed per byte
    "signed char": (1, "int8"),
    "c10::qint8": (1, "int8"),
    "unsigned char": (1, None),
    "c10::quint8": (1, None),
    "bool": (1, None),
    "short int": (2, None),
    "unsigned short": (2, None),
    "int": (4, None),
    "unsigned int": (4, None),
    "c10::qint32": (4, None),
    "long int": (8, None),
    "unsigned long": (8, None),
    "c10::complex<c10::half>": (4, None),
    "c10::complex<float>": (8, None),
    "c10::complex<double>": (16, None),
}

# c10::ScalarType enum values (c10/core/ScalarType.h), as `Concrete Inputs` records a
# ScalarType argument such as the out_dtype of aten::_scaled_mm.
_SCALAR_TYPES: dict[int, str] = {
    0: "unsigned char",
    1: "signed char",
    2: "short int",
    3: "int",
    4: "long int",
    5: "c10::Half",
    6: "float",
    7: "double",
    11: "bool",
    15: "c10::BFloat16",
    23: "c10::Float8_e5m2",
    24: "c10::Float8_e4m3fn",
    25: "c10::Float8_e5m2fnuz",
    26: "c10::Float8_e4m3fnuz",
}


def lookup_dtype(name: object) -> DType | None:
    """The :class:`DType` of a profiler ``Input type`` string, or ``None`` if unknown.

    Args:
        name: One entry of ``Input type``; anything that is not a known tensor dtype string
            (``"Scalar"``, ``""``, a number, ``None``) gives ``None``.

    Returns:
        The dtype, or ``None``.
    """
    if not isinstance(name, str) or len(name) > 64:
        return None
    entry = _TABLE.get(name.strip().lower())
    if entry is None:
        return None
    return DType(name=name, itemsize=entry[0], precision=entry[1])


def scalar_type_dtype(code: object) -> DType | None:
    """The :class:`DType` of a ``c10::ScalarType`` enum value, or ``None`` if unknown.

    Args:
        code: The integer the profiler recorded for a ScalarType argument.

    Returns:
        The dtype, or ``None``.
    """
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    name = _SCALAR_TYPES.get(code)
    return lookup_dtype(name) if name is not None else None
