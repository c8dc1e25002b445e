"""`badput.telemetry.Sampler`: a background thread sampling the GPUs and the host.

At a fixed rate (drift-corrected: sample k is due at start + k / hz; slots the thread could
not keep are skipped and counted, never bunched up), it records into columnar buffers:

- `ts_ns`: wall-clock time of the sample, epoch nanoseconds (`time.time_ns()`, the clock
  Kineto's trace timestamps are on, so samples can be aligned with a trace window);
- per GPU i (NVML): `gpu{i}_util_pct`, `gpu{i}_sm_clock_mhz`, `gpu{i}_mem_used_bytes`,
  `gpu{i}_power_mw`, `gpu{i}_temp_c`, `gpu{i}_pcie_tx_bytes_per_s`, `gpu{i}_pcie_rx_bytes_per_s`;
- host (/proc, or psutil where there is no /proc): `cpu{j}_util_pct` per core, `rss_bytes`
  of the watched process, `disk_read_bytes_per_s`, `disk_write_bytes_per_s`,
  `net_rx_bytes_per_s`, `net_tx_bytes_per_s`. Rates are over the interval since the
  previous sample: the first sample has none (null).

The file is JSONL (always available: a header line, one line per sample, a summary line) or
Parquet (`.parquet`, with pyarrow: one column each, header and summary in the file metadata
under the key "badput"). The summary has the sampler's own CPU cost: the CPU time of its
thread (`time.thread_time()`) as a share of one core over the wall time.

Fail open: a source that raises records an error count (and is switched off after
`MAX_CONSECUTIVE_ERRORS` failures in a row); a file that cannot be written gives a warning.
Nothing the sampler does raises into the code it measures.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from badput.telemetry.sources import Host, Nvml, NvmlUnavailable, TelemetryError, open_nvml

__all__ = ["SCHEMA", "Sampler", "TelemetryData", "TelemetryWarning", "read_telemetry"]

SCHEMA = "badput.telemetry/1"
MAX_CONSECUTIVE_ERRORS = 10
GPU_FIELDS = (
    ("util_pct", "utilization_pct"),
    ("sm_clock_mhz", "sm_clock_mhz"),
    ("mem_used_bytes", "memory_used_bytes"),
    ("power_mw", "power_mw"),
    ("temp_c", "temperature_c"),
    ("pcie_tx_bytes_per_s", "pcie_tx_bytes_per_s"),
    ("pcie_rx_bytes_per_s", "pcie_rx_bytes_per_s"),
)


class TelemetryWarning(UserWarning):
    """The sampler lost part of its data; the measured code goes on."""


Value = float | int | None


@dataclass
class _Source:
    name: str
    columns: list[str]
    read: Callable[[float], list[Value]]  # monotonic seconds -> one value per column
    errors: int = 0
    consecutive: int = 0
    first_error: str | None = None
    off: bool = False


class Sampler:
    """Samples GPU and host metrics on a background thread; use as a context manager.

    Args:
        out: the file to write (`.parquet` for Parquet, anything else JSONL); None keeps the
            samples in memory only (`columns`).
        hz: samples per second.
        nvml: the NVML to read; None opens the real one, and no GPU columns when it cannot;
            False: no GPU columns.
        host: the /proc reader; False: no host columns.
        pid: the process whose RSS is recorded (default: this one).
        flush_every: JSONL rows written per batch.

    Raises:
        TelemetryError: `.parquet` asked for without pyarrow, or hz not positive.

    Example:
        with badput.telemetry.Sampler("telemetry.jsonl", hz=10) as sampler:
            train()
        print(sampler.summary["cpu_share_of_one_core"])
    """

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        hz: float = 10.0,
        *,
        nvml: Nvml | bool | None = None,
        host: Host | bool | None = None,
        pid: int | None = None,
        flush_every: int = 10,
    ) -> None:
        if not hz > 0:
            raise TelemetryError(f"the sampling rate must be positive, got {hz}")
        self.out = os.fspath(out) if out is not None else None
        self.parquet = bool(self.out and self.out.endswith(".parquet"))
        if self.parquet:
            try:
                importlib.import_module("pyarrow")
            except ImportError:
                raise TelemetryError(
                    "Parquet output needs pyarrow: pip install 'badput[parquet]' (or write .jsonl)"
                ) from None
        self.hz = float(hz)
        self.pid = pid
        self.flush_every = max(1, flush_every)
        self._nvml_arg = nvml
        self._host_arg = host
        self._sources: list[_Source] = []
        self.columns: dict[str, list[Value]] = {"ts_ns": []}
        self.summary: dict[str, Any] = {}
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Nvml | None = None
        self._own_nvml = False
        self._file: Any = None
        self._written = 0
        self._missed = 0
        self._cpu_s = 0.0
        self._wall_s = 0.0
        self._tid: int | None = None
        self._lock = threading.Lock()

    @property
    def thread_id(self) -> int | None:
        """The native id of the sampling thread (None before it runs)."""
        return self._tid

    # ---- life cycle -------------------------------------------------------------------

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Set up the sources, write the header and start the thread."""
        if self._thread is not None:
            return
        try:
            self._setup()
        except Exception as e:  # fail open: no sampling rather than a crashed job
            self._lose("setup", e)
        for s in self._sources:
            for c in s.columns:
                self.columns[c] = []
        self._open_file()
        self._thread = threading.Thread(target=self._run, name="badput-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop the thread, write the remaining rows and the summary; return the summary."""
        if self._thread is None:
            return self.summary
        self._stop.set()
        self._thread.join()
        if self._own_nvml and self._nvml is not None:
            try:
                self._nvml.close()
            except Exception as e:
                self._lose("nvml close", e)
        self.summary = self._summary()
        self._finish_file()
        return self.summary

    # ---- sources ----------------------------------------------------------------------

    def _setup(self) -> None:
        nvml = self._nvml_arg
        if nvml is None or nvml is True:
            try:
                self._nvml, self._own_nvml = open_nvml(), True
            except NvmlUnavailable as e:
                self.lost.append(f"gpu: {e}")
        elif nvml is not False:
            self._nvml = nvml
        if self._nvml is not None:
            for i in range(self._nvml.device_count()):
                self._sources.append(self._gpu_source(self._nvml, i))
        host = self._host_arg
        if host is not False:
            if host is None or host is True:
                host = Host()
            assert isinstance(host, Host)
            if host.cpu_times():
                self._sources.extend(self._proc_sources(host))
            else:
                self._sources.extend(self._psutil_sources())

    def _gpu_source(self, nvml: Nvml, i: int) -> _Source:
        def read(_: float) -> list[Value]:
            s = nvml.sample(i)
            return [getattr(s, attr) for _, attr in GPU_FIELDS]

        return _Source(f"gpu{i}", [f"gpu{i}_{name}" for name, _ in GPU_FIELDS], read)

    def _proc_sources(self, host: Host) -> list[_Source]:
        pid: int | str = self.pid if self.pid is not None else "self"
        prev_cpu = host.cpu_times()

        def cpu(_: float) -> list[Value]:
            nonlocal prev_cpu
            now = host.cpu_times()
            out: list[Value] = []
            for (b0, t0), (b1, t1) in zip(prev_cpu, now, strict=False):
                out.append(round(100.0 * (b1 - b0) / (t1 - t0), 1) if t1 > t0 else None)
            prev_cpu = now
            return out

        return [
            _Source("cpu", [f"cpu{j}_util_pct" for j in range(len(prev_cpu))], cpu),
            _Source("rss", ["rss_bytes"], lambda _: [host.rss_bytes(pid)]),
            _Source(
                "disk",
                ["disk_read_bytes_per_s", "disk_write_bytes_per_s"],
                _rate(host.disk_bytes),
            ),
            _Source("net", ["net_rx_bytes_per_s", "net_tx_bytes_per_s"], _rate(host.net_bytes)),
        ]

    def _psutil_sources(self) -> list[_Source]:
        try:
            psutil: Any = importlib.import_module("psutil")
        except ImportError:
            self.lost.append(
                "host: no /proc and psutil not installed: pip install 'badput[telemetry]'"
            )
            return []
        proc = psutil.Process(self.pid)
        cores = len(psutil.cpu_percent(percpu=True))

        def disk() -> tuple[int, int] | None:
            d = psutil.disk_io_counters()
            return (int(d.read_bytes), int(d.write_bytes)) if d else None

        def net() -> tuple[int, int]:
            n = psutil.net_io_counters()
            return int(n.bytes_recv), int(n.bytes_sent)

        return [
            _Source(
                "cpu",
                [f"cpu{j}_util_pct" for j in range(cores)],
                lambda _: list(psutil.cpu_percent(percpu=True)),
            ),
            _Source("rss", ["rss_bytes"], lambda _: [int(proc.memory_info().rss)]),
            _Source("disk", ["disk_read_bytes_per_s", "disk_write_bytes_per_s"], _rate(disk)),
            _Source("net", ["net_rx_bytes_per_s", "net_tx_bytes_per_s"], _rate(net)),
        ]

    # ---- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        self._tid = threading.get_native_id()
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        period = 1.0 / self.hz
        k = 0
        try:
            while True:
                self._sample_once()
                if len(self.columns["ts_ns"]) - self._written >= self.flush_every:
                    self._flush_rows()
                k += 1
                now = time.perf_counter()
                due = wall0 + k * period
                if now > due + period:  # fell behind: skip the slots already past
                    late = int((now - due) / period)
                    self._missed += late
                    k += late
                    due = wall0 + k * period
                if self._stop.wait(max(0.0, due - now)):
                    break
        except Exception as e:  # never let the thread die noisily
            self._lose("sampler", e)
        finally:
            self._cpu_s = time.thread_time() - cpu0
            self._wall_s = time.perf_counter() - wall0

    def _sample_once(self) -> None:
        ts = time.time_ns()
        mono = time.monotonic()
        row: dict[str, Value] = {"ts_ns": ts}
        for s in self._sources:
            values: list[Value] = [None] * len(s.columns)
            if not s.off:
                try:
                    got = s.read(mono)
                    values = (list(got) + values)[: len(s.columns)]
                    s.consecutive = 0
                except Exception as e:
                    s.errors += 1
                    s.consecutive += 1
                    if s.first_error is None:
                        s.first_error = f"{type(e).__name__}: {e}"
                        warnings.warn(
                            f"badput sampler: {s.name} failed ({s.first_error}); sampling goes on",
                            TelemetryWarning,
                            stacklevel=2,
                        )
                    if s.consecutive >= MAX_CONSECUTIVE_ERRORS:
                        s.off = True
                        self.lost.append(
                            f"{s.name}: switched off after {s.consecutive} failures in a row "
                            f"({s.first_error})"
                        )
            row.update(zip(s.columns, values, strict=True))
        with self._lock:
            for c, v in row.items():
                self.columns[c].append(v)

    # ---- files ------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """The file header: schema, rate, clock and columns."""
        return {
            "schema": SCHEMA,
            "hz": self.hz,
            "clock": "ts_ns: wall clock, epoch nanoseconds (time.time_ns)",
            "pid": self.pid if self.pid is not None else os.getpid(),
            "columns": list(self.columns),
        }

    def _open_file(self) -> None:
        if self.out is None or self.parquet:
            return
        try:
            self._file = open(self.out, "w", encoding="utf-8")  # noqa: SIM115 (closed in stop)
            self._file.write(json.dumps(self.header()) + "\n")
            self._file.flush()
        except OSError as e:
            self._file = None
            self._lose("file", e)

    def _flush_rows(self) -> None:
        if self._file is None:
            self._written = len(self.columns["ts_ns"])
            return
        with self._lock:
            n = len(self.columns["ts_ns"])
            rows = [
                {c: vals[i] for c, vals in self.columns.items()} for i in range(self._written, n)
            ]
        try:
            self._file.write("".join(json.dumps(r) + "\n" for r in rows))
            self._file.flush()
        except (OSError, ValueError) as e:
            self._lose("file", e)
            self._file = None
        self._written = n

    def _finish_file(self) -> None:
        if self.out is None:
            return
        if self.parquet:
            try:
                _write_parquet(self.out, self.columns, self.header(), self.summary)
            except Exception as e:
                self._lose("file", e)
            return
        self._flush_rows()
        if self._file is not None:
            try:
                self._file.write(json.dumps({"summary": self.summary}) + "\n")
                self._file.close()
            except (OSError, ValueError) as e:
                self._lose("file", e)
            self._file = None

    def _summary(self) -> dict[str, Any]:
        n = len(self.columns["ts_ns"])
        ts = self.columns["ts_ns"]
        span_s = (int(ts[-1] or 0) - int(ts[0] or 0)) / 1e9 if n > 1 else 0.0
        return {
            "samples": n,
            "hz_requested": self.hz,
            "hz_achieved": round((n - 1) / span_s, 3) if span_s > 0 else None,
            "missed_slots": self._missed,
            "wall_s": round(self._wall_s, 6),
            "sampler_cpu_s": round(self._cpu_s, 6),
            "cpu_share_of_one_core": (
                round(self._cpu_s / self._wall_s, 6) if self._wall_s > 0 else None
            ),
            "sampler_thread_id": self._tid,
            "errors": {s.name: s.errors for s in self._sources if s.errors},
            "sources": [s.name for s in self._sources],
            "lost": list(self.lost),
        }

    def _lose(self, part: str, error: BaseException) -> None:
        self.lost.append(f"{part}: {type(error).__name__}: {error}")
        warnings.warn(
            f"badput sampler: {part} failed ({type(error).__name__}: {error}); the job goes on",
            TelemetryWarning,
            stacklevel=2,
        )


def _rate(read: Callable[[], tuple[int, int] | None]) -> Callable[[float], list[Value]]:
    """A source of per-second rates from a reader of cumulative byte counters."""
    prev: tuple[float, tuple[int, int]] | None = None

    def source(mono: float) -> list[Value]:
        nonlocal prev
        now = read()
        if now is None:
            return [None, None]
        out: list[Value] = [None, None]
        if prev is not None and mono > prev[0]:
            dt = mono - prev[0]
            out = [round((now[0] - prev[1][0]) / dt), round((now[1] - prev[1][1]) / dt)]
        prev = (mono, now)
        return out

    return source


def _write_parquet(
    path: str, columns: dict[str, list[Value]], header: dict[str, Any], summary: dict[str, Any]
) -> None:
    pa: Any = importlib.import_module("pyarrow")
    pq: Any = importlib.import_module("pyarrow.parquet")

    table = pa.table({c: pa.array(v) for c, v in columns.items()})
    meta = {b"badput": json.dumps({"header": header, "summary": summary}).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


@dataclass
class TelemetryData:
    """A telemetry file read back: header, columns (name -> values) and summary."""

    header: dict[str, Any]
    columns: dict[str, list[Value]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def read_telemetry(path: str | os.PathLike[str]) -> TelemetryData:
    """Read a file written by the sampler (JSONL or Parquet).

    Raises:
        TelemetryError: missing, not a regular file, unreadable or not a badput telemetry file.
    """
    from badput.trace._files import file_problem  # here: the trace package imports numpy

    p = os.fspath(path)
    # Stat before opening: a FIFO or a device given as the file would block the read. (A
    # missing file is left to open(), whose message the callers know.)
    if os.path.lexists(p) and (problem := file_problem(p)) is not None:
        raise TelemetryError(f"{p}: {problem}")
    if p.endswith(".parquet"):
        try:
            pq: Any = importlib.import_module("pyarrow.parquet")
        except ImportError:
            raise TelemetryError(
                f"{p}: reading Parquet needs pyarrow: pip install 'badput[parquet]'"
            ) from None
        try:
            table = pq.read_table(p)
            meta = json.loads((table.schema.metadata or {})[b"badput"])
        except (OSError, KeyError, ValueError) as e:
            raise TelemetryError(f"{p}: not a badput telemetry Parquet file ({e})") from None
        return TelemetryData(meta["header"], table.to_pydict(), meta.get("summary", {}))
    try:
        with open(p, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise TelemetryError(f"{p}: {e.strerror}") from None
    try:
        header = json.loads(lines[0]) if lines else {}
    except ValueError:
        header = {}
    if header.get("schema") != SCHEMA:
        raise TelemetryError(f"{p}: not a badput telemetry file (no {SCHEMA} header)")
    data = TelemetryData(header, {c: [] for c in header.get("columns", ["ts_ns"])})
    for n, line in enumerate(lines[1:], start=2):
        try:
            obj = json.loads(line)
        except ValueError:
            if n == len(lines):  # a last line cut short by a killed job: keep the rest
                break
            raise TelemetryError(f"{p}: line {n} is not JSON") from None
        if "summary" in obj and "ts_ns" not in obj:
            data.summary = obj["summary"]
            continue
        for c, vals in data.columns.items():
            vals.append(obj.get(c))
    return data
