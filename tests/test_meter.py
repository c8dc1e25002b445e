"""badput.Meter: accuracy against independent truth, summary shape, lazy device timing, MFU,
fail-open behaviour, Prometheus, and the O(1), I/O-free hot path.

Timed tests use sleep-based work (the main thread is idle, so a loaded 2-core machine does
not skew them) and the acceptance tolerance of 3 points of wall-time share. Exact values
(ideal step time, MFU, category accounting) use a fake nanosecond clock.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
import time
import tracemalloc
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from badput import Meter
from badput.meter import BUILTIN_CATEGORIES, MeterWarning
from badput.meter.events import PendingSteps
from badput.meter.sinks import PrometheusSink

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "examples" / "train_toy.py"
H100 = "NVIDIA H100 80GB HBM3"
NEVER = 10**9  # report_every that never reports during a test
MS = 1_000_000  # nanoseconds

STEP_STAT_KEYS = {"mean", "median", "p90", "max", "ideal"}


# ---- helpers -------------------------------------------------------------------------------


class FakeClock:
    """A nanosecond clock that moves only when the test says so."""

    def __init__(self, start: int = 0) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += round(ms * MS)


class FakeIterable:
    """Yields `n` items; each `next` (and the final StopIteration) costs `ms` on the clock."""

    def __init__(self, clock: FakeClock, n: int, ms: float, end_ms: float | None = None) -> None:
        self.clock = clock
        self.n = n
        self.ms = ms
        self.end_ms = ms if end_ms is None else end_ms

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            self.clock.advance_ms(self.ms)
            yield i
        self.clock.advance_ms(self.end_ms)


class ListSink:
    """Collects records (from the meter's sink thread)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.closed = False

    def emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def close(self) -> None:
        self.closed = True


class BrokenSink:
    """A sink whose emit always raises."""

    def __init__(self) -> None:
        self.calls = 0

    def emit(self, record: dict[str, Any]) -> None:
        self.calls += 1
        raise RuntimeError("sink is broken")

    def close(self) -> None:
        pass


class FakeEvent:
    """A device event: completes when its backend says so (in stream order)."""

    def __init__(self, backend: FakeEvents, seq: int, ms: float) -> None:
        self.backend = backend
        self.seq = seq
        self.ms = ms  # elapsed_time of a pair is the `ms` of its end event

    @property
    def done(self) -> bool:
        return self.seq < self.backend.completed

    def query(self) -> bool:
        self.backend.queries += 1
        if self.backend.fail == "query":
            raise RuntimeError("query boom")
        return self.done

    def elapsed_time(self, end_event: FakeEvent) -> float:
        b = self.backend
        if b.fail == "elapsed_time":
            raise RuntimeError("elapsed_time boom")
        if not (self.done and end_event.done):
            b.violations.append(f"read pair ({self.seq}, {end_event.seq}) before completion")
        steps = b.meter.steps if b.meter is not None else -1
        b.reads.append((end_event.seq, steps))
        return end_event.ms

    def synchronize(self) -> None:
        pytest.fail("the meter synchronized on an event")

    def wait(self, *args: object) -> None:
        pytest.fail("the meter made a stream wait on an event")


class FakeEvents:
    """A fake EventBackend. Events complete in recording order, as on one CUDA stream."""

    def __init__(self, ms: float = 10.0, fail: str | None = None) -> None:
        self.ms = ms
        self.fail = fail
        self.recorded: list[FakeEvent] = []
        self.completed = 0  # events with seq < completed have completed
        self.queries = 0
        self.reads: list[tuple[int, int]] = []  # (end event seq, meter.steps at read time)
        self.violations: list[str] = []
        self.meter: Meter | None = None

    def record(self) -> FakeEvent:
        if self.fail == "record":
            raise RuntimeError("record boom")
        event = FakeEvent(self, len(self.recorded), self.ms)
        self.recorded.append(event)
        return event

    def complete_all(self) -> None:
        """The GPU catches up with everything recorded so far."""
        self.completed = len(self.recorded)

    def synchronize(self) -> None:
        pytest.fail("the meter synchronized the device")


def meter_warnings(record: Any) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, MeterWarning)]


@pytest.fixture
def no_cuda_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        pytest.fail("the meter called torch.cuda.synchronize")

    monkeypatch.setattr(torch.cuda, "synchronize", fail)


# ---- 1. a real toy loop on CPU against independently measured truth -------------------------


