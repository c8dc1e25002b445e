"""Two small benchmarks for `badput bench run`: a timed loop and a custom metric.

Run (each round is a fresh Python process):

    badput bench run examples/bench_example.py --rounds 5 --json bench.json

Then gate the deterministic one (peak memory) against expectations kept in the repository:

    badput bench check bench_expected.json bench.json --update   # first time: create the file
    badput bench check bench_expected.json bench.json            # later: exit 1 on a regression
"""

from __future__ import annotations

import tracemalloc

from badput.bench import benchmark


@benchmark(params={"n": [10_000, 50_000]}, warmup=1, iterations=5)
def sum_of_squares(n: int) -> None:
    """Wall time (the default metric) of a pure-Python loop, per parameter value."""
    total = 0
    for i in range(n):
        total += i * i


# The first call in a process allocates a little more (one-time interpreter state): the
# warm-up call takes it, and the median of three smooths what is left.
@benchmark(params={"n": [10_000]}, metric="peak_bytes", warmup=1, iterations=3)
def list_peak_memory(n: int) -> int:
    """Peak bytes allocated while building a list: a custom, deterministic metric."""
    tracemalloc.start()
    try:
        data = [str(i) for i in range(n)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del data
    return peak
