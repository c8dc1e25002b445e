"""Units, numbers and metric names of ``ncu --csv`` output, and lookups over one kernel's metrics.

`badput.trace.ncu` reads the table and builds its kernels from these (see it for the format).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from badput.trace.ncu import NcuRule

__all__ = ["FLOP_CLASSES", "to_bytes", "to_bytes_per_s", "to_hz", "to_ns"]

#: FLOP classes counted from the SASS counters, by the letter ncu's metric names use.
FLOP_CLASSES: tuple[str, ...] = ("fp64", "fp32", "fp16")
_CLASS_LETTER = {"d": "fp64", "f": "fp32", "h": "fp16"}

# ---- units ---------------------------------------------------------------------------------------

_TIME_NS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "nanosecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "µs": 1e3,
    "microsecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "millisecond": 1e6,
    "s": 1e9,
    "sec": 1e9,
    "second": 1e9,
}
_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40, "pi": 2.0**50}
_BYTES = re.compile(r"(?P<prefix>[kmgtp]i?)?(?:byte|b)")
_PER_TIME = re.compile(r"(?P<num>.+?)\s*/\s*(?P<time>[a-zµ]+)")
_HERTZ = re.compile(r"(?P<prefix>[kmgt])?hz")


def _prefix_factor(prefix: str | None) -> float:
    prefix = (prefix or "").lower()
    return _BINARY[prefix] if prefix in _BINARY else _DECIMAL[prefix]


def to_ns(value: float, unit: str) -> float | None:
    """Nanoseconds of a time value, or ``None`` when ``unit`` is no time unit.

    Args:
        value: the number as ncu prints it.
        unit: ``ns``, ``nsecond``, ``us``, ``usecond``, ``ms``, ``msecond``, ``s``, ``second``.
    """
    factor = _TIME_NS.get(unit.strip().lower())
    return None if factor is None else value * factor


def to_bytes(value: float, unit: str) -> float | None:
    """Bytes of a size value (``byte``, ``Kbyte`` = 1e3, ``KiB`` = 1024, ...), else ``None``."""
    match = _BYTES.fullmatch(unit.strip().lower())
    return None if match is None else value * _prefix_factor(match.group("prefix"))


def to_bytes_per_s(value: float, unit: str) -> float | None:
    """Bytes per second of a throughput (``byte/s``, ``Gbyte/second``, ``MB/ms``), else ``None``."""
    match = _PER_TIME.fullmatch(unit.strip().lower())
    if match is None:
        return None
    size = to_bytes(value, match.group("num"))
    per_ns = to_ns(1.0, match.group("time"))
    return None if size is None or per_ns is None else size / per_ns * 1e9


def to_hz(value: float, unit: str) -> float | None:
    """Hertz of a frequency (``hz``, ``Mhz``, ``Ghz``, ``cycle/nsecond``, ...), else ``None``."""
    text = unit.strip().lower()
    match = _HERTZ.fullmatch(text)
    if match is not None:
        return value * _DECIMAL[match.group("prefix") or ""]
    per = _PER_TIME.fullmatch(text)
    if per is not None and per.group("num") in ("cycle", "cycles"):
        per_ns = to_ns(1.0, per.group("time"))
        return None if per_ns is None else value / per_ns * 1e9
    return None


def _number(text: str) -> float | None:
    """A metric value as a float: thousands separators dropped; ``n/a`` or text gives ``None``."""
    text = text.strip().replace(",", "")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---- one kernel's metrics ------------------------------------------------------------


@dataclass
class _Metrics:
    """The metrics of one kernel: ncu's labels (details page) and raw metric names."""

    labelled: list[tuple[str, str, str, str]] = field(default_factory=list)  # sect, name, unit, v
    raw: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (unit, value)
    rules: list[NcuRule] = field(default_factory=list)


# Labels of the details page (they changed across ncu versions), by the quantity they carry.
_DURATION_LABELS = ("Duration",)
_SOL_COMPUTE_LABELS = ("Compute (SM) Throughput", "Compute (SM) [%]", "SM [%]", "SM Throughput")
_SOL_MEMORY_LABELS = ("Memory Throughput", "Memory [%]")
_DRAM_PCT_LABELS = ("DRAM Throughput", "DRAM [%]")
_DRAM_BW_LABELS = ("Memory Throughput", "DRAM Throughput", "DRAM Bandwidth")

_RAW_DURATION = ("gpu__time_duration.sum", "gpu__time_duration.avg")
_RAW_SOL_COMPUTE = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
_RAW_SOL_MEMORY = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)
_RAW_DRAM_PCT = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
_RAW_DRAM_BW = ("dram__bytes.sum.per_second",)
_RAW_DRAM_BYTES = ("dram__bytes.sum",)
_RAW_ACHIEVED_OCC = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
_RAW_THEORETICAL_OCC = ("sm__maximum_warps_per_active_cycle_pct",)
_RAW_SM_HZ = ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second")

