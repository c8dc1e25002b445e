"""`on_trace_ready` for `torch.profiler.profile`: write the trace as usual, then analyse it.

A drop-in for `torch.profiler.tensorboard_trace_handler`: the trace file gets the same name in
the same folder (`{worker_name}.{time_ns}.pt.trace.json`, `.gz` with `use_gzip`), and then
badput analyses it exactly as `badput analyze` does (`badput.scale.work.analyze_path`, the
same rules and the same `badput.analysis/1` JSON document). It logs one line per GPU, goodput
and the top finding, to the `badput` logger, and writes the JSON document next to the trace
(`{worker_name}.{time_ns}.badput.json`; `report_dir` puts it elsewhere). Neither `badput
analyze <dir>` (which skips `*.badput.json`) nor the TensorBoard plugin (which reads
`*.pt.trace.json`) takes a report for a trace.

The analysis never reaches into the training loop: it runs in one background thread by
default (the profiler's own export is what the loop waits for), and any error in it is logged
as a warning, never raised. Writing the trace itself fails as torch's handler fails.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from badput.diagnose import JobResult

__all__ = ["TraceHandler", "TraceResult", "on_trace_ready"]

logger = logging.getLogger("badput")

_TRACE_SUFFIX = ".pt.trace.json"


@dataclass(frozen=True)
class TraceResult:
    """One trace the handler wrote, and what its analysis gave.

    Attributes:
        trace_path: the trace file.
        json_path: the `badput.analysis/1` document written for it (None if analysis failed).
        analysis_s: seconds the analysis took (read, analyse, diagnose, write the JSON).
        goodput: goodput of each GPU with activity, in the report's order.
        top_finding: id of the finding with the largest savings (None when there is none).
        error: why the analysis failed (None when it did not).
    """

    trace_path: str
    json_path: str | None
    analysis_s: float
    goodput: list[float]
    top_finding: str | None
    error: str | None = None


class TraceHandler:
    """The callable that `on_trace_ready` returns; see there for the arguments.

    Attributes:
        results: one `TraceResult` per trace whose analysis has finished, in that order.
    """

    def __init__(
        self,
        dir_name: str | os.PathLike[str],
        worker_name: str | None = None,
        use_gzip: bool = False,
        *,
        use_python_export: bool = False,
        background: bool = True,
        report_dir: str | os.PathLike[str] | None = None,
        window: str | None = None,
        top: int = 10,
    ) -> None:
        self.dir_name = os.fspath(dir_name)
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.use_python_export = use_python_export
        self.background = background
        self.report_dir = os.fspath(report_dir) if report_dir is not None else self.dir_name
        self.window = window
        self.top = top
        self.results: list[TraceResult] = []
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[concurrent.futures.Future[None]] = []

    def __call__(self, prof: Any) -> None:
        """Export the profiler's trace, then analyse it (in the background by default)."""
        path = self._export(prof)
        if not self.background:
            self._analyse(path)
            return
        try:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="badput-trace"
                )
            future = self._pool.submit(self._analyse, path)
        except Exception as e:  # e.g. the interpreter is shutting down: no analysis, no error
            logger.warning("badput: %s: not analysed (%s: %s)", path, type(e).__name__, e)
            return
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()] + [future]

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the analyses started so far; True when all of them have finished."""
        with self._lock:
            pending = list(self._pending)
        _, not_done = concurrent.futures.wait(pending, timeout=timeout_s)
        return not not_done

    def close(self) -> None:
        """Wait for the pending analyses and stop the background thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ---- internals -----------------------------------------------------------------------

    def _export(self, prof: Any) -> str:
        """Write the trace as `tensorboard_trace_handler` names it; return its path."""
        if not os.path.isdir(self.dir_name):
            try:
                os.makedirs(self.dir_name, exist_ok=True)
            except Exception as e:
                raise RuntimeError(f"Can't create directory: {self.dir_name}") from e
        if not self.worker_name:
            self.worker_name = f"{socket.gethostname()}_{os.getpid()}"
        # Nanoseconds in the name keep two exports of one worker apart (torch does the same).
        name = f"{self.worker_name}.{time.time_ns()}{_TRACE_SUFFIX}"
        if self.use_gzip:
            name += ".gz"
        path = os.path.join(self.dir_name, name)
        prof.export_chrome_trace(path, use_python_export=self.use_python_export)
        return path

    def _json_path(self, trace_path: str) -> str:
        name = os.path.basename(trace_path)
        for suffix in (_TRACE_SUFFIX + ".gz", _TRACE_SUFFIX):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        return os.path.join(self.report_dir, f"{name}.badput.json")

    def _analyse(self, path: str) -> None:
        """Analyse one trace, write its JSON and log the result; never raises."""
        start_ns = time.perf_counter_ns()
        try:
            result = self._analyse_unguarded(path, start_ns)
        except Exception as e:
            elapsed_s = (time.perf_counter_ns() - start_ns) / 1e9
            error = f"{type(e).__name__}: {e}"
            result = TraceResult(path, None, elapsed_s, [], None, error)
            logger.warning("badput: %s: analysis failed (%s); training goes on", path, error)
        with self._lock:
            self.results.append(result)

    def _analyse_unguarded(self, path: str, start_ns: int) -> TraceResult:
        from badput.diagnose import diagnose_job
        from badput.report.json_report import encode_document, job_document
        from badput.scale.work import analyze_path

        # One reading thread: inside the training job, the job's own threads keep the CPUs.
        outcome = analyze_path(path, window=self.window, top=self.top, read_jobs=1)
        if outcome.error is not None:
            raise ValueError(outcome.error)
        job = diagnose_job([outcome])
        data = encode_document(job_document(job, top=self.top))
        json_path = self._json_path(path)
        os.makedirs(self.report_dir, exist_ok=True)
        tmp = f"{json_path}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, json_path)  # a reader never sees half a document
        elapsed_s = (time.perf_counter_ns() - start_ns) / 1e9
        for line in summary_lines(job, path, json_path, elapsed_s):
            logger.info("%s", line)
        ranked = job.diagnosis.ranked
        return TraceResult(
            trace_path=path,
            json_path=json_path,
            analysis_s=elapsed_s,
            goodput=[d.goodput for o in job.analysed for d in o.devices if d.goodput is not None],
            top_finding=ranked[0].id if ranked else None,
        )


