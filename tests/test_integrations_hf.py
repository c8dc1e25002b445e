"""badput.integrations.hf on a real transformers Trainer (CPU, a tiny BERT built from a config).

No network: the model is built from a config (no weights downloaded), the hub is offline.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")  # before transformers reads them at import
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from badput.integrations.hf import GoodputCallback, attach  # noqa: E402

STEPS = 8
BATCH = 2
SLEEP_PER_SAMPLE_S = 0.010  # 20 ms per batch: a known data wait
CATEGORIES = [
    f"badput/{c}_s" for c in ("data_wait", "checkpoint", "eval", "compile", "startup", "idle")
]


class SlowTokens(torch.utils.data.Dataset):  # type: ignore[misc]
    """Token sequences that each take `sleep_s` to load."""

    def __init__(self, n: int, sleep_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 12), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _model() -> Any:
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config)


def _args(tmp_path: Path, **kwargs: Any) -> Any:
    base: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": STEPS,
        "per_device_train_batch_size": BATCH,
        "logging_steps": 2,
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "seed": 0,
    }
    base.update(kwargs)
    return transformers.TrainingArguments(**base)


class Stopwatch(transformers.TrainerCallback):  # type: ignore[misc]
    """The test's own clock at the hooks the meter's callback uses (listed before it).

    `fetch_s`: from the start of training and from each optimizer step's end to the next
    step's begin (where the Trainer fetches its batch). The meter's data wait must be these
    gaps; their content (the sleeps) is asserted apart, so a loaded machine that stretches
    the gaps moves both sides.
    """

    def __init__(self) -> None:
        self.fetch_s = 0.0
        self._mark: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._mark is not None:
            self.fetch_s += time.perf_counter() - self._mark
        self._mark = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark = time.perf_counter()


def test_metrics_in_log_history_with_the_known_data_wait(tmp_path: Path) -> None:
    cb = GoodputCallback(gpu_timing=False, distributed=False)
    trainer = transformers.Trainer(
        model=_model(),
        args=_args(tmp_path),
        train_dataset=SlowTokens(STEPS * BATCH, SLEEP_PER_SAMPLE_S),
        callbacks=[watch := Stopwatch(), cb],
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "badput/steps" in h]
    # logging_steps=2 gives logs at steps 2, 4, 6, 8; then the Trainer's final training log.
    assert [h["badput/steps"] for h in logged] == [2, 4, 6, 8, 8]
    assert all("loss" in h for h in logged[:4]) and "train_runtime" in logged[-1]
    final = logged[-1]
    assert cb.meter is not None and cb.meter.steps == STEPS
    assert 0.0 < final["badput/goodput"] < 1.0
    total = final["badput/productive_s"] + sum(final[k] for k in CATEGORIES)
    assert total == pytest.approx(final["badput/wall_s"])
    # Each gap between two optimizer steps holds one batch fetch of 20 ms (never less); the
    # first fetch may fall before on_train_begin, and accelerate's loader prefetches one batch,
    # so the gaps hold at least N - 1 of them. On top come collation, the loss read-out of
    # each log and the Trainer's loop (8-16 ms a step on the 2-core machine under load from
    # other jobs), which the test's own clock at the same hooks measures too: the meter's
    # data wait is those gaps. A fetch counted as idle or as step time, a second fetch per
    # step, or the productive step (50-250 ms here) counted as data wait misses them by a
    # fetch or a step; the two clocks are read microseconds apart at each hook (10 ms allowed
    # for a stall between them on a loaded machine).
    per_fetch_s = BATCH * SLEEP_PER_SAMPLE_S
    print({k: round(v, 4) for k, v in final.items() if k.startswith("badput/")})
    assert per_fetch_s * (STEPS - 1) <= watch.fetch_s
    assert final["badput/data_wait_s"] == pytest.approx(watch.fetch_s, abs=0.01)


def test_attach_reaches_report_to_tensorboard_and_times_eval_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logs))  # transformers 5: no logging_dir
    args = _args(
        tmp_path,
        report_to=["tensorboard"],
        eval_strategy="steps",
        eval_steps=4,
        save_strategy="steps",
        save_steps=4,
        per_device_eval_batch_size=2,
    )
    trainer = transformers.Trainer(
        model=_model(),
        args=args,
        train_dataset=SlowTokens(STEPS * BATCH, 0.0),
        eval_dataset=SlowTokens(4, 0.025),  # 2 eval runs x 4 samples x 25 ms = 200 ms of eval
    )
    cb = attach(trainer, gpu_timing=False, distributed=False)
    assert trainer.callback_handler.callbacks[0] is cb
    trainer.train()

    final = [h for h in trainer.state.log_history if "badput/steps" in h][-1]
    assert final["badput/steps"] == STEPS
    print({k: round(v, 4) for k, v in final.items() if k.startswith("badput/")})
    # Eval holds the loader's sleeps (200 ms, never less) plus each run's forward passes, its
    # log and the first TensorBoard write: per run at most two training steps (forward +
    # backward + optimizer) or 150 ms, a tolerance that follows the machine's load (steps
    # took 0.01-0.9 s on the 2-core CI machine; one run there took 0.49 s of eval against
    # 0.12 s steps).
    slack_s = 2 * max(0.15, 2 * final["badput/step_max_s"])
    assert 0.200 <= final["badput/eval_s"] <= 0.200 + slack_s
    assert final["badput/checkpoint_s"] > 0.0  # two checkpoints written, at steps 4 and 8
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "checkpoint-4",
        "checkpoint-8",
    ]
    # The training loader does not sleep (3-8 ms a fetch measured); eval counted as data wait
    # would put both eval runs' 200 ms there.
    assert final["badput/data_wait_s"] < 0.2

    # The TensorBoard integration of report_to wrote the same numbers.
    (run,) = {p.parent for p in logs.rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(run))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    goodput = [e for t in tags if t.endswith("badput/goodput") for e in acc.Scalars(t)]
    steps = [e for t in tags if t.endswith("badput/steps") for e in acc.Scalars(t)]
    # Every log carries the metrics: the training logs at steps 2, 4, 6, 8, the eval logs at
    # 4 and 8, and the final training log; TensorBoard got each of them, in that order.
    history = [h for h in trainer.state.log_history if "badput/steps" in h]
    assert [h["badput/steps"] for h in history] == [2, 4, 4, 6, 8, 8, 8]
    assert [e.value for e in steps] == [h["badput/steps"] for h in history]
    assert [e.value for e in goodput] == pytest.approx([h["badput/goodput"] for h in history])
    assert all(0.0 < e.value < 1.0 for e in goodput)
