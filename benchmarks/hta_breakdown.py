"""Anchor for ``badput analyze``: HTA loads a trace and computes its temporal breakdown.

Run by bench_analyze.py with the .venv-bench interpreter (HolisticTraceAnalysis 0.5.0 and its
pandas stack, kept out of the project's own .venv).

HTA reads a directory of traces, one per rank. Two details of HTA 0.5.0 shape the call:

* It only takes files ending in ".json" or ".gz", so the trace is put into a temporary
  directory under the name rank-0.json, as a symlink (no 1 GB copy).
* Given only ``trace_dir``, it finds each file's rank by reading the file line by line until
  a ``"rank": N`` entry (``distributedInfo``) turns up. Kineto traces from a single process
  have none, so that would be one more full pass over the 1 GB before parsing starts. Passing
  ``trace_files={0: "rank-0.json"}`` with the same ``trace_dir`` skips that scan, which is
  HTA's fastest way to load the trace: the comparison gives HTA the benefit of the doubt.

Everything else is HTA's default: its stock JSON parser backend, include_last_profiler_step
False, a single rank parsed in-process (HTA only forks workers for several ranks).

Prints HTA's breakdown table on stderr and one JSON line on stdout with timings per stage.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    trace = Path(sys.argv[1]).resolve()
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hta-bench-") as tmp:
        (Path(tmp) / "rank-0.json").symlink_to(trace)
        analysis = TraceAnalysis(trace_files={0: "rank-0.json"}, trace_dir=tmp)
        t2 = time.perf_counter()
        breakdown = analysis.get_temporal_breakdown(visualize=False)
        t3 = time.perf_counter()
    print(breakdown.to_string(), file=sys.stderr)
    result = {
        "import_s": round(t1 - t0, 3),
        "load_s": round(t2 - t1, 3),
        "breakdown_s": round(t3 - t2, 3),
        "breakdown": json.loads(breakdown.to_json(orient="records")),
        "affinity": sorted(os.sched_getaffinity(0)),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