class SlowDataset(Dataset[torch.Tensor]):
    """Each batch takes `ms` to produce (a sleep: the main thread is free)."""

    def __init__(self, n: int, ms: float, batch: int) -> None:
        self.n = n
        self.ms = ms
        self.batch = batch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.ms / 1000)
        return torch.full((self.batch, 32), float(i))


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    # Tiny CPU ops with several OpenMP threads on a busy 2-core machine can take tens of ms
    # (threads wait for a busy core); one thread keeps the toy steps short and steady.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_toy_loop_shares_match_independent_truth(tmp_path: Path, one_torch_thread: None) -> None:
    n_steps, batch, every = 40, 8, 10
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(n_steps, 5.0, batch), batch_size=None, num_workers=0)
    pad = torch.zeros(500_000)

    # The truth is taken from outside the meter: the gaps between loop bodies are the data
    # wait (everything `for` does to produce the next batch, the meter's generator included),
    # and the checkpoint is timed around the phase block. The meter times next() inside its
    # generator and the phase inside its context manager: the same intervals, measured by
    # different clocks reads in different places.
    truth_data = truth_ck = 0.0
    meter = Meter(report_every=NEVER, gpu_timing=False, distributed=False)
    t_start = mark = time.perf_counter()
    for steps, batch_x in enumerate(meter.data(loader), start=1):
        truth_data += time.perf_counter() - mark
        with meter.step(samples=len(batch_x)):
            loss = model(batch_x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.013)  # the rest of a ~15 ms step
        if steps % every == 0:
            t = time.perf_counter()
            with meter.phase("checkpoint"):
                torch.save({"model": model.state_dict(), "pad": pad}, tmp_path / "ck.pt")
                time.sleep(0.015)  # a slow filesystem
            truth_ck += time.perf_counter() - t
        mark = time.perf_counter()
    t_end = time.perf_counter()
    truth_data += t_end - mark
    s = meter.summary()
    meter.close()
    loop = t_end - t_start

    assert s["steps"] == steps == n_steps
    wall = s["wall_s"]
    assert wall == pytest.approx(loop, abs=0.01)
    truth_data_share = truth_data / loop
    truth_ck_share = truth_ck / loop
    assert truth_data_share > 0.1  # the set-up: about a quarter of each step on an idle machine
    assert truth_ck_share > 0.03
    assert s["badput_s"]["data_wait"] / wall == pytest.approx(truth_data_share, abs=0.03)
    assert s["badput_s"]["checkpoint"] / wall == pytest.approx(truth_ck_share, abs=0.03)
    # Every nanosecond is in exactly one place.
    assert s["productive_s"] + sum(s["badput_s"].values()) == pytest.approx(wall, rel=1e-6)
    assert s["samples_per_s"] == pytest.approx(n_steps * batch / wall, rel=1e-6)
    assert s["tokens_per_s"] is None
    assert s["mfu"] is None  # CPU: no peak to divide by
    assert s["gpu_step_time_s"] is None
    assert s["lost"] == []


# ---- summary shape and exact accounting (fake clock) ---------------------------------------


def test_summary_keys_and_exact_accounting() -> None:
    clock = FakeClock(start=5 * MS)
    meter = Meter(clock=clock, report_every=NEVER, gpu_timing=False, distributed=False)
    clock.advance_ms(100)  # start-up: imports, model construction
    with meter.phase("compile"):  # before the first step: compile, not start-up
        clock.advance_ms(9)
    for i in meter.data(FakeIterable(clock, 4, ms=5, end_ms=1)):  # 4 x 5 ms + 1 ms at the end
        with meter.step(samples=8, tokens=1024):
            clock.advance_ms(12)
            if i == 1:  # gradient accumulation: a data wait inside a step is data wait
                for _ in meter.data(FakeIterable(clock, 1, ms=2, end_ms=0)):
                    pass
            clock.advance_ms(8)
        if i == 1:
            with meter.phase("checkpoint"):
                clock.advance_ms(7)
        if i == 2:
            with meter.phase("my_phase"):
                clock.advance_ms(4)
            clock.advance_ms(6)  # nothing measured: idle
    s = meter.summary()
    meter.close()

    assert {"wall_s", "goodput", "steps", "badput_s", "step_time_s"} <= s.keys()
    assert {"samples_per_s", "tokens_per_s", "mfu"} <= s.keys()
    assert set(s["badput_s"]) == {*BUILTIN_CATEGORIES, "my_phase"}
    assert set(BUILTIN_CATEGORIES) == {
        "data_wait",
        "checkpoint",
        "eval",
        "compile",
        "startup",
        "idle",
    }
    assert set(s["step_time_s"]) == STEP_STAT_KEYS

    b = s["badput_s"]
    assert b["startup"] == pytest.approx(0.100, abs=1e-12)
    assert b["data_wait"] == pytest.approx(0.023, abs=1e-12)  # 4 x 5 + 1 + 2 nested
    assert b["compile"] == pytest.approx(0.029, abs=1e-12)  # warm-up step 20 + phase 9
    assert b["checkpoint"] == pytest.approx(0.007, abs=1e-12)
    assert b["my_phase"] == pytest.approx(0.004, abs=1e-12)
    assert b["eval"] == 0
    assert b["idle"] == pytest.approx(0.006, abs=1e-12)
    assert s["productive_s"] == pytest.approx(0.060, abs=1e-12)  # 3 steps x 20 ms
    assert s["wall_s"] == pytest.approx(0.229, abs=1e-12)
    assert s["goodput"] == pytest.approx(60 / 229, rel=1e-12)
    assert s["steps"] == 4
    assert s["samples_per_s"] == pytest.approx(32 / 0.229, rel=1e-12)
    assert s["tokens_per_s"] == pytest.approx(4096 / 0.229, rel=1e-12)
    assert s["step_time_s"]["mean"] == pytest.approx(0.020, abs=1e-12)
    assert s["mfu"] is None


def test_add_time_counts_gaps_timed_by_a_framework() -> None:
    """Framework hooks time the gaps themselves: add_time puts them where data()/phase() would."""
    clock = FakeClock()
    meter = Meter(
        clock=clock, warmup_steps=0, report_every=NEVER, gpu_timing=False, distributed=False
    )
    for _ in range(3):
        clock.advance_ms(5)  # the framework fetched a batch and timed it
        meter.add_time("data_wait", 5 * MS)
        with meter.step():
            clock.advance_ms(10)
    clock.advance_ms(7)
    meter.add_time("eval", 7 * MS)
    meter.add_time("eval", -1)  # a clock going backwards is ignored
    s = meter.summary()
    meter.close()
    b = s["badput_s"]
    assert b["data_wait"] == pytest.approx(0.015, abs=1e-12)
    assert b["eval"] == pytest.approx(0.007, abs=1e-12)
    assert b["idle"] == pytest.approx(0.0, abs=1e-12)
    assert s["productive_s"] == pytest.approx(0.030, abs=1e-12)
    assert s["wall_s"] == pytest.approx(0.052, abs=1e-12)


