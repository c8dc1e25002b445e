"""What issue 19's analyses cost inside ``badput analyze``: run by bench_analyze.py in .venv.

Loads the trace, analyses and diagnoses it as ``badput analyze`` does (`analyze_trace`, then
`outcome_of`), and times, inside that same run, the three parts issue 19 added: the launch
statistics (`launch_stats`), the critical path (`critical_path`, per GPU) and the graph
what-ifs of the findings (`what_if`). It wraps those functions where their callers look them
up, so each is timed exactly as analyze calls it, once per call.

Prints one JSON line: the stage times (s), the GPUs, and the CPUs this process may run on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import badput.analysis.device as device
import badput.diagnose.context as context
from badput.diagnose import outcome_of
from badput.trace import load_trace

SPENT: dict[str, float] = defaultdict(float)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - t0

    return wrapper


def main() -> int:
    device.launch_stats = timed("launch_s", device.launch_stats)  # type: ignore[assignment]
    device.critical_path = timed("critical_path_s", device.critical_path)  # type: ignore[assignment]
    context.what_if = timed("what_if_s", context.what_if)  # type: ignore[assignment]
    t0 = time.perf_counter()
    trace = load_trace(sys.argv[1])
    t1 = time.perf_counter()
    analyses = device.analyze_trace(trace)
    t2 = time.perf_counter()
    outcome = outcome_of(trace, analyses)
    t3 = time.perf_counter()
    result = {
        "load_s": round(t1 - t0, 3),
        "analyze_s": round(t2 - t1, 3),
        "diagnose_s": round(t3 - t2, 3),
        **{k: round(v, 3) for k, v in SPENT.items()},
        "gpus": sum(1 for d in analyses if d.device >= 0),
        "findings_with_graph_savings": sum(
            1 for found in outcome.findings for f in found if f.graph_savings_ns is not None
        ),
        "affinity": sorted(os.sched_getaffinity(0)),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