def summary_lines(job: JobResult, trace_path: str, json_path: str, analysis_s: float) -> list[str]:
    """The log lines for one analysed trace: goodput of each GPU and its top finding.

    Args:
        job: the trace's job result (one outcome).
        trace_path: the trace file.
        json_path: where its JSON document was written.
        analysis_s: seconds the analysis took.
    """
    name = os.path.basename(trace_path)
    lines: list[str] = []
    for outcome in job.analysed:
        for d in outcome.devices:
            if d.goodput is None:
                continue
            steps = f", {len(d.steps)} steps" if d.steps else ""
            line = (
                f"badput: {name}: GPU {d.device} goodput {100 * d.goodput:.1f} % of "
                f"{d.window_ns / 1e6:.1f} ms{steps}"
            )
            found = job.diagnosis.for_device(d)
            if found:
                top = found[0]
                line += f"; top finding [{top.id}] {top.title}"
            lines.append(line)
    if not lines:
        lines.append(f"badput: {name}: no GPU activity in the trace, goodput is undefined")
    lines.append(f"badput: report {json_path} (analysed in {analysis_s:.2f} s)")
    return lines


def on_trace_ready(
    dir_name: str | os.PathLike[str],
    worker_name: str | None = None,
    use_gzip: bool = False,
    *,
    use_python_export: bool = False,
    background: bool = True,
    report_dir: str | os.PathLike[str] | None = None,
    window: str | None = None,
    top: int = 10,
) -> TraceHandler:
    """A drop-in for `torch.profiler.tensorboard_trace_handler` that also analyses each trace.

    Args:
        dir_name: folder of the trace files (made if missing), as in torch's handler.
        worker_name: first part of the file name (default `{hostname}_{pid}`), as in torch.
        use_gzip: write `.pt.trace.json.gz`, as in torch.
        use_python_export: passed to `export_chrome_trace`, as in torch.
        background: analyse in one background thread (True, the default) or in the
            profiler's call, before training continues (False).
        report_dir: folder of the JSON reports (default `dir_name`, next to the traces); each
            is named after its trace: `{worker_name}.{time_ns}.badput.json`.
        window: the analysis window, as `badput analyze --window` takes it.
        top: kernels listed per GPU in the JSON report (0 lists all).

    Returns:
        The handler; its `wait()` waits for the background analyses and its `results` holds
        what each gave.

    Example:
        >>> with torch.profiler.profile(  # doctest: +SKIP
        ...     schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        ...     on_trace_ready=badput.profiler.on_trace_ready("./log"),
        ... ) as prof:
        ...     for batch in loader:
        ...         train_step(batch)
        ...         prof.step()
    """
    return TraceHandler(
        dir_name,
        worker_name,
        use_gzip,
        use_python_export=use_python_export,
        background=background,
        report_dir=report_dir,
        window=window,
        top=top,
    )