def test_ideal_step_time_is_mean_of_steps_within_median_plus_3_mad() -> None:
    clock = FakeClock()
    meter = Meter(
        clock=clock, warmup_steps=0, report_every=NEVER, gpu_timing=False, distributed=False
    )
    steps_ms = [10, 11, 12, 10, 10, 13, 10, 40, 11, 10]
    for ms in steps_ms:
        with meter.step():
            clock.advance_ms(ms)
    st = meter.summary()["step_time_s"]
    meter.close()
    # sorted: 10 10 10 10 10 11 11 12 13 40 -> median 10.5, MAD 0.5, cut 10.5 + 1.5 = 12:
    # 13 and 40 are outliers; ideal = (5 x 10 + 2 x 11 + 12) / 8 = 10.5 ms.
    assert st["ideal"] == 10_500_000 / 1e9
    assert st["median"] == 10_500_000 / 1e9
    assert st["mean"] == 137 * MS / 10 / 1e9
    assert st["max"] == 40 * MS / 1e9
    assert st["p90"] == pytest.approx(0.0157, rel=1e-12)  # 13 + 0.1 x (40 - 13), numpy linear
    assert st["p90"] == float(np.percentile(np.array(steps_ms, dtype=float) * MS, 90)) / 1e9


def test_ideal_step_time_keeps_a_step_exactly_at_the_cut() -> None:
    clock = FakeClock()
    meter = Meter(
        clock=clock, warmup_steps=0, report_every=NEVER, gpu_timing=False, distributed=False
    )
    for ms in [9, 10, 11, 10, 13, 10, 14]:
        with meter.step():
            clock.advance_ms(ms)
    st = meter.summary()["step_time_s"]
    meter.close()
    # median 10, MAD 1, cut 13: 13 is kept ("<="), 14 is not: (9 + 10 + 11 + 10 + 13 + 10) / 6
    assert st["ideal"] == 63 * MS / 6 / 1e9
    assert st["median"] == 10 * MS / 1e9


def test_step_stats_median_and_ideal_cover_the_recent_window_only() -> None:
    clock = FakeClock()
    meter = Meter(
        clock=clock,
        warmup_steps=0,
        window=4,
        report_every=NEVER,
        gpu_timing=False,
        distributed=False,
    )
    for ms in [50, 50, 50, 50, 10, 10, 10, 10]:
        with meter.step():
            clock.advance_ms(ms)
    s = meter.summary()
    meter.close()
    assert s["window_steps"] == 4
    assert s["step_time_s"]["median"] == 10 * MS / 1e9
    assert s["step_time_s"]["ideal"] == 10 * MS / 1e9
    assert s["step_time_s"]["mean"] == 30 * MS / 1e9  # all steps
    assert s["step_time_s"]["max"] == 50 * MS / 1e9  # all steps


# ---- 2. badput run on an unmodified script --------------------------------------------------


def test_badput_run_matches_the_scripts_own_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from badput.cli.app import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # steady toy steps on a busy machine

    source = TOY.read_text()
    assert "import badput" not in source and "from badput" not in source  # no code changes
    out, truth_path = tmp_path / "summary.json", tmp_path / "truth.json"
    code = main(
        ["run", "--out", str(out), "--", sys.executable, str(TOY), "--report", str(truth_path)]
    )
    assert code == 0, capsys.readouterr().err
    s = json.loads(out.read_text())
    truth = json.loads(truth_path.read_text())
    assert "badput meter" in capsys.readouterr().err  # the summary table was printed

    assert s["steps"] == truth["steps"] == 40
    b = s["badput_s"]
    # The meter's wall starts when the interpreter attaches it (before `import torch`), so it
    # holds start-up the script never sees; its loop is the rest: productive steps + data wait
    # + checkpoint + warm-up/compile + idle (idle is mostly the few milliseconds between the
    # script's last clock read and the summary written at exit). The script's loop_s runs from
    # just before iter(loader) to the loop's end (the last next(), after the last checkpoint),
    # before its temporary directory is removed: that removal took 59 ms on a CI machine and
    # is no part of either loop. Compare shares of these loops.
    meter_loop = s["productive_s"] + sum(v for k, v in b.items() if k != "startup")
    assert b["startup"] > 0
    assert meter_loop == pytest.approx(truth["loop_s"], abs=0.05)
    truth_data_share = truth["data_wait_s"] / truth["loop_s"]
    truth_ck_share = truth["checkpoint_s"] / truth["loop_s"]
    assert truth_data_share > 0.1 and truth_ck_share > 0.0
    assert b["data_wait"] / meter_loop == pytest.approx(truth_data_share, abs=0.03)
    assert b["checkpoint"] / meter_loop == pytest.approx(truth_ck_share, abs=0.03)
    assert s["lost"] == []
    # The toy's DataLoader has batch_size=None: no samples/s, and the summary says why.
    assert s["samples_per_s"] is None
    assert "batch_size=None" in s["missing"]["samples_per_s"]
    assert s["precision"] == "fp32"  # the toy's float32 Linear layers, on CPU


