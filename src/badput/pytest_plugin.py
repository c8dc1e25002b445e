"""The pytest plugin: `pytest --badput-bench` records a benchmark suite into the results store.

Registered as the ``badput`` pytest11 entry point, so it loads in every pytest session of an
environment where badput is installed; without ``--badput-bench`` it only adds its options
and does nothing else (no fixture, no hook work, no import beyond pytest and the standard
library).

With ``--badput-bench``:

* The benchmarks are those of pytest-benchmark's ``benchmark`` fixture when pytest-benchmark
  is installed (and not disabled with ``-p no:benchmark``); otherwise this plugin provides a
  small compatible ``benchmark`` fixture: ``benchmark(fn, *args, **kwargs)`` (calibrated
  iterations per round, at least 5 rounds, about 1 s) and ``benchmark.pedantic(target, args,
  kwargs, setup, teardown, rounds, warmup_rounds, iterations)``.
* At the end of the session each benchmark's round values (seconds per iteration, one value
  per round, as pytest-benchmark's own ``stats.data``) are recorded in the store as one run,
  exactly the rows that `badput bench ingest` writes for a `badput bench run --json` document:
  benchmark id = the test's node id, metric ``wall_s``, the run keyed by commit and hardware
  fingerprint. `badput bench history --benchmark ID` then follows each benchmark over commits
  with change-point detection.
* ``--badput-json FILE`` writes that ``badput.bench.run/1`` document (for ``badput bench
  ingest`` where CI cannot reach the store).
* ``--badput-metrics-line`` prints each benchmark's median (seconds) as one JSON object line at
  the end of the session, keyed ``"<node id> wall_s"``: the form in which `badput bench ab`
  reads a round's metrics, so that
  ``badput bench ab --base-ref main --head-ref HEAD --command "pytest benchmarks
  --badput-bench --badput-store none --badput-metrics-line -q"`` gates every benchmark of the
  suite with the paired statistical test (one pytest session per round).

A failure to record (a store that cannot be opened) prints one line and turns a passing
session's exit status into 3, as does ``--badput-bench`` when no benchmark ran: the design's
"zero benchmarks executed" is an infrastructure error, never a pass.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = ["BenchmarkFixture", "pytest_addoption", "pytest_configure"]

#: Exit status of a session whose benchmarks could not be recorded (or where none ran).
EXIT_INFRA = 3
_PLUGIN = "badput-bench"
_FALLBACK = "badput-benchmark-fixture"
_METRIC = "wall_s"
# The fallback fixture's defaults, those of pytest-benchmark 5 (its --benchmark-* options).
_MIN_ROUNDS = 5
_MIN_TIME_S = 5e-6
_MAX_TIME_S = 1.0
_MAX_ITERATIONS = 10**7


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``--badput-*`` options (they do nothing without ``--badput-bench``)."""
    group = parser.getgroup("badput", "badput: record benchmarks in the results store")
    group.addoption(
        "--badput-bench",
        action="store_true",
        default=False,
        help="Record the session's benchmarks (the `benchmark` fixture) in the badput store.",
    )
    group.addoption(
        "--badput-store",
        default=None,
        metavar="URL",
        help="Results store: a path, sqlite:///PATH or postgresql://... "
        "(default .badput/bench.sqlite, as `badput bench`); 'none' records nothing.",
    )
    group.addoption(
        "--badput-commit",
        default=None,
        metavar="SHA",
        help="Commit of the run (default: `git rev-parse HEAD` in the rootdir, if any).",
    )
    group.addoption(
        "--badput-branch", default=None, metavar="NAME", help="Branch of the run (default: git's)."
    )
    group.addoption(
        "--badput-json",
        default=None,
        metavar="FILE",
        help="Also write the run as a badput.bench.run/1 document (for `badput bench ingest`).",
    )
    group.addoption(
        "--badput-metrics-line",
        action="store_true",
        default=False,
        help="Print each benchmark's median seconds as one JSON line (what `bench ab` reads).",
    )


def pytest_configure(config: pytest.Config) -> None:
    """With ``--badput-bench``, register the recorder (and the fallback fixture if needed)."""
    if not config.getoption("badput_bench"):
        return
    recorder = _Recorder(config)
    config.pluginmanager.register(recorder, _PLUGIN)
    if not config.pluginmanager.hasplugin("benchmark"):  # pytest-benchmark's plugin name
        config.addinivalue_line("markers", "benchmark: benchmark settings (badput's fixture).")
        config.pluginmanager.register(_FallbackPlugin(recorder), _FALLBACK)


@dataclass
class _Case:
    """One benchmark of the session: its round values in seconds per iteration."""

    fullname: str
    name: str
    params: dict[str, Any]
    group: str | None
    iterations: int
    values: list[float]
    error: str | None = None


@dataclass
class _Outcome:
    """What the recorder did, for the terminal summary."""

    cases: list[_Case] = field(default_factory=list)
    run_id: str | None = None
    store: str | None = None
    error: str | None = None


