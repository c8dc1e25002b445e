"""Where meter summaries go: JSONL files, Prometheus, the console. Written off the hot path."""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["ConsoleSink", "JsonlSink", "PrometheusSink", "Sink", "SinkWorker"]


class Sink(Protocol):
    """Receives summary records (dicts) from the meter's background thread."""

    def emit(self, record: dict[str, Any]) -> None:
        """Write one record."""
        ...

    def close(self) -> None:
        """Flush and release resources."""
        ...


class SinkWorker:
    """A daemon thread that drains a bounded queue into the sinks.

    A sink that raises is switched off after one warning (through `on_error`); a full queue
    drops the record (and says so once) rather than blocking the training loop.
    """

    def __init__(self, sinks: list[Sink], on_error: Callable[[str, BaseException], None]) -> None:
        self._sinks = list(sinks)
        self._on_error = on_error
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=256)
        self._thread = threading.Thread(target=self._run, name="badput-meter-sinks", daemon=True)
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        """Queue a record; never blocks."""
        try:
            self._queue.put_nowait(record)
        except queue.Full as e:
            self._on_error("sink queue", e)

    def close(self, timeout_s: float = 5.0) -> None:
        """Drain what is queued, close the sinks, stop the thread."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            if record is None:
                break
            for sink in list(self._sinks):
                try:
                    sink.emit(record)
                except Exception as e:
                    self._sinks.remove(sink)
                    self._on_error(f"sink {type(sink).__name__}", e)
        for sink in self._sinks:
            try:
                sink.close()
            except Exception as e:
                self._on_error(f"sink {type(sink).__name__}", e)


class JsonlSink:
    """Appends each record as one JSON line; opened lazily by the sink thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: Any = None

    def emit(self, record: dict[str, Any]) -> None:
        """Append one line and flush it (a crash keeps every report written so far)."""
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


class ConsoleSink:
    """A one-line status on stderr at each report."""

    def emit(self, r: dict[str, Any]) -> None:
        """Print the status line."""
        step = r["step_time_s"]["median"]
        data = r["badput_s"]["data_wait"] / r["wall_s"] if r["wall_s"] else 0.0
        goodput = r["goodput"] or 0.0
        parts = [
            f"badput · step {r['steps']}",
            f"goodput {100 * goodput:.1f} %",
            f"data wait {100 * data:.1f} %",
        ]
        if step is not None:
            parts.append(f"median step {1000 * step:.1f} ms")
        if r.get("samples_per_s"):
            parts.append(f"{r['samples_per_s']:,.0f} samples/s")
        if r.get("stragglers"):
            parts.append(f"stragglers: ranks {r['stragglers']}")
        sys.stderr.write(" · ".join(parts) + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        """Nothing to release."""


class PrometheusSink:
    """Serves the latest summary as Prometheus gauges (needs `prometheus-client`, extra prom).

    Metrics (label `rank`): badput_goodput, badput_wall_seconds, badput_steps,
    badput_seconds{category}, badput_step_time_seconds{stat}, badput_samples_per_second,
    badput_tokens_per_second, badput_mfu.
    """

    def __init__(self, port: int, addr: str = "0.0.0.0", rank: int = 0) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise ImportError(
                "the Prometheus sink needs prometheus-client: pip install 'badput[prom]'"
            ) from None
        self.registry = prom.CollectorRegistry()
        self.rank = str(rank)
        g = prom.Gauge
        reg = self.registry
        self._goodput = g(
            "badput_goodput", "Productive step time / wall time", ["rank"], registry=reg
        )
        self._wall = g("badput_wall_seconds", "Wall time measured", ["rank"], registry=reg)
        self._steps = g("badput_steps", "Training steps completed", ["rank"], registry=reg)
        self._badput = g(
            "badput_seconds", "Wall time lost, by category", ["rank", "category"], registry=reg
        )
        self._step = g(
            "badput_step_time_seconds", "Step time statistics", ["rank", "stat"], registry=reg
        )
        self._samples = g(
            "badput_samples_per_second", "Samples per wall second", ["rank"], registry=reg
        )
        self._tokens = g(
            "badput_tokens_per_second", "Tokens per wall second", ["rank"], registry=reg
        )
        self._mfu = g("badput_mfu", "Model FLOPs utilization (dense peak)", ["rank"], registry=reg)
        server = prom.start_http_server(port, addr=addr, registry=reg)
        self.server = server[0] if isinstance(server, tuple) else None
        self.port = self.server.server_port if self.server is not None else port

    def emit(self, r: dict[str, Any]) -> None:
        """Update the gauges."""
        rank = self.rank
        self._goodput.labels(rank).set(r["goodput"] or 0.0)
        self._wall.labels(rank).set(r["wall_s"])
        self._steps.labels(rank).set(r["steps"])
        for category, seconds in r["badput_s"].items():
            self._badput.labels(rank, category).set(seconds)
        for stat, seconds in r["step_time_s"].items():
            if seconds is not None:
                self._step.labels(rank, stat).set(seconds)
        for gauge, key in (
            (self._samples, "samples_per_s"),
            (self._tokens, "tokens_per_s"),
            (self._mfu, "mfu"),
        ):
            if r.get(key) is not None:
                gauge.labels(rank).set(r[key])

    def close(self) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()  # release the port