_BATCHED_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(100, 16), torch.randn(100, 1))
for x, y in DataLoader(data, batch_size=8):  # 12 batches of 8, then one of 4
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_badput_run_counts_samples_from_the_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from badput.cli.app import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    script, out = tmp_path / "train.py", tmp_path / "summary.json"
    script.write_text(_BATCHED_SCRIPT)
    assert main(["run", "--out", str(out), "--", sys.executable, str(script)]) == 0
    err = capsys.readouterr().err
    s = json.loads(out.read_text())
    assert s["steps"] == 13
    # Every one of the 100 samples, over the same wall time the summary reports.
    assert s["samples_per_s"] == pytest.approx(100 / s["wall_s"], rel=1e-12)
    assert "samples_per_s" not in s["missing"]
    assert f"{s['samples_per_s']:,.1f} samples/s" in err


@pytest.mark.parametrize(
    ("batch", "samples", "why"),
    [
        (torch.zeros(8, 3), 8, None),
        ((torch.zeros(4, 3), torch.zeros(4)), 4, None),
        ({"input_ids": torch.zeros(2, 7), "mask": torch.zeros(2, 7), "n": 3}, 2, None),
        ([{"x": torch.zeros(5, 1)}, torch.zeros(5)], 5, None),
        ((torch.zeros(4, 3), torch.zeros(6)), None, "disagree"),
        (("a", 3), None, "no tensor"),
        (torch.tensor(1.0), None, "no tensor"),
    ],
)
def test_batch_samples_from_the_leading_dimension(
    batch: Any, samples: int | None, why: str | None
) -> None:
    from badput.meter.auto import batch_samples

    n, reason = batch_samples(batch)
    assert n == samples
    assert (reason is None) == (why is None)
    if why is not None:
        assert reason is not None and why in reason


# ---- summary and final record agree; precision from evidence --------------------------------


def _cpu_loop(meter: Meter, steps: int = 6, batch: int = 4) -> None:
    model, opt = _tiny_model()
    loader = DataLoader(TensorDataset(torch.randn(steps * batch, 32)), batch_size=batch)
    for (x,) in meter.data(loader):
        with meter.step(samples=len(x)):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


def test_summary_after_the_loop_agrees_with_the_final_jsonl_record(
    tmp_path: Path, one_torch_thread: None
) -> None:
    # The reported bug: print(meter.summary()) after the loop said goodput 0.51, the final
    # JSONL record written at exit 0.445, because the final one also counted the time from
    # the end of the loop to the exit as idle. The wall now ends at the meter's last event.
    out = tmp_path / "goodput.jsonl"
    meter = Meter(out=out, report_every=NEVER, gpu_timing=False, distributed=False)
    _cpu_loop(meter)
    s = meter.summary()
    time.sleep(0.2)  # teardown after the loop: plotting, saving, interpreter exit
    meter.close()
    (final,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert final.pop("type") == "final"
    assert final == json.loads(json.dumps(s))
    assert s["goodput"] is not None and 0 < s["goodput"] < 1
    assert s["badput_s"]["idle"] < 0.2  # the teardown is not in it
    assert meter.summary() == s  # and a summary asked for after close says the same


def test_idle_between_steps_still_counts_and_the_tail_does_not() -> None:
    clock = FakeClock()
    sink = ListSink()
    meter = Meter(clock=clock, sinks=[sink], warmup_steps=0, report_every=NEVER,
                  gpu_timing=False, distributed=False)  # fmt: skip
    for _ in range(3):
        with meter.step():
            clock.advance_ms(10)
        clock.advance_ms(5)  # between steps: idle
    s = meter.summary()
    clock.advance_ms(500)  # after the last step: no part of the run
    meter.close()
    final = sink.records[-1]
    assert final["type"] == "final"
    assert final["wall_s"] == s["wall_s"] == pytest.approx(0.040, abs=1e-12)  # 3 x 10 + 2 x 5
    assert final["badput_s"]["idle"] == pytest.approx(0.010, abs=1e-12)
    assert final["goodput"] == s["goodput"] == pytest.approx(0.75, rel=1e-12)


def test_precision_of_a_cpu_fp32_loop_is_fp32_from_its_matrix_products(
    one_torch_thread: None,
) -> None:
    meter = Meter(report_every=NEVER, gpu_timing=False, distributed=False)
    assert meter.summary()["precision"] is None  # nothing decided before the first step
    _cpu_loop(meter)
    s = meter.summary()
    meter.close()
    assert s["precision"] == "fp32"
    # Linear forward (2 addmm) and backward (3 mm: no input gradient for the first layer).
    assert s["precision_source"] == "first step's matrix products: 5 fp32"
    assert s["mfu"] is None and "no GPU" in s["missing"]["mfu"]


def test_precision_under_cpu_bf16_autocast_is_bf16(one_torch_thread: None) -> None:
    model, opt = _tiny_model()
    meter = Meter(report_every=NEVER, gpu_timing=False, distributed=False)
    for _ in range(2):
        with meter.step(), torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 32)).float().pow(2).mean()
        loss.backward()
        opt.step()
    s = meter.summary()
    meter.close()
    assert s["precision"] == "bf16"
    assert s["precision_source"].startswith("first step's matrix products: ")


def test_precision_is_unknown_when_nothing_tells() -> None:
    clock = FakeClock()
    meter = Meter(clock=clock, gpu_name=H100, flops_per_step=1e12, report_every=NEVER,
                  gpu_timing=False, distributed=False)  # fmt: skip
    for _ in range(3):
        with meter.step():  # no torch op at all
            clock.advance_ms(10)
    s = meter.summary()
    meter.close()
    assert s["precision"] is None
    assert s["precision_source"].startswith("no matrix product in the first step")
    assert s["mfu"] is None and s["mfu_denominator_tflops"] is None  # never a bf16 default
    assert "precision is unknown" in s["missing"]["mfu"]


