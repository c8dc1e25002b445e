"""History monitor: E-Divisive change points, permutation p-values, floor, persistence."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from badput.bench.changepoint import ChangePoint, _best_splits, detect, find_outliers


def noisy(levels: list[float], cv: float = 0.01, seed: int = 0) -> list[float]:
    """Levels times multiplicative Gaussian noise (seeded)."""
    rng = np.random.default_rng(seed)
    return [float(v) for v in np.asarray(levels) * np.exp(rng.normal(0.0, cv, len(levels)))]


# ---- the statistic ----------------------------------------------------------------------------


def q_naive(x: list[float], tau: int, kappa: int) -> float:
    """Q-hat of Matteson & James (alpha = 1) straight from its definition."""
    a, b = x[:tau], x[tau:kappa]
    m, n = len(a), len(b)
    cross = sum(abs(u - v) for u in a for v in b)
    within_a = sum(abs(u - v) for u, v in itertools.combinations(a, 2))
    within_b = sum(abs(u - v) for u, v in itertools.combinations(b, 2))
    e = 2 * cross / (m * n) - within_a / math.comb(m, 2) - within_b / math.comb(n, 2)
    return m * n / (m + n) * e


@pytest.mark.parametrize("min_segment", [2, 3])
def test_best_split_matches_the_definition(min_segment: int) -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(size=(3, 13))
    q, tau = _best_splits(z, min_segment)
    for row in range(3):
        x = z[row].tolist()
        every = {
            (t, k): q_naive(x, t, k)
            for t in range(min_segment, 14)
            for k in range(t + min_segment, 14)
            if t >= min_segment
        }
        (t_best, _), q_best = max(every.items(), key=lambda kv: kv[1])
        assert q[row] == pytest.approx(q_best, rel=1e-9)
        assert tau[row] == t_best


# ---- detection --------------------------------------------------------------------------------


def test_clean_step_found_at_the_right_index() -> None:
    cps = detect(noisy([1.0] * 30 + [1.1] * 30))
    assert len(cps) == 1
    (cp,) = cps
    assert cp.index == 30
    assert cp.change == pytest.approx(0.1, abs=0.01)
    assert cp.before == pytest.approx(1.0, abs=0.01)
    assert cp.after == pytest.approx(1.1, abs=0.01)
    assert cp.p_value == pytest.approx(1 / 200)  # no permutation reaches it: 1 / (1 + 199)
    assert cp.confirmed


def test_step_down_is_a_negative_change() -> None:
    (cp,) = detect(noisy([2.0] * 20 + [1.5] * 20, seed=1))
    assert cp.index == 20
    assert cp.change == pytest.approx(-0.25, abs=0.02)


@pytest.mark.parametrize("seed", range(10))
def test_flat_series_gives_none(seed: int) -> None:
    assert detect(noisy([1.0] * 60, cv=0.02, seed=seed), seed=seed) == []


def test_constant_series_gives_none() -> None:
    assert detect([5.0] * 40) == []


def test_magnitude_floor_drops_a_significant_but_tiny_change() -> None:
    values = noisy([1.0] * 30 + [1.01] * 30, cv=0.001)
    (cp,) = detect(values, min_change=0.0)  # clearly significant...
    assert cp.index == 30
    assert cp.p_value <= 0.01
    assert cp.change == pytest.approx(0.01, abs=0.002)
    assert detect(values) == []  # ...but under the default 3 % floor


def test_floor_merges_and_resizes_neighbours() -> None:
    # +10 %, then +1 % (dropped by the floor): the remaining change is sized on the merged
    # segment after it.
    values = noisy([1.0] * 20 + [1.1] * 20 + [1.111] * 20, cv=0.001)
    assert [c.index for c in detect(values, min_change=0.0)] == [20, 40]
    (cp,) = detect(values)
    assert cp.index == 20
    assert cp.after == pytest.approx(1.1055, abs=0.005)


def test_persistence_rule_marks_a_tail_change_unconfirmed() -> None:
    (cp,) = detect(noisy([1.0] * 40 + [1.2] * 2))  # the change point and 1 point after it
    assert cp.index == 40
    assert cp.change == pytest.approx(0.2, abs=0.02)
    assert not cp.confirmed
    (cp,) = detect(noisy([1.0] * 40 + [1.2] * 2), min_confirm=1)
    assert cp.confirmed
    (cp,) = detect(noisy([1.0] * 40 + [1.2] * 3))  # 2 points after it: confirmed
    assert cp.index == 40
    assert cp.confirmed


def test_deterministic_for_a_seed() -> None:
    values = noisy([1.0] * 30 + [1.04] * 30, cv=0.03, seed=5)
    first = detect(values, seed=11)
    assert first == detect(values, seed=11)
    assert first == detect(np.asarray(values).tolist(), seed=11)
    assert all(isinstance(c, ChangePoint) for c in first)


def test_two_steps_found() -> None:
    cps = detect(noisy([1.0] * 25 + [1.1] * 20 + [1.25] * 20, seed=2))
    assert [c.index for c in cps] == [25, 45]
    assert all(c.confirmed for c in cps)
    assert cps[0].after == pytest.approx(1.1, abs=0.01)
    assert cps[1].before == pytest.approx(1.1, abs=0.01)
    assert cps[1].change == pytest.approx(1.25 / 1.1 - 1, abs=0.01)


def test_temporary_regression_found_at_both_edges() -> None:
    cps = detect(noisy([1.0] * 25 + [1.08] * 8 + [1.0] * 27, seed=4))
    assert [c.index for c in cps] == [25, 33]
    assert [c.change > 0 for c in cps] == [True, False]
    assert all(c.confirmed for c in cps)


def test_short_series_gives_none() -> None:
    assert detect([1.0, 2.0, 3.0]) == []
    assert detect([1.0]) == []


# ---- outliers ---------------------------------------------------------------------------------


def test_single_and_paired_outliers_are_excluded() -> None:
    values = noisy([1.0] * 50, cv=0.01, seed=3)
    values[20] *= 1.3
    values[35] *= 1.25
    values[36] *= 1.2
    assert find_outliers(values) == [20, 35, 36]
    assert detect(values) == []


def test_a_step_is_not_an_outlier_and_indices_skip_outliers() -> None:
    values = noisy([1.0] * 30 + [1.1] * 30, seed=6)
    assert find_outliers(values) == []
    values[28] *= 1.4  # an outlier just before the step
    assert find_outliers(values) == [28]
    (cp,) = detect(values)
    assert cp.index == 30
    assert cp.before == pytest.approx(1.0, abs=0.01)


def test_three_points_are_a_shift_not_outliers() -> None:
    values = noisy([1.0] * 20 + [1.3] * 3 + [1.0] * 20, seed=7)
    assert find_outliers(values) == []
    assert [(c.index, c.confirmed) for c in detect(values)] == [(20, True), (23, True)]


def test_last_point_is_never_an_outlier() -> None:
    values = [*noisy([1.0] * 20, seed=8), 1.5]
    assert find_outliers(values) == []


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "empty"),
        ([1.0, 0.0, 1.0], r"finite and positive.*values\[1\] = 0\.0"),
        ([1.0, 2.0, -3.0], r"values\[2\] = -3\.0"),
        ([1.0, float("nan")], "finite and positive"),
        ([1.0, float("inf")], "finite and positive"),
    ],
)
def test_bad_values_raise(values: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        detect(values)
    with pytest.raises(ValueError, match=message):
        find_outliers(values)


def test_nested_values_raise() -> None:
    with pytest.raises(ValueError, match="flat sequence"):
        detect([[1.0, 2.0]])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("p_threshold", 0.0),
        ("p_threshold", 1.5),
        ("permutations", 0),
        ("min_change", -0.01),
        ("min_confirm", -1),
        ("min_segment", 1),
        ("outlier_k", 0.0),
        ("seed", -1),
    ],
)
def test_bad_options_raise(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        detect([1.0] * 10, **{option: value})  # type: ignore[arg-type]
