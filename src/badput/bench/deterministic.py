"""Tier A of the regression gate: deterministic metrics checked against expected values.

Peak memory, counts of kernels, graph breaks or recompiles, FLOPs, instruction counts: metrics
that do not wobble with machine noise need no statistics, only a tolerance against a value
kept in the repository (design note, section 5.1, Tier A).

Expectations file (JSON, checked in; `badput bench check EXPECTED RESULTS`):

    {
      "schema": "badput.bench.expected/1",
      "fail_on_wins": false,
      "defaults": {"rel_tol": 0.0, "abs_tol": 0.0},
      "benchmarks": {
        "list_peak_memory[n=10000]": {
          "peak_bytes": {"value": 85176, "rel_tol": 0.01, "abs_tol": 16777216}
        },
        "compiled_step": {
          "recompiles": {"value": 0},
          "tokens_per_s": {"value": 1500, "rel_tol": 0.02, "higher_is_better": true,
                           "fail_on_wins": true, "note": "CPU only"}
        }
      }
    }

* `benchmarks` maps a case id (as `badput bench run` names it: `name[param=value]`) to its
  metrics; each metric has a `value` (required) and optionally:
  * `rel_tol`: allowed change as a fraction of `value` (0.01 = 1 %);
  * `abs_tol`: allowed change in the metric's own unit (16777216 = 16 MiB for bytes);
  * `higher_is_better`: direction (default: from the name, as the A/B gate infers it);
  * `fail_on_wins`: this metric's own ratchet setting; `note`: free text, kept on update.
* A metric's tolerance is its own `rel_tol`/`abs_tol`, else the file's `defaults`, else, for a
  metric whose name contains "bytes", +1 % and 16 MiB (the design's memory default on shared
  CPU CI), and exact otherwise (counts).
* `fail_on_wins` (top level, default false): an improvement beyond tolerance fails too (the
  PyTorch ratchet) until the file is updated, so that a win cannot quietly be given back.

Verdict per metric, with allowed = max(rel_tol x |value|, abs_tol): a change fails only when
it exceeds both tolerances, so that "+1 % and +16 MiB" ignores a few MiB on a small model and
a fraction of a percent on a big one.

* `pass`: |measured - value| <= allowed;
* `regression`: worse than that (exit 1);
* `improvement`: better than that; `improvement_needs_update` when `fail_on_wins` (exit 1);
* `missing`: expected but not measured (exit 3: the benchmark did not run, which is not a
  regression);
* `new`: measured but not expected (reported; `--update` adds it). Wall time (`wall_s`) is
  not deterministic and is left to the A/B gate: it is neither new nor added.

Exit code: 1 on any regression or needed update, else 3 when something is missing or nothing
was compared, else 0. `--update` rewrites the file with the measured value of every metric
that did not pass (passing ones keep their value, so that drift within the tolerance cannot
accumulate update after update) and then exits 0.

Measured file: a `badput bench run --json` document (each case's median of rounds), or
`{"benchmarks": {"case": {"metric": number}}}`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from badput.errors import UsageError

__all__ = [
    "EXPECTED_SCHEMA",
    "CheckResult",
    "Expectations",
    "Expected",
    "MetricCheck",
    "Verdict",
    "check",
    "load_expected",
    "load_measured",
    "measured_from_doc",
    "updated",
    "write_expected",
]

EXPECTED_SCHEMA = "badput.bench.expected/1"
_MIB = 1 << 20
# Design note section 7, "memory tolerance" on shared CPU CI: +1 % and +16 MiB.
_MEMORY_TOL = (0.01, 16 * _MIB)
_WALL = "wall_s"
# Relative slack on the comparison with `allowed`, so that a change of exactly the tolerance
# passes despite binary rounding (0.01 x 300 is 3.0000000000000004).
_ROUNDING = 1e-12


class Verdict(StrEnum):
    """Outcome for one metric."""

    PASS = "pass"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NEEDS_UPDATE = "improvement_needs_update"
    MISSING = "missing"
    NEW = "new"


@dataclass(frozen=True)
class Expected:
    """One metric's expected value; None fields fall back to the file's defaults."""

    value: float
    rel_tol: float | None = None
    abs_tol: float | None = None
    higher_is_better: bool | None = None
    fail_on_wins: bool | None = None
    note: str | None = None


@dataclass(frozen=True)
class Expectations:
    """The parsed expectations file."""

    metrics: dict[tuple[str, str], Expected] = field(default_factory=dict)
    fail_on_wins: bool = False
    default_rel_tol: float | None = None
    default_abs_tol: float | None = None

    def tolerance(self, metric: str, e: Expected | None) -> tuple[float, float]:
        """(rel_tol, abs_tol) of a metric: its own, the file's defaults, or by its name."""
        rel, abs_ = e.rel_tol if e else None, e.abs_tol if e else None
        rel = rel if rel is not None else self.default_rel_tol
        abs_ = abs_ if abs_ is not None else self.default_abs_tol
        builtin = _MEMORY_TOL if "bytes" in metric.lower() else (0.0, 0.0)
        return (
            rel if rel is not None else builtin[0],
            abs_ if abs_ is not None else builtin[1],
        )

    def to_doc(self) -> dict[str, Any]:
        """The file's JSON form, benchmarks and metrics sorted for stable diffs."""
        benchmarks: dict[str, dict[str, Any]] = {}
        for bench, metric in sorted(self.metrics):
            e = self.metrics[bench, metric]
            entry: dict[str, Any] = {"value": _plain(e.value)}
            for key in ("rel_tol", "abs_tol", "higher_is_better", "fail_on_wins", "note"):
                v = getattr(e, key)
                if v is not None:
                    entry[key] = _plain(v) if key == "abs_tol" else v
            benchmarks.setdefault(bench, {})[metric] = entry
        doc: dict[str, Any] = {"schema": EXPECTED_SCHEMA, "fail_on_wins": self.fail_on_wins}
        defaults = {
            k: v
            for k, v in (("rel_tol", self.default_rel_tol), ("abs_tol", self.default_abs_tol))
            if v is not None
        }
        if defaults:
            doc["defaults"] = defaults
        doc["benchmarks"] = benchmarks
        return doc


