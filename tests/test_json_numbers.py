"""The JSON report's microsecond texts: exact, and the same in one-text rows as in dicts."""

from __future__ import annotations

import random
from decimal import Decimal

import msgspec
import numpy as np
import pytest

from badput.analysis.results import Breakdown, IdleCauses, StepResult
from badput.report.json_report import _causes, _step, _us_list, us

_EXACT = msgspec.json.Decoder(float_hook=Decimal)


def _reference(ns: int) -> Decimal:
    return Decimal(ns) / 1000


@pytest.mark.parametrize(
    "ns",
    [
        0,
        1,
        9,
        10,
        100,
        999,
        1000,
        1001,
        1010,
        1100,
        12_345,
        -1,
        -1000,
        -1001,
        -999_999,
        1712195495519689047,
        -1712195495519689047,
        2**63 - 1,
        10**25 + 7,
    ],
)
def test_us_is_the_exact_decimal(ns: int) -> None:
    text = bytes(us(ns)).decode()
    assert Decimal(text) == _reference(ns)
    # Shortest form: no trailing zeros after the point, no point without a fraction.
    assert not text.endswith("0") or "." not in text
    assert not text.endswith(".")
    assert not text.startswith("-0") or text.startswith("-0.")


def test_us_on_random_values_and_numpy_ints() -> None:
    rng = random.Random(21)
    values = [rng.randrange(-(10**19), 10**19) for _ in range(5000)]
    values += [rng.randrange(10**6) * 1000 for _ in range(500)]
    for ns in values:
        assert Decimal(bytes(us(ns)).decode()) == _reference(ns)
    assert bytes(us(np.int64(1_234_500))) == b"1234.5"
    assert bytes(us(np.int32(-7))) == b"-0.007"


def test_step_rows_decode_as_the_dicts_they_replace() -> None:
    step = StepResult(
        name='ProfilerStep#7 "quoted"\n',
        start_ns=1712195495519689047,
        dur_ns=1_000_001,
        breakdown=Breakdown(compute_ns=5, communication_ns=0, memory_ns=1000, idle_ns=-20),
        idle_causes=IdleCauses(runtime_ns=1, dataloader_ns=2_000, cpu_ns=30, other_ns=400_000),
    )
    row = _EXACT.decode(bytes(_step(step)))
    assert row == {
        "name": step.name,
        "start_us": Decimal("1712195495519689.047"),
        "dur_us": Decimal("1000.001"),
        "breakdown_us": {
            "compute": Decimal("0.005"),
            "communication": 0,
            "memory": 1,
            "idle": Decimal("-0.02"),
        },
        "idle_causes_us": {
            "runtime": Decimal("0.001"),
            "dataloader": 2,
            "cpu": Decimal("0.03"),
            "other": 400,
        },
    }
    assert list(row) == ["name", "start_us", "dur_us", "breakdown_us", "idle_causes_us"]
    assert msgspec.json.decode(bytes(_causes(step.idle_causes))) == {
        "runtime": 0.001,
        "dataloader": 2,
        "cpu": 0.03,
        "other": 400,
    }
    assert bytes(_us_list([])) == b"[]"
    assert _EXACT.decode(bytes(_us_list([1500, 0, -3]))) == [
        Decimal("1.5"),
        0,
        Decimal("-0.003"),
    ]