class _Recorder:
    """Collects the benchmarks at session end and records them (registered only when enabled)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.fallback_cases: list[_Case] = []
        self.outcome = _Outcome()
        self.start_s = time.perf_counter()

    def _harvest(self) -> list[_Case]:
        """pytest-benchmark's benchmarks (its session's `benchmarks`), or the fallback's."""
        session = getattr(self.config, "_benchmarksession", None)
        if session is None:
            return list(self.fallback_cases)
        cases: list[_Case] = []
        for bench in getattr(session, "benchmarks", ()):
            data = [float(v) for v in getattr(bench.stats, "data", ())]
            failed = bool(getattr(bench, "has_error", False))
            if not data and not failed:
                continue
            cases.append(
                _Case(
                    fullname=str(bench.fullname),
                    name=str(bench.name),
                    params=dict(bench.params or {}),
                    group=bench.group,
                    iterations=int(bench.iterations),
                    values=[] if failed else data,
                    error="the benchmarked function raised" if failed else None,
                )
            )
        return cases

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Record the session's benchmarks; a failure makes a passing session exit 3."""
        cases = self._harvest()
        self.outcome.cases = cases
        if not cases:
            if exitstatus == pytest.ExitCode.OK:
                self.outcome.error = "--badput-bench: no benchmark ran in this session"
                session.exitstatus = EXIT_INFRA
            return
        doc = run_document(cases, str(self.config.rootpath), time.perf_counter() - self.start_s)
        try:
            path = self.config.getoption("badput_json")
            if path:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(json.dumps(doc, indent=2, default=str) + "\n")
            url = self.config.getoption("badput_store")
            if url is None or url.lower() != "none":
                self.outcome.run_id, self.outcome.store = self._record(doc, url)
        except Exception as e:  # badput's UsageError, OSError, the database driver's errors
            self.outcome.error = f"could not record the benchmarks: {e}"
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = EXIT_INFRA

    def _record(self, doc: dict[str, Any], url: str | None) -> tuple[str, str]:
        from badput.bench.store import Store

        root = str(self.config.rootpath)
        commit = self.config.getoption("badput_commit")
        branch = self.config.getoption("badput_branch")
        if commit is None:
            commit = _git(root, "rev-parse", "HEAD") or ""
        if branch is None:
            name = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
            branch = name if name and name != "HEAD" else None
        with Store.open(url) as db:
            return db.record_run(doc, commit=commit, branch=branch), db.path

    @pytest.hookimpl(trylast=True)  # after pytest-benchmark's table: the JSON line comes last
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Say what was recorded; with --badput-metrics-line, print the medians last."""
        o = self.outcome
        tr = terminalreporter
        if o.error:
            tr.write_line(f"badput: error: {o.error}", red=True)
        elif o.run_id:
            tr.write_line(
                f"badput: recorded {len(o.cases)} benchmark(s) in {o.store} (run {o.run_id})"
            )
        if self.config.getoption("badput_metrics_line") and o.cases:
            medians = {
                metrics_line_key(c.fullname): statistics.median(c.values)
                for c in o.cases
                if c.values
            }
            tr.write_line(json.dumps(medians, sort_keys=True))


def metrics_line_key(fullname: str) -> str:
    """A benchmark's key in the metrics line: its node id and the metric, `ID wall_s`.

    The metric word last tells `bench ab` the direction (seconds: lower is better), whatever
    the test is called (`test_speed` would otherwise read as a throughput).
    """
    return f"{fullname} {_METRIC}"


def _git(cwd: str, *args: str) -> str | None:
    """The stripped output of a git command, or None outside a repository or without git."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def run_document(cases: list[_Case], file: str, elapsed_s: float) -> dict[str, Any]:
    """The ``badput.bench.run/1`` document of a session's benchmarks (as `bench run` writes).

    Args:
        cases: The benchmarks.
        file: What was run (the pytest rootdir).
        elapsed_s: Seconds the session took.
    """
    from badput.bench.runner import result_entry
    from badput.bench.runner import run_document as document

    results = [
        result_entry(
            c.fullname,
            {"name": c.name, "params": c.params, "group": c.group},
            {"name": _METRIC, "unit": "s", "higher_is_better": False},
            c.values,
            c.error,
            {
                "harness": "pytest",
                "warmup_iters": None,
                "iters_per_round": c.iterations,
                "round_stat": "mean",
                "process_per_round": False,
            },
        )
        for c in cases
    ]
    rounds = max((len(c.values) for c in cases), default=0)
    return document(file, sys.version.split()[0], rounds, elapsed_s, results)


