"""The benchmark API: `@benchmark`, loading a file's benchmarks, rounds in fresh processes.

A benchmark file is plain Python; each decorated function is one benchmark, and each
combination of its parameters one case:

    from badput.bench import benchmark

    @benchmark(params={"n": [1_000, 10_000]}, iterations=5)
    def sum_squares(n):
        sum(i * i for i in range(n))

    @benchmark(metric="peak_bytes")
    def peak(): ...  # returns the number: a custom metric

`badput bench run FILE` runs every case in rounds, and each round in a fresh Python process
(design note section 5.1: the round, not the iteration, is the unit of replication, and a
fresh process keeps one round's caches, allocator state and JIT warm-up out of the next).
Inside a round: `setup(**params)` once (untimed), `warmup` discarded calls, then `iterations`
measured calls; the round's value is the median over the measured calls of the wall time
(`metric="wall_s"`, seconds) or of the number the function returns (any other metric name).
Rounds of all cases are interleaved (case 1, case 2, ..., then round 2) so that slow drift of
the machine spreads over every case instead of landing on the last one.

A round runs as
`python -c "import sys; from badput.bench.api import child_main; sys.exit(child_main())"
FILE NAME PARAMS_JSON [OUT_JSON]`; without OUT_JSON the child prints its result, which is the
way to debug one round by hand. (Not `python -m badput.bench.api`: the package imports this
module first, so runpy would run a second copy, with its own list of benchmarks, and warn.)
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import inspect
import itertools
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

from badput.errors import UsageError

__all__ = [
    "WALL",
    "Benchmark",
    "BenchmarkDefinitionError",
    "BenchmarkFileError",
    "Case",
    "benchmark",
    "child_main",
    "load_benchmarks",
    "measure",
]

# Only the standard library is imported at module level: every round's fresh process imports
# this module, and its start-up time is paid once per round.

#: The default metric: wall time of one call, in seconds.
WALL = "wall_s"

F = TypeVar("F", bound=Callable[..., Any])

_CHILD_CODE = "import sys; from badput.bench.api import child_main; sys.exit(child_main())"
# The directory holding the `badput` package, put on a round's PYTHONPATH so that the round
# imports this very badput even from a source tree that is not installed.
_SRC_ROOT = str(Path(__file__).resolve().parents[2])


class BenchmarkDefinitionError(UsageError):
    """`@benchmark` was used wrongly (bad params, metric, warm-up or iterations)."""


class BenchmarkFileError(UsageError):
    """A benchmark file cannot be loaded: missing, a syntax or import error, decorator misuse."""


@dataclass(frozen=True)
class Benchmark:
    """One decorated function and how to measure it.

    Attributes:
        name: unique within its file; the function's name unless given.
        func: the function; called as `func(*setup_value, **params)`.
        params: parameter name -> values; every combination is one case.
        setup: called as `setup(**params)` once per round, untimed; a result other than None
            is passed to `func` as its first positional argument.
        metric: "wall_s" (seconds per call), or the name of the number `func` returns.
        higher_is_better: direction of the metric; None infers it from the name.
        warmup: calls per round whose values are discarded.
        iterations: measured calls per round; the round's value is their median.
    """

    name: str
    func: Callable[..., Any]
    params: dict[str, tuple[Any, ...]]
    setup: Callable[..., Any] | None
    metric: str
    higher_is_better: bool | None
    warmup: int
    iterations: int

    @property
    def unit(self) -> str | None:
        """The metric's unit when known: seconds for wall time."""
        return "s" if self.metric == WALL else None

    def better_higher(self) -> bool:
        """Whether a larger value is better (given, or inferred as the A/B gate does)."""
        if self.higher_is_better is not None:
            return self.higher_is_better
        if self.metric == WALL:
            return False
        from badput.bench.ab import Policy  # numpy: kept out of the rounds' start-up

        return Policy().better_higher(self.metric)

    def cases(self) -> list[Case]:
        """Every combination of the parameters, in declaration order."""
        keys = list(self.params)
        return [
            Case(self, dict(zip(keys, values, strict=True)))
            for values in itertools.product(*(self.params[k] for k in keys))
        ]


