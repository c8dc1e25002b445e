"""Threshold gates for CI: whether every analysed GPU reaches a goodput and a step time.

`badput analyze --min-goodput F --max-step-time-ms MS` evaluates these after the analysis and
exits 1 when one fails. A GPU with nothing to measure fails its gate: a gate that passes
because nothing was measured would let a broken profiling run through CI. Nothing measured
is: no GPU activity or a zero-length window (goodput n/a), no steps, or steps that all last
zero time (no step time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from badput.analysis.results import DeviceAnalysis
    from badput.diagnose import JobResult

__all__ = ["GateCheck", "evaluate_gates"]

MIN_GOODPUT = "--min-goodput"
MAX_STEP_TIME = "--max-step-time-ms"


@dataclass(frozen=True)
class GateCheck:
    """One gate on one GPU, evaluated.

    Attributes:
        gate: The option, e.g. ``--min-goodput``.
        where: Which GPU, e.g. ``rank 3 GPU 0``.
        limit: The threshold, formatted.
        measured: The measured value, formatted ("n/a" or "no steps" when there is none).
        passed: Whether the GPU meets the gate.
        message: One line saying what failed and by how much (empty when passed).
    """

    gate: str
    where: str
    limit: str
    measured: str
    passed: bool
    message: str = ""


def _where(d: DeviceAnalysis) -> str:
    if d.rank is not None:
        return f"rank {d.rank} GPU {d.device}"
    return f"GPU {d.device} of {os.path.basename(d.trace)}"


def _goodput(d: DeviceAnalysis, where: str, minimum: float) -> GateCheck:
    limit = f">= {100 * minimum:.1f} %"
    if d.goodput is None:
        # Nothing measured fails: a broken profiling run must not pass CI.
        why = (
            f"{where}: goodput is n/a ({d.goodput_undefined_reason}), so it cannot reach "
            f"{MIN_GOODPUT} {minimum:g}"
        )
        return GateCheck(MIN_GOODPUT, where, limit, "n/a", False, why)
    ok = d.goodput >= minimum
    why = (
        ""
        if ok
        else f"{where}: goodput {100 * d.goodput:.1f} % is below {100 * minimum:.1f} % by "
        f"{100 * (minimum - d.goodput):.1f} points"
    )
    return GateCheck(MIN_GOODPUT, where, limit, f"{100 * d.goodput:.1f} %", ok, why)


def _step_time(d: DeviceAnalysis, where: str, maximum_ms: float) -> GateCheck:
    limit = f"<= {maximum_ms:,.2f} ms"
    stats = d.step_time_stats_ns()
    if stats is None:
        why = (
            f"{where}: no ProfilerStep in the window, so no step time to check against "
            f"{MAX_STEP_TIME} {maximum_ms:g}"
        )
        return GateCheck(MAX_STEP_TIME, where, limit, "no steps", False, why)
    if stats[2] == 0:
        # Steps that all last zero time measured nothing: like no steps, they fail the gate.
        why = (
            f"{where}: every step has zero duration, so no step time to check against "
            f"{MAX_STEP_TIME} {maximum_ms:g}"
        )
        return GateCheck(MAX_STEP_TIME, where, limit, "n/a", False, why)
    median_ms = stats[1] / 1e6
    ok = median_ms <= maximum_ms
    over = median_ms - maximum_ms
    why = (
        ""
        if ok
        else f"{where}: median step time {median_ms:,.2f} ms is above {maximum_ms:,.2f} ms by "
        f"{over:,.2f} ms ({100 * over / maximum_ms:.1f} %)"
    )
    return GateCheck(MAX_STEP_TIME, where, limit, f"{median_ms:,.2f} ms", ok, why)


def evaluate_gates(
    job: JobResult, min_goodput: float | None, max_step_time_ms: float | None
) -> list[GateCheck]:
    """The threshold gates on every analysed GPU, in trace order.

    Args:
        job: The analysed traces.
        min_goodput: Smallest goodput (a fraction, 0.8 = 80 %) each GPU must reach; None: no
            gate.
        max_step_time_ms: Largest median step time (ms) each GPU may take; None: no gate.

    Returns:
        One check per gate and GPU.
    """
    checks: list[GateCheck] = []
    for o in job.analysed:
        for d in o.devices:
            where = _where(d)
            if min_goodput is not None:
                checks.append(_goodput(d, where, min_goodput))
            if max_step_time_ms is not None:
                checks.append(_step_time(d, where, max_step_time_ms))
    return checks