_FLOP_COUNT = re.compile(
    r"(?P<unit>sm|smsp)__sass_thread_inst_executed_op_(?P<p>[dfh])(?P<op>add|mul|fma)_pred_on\.sum"
)
_FLOP_RATE = re.compile(
    r"(?P<unit>sm|smsp)__sass_thread_inst_executed_op_(?P<p>[dfh])(?P<op>add|mul|fma)"
    r"_pred_on\.sum\.per_cycle_elapsed"
)
_FLOP_RATE_X2 = re.compile(
    r"derived__(?P<unit>sm|smsp)__sass_thread_inst_executed_op_(?P<p>[dfh])fma_pred_on_x2"
)
_TENSOR = re.compile(r"__(?:inst_executed_pipe_tensor|pipe_tensor\w*cycles_active)")
# Tensor-pipe instruction counters by MMA kind (`smsp__inst_executed_pipe_tensor_op_hmma.sum`):
# hmma = FP16/BF16/TF32 (Volta to Ada), imma = integer, dmma = FP64, gmma = Hopper warpgroup MMA
# (any type). Nsight Compute "Kernel Profiling Guide", metrics reference (pipe_tensor_op_*).
_TENSOR_KIND = re.compile(r"__inst_executed_pipe_tensor_op_(?P<kind>[a-z]+?)(?:_\w+)?\.sum$")
# Tensor-path math operations by source type (`sm__ops_path_tensor_src_fp8.sum`): one count per
# floating-point (or integer) operation, as Nsight Compute's tensor roofline counts them (weight
# 1; e.g. 2·M·N·K for one FP8 GEMM). Variants split the same work by destination type, sparsity
# or MMA kind: only one level is summed (see `_tensor_ops`).
_TENSOR_OPS = re.compile(
    r"(?:sm|smsp)__ops_path_tensor_(?:op_(?P<op>[a-z]+)_)?src_(?P<src>[a-z0-9_]+?)"
    r"(?:_dst_(?P<dst>fp16|fp32))?(?:_sparsity_(?P<sp>on|off))?\.sum"
)
#: Tensor-path source types to the hardware table's precision names (int1/int4 have no entry).
_TENSOR_SRC = (
    ("fp4", "fp4"),
    ("fp8", "fp8"),
    ("bf16", "bf16"),
    ("tf32", "tf32"),
    ("fp16", "fp16"),
    ("fp64", "fp64_tensor"),
    ("int8", "int8"),
)


class _Lookup:
    """Values of one kernel's metrics, units normalised; records where each came from."""

    def __init__(self, m: _Metrics, warnings: list[str]) -> None:
        self.m = m
        self.warnings = warnings
        self.sources: dict[str, str] = {}

    def labelled(self, labels: tuple[str, ...], convert: _Convert) -> tuple[float, str] | None:
        # A label can carry several quantities ("Memory Throughput" is a percentage in the SOL
        # section and bytes per second in Memory Workload Analysis): the unit decides.
        for label in labels:
            for section, name, unit, text in self.m.labelled:
                if name != label or not unit:
                    continue
                value = _number(text)
                if value is None:
                    continue
                out = convert(value, unit)
                if out is not None:
                    return out, f"{section} / {name} ({unit})"
        return None

    def raw(self, names: tuple[str, ...], convert: _Convert, what: str) -> tuple[float, str] | None:
        for name in names:
            if name not in self.m.raw:
                continue
            unit, text = self.m.raw[name]
            value = _number(text)
            if value is None:
                continue
            out = convert(value, unit)
            if out is None:
                self.warnings.append(f"{name}: unit {unit!r} is not a {what} unit; ignored")
                continue
            return out, f"{name} ({unit})" if unit else name
        return None

    def first(
        self,
        key: str,
        labels: tuple[str, ...],
        raw_names: tuple[str, ...],
        convert: _Convert,
        what: str,
    ) -> float | None:
        found = self.raw(raw_names, convert, what) or self.labelled(labels, convert)
        if found is None:
            return None
        self.sources[key] = found[1]
        return found[0]


#: A unit conversion: (value, unit) to the base unit, or None when the unit does not fit.
_Convert = Callable[[float, str], float | None]


# Unit conversions by quantity. An empty unit (a raw page without its units line) is taken
# as ncu's base unit.
def _time(value: float, unit: str) -> float | None:
    return to_ns(value, unit.strip() or "ns")


def _size(value: float, unit: str) -> float | None:
    return to_bytes(value, unit.strip() or "byte")


def _bandwidth(value: float, unit: str) -> float | None:
    return to_bytes_per_s(value, unit.strip() or "byte/second")