def test_a_given_precision_wins_over_the_evidence(one_torch_thread: None) -> None:
    meter = Meter(precision="bf16", report_every=NEVER, gpu_timing=False, distributed=False)
    _cpu_loop(meter)
    s = meter.summary()
    meter.close()
    assert (s["precision"], s["precision_source"]) == ("bf16", "given (Meter(precision=...))")


def test_missing_figures_say_why() -> None:
    clock = FakeClock()
    meter = Meter(clock=clock, report_every=NEVER, gpu_timing=False, distributed=False)
    with meter.step():
        clock.advance_ms(10)
    s = meter.summary()
    meter.close()
    assert s["samples_per_s"] is None and "samples=N" in s["missing"]["samples_per_s"]
    assert s["tokens_per_s"] is None and "tokens=N" in s["missing"]["tokens_per_s"]
    assert set(s["missing"]) == {"samples_per_s", "tokens_per_s", "mfu"}


# ---- 3. lazy device timing against a fake event API -----------------------------------------


def test_gpu_events_are_read_lazily_only_after_completion(no_cuda_sync: None) -> None:
    clock = FakeClock()
    ev = FakeEvents()
    meter = Meter(events=ev, gpu_name=H100, clock=clock, report_every=NEVER, distributed=False)
    ev.meter = meter

    def step(gpu_ms: float) -> dict[str, Any]:
        ev.ms = gpu_ms
        with meter.step():
            clock.advance_ms(10)
        g = meter.summary()["gpu_step_time_s"]
        assert isinstance(g, dict)
        return g

    g = step(10.0)  # the GPU has not finished step 1: nothing may be read
    assert (g["measured_steps"], g["pending_steps"], g["mean"], g["max"]) == (0, 1, None, None)
    assert ev.reads == []
    assert len(ev.recorded) == 2  # one start and one end event per step

    ev.complete_all()  # the GPU finishes step 1 while the host is between steps
    g = step(30.0)  # step 1 is read now, at the end of step 2; step 2 is pending
    assert (g["measured_steps"], g["pending_steps"]) == (1, 1)
    assert g["mean"] == pytest.approx(0.010) and g["max"] == pytest.approx(0.010)

    for _ in range(3):  # the GPU falls behind: nothing more is read
        g = step(20.0)
    assert (g["measured_steps"], g["pending_steps"]) == (1, 4)

    ev.complete_all()
    g = step(20.0)  # steps 2..5 are read (at most 4 per step); step 6 is pending
    assert (g["measured_steps"], g["pending_steps"], g["dropped_steps"]) == (5, 1, 0)
    assert g["mean"] == pytest.approx((10 + 30 + 3 * 20) / 5 / 1000)
    assert g["max"] == pytest.approx(0.030)

    ev.complete_all()
    meter.close()  # the final summary reads what has completed, without waiting
    g = meter.summary()["gpu_step_time_s"]
    assert (g["measured_steps"], g["pending_steps"]) == (6, 0)

    assert ev.violations == []
    # Lazy: a step's events are read on a later step (or at close), never at its own end.
    for end_seq, steps_at_read in ev.reads:
        step_of_pair = end_seq // 2 + 1
        assert steps_at_read > step_of_pair or steps_at_read == meter.steps
    assert [seq for seq, _ in ev.reads] == [1, 3, 5, 7, 9, 11]  # in order, each pair once
    assert ev.queries <= 2 * meter.steps + 1  # no busy polling


def test_pending_queue_is_bounded_and_drops_the_oldest() -> None:
    ev = FakeEvents()
    pending = PendingSteps(capacity=3)
    for i in range(5):
        ev.ms = float(i + 1)
        pending.push(ev.record(), ev.record())
    assert (len(pending), pending.dropped, pending.count) == (3, 2, 0)
    pending.drain()
    assert pending.count == 0  # nothing completed: nothing read
    ev.complete_all()
    pending.drain(limit=10)
    assert (len(pending), pending.count) == (0, 3)
    assert pending.gpu_ns == (3 + 4 + 5) * MS  # the newest three were kept
    assert pending.max_ns == 5 * MS
    assert ev.violations == []


def test_meter_pending_steps_stay_bounded_when_the_gpu_never_catches_up(
    no_cuda_sync: None,
) -> None:
    ev = FakeEvents()
    meter = Meter(events=ev, report_every=NEVER, distributed=False)
    for _ in range(100):
        with meter.step():
            pass
    g = meter.summary()["gpu_step_time_s"]
    assert g == {
        "mean": None,
        "max": None,
        "measured_steps": 0,
        "pending_steps": 64,
        "dropped_steps": 36,
    }
    assert ev.queries <= 100  # one non-blocking query per step at most, when stuck
    ev.complete_all()
    meter.close()
    g = meter.summary()["gpu_step_time_s"]
    assert (g["measured_steps"], g["pending_steps"], g["dropped_steps"]) == (64, 0, 36)
    assert ev.violations == []


def test_gpu_timing_off_uses_no_events() -> None:
    ev = FakeEvents()
    meter = Meter(events=ev, gpu_timing=False, report_every=NEVER, distributed=False)
    with meter.step():
        pass
    assert meter.summary()["gpu_step_time_s"] is None
    assert ev.recorded == []
    meter.close()


# ---- MFU ------------------------------------------------------------------------------------


