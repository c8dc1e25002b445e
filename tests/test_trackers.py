"""Tracker sinks (TensorBoard, W&B offline, MLflow local store), the shared integration helpers
(`scalar_metrics`, `LoopTimer`), and the `all` extra's dependency closure.

The meter runs on a fake clock, so every value written to a tracker is known exactly; each test
reads the values back from the tracker's own files.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import struct
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from badput import Meter
from badput.integrations import LoopTimer, scalar_metrics

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
STEPS = 6
REPORT_EVERY = 2
# Each step: a 20 ms fetch, then 80 ms of work. Goodput = 80 / 100 exactly (no warm-up).
DATA_MS, STEP_MS = 20, 80
EXPECTED_STEPS = [2.0, 4.0, 6.0, 6.0]  # reports at 2, 4, 6, then the final summary


class FakeClock:
    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now


def _run(sink: Any) -> Meter:
    """Six steps on the fake clock into `sink`; the meter is closed (final summary sent)."""
    clock = FakeClock()
    meter = Meter(
        sinks=[sink],
        report_every=REPORT_EVERY,
        warmup_steps=0,
        gpu_timing=False,
        distributed=False,
        clock=clock,
    )

    def batches() -> Iterator[int]:
        for i in range(STEPS):
            clock.now += DATA_MS * MS
            yield i

    for _ in meter.data(batches()):
        with meter.step(samples=4):
            clock.now += STEP_MS * MS
    meter.close()
    # close() waits 5 s at most for the sink thread (a training job's exit is never held up
    # longer); a tracker's own finish (wandb's, under a loaded CI machine) can take more. The
    # test reads what the sink wrote, so it waits for the thread to end.
    for thread in threading.enumerate():
        if thread.name == "badput-meter-sinks":
            thread.join(timeout=120)
    return meter


def _expected(step: float) -> dict[str, float]:
    wall_s = step * (DATA_MS + STEP_MS) / 1000
    return {
        "badput/steps": step,
        "badput/goodput": STEP_MS / (DATA_MS + STEP_MS),
        "badput/wall_s": wall_s,
        "badput/data_wait_s": step * DATA_MS / 1000,
        "badput/samples_per_s": 4 * step / wall_s,
        "badput/step_median_s": STEP_MS / 1000,
    }


# ---- shared helpers ------------------------------------------------------------------------


def test_scalar_metrics_flattens_a_summary() -> None:
    summary = {
        "goodput": 0.5,
        "wall_s": 2.0,
        "steps": 10,
        "productive_s": 1.0,
        "badput_s": {"data_wait": 0.25, "idle": 0.75, "my_phase": 0.0},
        "step_time_s": {"mean": 0.1, "median": 0.09, "p90": None},
        "samples_per_s": None,
        "tokens_per_s": 100.0,
        "mfu": None,
        "gpu": "NVIDIA H100",
        "stragglers": [],
        "lost": [],
    }
    assert scalar_metrics(summary, "b.") == {
        "b.goodput": 0.5,
        "b.wall_s": 2.0,
        "b.steps": 10.0,
        "b.productive_s": 1.0,
        "b.data_wait_s": 0.25,
        "b.idle_s": 0.75,
        "b.my_phase_s": 0.0,
        "b.step_mean_s": 0.1,
        "b.step_median_s": 0.09,
        "b.tokens_per_s": 100.0,
    }


def test_loop_timer_puts_each_gap_where_its_hook_says() -> None:
    clock = FakeClock()
    meter = Meter(warmup_steps=0, gpu_timing=False, distributed=False, clock=clock)
    timer = LoopTimer(meter)
    clock.now += 5 * MS  # before the loop starts: start-up
    timer.start()
    clock.now += 20 * MS  # first fetch
    timer.begin_step(samples=8)
    clock.now += 100 * MS
    timer.mark("eval")  # inside a step: ignored, the step goes on
    timer.end_step()
    clock.now += 3 * MS  # loop overhead: idle
    timer.mark(None)
    clock.now += 50 * MS
    timer.mark("eval")
    clock.now += 30 * MS
    timer.mark("checkpoint")
    clock.now += 20 * MS  # second fetch
    timer.begin_step(samples=8)
    clock.now += 100 * MS
    timer.end_step()
    timer.end_step()  # no step open: nothing happens
    s = meter.summary()
    assert s["steps"] == 2
    assert s["productive_s"] == pytest.approx(0.200)
    assert s["badput_s"]["data_wait"] == pytest.approx(0.040)
    assert s["badput_s"]["eval"] == pytest.approx(0.050)
    assert s["badput_s"]["checkpoint"] == pytest.approx(0.030)
    assert s["badput_s"]["idle"] == pytest.approx(0.003)
    assert s["badput_s"]["startup"] == pytest.approx(0.005)
    assert s["wall_s"] == pytest.approx(0.328)
    assert s["samples_per_s"] == pytest.approx(16 / 0.328)
    meter.close()


def test_prometheus_is_exposed_with_the_trackers() -> None:
    from badput.integrations import trackers
    from badput.meter.sinks import PrometheusSink

    assert trackers.PrometheusSink is PrometheusSink  # served and tested in test_meter.py


@pytest.mark.parametrize(
    ("sink", "module", "extra"),
    [
        ("TensorBoardSink", "tensorboard", "tensorboard"),
        ("WandbSink", "wandb", "wandb"),
        ("MlflowSink", "mlflow", "mlflow"),
    ],
)
def test_missing_tracker_package_gives_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sink: str, module: str, extra: str
) -> None:
    from badput.integrations import trackers

    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    args = (str(tmp_path),) if sink == "TensorBoardSink" else ()
    with pytest.raises(ImportError, match=re.escape(f"pip install 'badput[{extra}]'")):
        getattr(trackers, sink)(*args)


# ---- TensorBoard ---------------------------------------------------------------------------


def test_tensorboard_scalars_read_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from badput.integrations.trackers import TensorBoardSink

    _run(TensorBoardSink(tmp_path / "tb"))
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    assert "badput/goodput" in scalars and "badput/mfu" not in scalars  # None is left out
    for tag in _expected(1):
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [int(s) for s in EXPECTED_STEPS], tag
        # simple_value is a float32: 7 significant digits.
        expected = [_expected(s)[tag] for s in EXPECTED_STEPS]
        assert [e.value for e in events] == pytest.approx(expected, rel=1e-6), tag


# ---- Weights & Biases (offline) ------------------------------------------------------------


def _wandb_history(run_file: Path) -> list[dict[str, Any]]:
    """History rows of an offline run's .wandb file.

    The file is a LevelDB-style log (a 7-byte header ':W&B' + magic + version, then 32 KiB
    blocks of records: CRC32, length, type FULL/FIRST/MIDDLE/LAST) of `Record` protobufs;
    wandb 0.31 has no Python reader of its own, so the test reads the framing itself.
    """
    import json

    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    rows = []
    for raw in records:
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    # Keys with "/" are stored split, as nested_key.
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def test_wandb_offline_history_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_DISABLE_GIT": "true",
    }.items():
        monkeypatch.setenv(name, value)
    from badput.integrations.trackers import WandbSink

    sink = WandbSink(project="badput-test", mode="offline", dir=str(tmp_path))
    assert sink._owned
    _run(sink)
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    # wandb's own process writes the file; on a loaded machine its last records can land a
    # moment after finish() returns: read until every step is there (or 30 s pass).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:  # a record being written may not parse yet
            if sum("badput/steps" in r for r in _wandb_history(run_file)) >= len(EXPECTED_STEPS):
                break
        except Exception:
            pass
        time.sleep(0.2)
    rows = [r for r in _wandb_history(run_file) if "badput/steps" in r]
    assert [r["badput/steps"] for r in rows] == EXPECTED_STEPS
    for row in rows:
        for key, value in _expected(row["badput/steps"]).items():
            assert row[key] == pytest.approx(value, rel=1e-12), key


# ---- MLflow (local file store) -------------------------------------------------------------


def test_mlflow_local_store_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    # mlflow 3 keeps the file store in maintenance mode behind this switch; SQLite would need
    # SQLAlchemy, which mlflow-skinny leaves out.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    from badput.integrations.trackers import MlflowSink

    uri = (tmp_path / "mlruns").as_uri()
    sink = MlflowSink(tracking_uri=uri, experiment_name="goodput")
    _run(sink)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(sink.run_id)
    assert run.info.status == "FINISHED"  # made by the sink, ended by it
    assert client.get_experiment(run.info.experiment_id).name == "goodput"
    for key in _expected(1):
        history = client.get_metric_history(sink.run_id, key)
        assert [m.step for m in history] == [int(s) for s in EXPECTED_STEPS], key
        expected = [_expected(s)[key] for s in EXPECTED_STEPS]
        assert [m.value for m in history] == pytest.approx(expected, rel=1e-12), key


def test_mlflow_logs_into_an_existing_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    from badput.integrations.trackers import MlflowSink

    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("mine")).info.run_id
    _run(MlflowSink(tracking_uri=uri, run_id=run_id))
    assert client.get_run(run_id).info.status == "RUNNING"  # not ours to end
    assert len(client.get_metric_history(run_id, "badput/goodput")) == len(EXPECTED_STEPS)


# ---- the `all` extra -----------------------------------------------------------------------


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras: dict[str, list[str]] = tomllib.load(f)["project"]["optional-dependencies"]
    return extras


def test_all_extra_holds_every_optional_dependency_and_one_torch() -> None:
    from packaging.requirements import Requirement

    extras = _extras()
    all_reqs = {str(Requirement(r)) for r in extras["all"]}
    for name, reqs in extras.items():
        if name in ("all", "dev"):
            continue
        for r in reqs:
            assert str(Requirement(r)) in all_reqs, f"extra {name}: {r} missing from all"
    for name in ("lightning", "hf", "tensorboard", "wandb", "mlflow"):
        for r in extras[name]:
            assert str(Requirement(r).specifier).startswith("=="), f"{r}: integrations pin"
    torch_specs = [Requirement(r).specifier for r in extras["all"] if r.startswith("torch")]
    assert [str(s) for s in torch_specs] == ["==2.13.0"]


# NVML's Python bindings (extra nvml) are pure Python, not a CUDA build: the one nvidia-* allowed.
ALLOWED_NVIDIA = {"nvidia-ml-py"}


def _closure() -> tuple[dict[str, tuple[str, list[str]]], list[str]]:
    """Distributions `badput[all]` pulls in, walked through installed metadata.

    Returns {name: (version, [requirement strings that led to it])} and the requirements whose
    distribution is not installed.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, tuple[str, list[str]]] = {}
    walked: set[tuple[str, frozenset[str]]] = set()
    missing: list[str] = []
    queue = [Requirement(r) for r in _extras()["all"]]
    while queue:
        req = queue.pop()
        name = canonicalize_name(req.name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(str(req))
            continue
        seen.setdefault(name, (dist.version, []))[1].append(str(req))
        key = (name, frozenset(req.extras))
        if key in walked:
            continue
        walked.add(key)
        envs = [{"extra": ""}] + [{"extra": e} for e in req.extras]
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                queue.append(sub)
    return seen, missing


def test_all_extra_pulls_no_other_torch_and_no_cuda_packages() -> None:
    seen, missing = _closure()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"badput[all] is not fully installed: {missing}")
        pytest.skip(f"badput[all] is not fully installed: {missing[:5]}")
    cuda = sorted(n for n in seen if n.startswith("nvidia-") and n not in ALLOWED_NVIDIA)
    assert cuda == [], f"CUDA packages in badput[all]: {cuda}"
    from packaging.requirements import Requirement

    version, reqs = seen["torch"]
    assert version.split("+")[0] == "2.13.0"
    for text in reqs:  # every package that asks for torch accepts 2.13.0
        assert Requirement(text).specifier.contains("2.13.0", prereleases=True), text
    # The integrations are in the closure at their pins.
    for name, pin in (
        ("lightning", "2.6.6"),
        ("transformers", "5.24.0"),
        ("tensorboard", "2.21.0"),
        ("wandb", "0.31.0"),
        ("mlflow-skinny", "3.17.2"),
    ):
        assert seen[name][0] == pin, name