@dataclass(frozen=True)
class Case:
    """One benchmark with one value for each of its parameters."""

    benchmark: Benchmark
    params: dict[str, Any]

    @property
    def id(self) -> str:
        """`name[n=1000,mode=fast]`, or the bare name without parameters."""
        if not self.params:
            return self.benchmark.name
        inner = ",".join(f"{k}={_show(v)}" for k, v in self.params.items())
        return f"{self.benchmark.name}[{inner}]"


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


# While `load_benchmarks` imports a file, the decorator adds to the innermost list here (a
# stack, for a benchmark file that loads another). Outside a load nothing is kept, so that
# importing a benchmark module as a plain module holds no references.
_COLLECTING: list[list[Benchmark]] = []


@overload
def benchmark(name: F) -> F: ...


@overload
def benchmark(
    name: str | None = None,
    *,
    params: Mapping[str, Sequence[Any]] | None = None,
    setup: Callable[..., Any] | None = None,
    metric: str = WALL,
    higher_is_better: bool | None = None,
    warmup: int = 1,
    iterations: int = 1,
) -> Callable[[F], F]: ...


def benchmark(
    name: str | Callable[..., Any] | None = None,
    *,
    params: Mapping[str, Sequence[Any]] | None = None,
    setup: Callable[..., Any] | None = None,
    metric: str = WALL,
    higher_is_better: bool | None = None,
    warmup: int = 1,
    iterations: int = 1,
) -> Any:
    """Declare a benchmark; the function is returned unchanged.

    Args:
        name: the benchmark's name (default: the function's name). `@benchmark` without
            parentheses also works.
        params: parameter name -> list of values; every combination is one case. Values must
            be JSON (they travel to each round's process as JSON).
        setup: called as `setup(**params)` once per round, untimed; a result other than None
            is passed to the function as its first positional argument.
        metric: "wall_s" to time each call, or the name of the number the function returns
            (throughput, peak memory, a count...).
        higher_is_better: the metric's direction; None infers it from the name (wall time and
            memory: lower; throughput, goodput, ..._per_s: higher).
        warmup: calls per round that are run and discarded.
        iterations: measured calls per round; the round's value is their median.

    Raises:
        BenchmarkDefinitionError: a bad argument, or params that the function cannot take.

    Example:
        @benchmark(params={"n": [1000, 2000]}, iterations=3)
        def loop(n):
            for _ in range(n):
                pass
    """
    if callable(name):
        return benchmark()(name)
    params_t = _check_params(params)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise BenchmarkDefinitionError(f"benchmark name must be a non-empty string, not {name!r}")
    if not isinstance(metric, str) or not metric.strip():
        raise BenchmarkDefinitionError(f"metric must be a non-empty string, not {metric!r}")
    if higher_is_better is not None and not isinstance(higher_is_better, bool):
        raise BenchmarkDefinitionError("higher_is_better must be True, False or None")
    if not _is_int(warmup) or warmup < 0:
        raise BenchmarkDefinitionError(f"warmup must be an integer >= 0, not {warmup!r}")
    if not _is_int(iterations) or iterations < 1:
        raise BenchmarkDefinitionError(f"iterations must be an integer >= 1, not {iterations!r}")
    if setup is not None and not callable(setup):
        raise BenchmarkDefinitionError(f"setup must be callable, not {type(setup).__name__}")

    def decorate(func: F) -> F:
        if not callable(func):
            raise BenchmarkDefinitionError(
                f"@benchmark decorates a function, not {type(func).__name__}"
            )
        bench_name = name if isinstance(name, str) else getattr(func, "__name__", None)
        if not bench_name:
            raise BenchmarkDefinitionError("@benchmark(name=...) is needed for this callable")
        _check_signature(bench_name, func, setup, params_t)
        b = Benchmark(
            bench_name, func, params_t, setup, metric, higher_is_better, warmup, iterations
        )
        if _COLLECTING:
            _COLLECTING[-1].append(b)
        return func

    return decorate


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_params(params: object) -> dict[str, tuple[Any, ...]]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise BenchmarkDefinitionError(
            f"params must be a dict of name -> list of values, not {type(params).__name__}"
        )
    out: dict[str, tuple[Any, ...]] = {}
    for key, values in params.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise BenchmarkDefinitionError(f"param name {key!r} is not an identifier")
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise BenchmarkDefinitionError(f"param {key!r} needs a non-empty list of values")
        for v in values:
            # Each round's process gets its parameters as JSON: a value that does not survive
            # the trip would silently become a different value there.
            try:
                same = json.loads(json.dumps(v)) == v
            except (TypeError, ValueError):
                same = False
            if not same:
                raise BenchmarkDefinitionError(
                    f"param {key!r}: value {v!r} is not JSON (str, number, bool, None, list, dict)"
                )
        out[key] = tuple(values)
    return out