def _plain(x: Any) -> Any:
    """An integral float as an int (a count reads as 12, not 12.0)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


def _better_higher(metric: str) -> bool:
    from badput.bench.ab import Policy

    return Policy().better_higher(metric)


@dataclass(frozen=True)
class MetricCheck:
    """The verdict on one metric of one benchmark."""

    benchmark: str
    metric: str
    verdict: Verdict
    expected: float | None
    measured: float | None
    rel_tol: float
    abs_tol: float
    higher_is_better: bool

    @property
    def allowed(self) -> float:
        """The largest change that passes: max(rel_tol x |expected|, abs_tol)."""
        if self.expected is None:
            return self.abs_tol
        return max(self.rel_tol * abs(self.expected), self.abs_tol)

    @property
    def delta(self) -> float | None:
        """Measured value minus expected value."""
        if self.expected is None or self.measured is None:
            return None
        return self.measured - self.expected

    @property
    def delta_rel(self) -> float | None:
        """(measured - expected) / |expected|; None when either is missing or expected is 0."""
        d = self.delta
        if d is None or not self.expected:
            return None
        return d / abs(self.expected)

    @property
    def fails(self) -> bool:
        """Whether this verdict fails the check (exit 1)."""
        return self.verdict in (Verdict.REGRESSION, Verdict.NEEDS_UPDATE)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "benchmark": self.benchmark,
            "metric": self.metric,
            "verdict": str(self.verdict),
            "expected": self.expected,
            "measured": self.measured,
            "delta": self.delta,
            "delta_rel": self.delta_rel,
            "allowed": self.allowed,
            "rel_tol": self.rel_tol,
            "abs_tol": self.abs_tol,
            "higher_is_better": self.higher_is_better,
        }


@dataclass(frozen=True)
class CheckResult:
    """Every metric's verdict."""

    checks: list[MetricCheck]
    fail_on_wins: bool

    @property
    def compared(self) -> int:
        """Metrics with both an expected and a measured value."""
        return sum(1 for c in self.checks if c.expected is not None and c.measured is not None)

    @property
    def exit_code(self) -> int:
        """1 regression or needed update; 3 missing or nothing compared; else 0."""
        if any(c.fails for c in self.checks):
            return 1
        if self.compared == 0 or any(c.verdict is Verdict.MISSING for c in self.checks):
            return 3
        return 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON check report (`badput.bench.check/1`)."""
        return {
            "schema": "badput.bench.check/1",
            "fail_on_wins": self.fail_on_wins,
            "exit_code": self.exit_code,
            "results": [c.as_dict() for c in self.checks],
        }


def check(
    expected: Expectations | Mapping[str, Any],
    measured: Mapping[str, Mapping[str, float]],
    *,
    fail_on_wins: bool | None = None,
) -> CheckResult:
    """Judge each measured metric against its expected value and tolerance.

    Args:
        expected: the parsed expectations, or the file's JSON document.
        measured: case id -> metric -> value (see `measured_from_doc`).
        fail_on_wins: overrides the file's top-level setting (a metric's own still wins).

    Raises:
        UsageError: `expected` is a malformed document.

    Example:
        result = check(load_expected("bench/expected.json"), load_measured("results.json"))
        sys.exit(result.exit_code)
    """
    exp = expected if isinstance(expected, Expectations) else _parse(expected, "expected")
    wins_fail = exp.fail_on_wins if fail_on_wins is None else fail_on_wins
    checks: list[MetricCheck] = []
    keys = set(exp.metrics) | {
        (b, m) for b, metrics in measured.items() for m in metrics if m != _WALL
    }
    for bench, metric in sorted(keys):
        e = exp.metrics.get((bench, metric))
        got = measured.get(bench, {}).get(metric)
        rel, abs_ = exp.tolerance(metric, e)
        higher = (
            e.higher_is_better if e and e.higher_is_better is not None else _better_higher(metric)
        )
        if e is None:
            verdict = Verdict.NEW
        elif got is None:
            verdict = Verdict.MISSING
        else:
            delta = got - e.value
            worse = -delta if higher else delta
            metric_wins_fail = e.fail_on_wins if e.fail_on_wins is not None else wins_fail
            if abs(delta) <= max(rel * abs(e.value), abs_) * (1 + _ROUNDING):
                verdict = Verdict.PASS
            elif worse > 0:
                verdict = Verdict.REGRESSION
            else:
                verdict = Verdict.NEEDS_UPDATE if metric_wins_fail else Verdict.IMPROVEMENT
        checks.append(
            MetricCheck(
                benchmark=bench,
                metric=metric,
                verdict=verdict,
                expected=e.value if e else None,
                measured=got,
                rel_tol=rel,
                abs_tol=abs_,
                higher_is_better=higher,
            )
        )
    return CheckResult(checks, wins_fail)


def updated(expected: Expectations, result: CheckResult) -> Expectations:
    """The expectations with the measured value of every metric that did not pass.

    Passing metrics keep their value (so drift inside the tolerance cannot add up over many
    updates); missing ones are kept (removing an expectation is a decision for a person); new
    ones are added with their tolerance and direction written out.
    """
    metrics = dict(expected.metrics)
    for c in result.checks:
        if c.measured is None or c.verdict is Verdict.PASS:
            continue
        old = metrics.get((c.benchmark, c.metric))
        if old is not None:
            metrics[c.benchmark, c.metric] = replace(old, value=c.measured)
        else:
            metrics[c.benchmark, c.metric] = Expected(
                c.measured, c.rel_tol, c.abs_tol, c.higher_is_better
            )
    return replace(expected, metrics=metrics)


# ---- files ------------------------------------------------------------------------------------


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _parse(doc: object, source: str) -> Expectations:
    """Validate an expectations document; every complaint names the file and the key."""

    def bad(where: str, problem: str) -> UsageError:
        return UsageError(f"{source}: {where}: {problem}")

    if not isinstance(doc, Mapping):
        raise UsageError(f"{source}: an expectations file is a JSON object")
    unknown = set(doc) - {"schema", "fail_on_wins", "defaults", "benchmarks"}
    if unknown:
        raise bad("top level", f"unknown key(s) {', '.join(sorted(unknown))}")
    if doc.get("schema", EXPECTED_SCHEMA) != EXPECTED_SCHEMA:
        raise bad("schema", f"expected {EXPECTED_SCHEMA!r}, found {doc['schema']!r}")
    fail_on_wins = doc.get("fail_on_wins", False)
    if not isinstance(fail_on_wins, bool):
        raise bad("fail_on_wins", "must be true or false")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, Mapping) or set(defaults) - {"rel_tol", "abs_tol"}:
        raise bad("defaults", 'must be {"rel_tol": x, "abs_tol": y}')
    for key in defaults:
        if not _number(defaults[key]) or defaults[key] < 0:
            raise bad(f"defaults.{key}", "must be a number >= 0")
    benchmarks = doc.get("benchmarks", {})
    if not isinstance(benchmarks, Mapping):
        raise bad("benchmarks", "must map case ids to their metrics")
    metrics: dict[tuple[str, str], Expected] = {}
    for bench, entries in benchmarks.items():
        if not isinstance(entries, Mapping):
            raise bad(f"benchmarks.{bench}", "must map metric names to expectations")
        for metric, spec in entries.items():
            where = f"benchmarks.{bench}.{metric}"
            if not isinstance(spec, Mapping):
                raise bad(where, 'must be an object like {"value": 123}')
            extra = set(spec) - {
                "value",
                "rel_tol",
                "abs_tol",
                "higher_is_better",
                "fail_on_wins",
                "note",
            }
            if extra:
                raise bad(where, f"unknown key(s) {', '.join(sorted(extra))}")
            if not _number(spec.get("value")):
                raise bad(where, "needs a numeric value")
            for key in ("rel_tol", "abs_tol"):
                if key in spec and (not _number(spec[key]) or spec[key] < 0):
                    raise bad(f"{where}.{key}", "must be a number >= 0")
            for key in ("higher_is_better", "fail_on_wins"):
                if key in spec and not isinstance(spec[key], bool):
                    raise bad(f"{where}.{key}", "must be true or false")
            if "note" in spec and not isinstance(spec["note"], str):
                raise bad(f"{where}.note", "must be a string")
            metrics[str(bench), str(metric)] = Expected(
                value=float(spec["value"]),
                rel_tol=spec.get("rel_tol"),
                abs_tol=spec.get("abs_tol"),
                higher_is_better=spec.get("higher_is_better"),
                fail_on_wins=spec.get("fail_on_wins"),
                note=spec.get("note"),
            )
    return Expectations(
        metrics=metrics,
        fail_on_wins=fail_on_wins,
        default_rel_tol=defaults.get("rel_tol"),
        default_abs_tol=defaults.get("abs_tol"),
    )


def _read_json(path: Path) -> Any:
    from badput.trace._files import file_problem  # here: the trace package imports numpy

    # Stat before opening: a FIFO or a device given as the file would block the read.
    if (problem := file_problem(str(path))) is not None:
        raise UsageError(f"{path}: {problem}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"{path}: not JSON: {e}") from None


def load_expected(path: str | os.PathLike[str]) -> Expectations:
    """Read and validate an expectations file.

    Raises:
        UsageError: missing, not JSON, or malformed (the message names the file and key).
    """
    p = Path(path)
    return _parse(_read_json(p), str(p))


def measured_from_doc(doc: object, source: str = "measured") -> dict[str, dict[str, float]]:
    """Case id -> metric -> value, from a `badput bench run` document or a plain mapping.

    A run document contributes each case that ran (status ok) with its median of rounds;
    failed cases are left out, so their expectations come out as missing.

    Raises:
        UsageError: neither form.
    """
    if isinstance(doc, Mapping) and doc.get("schema") == "badput.bench.run/1":
        out: dict[str, dict[str, float]] = {}
        for r in doc.get("results", []):
            if not isinstance(r, Mapping) or r.get("status") != "ok":
                continue
            metric = r.get("metric")
            name = metric.get("name") if isinstance(metric, Mapping) else None
            if name is None or "id" not in r or not _number(r.get("estimate")):
                raise UsageError(f"{source}: a result lacks its id, metric name or estimate")
            out.setdefault(str(r["id"]), {})[str(name)] = float(r["estimate"])
        return out
    benchmarks = doc.get("benchmarks") if isinstance(doc, Mapping) else None
    if not isinstance(benchmarks, Mapping):
        raise UsageError(
            f"{source}: expected a `badput bench run --json` document or "
            '{"benchmarks": {"case": {"metric": number}}}'
        )
    plain: dict[str, dict[str, float]] = {}
    for bench, metrics in benchmarks.items():
        if not isinstance(metrics, Mapping) or not all(_number(v) for v in metrics.values()):
            raise UsageError(f"{source}: benchmarks.{bench}: must map metric names to numbers")
        plain[str(bench)] = {str(m): float(v) for m, v in metrics.items()}
    return plain


def load_measured(path: str | os.PathLike[str]) -> dict[str, dict[str, float]]:
    """Read measured values from a file (see `measured_from_doc`).

    Raises:
        UsageError: missing, not JSON, or neither accepted form.
    """
    p = Path(path)
    return measured_from_doc(_read_json(p), str(p))


def write_expected(path: str | os.PathLike[str], expected: Expectations) -> None:
    """Write the expectations file (2-space JSON, sorted, trailing newline)."""
    Path(path).write_text(json.dumps(expected.to_doc(), indent=2) + "\n", encoding="utf-8")
