"""Collective communication of one GPU: per type count, time, exposed time and bandwidth.

The rows are the device's communication kernels (`patterns.is_communication_kernel`) that
overlap the analysis window. Message sizes come from the NCCL metadata newer Kineto traces
carry (`Trace.comm_meta`); bandwidths follow nccl-tests' definitions:

- algbw = size / time, with size as nccl-tests prints it (the whole buffer: for all-gather the
  gathered output, for reduce-scatter the input before scattering, for all-to-all the whole
  send buffer), in GB/s = 1e9 B/s;
- busbw = algbw x a factor per collective that makes it comparable to the hardware's link
  bandwidth (nccl-tests `doc/PERFORMANCE.md`, "Bus bandwidth",
  https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from badput.analysis._nesting import order_by
from badput.analysis.patterns import (
    CATEGORIES,
    COMM_KINDS,
    classify_name,
    comm_kind_from_letters,
    kernel_callee,
)
from badput.trace.model import NO_ID, CommMeta, Trace

if TYPE_CHECKING:
    from badput.analysis.results import DeviceAnalysis

__all__ = [
    "COLLECTIVE_TYPES",
    "CollectiveStat",
    "Collectives",
    "bus_factor",
    "collective_stats",
    "collective_type",
    "collectives",
    "dtype_bytes",
    "link_peak_gbps",
    "meta_index",
]

I64 = npt.NDArray[np.int64]

#: Collective types, in report order; `Collectives.type_code` indexes this tuple.
COLLECTIVE_TYPES = COMM_KINDS
_CODE = {t: i for i, t in enumerate(COLLECTIVE_TYPES)}

# Bytes per element of the "dtype" metadata, which holds a c10 ScalarType name (PyTorch
# c10/core/ScalarType.h, AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS).
_DTYPE_BYTES = {
    "Byte": 1,
    "Char": 1,
    "Short": 2,
    "Int": 4,
    "Long": 8,
    "Half": 2,
    "Float": 4,
    "Double": 8,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Bool": 1,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "BFloat16": 2,
    "QUInt4x2": 1,
    "QUInt2x4": 1,
    "Bits1x8": 1,
    "Bits2x4": 1,
    "Bits4x2": 1,
    "Bits8": 1,
    "Bits16": 2,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "Int16": 2,
    "Int32": 4,
    "Int64": 8,
}


def collective_type(kernel_name: str, collective_name: str | None = None) -> str:
    """The collective type (one of `COLLECTIVE_TYPES`) of a communication kernel.

    Args:
        kernel_name: the kernel's name (`ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`).
        collective_name: the `"Collective name"` NCCL metadata, when the trace has it; it
            decides over the kernel name (NCCL runs an all-to-all as SendRecv kernels).

    Returns:
        The type; "other" when neither name says.

    Example:
        >>> collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)")
        'send_recv'
        >>> collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "all_to_allv")
        'all_to_all'
    """
    if collective_name:
        return comm_kind_from_letters(collective_name)
    return classify_name(kernel_name).kind or comm_kind_from_letters(kernel_callee(kernel_name))


def bus_factor(collective_type: str, ranks: int) -> float:
    """Ratio busbw / algbw of a collective over `ranks` ranks, as nccl-tests defines it.

    From nccl-tests `doc/PERFORMANCE.md` ("Bus bandwidth"): all-reduce 2(n-1)/n; reduce-scatter
    and all-gather (n-1)/n; broadcast and reduce 1; and from its sources, all-to-all (n-1)/n
    (`src/alltoall.cu`, `AlltoAllGetBw`) and send/recv 1 (`src/sendrecv.cu`, `SendRecvGetBw`).

    Args:
        collective_type: one of `COLLECTIVE_TYPES` except "other".
        ranks: ranks in the communicator (`"Group size"`), at least 1.

    Returns:
        The factor.

    Raises:
        ValueError: "other" or an unknown type, or `ranks < 1`.

    Example:
        >>> bus_factor("all_reduce", 8)
        1.75
    """
    if ranks < 1:
        raise ValueError(f"a collective needs at least one rank, got {ranks}")
    n = ranks
    if collective_type == "all_reduce":
        return 2 * (n - 1) / n
    if collective_type in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective_type in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise ValueError(f"no bus bandwidth factor for collective type {collective_type!r}")


def dtype_bytes(dtype: str) -> int | None:
    """Bytes per element of a `"dtype"` NCCL metadata value (c10 ScalarType name), or None."""
    return _DTYPE_BYTES.get(dtype)


def link_peak_gbps(gpu_name: str | None, *, warn: bool = True) -> float | None:
    """GPU-to-GPU link peak of one direction, GB/s, to compare bus bandwidth against.

    nccl-tests' busbw is what each rank moves one way (PERFORMANCE.md: it is "comparable" to
    the hardware's peak bandwidth); the hardware table's `interconnect_gbs` is the datasheet's
    figure for both directions together (an A100 SXM's NVLink: 600 GB/s, so 300 one way).

    Args:
        gpu_name: the GPU model as the trace names it (`"NVIDIA A100-SXM4-40GB"`), or None.
        warn: whether an unknown GPU warns (reports pass False: "peak unknown" is enough).

    Returns:
        Half the table's `interconnect_gbs`; None for a PCIe-only or unknown GPU (an unknown
        one also warns, see `estimate.hardware.lookup_gpu`).
    """
    from badput.estimate.hardware import lookup_gpu

    if not gpu_name:
        return None
    with warnings.catch_warnings():
        if not warn:
            warnings.simplefilter("ignore")
        spec = lookup_gpu(gpu_name)
    if spec is None or spec.interconnect_gbs is None:
        return None
    return spec.interconnect_gbs / 2


@dataclass(frozen=True, eq=False)
class Collectives:
    """The communication kernels of one device that overlap the analysis window, in time order.

    Times are nanoseconds on the trace's own clock. Integer columns hold `NO_ID` where the
    trace does not say.

    Attributes:
        type_code: index into `COLLECTIVE_TYPES`.
        start_ns: kernel start (not clipped to the window).
        end_ns: kernel end (not clipped).
        exposed_ns: the part of the kernel inside the window not under compute. Where kernels
            overlap each other, the shared time counts once, for the one that started first,
            so the column sums to `DeviceAnalysis.breakdown.communication_ns`.
        msg_bytes: message size as nccl-tests' "size" column defines it for the collective:
            max(`In msg nelems`, `Out msg nelems`) x dtype bytes; `NO_ID` without metadata.
        group_size: ranks in the communicator (`"Group size"`); `NO_ID` without metadata.
        stream: CUDA stream.
        inside_ns: the part of the kernel inside the window.
        row: the kernel's row in the Trace (its name is `trace.name_of(row)`).
    """

    type_code: npt.NDArray[np.int8]
    start_ns: I64
    end_ns: I64
    exposed_ns: I64
    msg_bytes: I64
    group_size: I64
    stream: I64
    inside_ns: I64
    row: I64

    def __len__(self) -> int:
        """Number of kernels."""
        return int(self.type_code.shape[0])

    @staticmethod
    def empty() -> Collectives:
        """No kernels."""
        z = np.zeros(0, np.int64)
        return Collectives(np.zeros(0, np.int8), z, z, z, z, z, z, z, z)

    @property
    def types(self) -> list[str]:
        """Type name of each kernel."""
        return [COLLECTIVE_TYPES[c] for c in self.type_code.tolist()]


@dataclass(frozen=True)
class CollectiveStat:
    """Totals of one collective type on one device inside the analysis window.

    Attributes:
        type: one of `COLLECTIVE_TYPES`.
        count: kernels.
        total_ns: kernel time inside the window, summed over the kernels (not unioned).
        exposed_ns: of that, the time not under compute (see `Collectives.exposed_ns`).
        msg_bytes: bytes summed over the kernels whose size is known; None if none is.
        algbw_gbps: sum(bytes) / sum(kernel duration) over the kernels of known size, GB/s
            (1e9 B/s, as nccl-tests); whole durations, also of kernels the window cuts.
        busbw_gbps: sum(bytes x bus_factor) / sum(duration) over the kernels of known size and
            group size; `algbw_gbps * bus_factor(type, n)` when every kernel has n ranks. None
            for "other" or without a known group size.
        sized_count: kernels whose size is known (those `algbw_gbps` averages over).
    """

    type: str
    count: int
    total_ns: int
    exposed_ns: int
    msg_bytes: int | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    sized_count: int = 0

    @property
    def overlap_share(self) -> float | None:
        """Share of the kernel time hidden under compute, `1 - exposed / total`."""
        return 1 - self.exposed_ns / self.total_ns if self.total_ns > 0 else None


def collectives(trace: Trace, analysis: DeviceAnalysis) -> Collectives:
    """The communication kernels of the analysed device, with exposed time and NCCL metadata.

    Args:
        trace: the trace the analysis came from.
        analysis: one device's result of `analyze_trace(trace, ...)`.

    Returns:
        One row per communication kernel of `analysis.device` overlapping its window.

    Example:
        >>> from badput.analysis import analyze_trace  # doctest: +SKIP
        >>> [collective_stats(collectives(t, a)) for a in analyze_trace(t)]  # doctest: +SKIP
    """
    timeline = analysis.timeline
    if timeline is None or analysis.device < 0:
        return Collectives.empty()
    w0 = analysis.window_start_ns
    w1 = w0 + analysis.window_ns
    classes = timeline.classes
    if classes is None:
        from badput.analysis.classify import classify_kernels

        classes = classify_kernels(trace)
    mine = (classes.category == CATEGORIES.index("communication")) & (
        trace.device[classes.row] == analysis.device
    )
    rows = classes.row[mine]
    kinds = classes.kind[mine]
    start = trace.ts_ns[rows]
    end = start + trace.dur_ns[rows]
    # Overlapping the window; a zero-length kernel counts where it starts.
    keep = (start < w1) & ((end > w0) | (start >= w0))
    rows, start, end, kinds = rows[keep], start[keep], end[keep], kinds[keep]
    order = order_by(start, rows)  # by start, ties by row
    rows, start, end, kinds = rows[order], start[order], end[order], kinds[order]
    n = rows.shape[0]

    # Give each instant of exposed communication to the earliest-started kernel covering it:
    # kernel i owns [max(start_i, max(end_j, j < i)), end_i). Sorted by start, these pieces
    # partition the union of the kernels, so the exposed parts sum to the analysis' total.
    reach = np.maximum.accumulate(end) if n else end
    lo = np.empty(n, np.int64)
    if n:
        lo[0] = start[0]
        lo[1:] = np.maximum(start[1:], reach[:-1])
    lo = np.minimum(lo, end)
    exposed = timeline.exposed_communication.measure_between(lo, end)
    inside = np.maximum(np.minimum(end, w1) - np.maximum(start, w0), 0)

    # The kind comes from the classes: NCCL metadata, the launching op, the name, in order.
    type_code = kinds.astype(np.int8)
    m_index = classes.meta[classes.index_of(rows)]
    msg_bytes = np.full(n, NO_ID, np.int64)
    group_size = np.full(n, NO_ID, np.int64)
    meta = trace.comm_meta
    if meta is not None:
        for i, m in enumerate(m_index.tolist()):
            if m >= 0:
                msg_bytes[i] = _message_bytes(meta, m)
                group_size[i] = int(meta.group_size[m])
    return Collectives(
        type_code=type_code,
        start_ns=start,
        end_ns=end,
        exposed_ns=exposed.astype(np.int64, copy=False),
        msg_bytes=msg_bytes,
        group_size=group_size,
        stream=trace.stream[rows],
        inside_ns=inside,
        row=rows.astype(np.int64, copy=False),
    )


def meta_index(trace: Trace, rows: npt.NDArray[np.intp]) -> I64:
    """Index into `trace.comm_meta` of each kernel's metadata, `NO_ID` where it has none.

    A kernel's own args come first; else the host op that launched it (the `record_param_comms`
    or `nccl:*` op with the kernel's External id) if that op has metadata.
    """
    out = np.full(rows.shape[0], NO_ID, np.int64)
    meta = trace.comm_meta
    if meta is None or len(meta) == 0 or rows.shape[0] == 0:
        return out
    pos = np.searchsorted(meta.row, rows)
    safe = np.minimum(pos, len(meta) - 1)
    own = meta.row[safe] == rows
    out[own] = safe[own]
    host = np.flatnonzero(trace.device[meta.row] == NO_ID)
    ext = trace.external_id[meta.row[host]]
    host, ext = host[ext != NO_ID], ext[ext != NO_ID]
    missing = np.flatnonzero(~own)
    if host.shape[0] and missing.shape[0]:
        by_ext = np.argsort(ext, kind="stable")
        ext_sorted, host_sorted = ext[by_ext], host[by_ext]
        want = trace.external_id[rows[missing]]
        at = np.minimum(np.searchsorted(ext_sorted, want), ext_sorted.shape[0] - 1)
        hit = (ext_sorted[at] == want) & (want != NO_ID)
        out[missing[hit]] = host_sorted[at[hit]]
    return out


def _message_bytes(meta: CommMeta, m: int) -> int:
    """nccl-tests' size of metadata entry m, `NO_ID` when the entry cannot tell."""
    dtype = meta.string(int(meta.dtype[m]))
    size = dtype_bytes(dtype) if dtype is not None else None
    nelems = max(int(meta.in_nelems[m]), int(meta.out_nelems[m]))
    if size is None or nelems < 0:
        return NO_ID
    return nelems * size