def test_mfu_h100_dense_bf16_exact(no_cuda_sync: None) -> None:
    clock = FakeClock()
    flops = 4.9475e12  # 0.5 x 989.5 TFLOP/s x 10 ms
    meter = Meter(
        events=FakeEvents(),
        gpu_name=H100,
        flops_per_step=flops,
        precision="bf16",
        clock=clock,
        report_every=NEVER,
        distributed=False,
    )
    for _ in range(11):  # 1 warm-up + 10 productive steps of 10 ms
        with meter.step():
            clock.advance_ms(10)
    s = meter.summary()
    meter.close()
    assert s["mfu_denominator_tflops"] == 989.5
    assert s["precision"] == "bf16"
    assert s["precision_source"] == "given (Meter(precision=...))"
    assert s["gpu"] == H100
    assert s["flops_per_step"] == flops
    assert s["mfu"] == pytest.approx(flops / 0.010 / 989.5e12, rel=1e-12)
    assert s["mfu"] == pytest.approx(0.5, rel=1e-12)


def test_mfu_uses_per_step_flops_argument() -> None:
    clock = FakeClock()
    meter = Meter(
        gpu_name=H100,
        precision="bf16",
        clock=clock,
        warmup_steps=0,
        report_every=NEVER,
        distributed=False,
    )
    for f in (1e12, 3e12):
        with meter.step(flops=f):
            clock.advance_ms(10)
    s = meter.summary()
    meter.close()
    assert s["mfu"] == pytest.approx(4e12 / 0.020 / 989.5e12, rel=1e-12)


def test_mfu_is_none_for_an_unknown_gpu() -> None:
    clock = FakeClock()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unknown name is not an error, nor a warning
        meter = Meter(
            events=FakeEvents(),
            gpu_name="Imaginary Accelerator X9000",
            flops_per_step=1e12,
            clock=clock,
            report_every=NEVER,
            distributed=False,
        )
        for _ in range(3):
            with meter.step():
                clock.advance_ms(10)
        s = meter.summary()
    meter.close()
    assert s["mfu"] is None
    assert s["mfu_denominator_tflops"] is None


def test_mfu_is_none_on_cpu() -> None:
    assert not torch.cuda.is_available()
    meter = Meter(flops_per_step=1e12, report_every=NEVER, distributed=False)
    for _ in range(3):
        with meter.step():
            pass
    s = meter.summary()
    meter.close()
    assert s["gpu"] is None
    assert s["mfu"] is None
    assert s["gpu_step_time_s"] is None


