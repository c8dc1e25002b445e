"""Nsight Compute ``ncu --csv`` output: per kernel, time, FLOPs, DRAM traffic, SOL and rules.

Two layouts are read, both as ``ncu`` prints them (stdout or ``--log-file``):

- the *details* page (``--csv``, ``--page details``, the default): one row per metric and one
  per rule result, columns ``ID, Process ID, ..., Kernel Name, ..., Device, CC, Section Name,
  Metric Name, Metric Unit, Metric Value`` and, since the rules carry estimates, ``Rule Name,
  Rule Type, Rule Description, Estimated Speedup Type, Estimated Speedup``. Metric rows may
  stop after ``Metric Value`` (with or without a trailing comma);
- the *raw* page (``--csv --page raw``): one row per kernel, one column per metric
  (``gpu__time_duration.sum``, ``dram__bytes.sum.per_second``, ...), the second line holding
  the units.

Lines that are not part of the table (``==PROF==`` progress, ``==WARNING==``, the
application's own output before, between or after) are skipped and counted. A file that ends
inside a row is an error, as are a file without the table, an empty file and a missing file:
each raises :class:`~badput.errors.TraceFormatError` naming the file.

Numbers carry thousands separators (``"4,963,609,951.19"``); units vary with the ncu version and
the ``--print-units`` option (``ns``/``nsecond``/``usecond``/``msecond``; ``byte/s`` to
``Tbyte/second``; ``hz`` to ``Ghz`` or ``cycle/nsecond``). Everything is normalised here to
nanoseconds, bytes, bytes per second and hertz; ncu's byte prefixes are decimal (K = 1e3), and
binary ones (``KiB``, ``Mibyte``) are read as 1024 powers.

FLOPs come from the SASS floating-point instruction counters, as Nsight Compute's own
``SpeedOfLight_RooflineChart`` section computes them: ``add + mul + 2 x fma`` per precision
(``sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum``), or the section's
per-cycle rates times ``smsp__cycles_elapsed.avg.per_second``. The details page does not print
those counters (the roofline is a chart there), so a details export without
``--metrics``/raw columns has no FLOP count: the reader says so (``flops is None``) and never
invents one. Tensor-core work is not in these counters; a kernel that used the tensor pipe
says so in ``tensor_pipe_used`` (and ``tensor_kinds``: hmma, imma, dmma, gmma). The tensor-path
op counters (``sm__ops_path_tensor_src_fp8.sum`` and kin, with ``--metrics``) count that work
per source type, one per operation as ncu's tensor roofline does: ``tensor_ops``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field

from badput.errors import TraceFormatError
from badput.trace._files import require_regular_file
from badput.trace._ncu_metrics import (
    _DRAM_BW_LABELS,
    _DRAM_PCT_LABELS,
    _DURATION_LABELS,
    _RAW_ACHIEVED_OCC,
    _RAW_DRAM_BW,
    _RAW_DRAM_BYTES,
    _RAW_DRAM_PCT,
    _RAW_DURATION,
    _RAW_SM_HZ,
    _RAW_SOL_COMPUTE,
    _RAW_SOL_MEMORY,
    _RAW_THEORETICAL_OCC,
    _SOL_COMPUTE_LABELS,
    _SOL_MEMORY_LABELS,
    _TENSOR,
    FLOP_CLASSES,
    _bandwidth,
    _flops,
    _frequency,
    _Lookup,
    _Metrics,
    _number,
    _percent,
    _size,
    _tensor_kinds,
    _tensor_ops,
    _time,
    to_bytes,
    to_bytes_per_s,
    to_hz,
    to_ns,
)

__all__ = [
    "FLOP_CLASSES",
    "NcuKernel",
    "NcuReport",
    "NcuRule",
    "read_ncu_csv",
    "to_bytes",
    "to_bytes_per_s",
    "to_hz",
    "to_ns",
]


# Columns that describe a kernel launch, on both pages (the rest of a raw row is metrics).
_LAUNCH_COLUMNS = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
_DETAIL_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")


# ---- the result ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcuRule:
    """One rule result of Nsight Compute's guided analysis, as the details page prints it.

    Attributes:
        name: Rule identifier, e.g. ``"UncoalescedGlobalAccess"``.
        type: ``"OPT"`` (optimisation), ``"WRN"``, ``"INF"`` or ``"ERR"``, as ncu prints it.
        section: The section identifier the rule belongs to, e.g. ``"SourceCounters"``.
        description: ncu's text.
        speedup_type: ``"global"`` (the estimate applies to the kernel's whole duration) or
            ``"local"`` (to the part of the kernel the rule inspects), ``None`` when absent.
        estimated_speedup_pct: ncu's estimated reduction of the kernel's time, percent.
    """

    name: str
    type: str
    section: str
    description: str
    speedup_type: str | None
    estimated_speedup_pct: float | None


@dataclass(frozen=True)
class NcuKernel:
    """One profiled kernel launch, its units normalised.

    Every derived number is ``None`` when the CSV does not carry what it needs; ``sources``
    names the metric each value came from.

    Attributes:
        id: ncu's result ID (the ``ID`` column).
        process_id: The ``Process ID`` column.
        name: The kernel's name as printed (demangled unless ncu was told otherwise).
        device: The ``Device`` column (a device index in current ncu versions).
        device_name: ``device__attribute_display_name`` when the CSV has it, else ``None``.
        cc: Compute capability, e.g. ``"7.5"``.
        block_size: e.g. ``"(256, 1, 1)"``.
        grid_size: e.g. ``"(1024, 1, 1)"``.
        dur_ns: Kernel duration, nanoseconds (``gpu__time_duration.sum``, "Duration").
        flops: FLOPs per class in :data:`FLOP_CLASSES`; ``None`` when no FLOP counter is present.
        flop_per_s: Achieved FLOP/s of all classes together.
        tensor_pipe_used: Tensor-pipe instructions were executed (their FLOPs are not counted);
            ``None`` when the CSV has no tensor-pipe metric.
        dram_bytes: Bytes moved to and from DRAM.
        dram_bytes_per_s: Achieved DRAM bandwidth, bytes per second.
        arithmetic_intensity: ``sum(flops) / dram_bytes``, FLOP per byte.
        sol_compute_pct: "Compute (SM) Throughput", percent of peak.
        sol_memory_pct: "Memory Throughput", percent of peak (the busiest memory unit).
        dram_throughput_pct: "DRAM Throughput", percent of ncu's DRAM peak.
        achieved_occupancy_pct: "Achieved Occupancy", percent.
        theoretical_occupancy_pct: "Theoretical Occupancy", percent.
        sm_frequency_hz: "SM Frequency" during the measurement.
        rules: Rule results of this kernel, in file order.
        sources: Field name to the metric (section / label, or raw name) it was taken from.
        tensor_ops: Tensor-path math operations per precision of the hardware table (``fp8``,
            ``bf16``, ``fp16``, ``tf32``, ``fp64_tensor``, ``int8``, ``fp4``), from
            ``sm__ops_path_tensor_src_*``; ``None`` when the CSV has no such counter.
        tensor_kinds: MMA kinds with tensor-pipe instructions executed (``hmma``, ``imma``,
            ``dmma``, ``gmma``, ...), from ``*__inst_executed_pipe_tensor_op_*``.
    """

    id: int
    process_id: str
    name: str
    device: str
    device_name: str | None
    cc: str | None
    block_size: str
    grid_size: str
    dur_ns: float | None
    flops: dict[str, float] | None
    flop_per_s: float | None
    tensor_pipe_used: bool | None
    dram_bytes: float | None
    dram_bytes_per_s: float | None
    arithmetic_intensity: float | None
    sol_compute_pct: float | None
    sol_memory_pct: float | None
    dram_throughput_pct: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    sm_frequency_hz: float | None
    rules: tuple[NcuRule, ...]
    sources: dict[str, str] = field(default_factory=dict)
    tensor_ops: dict[str, float] | None = None
    tensor_kinds: tuple[str, ...] = ()

    @property
    def total_flops(self) -> float | None:
        """All counted FLOPs, or ``None`` when the CSV carries no FLOP counter."""
        return None if self.flops is None else sum(self.flops.values())


@dataclass(frozen=True)
class NcuReport:
    """An ``ncu --csv`` file, read.

    Attributes:
        path: The file.
        page: ``"details"`` or ``"raw"``.
        kernels: One entry per profiled launch, in file order.
        skipped_lines: Lines outside the CSV table (``==PROF==``, application output).
        warnings: Things the reader could not use (an unknown unit, say), in words.
    """

    path: str
    page: str
    kernels: tuple[NcuKernel, ...]
    skipped_lines: int
    warnings: tuple[str, ...]


# ---- reading the table ---------------------------------------------------------------------------


@dataclass
class _Record:
    line: int
    fields: list[str]


def _records(path: str, text: str, counts: list[int]) -> Iterator[_Record]:
    """CSV records of the text: lines starting with a quote, a quoted newline joining lines.

    Other lines are not part of the table: ``counts[0]`` counts them.
    """
    pending: list[str] = []
    start = 0
    quotes = 0
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and not lines[-1]:
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if pending:
            pending.append(line)
            quotes += line.count('"')
        elif line.startswith('"'):
            pending, start, quotes = [line], number, line.count('"')
        else:
            if line.strip():
                counts[0] += 1
            continue
        if quotes % 2 == 0:  # every quote closed: the record is complete
            joined = "\n".join(pending)
            pending = []
            try:
                fields = next(csv.reader([joined], strict=False))
            except csv.Error as e:
                raise TraceFormatError(path, f"line {start}: not a CSV row ({e})") from None
            yield _Record(start, fields)
    if pending:
        raise TraceFormatError(
            path, f"truncated: the file ends inside a quoted field of the row at line {start}"
        )


def _trim(fields: list[str], width: int) -> list[str]:
    """Drop empty fields past the header's width (a trailing comma gives one)."""
    while len(fields) > width and not fields[-1].strip():
        fields.pop()
    return fields


def read_ncu_csv(path: str) -> NcuReport:
    """Read an ``ncu --csv`` export (details or raw page) into per-kernel figures.

    Args:
        path: The CSV file, as ncu wrote it; progress lines and program output may surround it.

    Returns:
        The kernels, in file order.

    Raises:
        TraceFormatError: the file is missing, not a regular file, empty, not ncu CSV output,
            or ends mid-row.

    Example:
        >>> report = read_ncu_csv("copy_blocked.csv")  # doctest: +SKIP
        >>> report.kernels[0].dur_ns
        21058944.0
    """
    require_regular_file(path)  # a FIFO or a device would block the read below
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, not an ncu CSV file") from None
    except OSError as e:
        raise TraceFormatError(path, f"cannot be read ({e.strerror})") from None
    if not data.strip():
        raise TraceFormatError(path, "empty file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceFormatError(path, "not text (an ncu --csv export is UTF-8 text)") from None
    counts = [0]
    header: list[str] | None = None
    rows: list[_Record] = []
    units: list[str] | None = None
    for record in _records(path, text, counts):
        if header is None:
            if record.fields and record.fields[0].strip() == "ID":
                header = [h.strip() for h in _trim(record.fields, 0)]
                _check_header(path, header, record.line)
            else:
                counts[0] += 1  # a quoted line of program output before the table
            continue
        fields = _trim(record.fields, len(header))
        first = fields[0].strip() if fields else ""
        if [f.strip() for f in fields] == header:
            continue  # ncu repeats the header for each process
        if not first and units is None and not rows:
            units = fields  # raw page: the second line holds the units
            continue
        if not first.replace(",", "").isdigit():
            counts[0] += 1  # program output that happens to start with a quote
            continue
        rows.append(_Record(record.line, fields))
    if header is None:
        raise TraceFormatError(
            path,
            'not Nsight Compute CSV output: no header row starting with "ID","Process ID" '
            "(was ncu run with --csv?)",
        )
    details = all(c in header for c in _DETAIL_COLUMNS)
    width = header.index("Metric Value") + 1 if details else len(header)
    for i, row in enumerate(rows):
        if len(row.fields) < width:
            if i == len(rows) - 1:
                done = len(_trim(list(row.fields), 0))  # a cut after a comma: not a field
                raise TraceFormatError(
                    path,
                    f"truncated: the last row (line {row.line}) ends after {done} of {width} "
                    "fields",
                )
            raise TraceFormatError(
                path, f"line {row.line}: {len(row.fields)} fields where the header has {width}"
            )
        if i == len(rows) - 1 and details and width + 1 < len(row.fields) < len(header):
            # A rule row stopped early: a metric row has `width` fields (one more with a
            # trailing comma), a rule row all of the header's.
            raise TraceFormatError(
                path,
                f"truncated: the last row (line {row.line}) ends after "
                f"{len(_trim(list(row.fields), 0))} of {len(header)} fields",
            )
        if len(row.fields) > len(header):
            raise TraceFormatError(
                path,
                f"line {row.line}: {len(row.fields)} fields, more than the header's {len(header)}",
            )
    if not rows:
        raise TraceFormatError(path, "no kernel rows: the CSV has a header but no results")
    warnings: list[str] = []
    if details:
        kernels = _details(path, header, rows, warnings)
    else:
        kernels = _raw(path, header, units, rows, warnings)
    return NcuReport(
        path=path,
        page="details" if details else "raw",
        kernels=tuple(kernels),
        skipped_lines=counts[0],
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _check_header(path: str, header: list[str], line: int) -> None:
    missing = [c for c in ("ID", "Kernel Name") if c not in header]
    if missing:
        raise TraceFormatError(
            path,
            f"not Nsight Compute CSV output: the header (line {line}) has no "
            f"{', '.join(repr(m) for m in missing)} column",
        )
    if any(c in header for c in _DETAIL_COLUMNS) and not all(c in header for c in _DETAIL_COLUMNS):
        absent = [c for c in _DETAIL_COLUMNS if c not in header]
        raise TraceFormatError(
            path, f"not a complete ncu details page: the header lacks {', '.join(absent)}"
        )
    if not any(c in header for c in _DETAIL_COLUMNS) and not any(
        c not in _LAUNCH_COLUMNS for c in header
    ):
        raise TraceFormatError(
            path, "not Nsight Compute CSV output: the header names no metric column"
        )


# ---- per-kernel metrics --------------------------------------------------------------------------


def _launch(header: list[str], fields: list[str]) -> dict[str, str]:
    return {c: fields[header.index(c)].strip() for c in _LAUNCH_COLUMNS if c in header}


def _id(path: str, text: str, line: int) -> int:
    try:
        return int(text.replace(",", ""))
    except ValueError:
        raise TraceFormatError(path, f"line {line}: ID {text!r} is not a number") from None


def _details(
    path: str, header: list[str], rows: list[_Record], warnings: list[str]
) -> list[NcuKernel]:
    col = {name: i for i, name in enumerate(header)}

    def get(fields: list[str], name: str) -> str:
        i = col.get(name)
        return fields[i].strip() if i is not None and i < len(fields) else ""

    launches: dict[tuple[str, int], dict[str, str]] = {}
    metrics: dict[tuple[str, int], _Metrics] = {}
    for row in rows:
        f = row.fields
        key = (get(f, "Process ID"), _id(path, get(f, "ID"), row.line))
        if key not in launches:
            launches[key] = _launch(header, f)
            metrics[key] = _Metrics()
        m = metrics[key]
        name = get(f, "Metric Name")
        if name:
            unit, value = get(f, "Metric Unit"), get(f, "Metric Value")
            m.labelled.append((get(f, "Section Name"), name, unit, value))
            if "__" in name:  # a raw metric name (--metrics, "Command line profiler metrics")
                m.raw[name] = (unit, value)
        rule = get(f, "Rule Name")
        if rule:
            speedup_type = get(f, "Estimated Speedup Type").lower() or None
            m.rules.append(
                NcuRule(
                    name=rule,
                    type=get(f, "Rule Type"),
                    section=get(f, "Section Name"),
                    description=get(f, "Rule Description"),
                    speedup_type=speedup_type,
                    estimated_speedup_pct=_number(get(f, "Estimated Speedup")),
                )
            )
    return [_kernel(key[1], launches[key], metrics[key], warnings) for key in launches]


def _raw(
    path: str,
    header: list[str],
    units: list[str] | None,
    rows: list[_Record],
    warnings: list[str],
) -> list[NcuKernel]:
    if units is None:
        warnings.append("raw page without a units line: units taken as ncu's base units")
    kernels = []
    for row in rows:
        launch = _launch(header, row.fields)
        m = _Metrics()
        for i, name in enumerate(header):
            if name in _LAUNCH_COLUMNS or not name or i >= len(row.fields):
                continue
            unit = units[i].strip() if units is not None and i < len(units) else ""
            m.raw[name] = (unit, row.fields[i].strip())
        kernels.append(_kernel(_id(path, launch.get("ID", ""), row.line), launch, m, warnings))
    return kernels


def _kernel(kid: int, launch: dict[str, str], m: _Metrics, warnings: list[str]) -> NcuKernel:
    look = _Lookup(m, warnings)
    dur_ns = look.first("dur_ns", _DURATION_LABELS, _RAW_DURATION, _time, "time")
    bw = look.first("dram_bytes_per_s", _DRAM_BW_LABELS, _RAW_DRAM_BW, _bandwidth, "bandwidth")
    dram_bytes = look.first("dram_bytes", (), _RAW_DRAM_BYTES, _size, "size")
    if dram_bytes is None:
        read = look.raw(("dram__bytes_read.sum",), _size, "size")
        write = look.raw(("dram__bytes_write.sum",), _size, "size")
        if read is not None and write is not None:
            dram_bytes = read[0] + write[0]
            look.sources["dram_bytes"] = "dram__bytes_read.sum + dram__bytes_write.sum"
    if dram_bytes is None and bw is not None and dur_ns is not None:
        dram_bytes = bw * dur_ns * 1e-9
        look.sources["dram_bytes"] = "dram_bytes_per_s x dur_ns"
    if bw is None and dram_bytes is not None and dur_ns:
        bw = dram_bytes / (dur_ns * 1e-9)
        look.sources["dram_bytes_per_s"] = "dram_bytes / dur_ns"
    flops, flop_rate, flop_source = _flops(look, dur_ns)
    if flop_source is not None:
        look.sources["flops"] = flop_source
    total = None if flops is None else sum(flops.values())
    intensity = total / dram_bytes if total is not None and dram_bytes else None
    tensor: bool | None = None
    for name, (_, text) in m.raw.items():
        if _TENSOR.search(name):
            value = _number(text)
            if value is not None:
                tensor = bool(tensor) or value > 0
    tensor_ops, tensor_source = _tensor_ops(m)
    if tensor_source is not None:
        look.sources["tensor_ops"] = tensor_source
    kinds = _tensor_kinds(m)
    if tensor_ops and sum(tensor_ops.values()) > 0:
        tensor = True
    device_name = None
    if "device__attribute_display_name" in m.raw:
        device_name = m.raw["device__attribute_display_name"][1] or None
    return NcuKernel(
        id=kid,
        process_id=launch.get("Process ID", ""),
        name=launch.get("Kernel Name", ""),
        device=launch.get("Device", ""),
        device_name=device_name,
        cc=launch.get("CC") or None,
        block_size=launch.get("Block Size", ""),
        grid_size=launch.get("Grid Size", ""),
        dur_ns=dur_ns,
        flops=flops,
        flop_per_s=flop_rate,
        tensor_pipe_used=tensor,
        dram_bytes=dram_bytes,
        dram_bytes_per_s=bw,
        arithmetic_intensity=intensity,
        sol_compute_pct=look.first(
            "sol_compute_pct", _SOL_COMPUTE_LABELS, _RAW_SOL_COMPUTE, _percent, "percent"
        ),
        sol_memory_pct=look.first(
            "sol_memory_pct", _SOL_MEMORY_LABELS, _RAW_SOL_MEMORY, _percent, "percent"
        ),
        dram_throughput_pct=look.first(
            "dram_throughput_pct", _DRAM_PCT_LABELS, _RAW_DRAM_PCT, _percent, "percent"
        ),
        achieved_occupancy_pct=look.first(
            "achieved_occupancy_pct",
            ("Achieved Occupancy",),
            _RAW_ACHIEVED_OCC,
            _percent,
            "percent",
        ),
        theoretical_occupancy_pct=look.first(
            "theoretical_occupancy_pct",
            ("Theoretical Occupancy",),
            _RAW_THEORETICAL_OCC,
            _percent,
            "percent",
        ),
        sm_frequency_hz=look.first(
            "sm_frequency_hz", ("SM Frequency",), _RAW_SM_HZ, _frequency, "hz"
        ),
        rules=tuple(m.rules),
        sources=look.sources,
        tensor_ops=tensor_ops,
        tensor_kinds=kinds,
    )