class BenchmarkFixture:
    """The fallback ``benchmark`` fixture, used when pytest-benchmark is not installed.

    The calling conventions are pytest-benchmark's: ``benchmark(fn, *args, **kwargs)`` and
    ``benchmark.pedantic(...)``, each once per test, returning the function's result. A round's
    value is its wall time divided by its iterations, in seconds (`time.perf_counter_ns`).

    Attributes:
        name: The test's name.
        fullname: The test's node id: the benchmark id in the store.
        params: The test's parameters, when parametrized.
        group: The ``group`` of a ``@pytest.mark.benchmark(group=...)`` marker.
        extra_info: Free-form data a test may attach (kept for compatibility, not stored).
    """

    def __init__(
        self,
        node: pytest.Item,
        sink: Callable[[_Case], None],
        *,
        min_rounds: int = _MIN_ROUNDS,
        min_time_s: float = _MIN_TIME_S,
        max_time_s: float = _MAX_TIME_S,
        group: str | None = None,
    ) -> None:
        """Bind the fixture to a test; `sink` receives the case when the test ends."""
        callspec = getattr(node, "callspec", None)
        self.name = node.name
        self.fullname = node.nodeid
        self.params: dict[str, Any] = dict(callspec.params) if callspec is not None else {}
        self.group = group
        self.extra_info: dict[str, Any] = {}
        self._sink = sink
        self._min_rounds = min_rounds
        self._min_time_s = min_time_s
        self._max_time_s = max_time_s
        self._used = False

    def _case(self, iterations: int, values: list[float]) -> None:
        self._sink(
            _Case(self.fullname, self.name, self.params, self.group, iterations, values, None)
        )

    def _claim(self) -> None:
        if self._used:
            raise RuntimeError("the benchmark fixture can be used only once per test")
        self._used = True

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Time `function(*args, **kwargs)`: calibrated iterations per round, about 1 s in all."""
        self._claim()
        iterations = 1
        while True:  # calibrate: a round must last min_time_s, well above the timer's step
            start = time.perf_counter_ns()
            for _ in range(iterations):
                result = function(*args, **kwargs)
            round_s = (time.perf_counter_ns() - start) / 1e9
            if round_s >= self._min_time_s or iterations >= _MAX_ITERATIONS:
                break
            iterations *= 10
        rounds = max(self._min_rounds, math.ceil(self._max_time_s / max(round_s, 1e-9)))
        values = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            for _ in range(iterations):
                result = function(*args, **kwargs)
            values.append((time.perf_counter_ns() - start) / 1e9 / iterations)
        self._case(iterations, values)
        return result

    def pedantic(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        setup: Callable[[], Any] | None = None,
        teardown: Callable[..., Any] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> Any:
        """Time `target` in exactly `rounds` rounds of `iterations` calls, after warm-up rounds.

        As in pytest-benchmark, `setup` runs before each round, untimed, and may return
        ``(args, kwargs)`` for that round (then `args`/`kwargs` must not be given, and
        `iterations` must be 1); `teardown(*args, **kwargs)` runs after each round, untimed.

        Raises:
            ValueError: a count out of range, or setup combined with args or iterations.
        """
        self._claim()
        if not isinstance(rounds, int) or rounds < 1:
            raise ValueError("rounds must be a positive int")
        if not isinstance(iterations, int) or iterations < 1:
            raise ValueError("iterations must be a positive int")
        if not isinstance(warmup_rounds, int) or warmup_rounds < 0:
            raise ValueError("warmup_rounds must be a non-negative int")
        if setup is not None and iterations > 1:
            raise ValueError("iterations must be 1 when setup is given")
        values: list[float] = []
        result: Any = None
        for i in range(warmup_rounds + rounds):
            call_args, call_kwargs = args, dict(kwargs or {})
            if setup is not None:
                made = setup()
                if made is not None:
                    if args or kwargs:
                        raise ValueError("setup returned arguments and args/kwargs were given")
                    call_args, call_kwargs = made
            start = time.perf_counter_ns()
            for _ in range(iterations):
                result = target(*call_args, **call_kwargs)
            elapsed_s = (time.perf_counter_ns() - start) / 1e9
            if teardown is not None:
                teardown(*call_args, **call_kwargs)
            if i >= warmup_rounds:
                values.append(elapsed_s / iterations)
        self._case(iterations, values)
        return result


class _FallbackPlugin:
    """Holds the fallback ``benchmark`` fixture; registered only without pytest-benchmark."""

    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder

    @pytest.fixture
    def benchmark(self, request: pytest.FixtureRequest) -> Iterator[BenchmarkFixture]:
        """A minimal pytest-benchmark-compatible ``benchmark`` fixture."""
        marker = request.node.get_closest_marker("benchmark")
        opts = dict(marker.kwargs) if marker else {}
        fixture = BenchmarkFixture(
            request.node,
            self._recorder.fallback_cases.append,
            min_rounds=int(opts.get("min_rounds", _MIN_ROUNDS)),
            min_time_s=float(opts.get("min_time", _MIN_TIME_S)),
            max_time_s=float(opts.get("max_time", _MAX_TIME_S)),
            group=opts.get("group"),
        )
        yield fixture