def _check_signature(
    name: str, func: Callable[..., Any], setup: Callable[..., Any] | None, params: dict[str, Any]
) -> None:
    """Fail at decoration, not in the middle of a run, when the params cannot be passed."""
    kwargs = dict.fromkeys(params)
    for fn, label, tries in (
        # With a setup the function may take its result first, or not (None is not passed).
        (func, "function", [((None,), kwargs), ((), kwargs)] if setup else [((), kwargs)]),
        (setup, "setup", [((), kwargs)]),
    ):
        if fn is None:
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            continue  # a builtin without a signature: let the call tell
        for args, kw in tries:
            try:
                sig.bind(*args, **kw)
                break
            except TypeError:
                pass
        else:
            given = ", ".join(params) or "none"
            raise BenchmarkDefinitionError(
                f"benchmark {name!r}: {label} {getattr(fn, '__name__', '?')}{sig} "
                f"cannot take the params ({given})"
            )


# ---- loading a file ---------------------------------------------------------------------------

_loaded = itertools.count()


def load_benchmarks(path: str | os.PathLike[str]) -> list[Benchmark]:
    """Import a benchmark file by path and return its benchmarks, in definition order.

    The file's directory is on `sys.path` while it is imported, as for a script, so it can
    import its neighbours.

    Raises:
        BenchmarkFileError: the file is missing or cannot be imported (syntax error, import
            error, an exception at import, decorator misuse, two benchmarks of one name). The
            message is one line and names the file.
    """
    return _load(Path(path), keep_path=False)


def _load(path: Path, keep_path: bool) -> list[Benchmark]:
    from badput.trace._files import file_problem  # here: the trace package imports numpy

    # Not only a missing file: importing a FIFO or a device would block on the read.
    if (problem := file_problem(str(path))) is not None:
        raise BenchmarkFileError(f"{path}: {problem}")
    module_name = f"_badput_bench_{path.stem.replace('-', '_')}_{next(_loaded)}"
    loader = importlib.machinery.SourceFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    if spec is None:  # pragma: no cover - a SourceFileLoader always gives a spec
        raise BenchmarkFileError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    found: list[Benchmark] = []
    _COLLECTING.append(found)
    # In sys.modules while it runs, as for any import: dataclasses and pickling look it up.
    sys.modules[module_name] = module
    ok = False
    try:
        loader.exec_module(module)
        ok = True
    except SyntaxError as e:
        if e.filename and Path(e.filename).resolve() == path.resolve():
            raise BenchmarkFileError(f"{path}:{e.lineno}: SyntaxError: {e.msg}") from None
        raise BenchmarkFileError(f"{path}: {_describe(e)}") from None
    except (Exception, SystemExit) as e:  # the file is user code: any failure is its own
        line = _line_in(e, path)
        where = f"{path}:{line}" if line is not None else str(path)
        raise BenchmarkFileError(f"{where}: {_describe(e)}") from None
    finally:
        _COLLECTING.pop()
        if not ok:
            sys.modules.pop(module_name, None)  # a half-run module is of no use to anyone
        if added and not keep_path and folder in sys.path:
            sys.path.remove(folder)
    seen: set[str] = set()
    for b in found:
        if b.name in seen:
            raise BenchmarkFileError(f"{path}: two benchmarks are named {b.name!r}")
        seen.add(b.name)
    return found