def _frequency(value: float, unit: str) -> float | None:
    return to_hz(value, unit.strip() or "hz")


def _percent(value: float, unit: str) -> float | None:
    return value if unit.strip() in ("%", "", "pct") else None


def _flops(
    look: _Lookup, dur_ns: float | None
) -> tuple[dict[str, float] | None, float | None, str | None]:
    """FLOPs per class and FLOP/s from the SASS counters (counts first, then per-cycle rates)."""
    counts: dict[tuple[str, str, str], float] = {}  # (unit, class, op) -> count
    rates: dict[tuple[str, str, str], float] = {}  # per cycle
    for name, (_, text) in look.m.raw.items():
        value = _number(text)
        if value is None:
            continue
        if match := _FLOP_COUNT.fullmatch(name):
            counts[(match["unit"], _CLASS_LETTER[match["p"]], match["op"])] = value
        elif match := _FLOP_RATE.fullmatch(name):
            rates[(match["unit"], _CLASS_LETTER[match["p"]], match["op"])] = value
        elif match := _FLOP_RATE_X2.fullmatch(name):
            # The roofline section's derived metric: FMA instructions per cycle times two.
            rates.setdefault((match["unit"], _CLASS_LETTER[match["p"]], "fma"), value / 2)
    weight = {"add": 1.0, "mul": 1.0, "fma": 2.0}  # an FMA is a multiply and an add

    def per_class(table: Mapping[tuple[str, str, str], float]) -> dict[str, float]:
        unit = "sm" if any(k[0] == "sm" for k in table) else "smsp"  # sm sums its smsps
        out = dict.fromkeys(FLOP_CLASSES, 0.0)
        for (u, cls, op), value in table.items():
            if u == unit:
                out[cls] += weight[op] * value
        return out

    if counts:
        flops = per_class(counts)
        rate = sum(flops.values()) / (dur_ns * 1e-9) if dur_ns else None
        return flops, rate, "sm__sass_thread_inst_executed_op_*_pred_on.sum (add + mul + 2 fma)"
    if rates:
        unit = "sm" if any(k[0] == "sm" for k in rates) else "smsp"
        names = (f"{unit}__cycles_elapsed.avg.per_second", *_RAW_SM_HZ)
        hz = look.raw(names, _frequency, "frequency")
        if hz is None:
            look.warnings.append("FLOP rates per cycle without a cycles-per-second metric; ignored")
            return None, None, None
        per_cycle = per_class(rates)
        flop_rate_by_class = {c: v * hz[0] for c, v in per_cycle.items()}
        rate = sum(flop_rate_by_class.values())
        counted = {c: v * dur_ns * 1e-9 for c, v in flop_rate_by_class.items()} if dur_ns else None
        source = f"{unit}__sass_thread_inst_executed_op_*_pred_on.sum.per_cycle_elapsed x {hz[1]}"
        return counted, rate, source
    return None, None, None


def _tensor_precision(src: str) -> str | None:
    for token, precision in _TENSOR_SRC:
        if token in src:
            return precision
    return None


def _tensor_ops(m: _Metrics) -> tuple[dict[str, float] | None, str | None]:
    """Tensor-path operations per table precision, and the metrics they came from.

    Per source type the most aggregate level present is used, never two levels of the same
    work: the plain counter (``src_fp8.sum``), else its destination split summed, else its
    sparsity split, else its MMA-kind split. ``None`` when the CSV has no such counter.
    """
    levels: dict[str, dict[int, list[tuple[str, float]]]] = {}
    for name, (_, text) in m.raw.items():
        match = _TENSOR_OPS.fullmatch(name)
        value = _number(text) if match else None
        if match is None or value is None:
            continue
        level = 3 if match["op"] else 2 if match["sp"] else 1 if match["dst"] else 0
        levels.setdefault(match["src"], {}).setdefault(level, []).append((name, value))
    if not levels:
        return None, None
    ops: dict[str, float] = {}
    names: list[str] = []
    for src, by_level in sorted(levels.items()):
        precision = _tensor_precision(src)
        if precision is None:
            continue
        chosen = by_level[min(by_level)]
        ops[precision] = ops.get(precision, 0.0) + sum(v for _, v in chosen)
        names += [n for n, v in chosen if v > 0]
    return ops, " + ".join(names) if names else None


def _tensor_kinds(m: _Metrics) -> tuple[str, ...]:
    """MMA kinds (hmma, imma, dmma, gmma, ...) whose tensor-pipe instruction count is above 0."""
    kinds: dict[str, None] = {}
    for name, (_, text) in m.raw.items():
        match = _TENSOR_KIND.search(name)
        value = _number(text) if match else None
        if match is not None and value is not None and value > 0:
            kinds[match["kind"]] = None
    return tuple(kinds)