def collective_stats(c: Collectives) -> list[CollectiveStat]:
    """Per type totals of `collectives(...)`, one per type present, in `COLLECTIVE_TYPES` order.

    Args:
        c: the kernels of one device.

    Returns:
        The totals; empty without kernels.
    """
    stats: list[CollectiveStat] = []
    dur = c.end_ns - c.start_ns
    for code in np.unique(c.type_code).tolist():
        kind = COLLECTIVE_TYPES[code]
        mine = c.type_code == code
        sized = mine & (c.msg_bytes >= 0)
        size_bytes = c.msg_bytes[sized]
        sized_ns = int(dur[sized].sum())
        msg_bytes = int(size_bytes.sum()) if size_bytes.shape[0] else None
        # 1 byte per ns is 1e9 B/s: GB/s as nccl-tests counts it.
        algbw = int(size_bytes.sum()) / sized_ns if sized_ns > 0 else None
        busbw: float | None = None
        both = sized & (c.group_size >= 1)
        both_ns = int(dur[both].sum())
        if kind != "other" and both_ns > 0:
            moved = sum(
                b * bus_factor(kind, g)
                for b, g in zip(c.msg_bytes[both].tolist(), c.group_size[both].tolist(),
                                strict=True)
            )  # fmt: skip
            busbw = moved / both_ns
        stats.append(
            CollectiveStat(
                type=kind,
                count=int(mine.sum()),
                total_ns=int(c.inside_ns[mine].sum()),
                exposed_ns=int(c.exposed_ns[mine].sum()),
                msg_bytes=msg_bytes,
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                sized_count=int(sized.sum()),
            )
        )
    return stats
