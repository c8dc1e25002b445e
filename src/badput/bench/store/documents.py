"""Documents -> rows: A/B verdicts, `bench run` documents, analyses and meter summaries.

Pure functions: every check happens here, before anything is written.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from badput.bench.store.model import ResultRow, RunRow, StoreInputError

__all__ = ["ab_runs", "analysis_run", "bench_run", "floats", "meter_run"]


def floats(values: Any, what: str) -> list[float]:
    """`values` as a list of finite floats.

    Raises:
        StoreInputError: not a list, or an item that is not a finite number.
    """
    if not isinstance(values, list | tuple):
        raise StoreInputError(f"{what}: values must be a list of numbers")
    out: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise StoreInputError(f"{what}: {v!r} is not a finite number")
        out.append(float(v))
    return out


def _field(doc: Any, key: str, kind: Any, what: str) -> Any:
    if not isinstance(doc, Mapping):
        raise StoreInputError(f"{what}: expected a JSON object")
    if key not in doc:
        raise StoreInputError(f"{what}: missing {key!r}")
    value = doc[key]
    if not isinstance(value, kind):
        raise StoreInputError(f"{what}: {key!r} has the wrong type")
    return value


def ab_runs(
    doc: Mapping[str, Any], *, commit: str = "", base_commit: str = "", branch: str | None = None
) -> list[RunRow]:
    """The base and head runs of an A/B verdict document.

    Raises:
        StoreInputError: the document is malformed.
    """
    what = "A/B verdict"
    entries = _field(doc, "results", list, what)
    group = str(uuid.uuid4())
    base = RunRow("ab", [], commit=base_commit, purpose="ab_base", ab_group=group)
    head = RunRow("ab", [], commit=commit, branch=branch, purpose="ab_head", ab_group=group)
    head.verdict_params = dict(doc.get("policy") or {})
    for i, e in enumerate(entries):
        w = f"{what} results[{i}]"
        name = str(_field(e, "benchmark", str, w))
        metric = str(_field(e, "metric", str, w))
        _field(e, "decision", str, w)
        better = bool(_field(e, "higher_is_better", bool, w))
        unit = "s" if metric.endswith("_s") else ""
        for side, key in ((base, "base"), (head, "head")):
            vals = floats(_field(e, key, list, w), f"{w} {key}")
            if vals:
                side.results.append(ResultRow(name, metric, vals, unit, better))
        head.verdicts.append(dict(e))
    return [base, head]


def bench_run(
    doc: Mapping[str, Any], *, commit: str = "", branch: str | None = None, purpose: str = "history"
) -> RunRow:
    """The run of a `badput.bench.run/1` document.

    Raises:
        StoreInputError: the document is malformed.
    """
    what = "bench run"
    run = RunRow("run", [], commit=commit, branch=branch, purpose=purpose)
    for i, e in enumerate(_field(doc, "results", list, what)):
        w = f"{what} results[{i}]"
        case_id = str(_field(e, "id", str, w))
        bench = _field(e, "benchmark", Mapping, w)
        metric = _field(e, "metric", Mapping, w)
        rounds = _field(e, "rounds", list, w)
        vals = floats([_field(r, "value", int | float, f"{w} rounds") for r in rounds], w)
        times = [r.get("t") for r in rounds]
        status = str(e.get("status", "ok"))
        run.results.append(
            ResultRow(
                benchmark=case_id,
                metric=str(_field(metric, "name", str, w)),
                values=vals if status == "ok" else [],
                unit=str(metric.get("unit") or ""),
                higher_is_better=bool(metric.get("higher_is_better", False)),
                params=dict(bench.get("params") or {}),
                status=status,
                error=e.get("error"),
                t_offsets=(
                    [float(t) for t in times]
                    if status == "ok" and all(isinstance(t, int | float) for t in times)
                    else None
                ),
            )
        )
    return run


def _scalar(value: Any, what: str) -> float | None:
    if value is None:
        return None
    return floats([value], what)[0]


def analysis_run(
    doc: Mapping[str, Any],
    *,
    benchmark: str = "analyze",
    commit: str = "",
    branch: str | None = None,
) -> RunRow:
    """The run of a `badput.analysis/1` document: each device's goodput, step time, idle share.

    One device is stored under `benchmark`; several under ``benchmark[rank=R,device=D]``.

    Raises:
        StoreInputError: the document is malformed.
    """
    what = "analysis"
    devices = _field(doc, "devices", list, what)
    run = RunRow("analysis", [], commit=commit, branch=branch)
    for i, d in enumerate(devices):
        w = f"{what} devices[{i}]"
        if not isinstance(d, Mapping):
            raise StoreInputError(f"{w}: expected a JSON object")
        rank, device = d.get("rank"), d.get("device")
        name = benchmark if len(devices) == 1 else f"{benchmark}[rank={rank},device={device}]"
        params = {"rank": rank, "device": device, "gpu": d.get("gpu")}
        # null where the window has no length or no GPU work: stored as no goodput row.
        goodput = _scalar(_field(d, "goodput", (int, float, type(None)), w), w)
        window = _scalar(_field(d, "window_us", int | float, w), w)
        idle = _scalar(_field(_field(d, "breakdown_us", Mapping, w), "idle", int | float, w), w)
        step = d.get("step_time_us")
        mean = _scalar(step.get("mean"), w) if isinstance(step, Mapping) else None
        rows = [("goodput", goodput, "ratio", True)]
        if window and idle is not None:
            rows.append(("idle_share", idle / window, "ratio", False))
        if mean is not None:
            rows.append(("step_time_mean_s", mean / 1e6, "s", False))
        for metric, value, unit, better in rows:
            if value is not None:
                run.results.append(ResultRow(name, metric, [value], unit, better, params))
    return run


def meter_run(
    summary: Mapping[str, Any],
    *,
    benchmark: str = "meter",
    commit: str = "",
    branch: str | None = None,
) -> RunRow:
    """The run of a meter summary: goodput, step time (median, mean), throughput, MFU.

    Raises:
        StoreInputError: the summary is malformed.
    """
    what = "meter summary"
    goodput = _scalar(_field(summary, "goodput", (int, float, type(None)), what), what)
    steps = _field(summary, "step_time_s", Mapping, what)
    rows: list[tuple[str, float | None, str, bool]] = [
        ("goodput", goodput, "ratio", True),
        ("step_time_s", _scalar(steps.get("median"), what), "s", False),
        ("step_time_mean_s", _scalar(steps.get("mean"), what), "s", False),
    ]
    for key, unit in (("samples_per_s", "1/s"), ("tokens_per_s", "1/s"), ("mfu", "ratio")):
        rows.append((key, _scalar(summary.get(key), what), unit, True))
    params = {"rank": summary.get("rank"), "gpu": summary.get("gpu")}
    results = [
        ResultRow(benchmark, metric, [value], unit, better, params)
        for metric, value, unit, better in rows
        if value is not None
    ]
    return RunRow("meter", results, commit=commit, branch=branch)