def _tiny_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: int) -> None:
    loss = model(torch.randn(batch, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def test_count_flops_measures_the_first_step_once() -> None:
    model, opt = _tiny_model()
    with FlopCounterMode(display=False) as counter:
        _train_step(model, opt, 16)
    expected = float(counter.get_total_flops())
    assert expected > 0

    meter = Meter(count_flops=True, report_every=NEVER, gpu_timing=False, distributed=False)
    with meter.step():
        _train_step(model, opt, 16)
    assert meter.flops_per_step == expected
    with meter.step():  # a bigger batch later does not re-count: measured once
        _train_step(model, opt, 64)
    assert meter.flops_per_step == expected
    assert meter.summary()["flops_per_step"] == expected
    meter.close()


def test_count_flops_mfu_with_fake_clock_and_h100() -> None:
    model, opt = _tiny_model()
    with FlopCounterMode(display=False) as counter:
        _train_step(model, opt, 16)
    expected = float(counter.get_total_flops())
    clock = FakeClock()
    meter = Meter(
        count_flops=True,
        gpu_name=H100,
        clock=clock,
        report_every=NEVER,
        gpu_timing=False,
        distributed=False,
    )
    for _ in range(4):
        with meter.step():
            _train_step(model, opt, 16)
            clock.advance_ms(10)
    s = meter.summary()
    meter.close()
    # No precision given: the first step's products ran in fp32 (a CPU float32 model, read
    # with the flop counter's mode active too), so the denominator is the H100's fp32 peak.
    assert s["precision"] == "fp32"
    assert s["precision_source"].startswith("first step's matrix products: ")
    assert s["mfu_denominator_tflops"] == 67.0
    assert s["mfu"] == pytest.approx(expected / 0.010 / 67.0e12, rel=1e-12)


def test_count_flops_mfu_without_warmup_counts_the_measured_step() -> None:
    # With warmup_steps=0 the first step is productive: its time is in the MFU denominator,
    # so its FLOPs (the ones just measured) must be in the numerator. BUG: _end_step reads
    # flops_per_step before _stop_flop_counter sets it, so the first step adds no FLOPs and
    # MFU comes out (n - 1) / n of the truth (here 3/4).
    model, opt = _tiny_model()
    with FlopCounterMode(display=False) as counter:
        _train_step(model, opt, 16)
    expected = float(counter.get_total_flops())
    clock = FakeClock()
    meter = Meter(
        count_flops=True,
        warmup_steps=0,
        gpu_name=H100,
        precision="bf16",
        clock=clock,
        report_every=NEVER,
        gpu_timing=False,
        distributed=False,
    )
    for _ in range(4):
        with meter.step():
            _train_step(model, opt, 16)
            clock.advance_ms(10)
    s = meter.summary()
    meter.close()
    assert s["flops_per_step"] == expected
    assert s["mfu"] == pytest.approx(expected / 0.010 / 989.5e12, rel=1e-12)


# ---- 4. fault injection: fail open, one warning per part, lost says what ---------------------


def _run_steps(meter: Meter, n: int) -> None:
    for _ in meter.data(range(n)):
        with meter.step(samples=1):
            pass


def test_a_raising_sink_is_dropped_with_one_warning_and_others_keep_working() -> None:
    good, bad = ListSink(), BrokenSink()
    with pytest.warns(MeterWarning) as record:
        meter = Meter(sinks=[bad, good], report_every=5, gpu_timing=False, distributed=False)
        _run_steps(meter, 20)
        meter.close()
    messages = meter_warnings(record)
    assert len(messages) == 1 and "BrokenSink" in messages[0]
    assert bad.calls == 1  # switched off after its first failure
    assert [r["type"] for r in good.records] == ["report"] * 4 + ["final"]
    assert [r["steps"] for r in good.records] == [5, 10, 15, 20, 20]
    assert good.closed
    s = meter.summary()
    assert s["steps"] == 20
    assert len(s["lost"]) == 1
    assert "BrokenSink" in s["lost"][0] and "sink is broken" in s["lost"][0]


def _bad_out(tmp_path: Path, kind: str) -> Path:
    if kind == "missing-directory":
        return tmp_path / "no" / "such" / "dir" / "goodput.jsonl"
    if kind == "parent-is-a-file":
        (tmp_path / "file").write_text("x")
        return tmp_path / "file" / "goodput.jsonl"
    if kind == "out-is-a-directory":
        return tmp_path
    assert kind == "read-only-directory"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root ignores permissions
        pytest.skip("permissions are not enforced for this user")
    return ro / "goodput.jsonl"


@pytest.mark.parametrize(
    "kind",
    ["missing-directory", "parent-is-a-file", "out-is-a-directory", "read-only-directory"],
)
def test_an_unwritable_out_path_loses_only_the_file(tmp_path: Path, kind: str) -> None:
    out = _bad_out(tmp_path, kind)
    good = ListSink()
    with pytest.warns(MeterWarning) as record:
        meter = Meter(out=out, sinks=[good], report_every=5, gpu_timing=False, distributed=False)
        _run_steps(meter, 20)
        meter.close()
    messages = meter_warnings(record)
    assert len(messages) == 1 and "JsonlSink" in messages[0]
    assert len(good.records) == 5  # the other sink keeps working
    s = meter.summary()
    assert s["steps"] == 20
    assert len(s["lost"]) == 1 and s["lost"][0].startswith("sink JsonlSink")


def test_out_file_gets_every_report_and_the_final_summary(tmp_path: Path) -> None:
    out = tmp_path / "goodput.jsonl"
    with Meter(out=out, report_every=5, gpu_timing=False, distributed=False) as meter:
        _run_steps(meter, 20)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["report"] * 4 + ["final"]
    assert lines[-1]["steps"] == 20 and lines[-1]["lost"] == []


@pytest.mark.parametrize("fail", ["query", "elapsed_time", "record"])
def test_a_failing_event_api_loses_only_gpu_timing(fail: str, no_cuda_sync: None) -> None:
    # Expected: GPU timing is switched off ("gpu" is what is lost) and everything else goes on
    # counting. BUG: Meter._begin_step/_end_step catch every exception as part "step", which
    # disables the whole meter: steps stop counting after the failure and `lost` says "step".
    good = ListSink()
    ev = FakeEvents()
    with pytest.warns(MeterWarning) as record:
        meter = Meter(events=ev, sinks=[good], report_every=5, distributed=False)
        _run_steps(meter, 3)
        ev.fail = fail
        ev.complete_all()
        _run_steps(meter, 17)
        meter.close()
    messages = meter_warnings(record)
    assert len(messages) == 1
    s = meter.summary()
    assert len(s["lost"]) == 1
    assert s["lost"][0].startswith("gpu"), s["lost"]
    assert f"{fail} boom" in s["lost"][0]
    assert s["steps"] == 20  # the loop, and the rest of the meter, went on
    assert s["gpu_step_time_s"] is None
    assert [r["steps"] for r in good.records] == [5, 10, 15, 20, 20]


def test_an_event_failure_at_close_still_sends_the_final_summary(no_cuda_sync: None) -> None:
    # The event API breaks after the last step, while steps are pending: close() drains them.
    # Expected: GPU timing is lost (one warning), the final summary still reaches the sinks and
    # they are closed. BUG: Meter.close() runs the drain, the final put and the worker close in
    # one try block; the raising query aborts it as "close", so the final summary is never
    # sent, the sink thread is never stopped and no sink is closed.
    good = ListSink()
    ev = FakeEvents()
    with pytest.warns(MeterWarning) as record:
        meter = Meter(events=ev, sinks=[good], report_every=5, distributed=False)
        _run_steps(meter, 10)
        ev.fail = "query"
        ev.complete_all()
        meter.close()
    messages = meter_warnings(record)
    assert len(messages) == 1
    assert [r["type"] for r in good.records] == ["report", "report", "final"]
    assert good.closed
    lost = meter.summary()["lost"]
    assert len(lost) == 1 and lost[0].startswith("gpu"), lost


def test_a_busy_prometheus_port_loses_only_prometheus() -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    good = ListSink()
    try:
        with pytest.warns(MeterWarning) as record:
            meter = Meter(
                sinks=[good],
                prometheus_port=port,
                prometheus_addr="127.0.0.1",
                report_every=5,
                gpu_timing=False,
                distributed=False,
            )
            _run_steps(meter, 10)
            meter.close()
    finally:
        busy.close()
    messages = meter_warnings(record)
    assert len(messages) == 1 and "prometheus" in messages[0]
    s = meter.summary()
    assert s["steps"] == 10
    assert len(s["lost"]) == 1 and s["lost"][0].startswith("prometheus")
    assert len(good.records) == 3


def test_several_failing_parts_warn_once_each(tmp_path: Path) -> None:
    good = ListSink()
    with pytest.warns(MeterWarning) as record:
        meter = Meter(
            out=tmp_path / "missing" / "x.jsonl",
            sinks=[BrokenSink(), good],
            report_every=2,
            gpu_timing=False,
            distributed=False,
        )
        _run_steps(meter, 20)
        meter.close()
    messages = meter_warnings(record)
    assert len(messages) == 2
    lost = meter.summary()["lost"]
    assert sorted(x.split(":")[0] for x in lost) == ["sink BrokenSink", "sink JsonlSink"]
    assert len(good.records) == 11


# ---- 5. Prometheus ----------------------------------------------------------------------------


def _scrape(port: int) -> dict[str, list[Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _wait_for_steps(port: int, steps: int, timeout_s: float = 10.0) -> dict[str, list[Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        families = _scrape(port)
        got = [s.value for s in families.get("badput_steps", [])]
        if got == [steps]:
            return families
        assert time.monotonic() < deadline, f"no report of {steps} steps, got {got}"
        time.sleep(0.02)


def test_prometheus_endpoint_serves_the_latest_report() -> None:
    meter = Meter(
        prometheus_port=0,
        prometheus_addr="127.0.0.1",
        report_every=5,
        gpu_timing=False,
        distributed=False,
    )
    try:
        assert meter._worker is not None
        sink = next(s for s in meter._worker._sinks if isinstance(s, PrometheusSink))
        port = sink.port
        assert port != 0
        for i in meter.data(range(10)):
            with meter.step(samples=4):
                time.sleep(0.002)
            if i == 3:
                with meter.phase("checkpoint"):
                    time.sleep(0.003)
        families = _wait_for_steps(port, 10)
    finally:
        meter.close()

    (goodput,) = families["badput_goodput"]
    assert goodput.labels == {"rank": "0"}
    assert 0.0 < goodput.value <= 1.0
    seconds = {s.labels["category"]: s.value for s in families["badput_seconds"]}
    assert set(seconds) == set(BUILTIN_CATEGORIES)
    assert all(v >= 0 for v in seconds.values())
    assert seconds["checkpoint"] >= 0.003
    stats = {s.labels["stat"]: s.value for s in families["badput_step_time_seconds"]}
    assert set(stats) == STEP_STAT_KEYS
    assert 0.002 <= stats["median"] < 0.5
    assert stats["max"] >= stats["p90"] >= stats["median"] > 0
    (wall,) = families["badput_wall_seconds"]
    assert wall.value >= sum(seconds.values())
    (samples,) = families["badput_samples_per_second"]
    assert samples.value > 0
    assert "badput_mfu" in families and families["badput_mfu"] == []  # None on CPU: unset


def test_prometheus_sink_passed_in_and_port_released_on_close() -> None:
    sink = PrometheusSink(0, "127.0.0.1")
    port = sink.port
    meter = Meter(sinks=[sink], report_every=3, gpu_timing=False, distributed=False)
    _run_steps(meter, 6)
    families = _wait_for_steps(port, 6)
    assert families["badput_goodput"][0].value > 0
    meter.close()
    # close() must "release resources" (the Sink protocol): the listening socket is closed,
    # so the port can be bound again (e.g. by a new Meter in the same process).
    # BUG: PrometheusSink.close calls server.shutdown() (stops serve_forever) but never
    # server.server_close(), so the socket keeps listening and the port stays taken.
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
    except OSError as e:
        pytest.fail(f"port {port} still held after Meter.close(): {e}")
    finally:
        probe.close()


# ---- 6. hot path: O(1) memory, no I/O -------------------------------------------------------

_AUDIT: dict[str, Any] = {"on": False, "thread": None, "events": []}


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    if _AUDIT["on"] and threading.get_ident() == _AUDIT["thread"]:
        _AUDIT["events"].append(event)


_IO_EVENT_PREFIXES = ("open", "os.", "socket.", "subprocess.", "shutil.", "time.sleep", "io.")


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    sys.addaudithook(_audit_hook)  # cannot be removed; inert while "on" is False
    return _AUDIT


def test_hot_path_keeps_a_fixed_ring_and_constant_memory(audit: dict[str, Any]) -> None:
    meter = Meter(window=64, report_every=NEVER, gpu_timing=False, distributed=False)
    for _ in range(1_000):
        with meter.step():
            pass
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        audit.update(on=True, thread=threading.get_ident(), events=[])
        for _ in range(19_000):
            with meter.step():
                pass
        audit["on"] = False
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        audit["on"] = False
        tracemalloc.stop()
    s = meter.summary()
    meter.close()
    assert s["steps"] == 20_000
    assert s["window_steps"] == 64
    assert len(meter._ring) == 64
    assert len(meter._recent_steps_ns()) == 64
    assert growth < 16_384  # anything kept per step would be >= 19,000 x 8 bytes
    io = [e for e in audit["events"] if e.startswith(_IO_EVENT_PREFIXES)]
    assert io == []


def test_reports_are_written_off_the_hot_path(tmp_path: Path, audit: dict[str, Any]) -> None:
    out = tmp_path / "goodput.jsonl"
    meter = Meter(out=out, report_every=100, gpu_timing=False, distributed=False)
    audit.update(on=True, thread=threading.get_ident(), events=[])
    try:
        for _ in meter.data(range(2_000)):
            with meter.step(samples=1):
                pass
    finally:
        audit["on"] = False
    meter.close()
    io = [e for e in audit["events"] if e.startswith(_IO_EVENT_PREFIXES)]
    assert io == []  # the training thread never opened or wrote the file...
    lines = out.read_text().splitlines()
    assert len(lines) == 21  # ...the sink thread wrote 20 reports and the final summary
    assert json.loads(lines[-1])["steps"] == 2_000
    assert math.isclose(json.loads(lines[0])["steps"], 100)
