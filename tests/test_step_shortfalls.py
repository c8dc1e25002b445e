"""`gpu_step_shortfalls` counts each host step's activities in one pass, not one pass over every
activity per step (which took minutes on a 1 GB trace of 19,000 steps): the same shortfalls as
the per-step definition, step by step, on traces with many steps and much work left out.
"""

from __future__ import annotations

import numpy as np
import pytest

from badput.analysis.intervals import IntervalSet
from badput.analysis.patterns import profiler_step_number
from badput.analysis.steps import (
    ROUNDING_NS,
    Launches,
    Shortfall,
    gpu_step_shortfalls,
    gpu_steps,
    launched_work,
)


def _per_step(gpu, names, s_cpu, e_cpu, launches, corr, g_s, g_e, is_kernel):  # type: ignore[no-untyped-def]
    """The definition, one step at a time (the former code): the oracle."""
    order = np.argsort(s_cpu, kind="stable")
    s0, s1 = s_cpu[order], e_cpu[order]
    index_of: dict[int, int] = {}
    for at, k in enumerate(order.tolist()):
        number = profiler_step_number(names[k])
        if number is not None:
            index_of.setdefault(number, at)
    work = launched_work(s0, s1, launches, corr, g_s, g_e)
    held = IntervalSet.from_spans(gpu.starts_ns, gpu.ends_ns)
    lost = work.launched & (g_e - g_s - held.measure_between(g_s, g_e) > ROUNDING_NS)
    out = []
    for name, g0, g1 in zip(gpu.names, gpu.starts_ns.tolist(), gpu.ends_ns.tolist(), strict=True):
        number = profiler_step_number(name)
        i = index_of.get(number) if number is not None else None
        if i is None:
            continue
        mine = work.step == i
        if not (lost & mine).any():
            continue
        w0, w1 = int(work.first_start_ns[i]), int(work.last_end_ns[i])
        inside = mine & (g_s >= g0 - ROUNDING_NS) & (g_e <= g1 + ROUNDING_NS)
        out.append(
            Shortfall(name, g0, g1, w0, w1,
                      int(IntervalSet.span(w0, w1).subtract(held).total_ns()),
                      int(inside.sum()), int(mine.sum()), int((inside & is_kernel).sum()),
                      int((mine & is_kernel).sum()))
        )  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(6))
def test_shortfalls_match_the_per_step_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_steps = int(rng.integers(5, 300))
    period = 1_000_000
    s_cpu = np.arange(n_steps, dtype=np.int64) * period
    e_cpu = s_cpu + period - 10_000
    names = [f"ProfilerStep#{k}" for k in range(n_steps)]
    # Launch calls: most inside a step, some between or after all steps.
    n_calls = n_steps * 12
    call_start = np.sort(rng.integers(0, n_steps * period + 500_000, n_calls)).astype(np.int64)
    call_end = call_start + rng.integers(1, 6_000, n_calls)
    correlation = np.arange(n_calls, dtype=np.int64) * 3 + 1
    launches = Launches(correlation, call_start, call_end)
    # GPU activities, some with no launch; each runs a little after its call.
    corr = np.concatenate([correlation, rng.integers(10**6, 2 * 10**6, n_steps)])
    base = np.concatenate([call_start, rng.integers(0, n_steps * period, n_steps)])
    g_s = (base + rng.integers(0, 300_000, corr.shape[0])).astype(np.int64)
    g_e = g_s + rng.integers(0, 40_000, corr.shape[0])
    is_kernel = rng.random(corr.shape[0]) < 0.7
    # GPU-side steps: cover part of each step's GPU work (some steps left out, some whole).
    keep = rng.random(n_steps) < 0.8
    starts = s_cpu[keep] + rng.integers(0, 400_000, int(keep.sum()))
    ends = starts + rng.integers(0, 900_000, int(keep.sum()))
    gpu = gpu_steps([n for n, k in zip(names, keep, strict=True) if k], starts, ends)
    args = (gpu, names, s_cpu, e_cpu, launches, corr, g_s, g_e, is_kernel)
    want = _per_step(*args)
    assert len(want) > 2  # the case under test: work left out of many steps
    assert gpu_step_shortfalls(*args) == want


def test_two_gpu_steps_of_one_number_each_get_the_host_steps_work() -> None:
    # "ProfilerStep#3" and "ProfilerStep#03" are two GPU-side steps (two names) of host step 3.
    rng = np.random.default_rng(7)
    n_steps, period = 8, 1_000_000
    s_cpu = np.arange(n_steps, dtype=np.int64) * period
    e_cpu = s_cpu + period - 10_000
    names = [f"ProfilerStep#{k}" for k in range(n_steps)]
    n_calls = n_steps * 10
    call_start = np.sort(rng.integers(0, n_steps * period, n_calls)).astype(np.int64)
    launches = Launches(np.arange(n_calls, dtype=np.int64) + 1, call_start, call_start + 1_000)
    corr = np.arange(n_calls, dtype=np.int64) + 1
    g_s = call_start + 50_000
    g_e = g_s + 20_000
    is_kernel = np.arange(n_calls) % 3 != 0
    gpu_names = ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#03", "ProfilerStep#5"]
    starts = np.array([2, 3, 3, 5], dtype=np.int64) * period + np.array([0, 0, 500_000, 0])
    ends = starts + np.array([period, 500_000, 500_000, 300_000], dtype=np.int64)
    gpu = gpu_steps(gpu_names, starts, ends)
    args = (gpu, names, s_cpu, e_cpu, launches, corr, g_s, g_e, is_kernel)
    got = gpu_step_shortfalls(*args)
    assert got == _per_step(*args)
    assert {s.name for s in got} >= {"ProfilerStep#3", "ProfilerStep#03"}
