"""badput.integrations.lightning.GoodputCallback on a real Lightning Trainer (CPU, tiny model)."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

from badput.integrations.lightning import GoodputCallback  # noqa: E402

STEPS = 16
BATCH = 2
SLEEP_PER_SAMPLE_S = 0.010  # the loader sleeps 20 ms per batch: a known data wait
CATEGORIES = [
    f"badput/{c}_s" for c in ("data_wait", "checkpoint", "eval", "compile", "startup", "idle")
]


class SlowDataset(torch.utils.data.Dataset):  # type: ignore[misc]
    """Samples that each take `sleep_s` to load (time.sleep: the GIL is free, like real I/O)."""

    def __init__(self, n: int, sleep_s: float) -> None:
        self.n = n
        self.sleep_s = sleep_s
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.x[i], self.y[i]


class Tiny(L.LightningModule):  # type: ignore[misc]
    def __init__(self, val_sleep_s: float = 0.0) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.val_sleep_s = val_sleep_s

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(self.val_sleep_s)
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(
    tmp_path: Path, cb: GoodputCallback, watch: Stopwatch | None = None, **kwargs: Any
) -> Any:
    return L.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=1,
        logger=L.loggers.CSVLogger(tmp_path, name="run", version=0),
        callbacks=[cb] if watch is None else [watch, cb],
        log_every_n_steps=4,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **kwargs,
    )


def _rows(tmp_path: Path) -> list[dict[str, str]]:
    with open(tmp_path / "run" / "version_0" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


class Stopwatch(L.Callback):  # type: ignore[misc]
    """The test's own clock at the hooks the meter's callback uses (listed before it).

    `fetch_s`: from the start of training and from each batch's end to the next batch's
    start (where Lightning fetches); `eval_s`: validation inside fit (no sanity check). What
    the meter reports must be these gaps, read a few microseconds apart; their content (the
    sleeps) is asserted apart, so a loaded machine that stretches the gaps moves both sides.
    """

    def __init__(self) -> None:
        self.fetch_s = 0.0
        self.eval_s = 0.0
        self._mark: float | None = None
        self._val: float | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._mark = time.perf_counter()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        if self._mark is not None:
            self.fetch_s += time.perf_counter() - self._mark
        self._mark = None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, i: int
    ) -> None:
        self._mark = time.perf_counter()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._val = time.perf_counter()
            self._mark = None  # the meter marks the time before it as loop overhead

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._val is not None:
            self.eval_s += time.perf_counter() - self._val
            self._val = None
            self._mark = time.perf_counter()


def test_metrics_reach_the_csv_logger_with_the_known_data_wait(tmp_path: Path) -> None:
    cb = GoodputCallback(gpu_timing=False, distributed=False)
    loader = torch.utils.data.DataLoader(
        SlowDataset(STEPS * BATCH, SLEEP_PER_SAMPLE_S), batch_size=BATCH, num_workers=0
    )
    watch = Stopwatch()
    _trainer(tmp_path, cb, watch).fit(Tiny(), loader)

    rows = [r for r in _rows(tmp_path) if r.get("badput/steps")]
    # Logged every 4 batches (the trainer's log_every_n_steps) and once at the end.
    steps_logged = [float(r["badput/steps"]) for r in rows]
    assert steps_logged == [4, 8, 12, 16, 16]
    final = {k: float(v) for k, v in rows[-1].items() if v != ""}
    assert cb.meter is not None and cb.meter.steps == STEPS
    assert 0.0 < final["badput/goodput"] < 1.0
    # The wall time is all accounted for: productive + every badput category.
    categories = sum(final[k] for k in CATEGORIES)
    assert final["badput/productive_s"] + categories == pytest.approx(final["badput/wall_s"])
    # Data wait: each gap between two batches holds one batch fetch (Lightning prefetches one
    # batch, so the fetch of batch i+1 falls in the gap before batch i; one of the N+1 fetches
    # happens before the first mark or is cut by max_steps). Each fetch sleeps 20 ms, never
    # less: the gaps hold at least N-1 of them. On top come collation and Lightning's loop
    # between hooks (1.7 ms a batch here, more on a loaded machine), which the test's own
    # clock at the same hooks measures too: the meter's data wait is those gaps. A step
    # counted as data wait, or a gap counted elsewhere, misses them by a step or a fetch
    # (tens of ms); the two clocks are read microseconds apart at each hook (10 ms allowed
    # for a stall between them on a loaded machine).
    per_fetch_s = BATCH * SLEEP_PER_SAMPLE_S
    data_wait_s = final["badput/data_wait_s"]
    assert per_fetch_s * (STEPS - 1) <= watch.fetch_s
    assert data_wait_s == pytest.approx(watch.fetch_s, abs=0.01)
    print({k: round(v, 4) for k, v in final.items() if k.startswith("badput/")})
    assert final["badput/samples_per_s"] == pytest.approx(STEPS * BATCH / final["badput/wall_s"])


def test_validation_inside_fit_counts_as_eval(tmp_path: Path) -> None:
    cb = GoodputCallback(gpu_timing=False, distributed=False, log_every_n_steps=100)
    train = torch.utils.data.DataLoader(SlowDataset(STEPS * BATCH, 0.0), batch_size=BATCH)
    val = torch.utils.data.DataLoader(SlowDataset(4, 0.0), batch_size=2)
    # Validation every 8 batches, 2 batches of 50 ms each: 2 runs x 100 ms = 200 ms of eval.
    watch = Stopwatch()
    trainer = _trainer(
        tmp_path,
        cb,
        watch,
        val_check_interval=8,
        num_sanity_val_steps=1,
        check_val_every_n_epoch=None,
    )
    trainer.fit(Tiny(val_sleep_s=0.05), train, val)
    final = {k: float(v) for k, v in _rows(tmp_path)[-1].items() if v != ""}
    assert final["badput/steps"] == STEPS
    print({k: round(v, 4) for k, v in final.items() if k.startswith("badput/")})
    # The two validation runs sleep 200 ms in all; the test's clock at the same hooks gives
    # what they took with Lightning's loop around them (more on a loaded machine). The
    # sanity check (one batch, 50 ms) runs before on_train_start: in neither.
    assert watch.eval_s >= 0.200
    assert final["badput/eval_s"] == pytest.approx(watch.eval_s, abs=0.01)
    assert final["badput/data_wait_s"] < 0.05  # the loaders do not sleep


def test_a_failing_logger_warns_once_and_training_goes_on(tmp_path: Path) -> None:
    from badput.meter import MeterWarning

    class Broken(L.loggers.CSVLogger):  # type: ignore[misc]
        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            if any(k.startswith("badput/") for k in metrics):
                raise OSError("disk full")
            super().log_metrics(metrics, step)

    cb = GoodputCallback(gpu_timing=False, distributed=False, log_every_n_steps=2)
    trainer = _trainer(tmp_path, cb)
    trainer.loggers = [Broken(tmp_path, name="broken", version=0)]
    loader = torch.utils.data.DataLoader(SlowDataset(STEPS * BATCH, 0.0), batch_size=BATCH)
    with pytest.warns(MeterWarning, match="disk full") as record:
        trainer.fit(Tiny(), loader)
    assert len([w for w in record if issubclass(w.category, MeterWarning)]) == 1
    assert trainer.global_step == STEPS and cb.meter is not None and cb.meter.steps == STEPS


def test_a_fresh_meter_per_fit_and_a_given_meter_left_open(tmp_path: Path) -> None:
    from badput import Meter

    loader = torch.utils.data.DataLoader(SlowDataset(STEPS * BATCH, 0.0), batch_size=BATCH)
    cb = GoodputCallback(gpu_timing=False, distributed=False)
    meters = []
    for run in range(2):
        _trainer(tmp_path / str(run), cb).fit(Tiny(), loader)
        assert cb.meter is not None and cb.meter.steps == STEPS  # not 2 x STEPS
        meters.append(cb.meter)
    assert meters[0] is not meters[1]

    records: list[dict[str, Any]] = []

    class Sink:
        def emit(self, record: dict[str, Any]) -> None:
            records.append(record)

        def close(self) -> None:
            pass

    mine = Meter(sinks=[Sink()], gpu_timing=False, distributed=False, report_every=10**9)
    cb = GoodputCallback(meter=mine)
    _trainer(tmp_path / "mine", cb).fit(Tiny(), loader)
    assert cb.meter is mine and mine.steps == STEPS
    assert records == []  # still open: the final summary is the owner's to send
    mine.close()
    assert [r["type"] for r in records] == ["final"] and records[0]["steps"] == STEPS
