"""The meter's summary: where the wall time went, step statistics, throughput and MFU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from badput.meter.core import Meter

__all__ = ["build_summary", "step_stats_s"]

# A step is an outlier for the "ideal step time" when it exceeds median + 3 MAD: the definition
# of Google's ml-goodput-measurement library (ideal step time, "median + 3 * MAD" filter).
_IDEAL_MADS = 3.0


def step_stats_s(steps_ns: list[int], mean_ns: float | None, max_ns: int) -> dict[str, Any]:
    """Mean (over all steps), and median, p90 and ideal step time (over the recent window).

    The ideal step time is the mean of the steps at most median + 3 MAD (median absolute
    deviation), as Google's ml-goodput-measurement library defines it.
    """
    if not steps_ns or mean_ns is None:
        return {"mean": None, "median": None, "p90": None, "max": None, "ideal": None}
    a = np.asarray(steps_ns, dtype=np.float64)
    median = float(np.median(a))
    mad = float(np.median(np.abs(a - median)))
    kept = a[a <= median + _IDEAL_MADS * mad]
    return {
        "mean": mean_ns / 1e9,
        "median": median / 1e9,
        "p90": float(np.percentile(a, 90)) / 1e9,
        "max": max_ns / 1e9,
        "ideal": float(kept.mean()) / 1e9,
    }


def _peak_tflops(gpu: str | None, precision: str | None) -> tuple[float | None, str | None]:
    """The dense peak for the MFU denominator, or None and why there is none."""
    if not gpu:
        return None, "no GPU: MFU needs a GPU's peak"
    if precision is None:
        return None, "the precision is unknown (see precision_source)"
    from badput.estimate.hardware import lookup_gpu

    spec = lookup_gpu(gpu, warn=False)
    if spec is None:
        return None, f"GPU {gpu!r} is not in the hardware table"
    try:
        peak = spec.peak(precision)
    except ValueError:
        return None, f"precision {precision!r} is not one badput knows"
    return peak, None if peak else f"the hardware table has no {precision} peak for {gpu}"


def _missing(m: Meter, s: dict[str, Any], mfu_why: str | None) -> dict[str, str]:
    """Why each throughput or MFU figure of a summary `s` is None."""
    out: dict[str, str] = {}
    nothing = "no time measured yet" if not s["wall_s"] else None
    if s["samples_per_s"] is None:
        out["samples_per_s"] = (
            nothing
            or m._samples_why
            or ("no step was given a sample count (Meter.step(samples=N))")
        )
    if s["tokens_per_s"] is None:
        out["tokens_per_s"] = nothing or "no step was given a token count (Meter.step(tokens=N))"
    if s["mfu"] is None:
        out["mfu"] = mfu_why or (
            "no FLOPs per step (flops_per_step=, step(flops=) or count_flops=True)"
            if not m._flops_steps
            else "no productive step time yet"
        )
    return out


def build_summary(m: Meter) -> dict[str, Any]:
    """The summary dict of `Meter.summary()`; all times in seconds.

    The wall time runs from the meter's creation to its last event: the start or end of a
    step, the end of a data wait or of a phase (to now before the first step). Time after
    the loop's last event is no part of the run measured, so a summary asked for after the
    loop and the final one sent at exit agree. `precision_source` says what decided the
    precision; `missing` says, for each of `samples_per_s`, `tokens_per_s` and `mfu` that is
    None, why.
    """
    now = m._clock() if m._first_step_start is None else m._last_ns
    wall = max(0, now - m._t0)
    if m._first_step_start is None:
        startup = max(0, wall - m._before_first_ns)
    else:
        startup = max(0, m._first_step_start - m._t0 - m._before_first_ns)
    phases = dict(m._phase_ns)
    badput = {
        "data_wait": m._data_ns,
        "checkpoint": phases.pop("checkpoint", 0),
        "eval": phases.pop("eval", 0),
        "compile": m._warmup_ns + phases.pop("compile", 0),
        "startup": startup,
        "idle": 0,
    }
    badput.update(phases)
    accounted = m._productive_ns + sum(badput.values())
    badput["idle"] = max(0, wall - accounted)
    productive_steps = max(0, m.steps - m.warmup_steps)
    mean = m._productive_ns / productive_steps if productive_steps else None
    peak, mfu_why = _peak_tflops(m._gpu_name, m.precision)
    mfu = None
    if peak and m._flops_steps and m._productive_ns > 0:
        mfu = m._flops / (m._productive_ns / 1e9) / (peak * 1e12)
    gpu: dict[str, Any] | None = None
    if m._pending is not None:
        p = m._pending
        gpu = {
            "mean": p.gpu_ns / p.count / 1e9 if p.count else None,
            "max": p.max_ns / 1e9 if p.count else None,
            "measured_steps": p.count,
            "pending_steps": len(p),
            "dropped_steps": p.dropped,
        }
    wall_s = wall / 1e9
    s = {
        "wall_s": wall_s,
        "goodput": m._productive_ns / wall if wall else None,
        "steps": m.steps,
        "productive_s": m._productive_ns / 1e9,
        "badput_s": {k: v / 1e9 for k, v in badput.items()},
        "step_time_s": step_stats_s(m._recent_steps_ns(), mean, m._step_max),
        "window_steps": min(m._ring_n, m._ring_size),
        "samples_per_s": (
            m._samples / wall_s if wall_s and m._samples and m._samples_why is None else None
        ),
        "tokens_per_s": m._tokens / wall_s if wall_s and m._tokens else None,
        "flops_per_step": m.flops_per_step,
        "mfu": mfu,
        "mfu_denominator_tflops": peak,
        "precision": m.precision,
        "precision_source": m._precision_source,
        "gpu": m._gpu_name,
        "gpu_step_time_s": gpu,
        "rank": m.rank,
        "ranks": m._ranks,
        "stragglers": m._stragglers,
        "lost": list(m.lost),
    }
    s["missing"] = _missing(m, s, mfu_why)
    return s
