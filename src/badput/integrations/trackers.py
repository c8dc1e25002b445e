"""Meter sinks for experiment trackers: TensorBoard, Weights & Biases, MLflow, Prometheus.

Each is a `badput.meter.sinks.Sink`: pass it to `Meter(sinks=[...])` (or to a framework
callback's meter keyword arguments) and it receives the meter's summaries from the meter's
background thread, every `report_every` steps and once at the end. The metrics are
`scalar_metrics` of each summary, at step = the meter's step count. Each tracker package is
imported when its sink is made, with an install hint when it is missing.

Example:
    >>> meter = Meter(sinks=[TensorBoardSink("runs/exp1")], report_every=50)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from typing import Any

from badput.integrations import scalar_metrics
from badput.meter.sinks import PrometheusSink

__all__ = ["MlflowSink", "PrometheusSink", "TensorBoardSink", "WandbSink"]


class TensorBoardSink:
    """Writes each summary as TensorBoard scalars (event files in `log_dir`).

    Writes the event protocol buffers through the `tensorboard` package itself (extra
    `tensorboard`), so it needs neither TensorFlow nor torch.

    Args:
        log_dir: the run's folder (TensorBoard's `--logdir` or a folder below it).
        prefix: put before every tag.
    """

    def __init__(self, log_dir: str | os.PathLike[str], prefix: str = "badput/") -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise ImportError(
                "the TensorBoard sink needs tensorboard: pip install 'badput[tensorboard]'"
            ) from None
        self.log_dir = os.fspath(log_dir)
        self.prefix = prefix
        self._event = Event
        self._summary = Summary
        self._writer: Any = EventFileWriter(self.log_dir)

    def emit(self, record: dict[str, Any]) -> None:
        """Write the record's metrics as scalars at step = its step count."""
        values = [
            self._summary.Value(tag=tag, simple_value=value)
            for tag, value in scalar_metrics(record, self.prefix).items()
        ]
        event = self._event(
            wall_time=time.time(), step=int(record["steps"]), summary=self._summary(value=values)
        )
        self._writer.add_event(event)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


class WandbSink:
    """Logs each summary to a Weights & Biases run (extra `wandb`).

    The metrics are plotted against `{prefix}steps` (the meter's step count, declared with
    `define_metric`), so they do not disturb the step of the run's other metrics.

    Args:
        run: the run to log to (default: `wandb.run` when a run is active, else a new one).
        prefix: put before every metric name.
        **init: `wandb.init` arguments for the new run (`project=`, `mode="offline"`, ...).
    """

    def __init__(self, run: Any = None, prefix: str = "badput/", **init: Any) -> None:
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "the Weights & Biases sink needs wandb: pip install 'badput[wandb]'"
            ) from None
        self.prefix = prefix
        self._owned = False
        if run is None:
            run = wandb.run
        if run is None:
            run = wandb.init(**init)
            self._owned = True  # made here: finished here
        self.run = run
        run.define_metric(f"{prefix}*", step_metric=f"{prefix}steps")

    def emit(self, record: dict[str, Any]) -> None:
        """Log the record's metrics (one history row)."""
        self.run.log(scalar_metrics(record, self.prefix))

    def close(self) -> None:
        """Finish the run if this sink started it."""
        if self._owned:
            self.run.finish()


class MlflowSink:
    """Logs each summary as MLflow metrics at step = the meter's step count (extra `mlflow`).

    Args:
        tracking_uri: the tracking server or store (default: MLflow's own default, i.e.
            `MLFLOW_TRACKING_URI`).
        run_id: the run to log to (default: the active run, else a new run made here).
        experiment_name: experiment of a new run (created if missing).
        prefix: put before every metric name.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        run_id: str | None = None,
        experiment_name: str = "badput",
        prefix: str = "badput/",
    ) -> None:
        try:
            import mlflow
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ImportError(
                "the MLflow sink needs mlflow: pip install 'badput[mlflow]'"
            ) from None
        self.prefix = prefix
        self._metric = Metric
        self.client: Any = MlflowClient(tracking_uri=tracking_uri)
        self._owned = False
        if run_id is None:
            active = mlflow.active_run()
            if active is not None and tracking_uri in (None, mlflow.get_tracking_uri()):
                run_id = active.info.run_id
        if run_id is None:
            experiment = self.client.get_experiment_by_name(experiment_name)
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else self.client.create_experiment(experiment_name)
            )
            run_id = self.client.create_run(experiment_id).info.run_id
            self._owned = True  # made here: ended here
        self.run_id: str = run_id

    def emit(self, record: dict[str, Any]) -> None:
        """Log the record's metrics in one batch."""
        timestamp_ms = int(time.time() * 1000)
        step = int(record["steps"])
        metrics = [
            self._metric(key, value, timestamp_ms, step)
            for key, value in scalar_metrics(record, self.prefix).items()
        ]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        """End the run if this sink started it."""
        if self._owned:
            self.client.set_terminated(self.run_id)