def _describe(e: BaseException) -> str:
    """`Type: first line of the message`: one line, no traceback."""
    lines = str(e).strip().splitlines()
    if isinstance(e, BenchmarkDefinitionError):
        return lines[0]  # our own message says what is wrong; its type name is noise
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _line_in(e: BaseException, path: Path) -> int | None:
    """The line of the innermost traceback frame in `path`: where the user's code failed."""
    target = path.resolve()
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == target:
            line = frame.lineno
    return line


# ---- one round --------------------------------------------------------------------------------


def _cuda_sync() -> None:
    """Wait for queued CUDA work, if this process uses CUDA; else nothing.

    Wall time of CUDA work measured without a sync is launch time only (design note 7).
    torch is looked up, not imported: importing it would cost a second per round.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and cuda.is_initialized():
        cuda.synchronize()


def measure(case: Case) -> list[float]:
    """Run one round of `case` in this process: setup, warm-up, measured calls.

    Returns:
        The measured calls' values (warm-up excluded): seconds for wall time, else the
        numbers the function returned.

    Raises:
        TypeError: the function returned something other than a finite number for a custom
            metric. Whatever the benchmark or its setup raises passes through.
    """
    b = case.benchmark
    state = b.setup(**case.params) if b.setup is not None else None
    args = () if state is None else (state,)
    timed = b.metric == WALL
    # Setup's garbage is collected now rather than inside a measured call; before the warm-up,
    # not after it, because a full collection empties the interpreter's free lists and the
    # first calls after it allocate afresh: warm-up calls are the ones that should pay that.
    gc.collect()
    for _ in range(b.warmup):
        b.func(*args, **case.params)
    values: list[float] = []
    for _ in range(b.iterations):
        if timed:
            _cuda_sync()
            t0 = time.perf_counter_ns()
            b.func(*args, **case.params)
            _cuda_sync()
            values.append((time.perf_counter_ns() - t0) / 1e9)
        else:
            values.append(_number(b.func(*args, **case.params), b))
    return values


def _number(out: object, b: Benchmark) -> float:
    if isinstance(out, bool) or not isinstance(out, int | float):
        raise TypeError(
            f"metric {b.metric!r}: {b.name} returned {type(out).__name__}, not a number"
        )
    value = float(out)
    if not math.isfinite(value):
        raise TypeError(f"metric {b.metric!r}: {b.name} returned {value}")
    return value


def child_main(argv: Sequence[str] | None = None) -> int:
    """One round in this (fresh) process: `FILE NAME PARAMS_JSON [OUT_JSON]`.

    Writes `{"value": median, "samples": [...], "pid": ...}`, or `{"error": "..."}`, to
    OUT_JSON (stdout without it): a file, not stdout, so that whatever the benchmark prints
    cannot be mistaken for the result.

    Returns:
        0 measured, 1 the benchmark failed, 2 bad arguments or an unloadable file.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (3, 4):
        sys.stderr.write("usage: child_main FILE NAME PARAMS_JSON [OUT_JSON]\n")
        return 2
    file, name, params_json = args[:3]
    path = Path(file)
    doc: dict[str, Any]
    try:
        found = {b.name: b for b in _load(path, keep_path=True)}
        if name not in found:
            raise BenchmarkFileError(f"{path}: no benchmark named {name!r}")
        params = json.loads(params_json)
        if not isinstance(params, dict):
            raise BenchmarkFileError(f"params must be a JSON object, not {params_json!r}")
        samples = measure(Case(found[name], params))
        doc = {"value": statistics.median(samples), "samples": samples, "pid": os.getpid()}
        code = 0
    except (BenchmarkFileError, json.JSONDecodeError) as e:
        doc, code = {"error": str(e)}, 2
    except Exception as e:  # the benchmark's own failure, reported to the parent as one line
        line = _line_in(e, path)
        doc, code = {"error": _describe(e) + (f" ({path.name}:{line})" if line else "")}, 1
    text = json.dumps(doc)
    if len(args) == 4:
        Path(args[3]).write_text(text, encoding="utf-8")
    else:
        print(text)
    return code
