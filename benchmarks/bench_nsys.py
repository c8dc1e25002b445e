"""Benchmark the Nsight Systems reader against SQLite's own row fetching, on a real export.

No Python reader of nsys exports installs here (pipit's PyPI release is an empty
placeholder; nsightful is not on PyPI), and every one of them reads the same way underneath:
SELECT the rows through the `sqlite3` module (pandas' `read_sql` included). So the anchor is
what a generic reader pays before it does anything with the rows: `SELECT *` of every table
badput reads, `fetchall()`, nothing else: no strings resolved, no numpy, no names. badput's
side is `load_trace(path)`: the same tables read into the columnar Trace, strings interned,
names built, ids decoded, rows sorted, checks run. badput selects only the columns it maps,
which is how it can finish in less time than fetching every column.

The export is the real T4 power-iteration export of `tests/data/traces/nsys/nsightful-t4`
(schema 3.20), replicated `--copies` times in time (start, end and correlation ids shifted
past the previous copy) so the tables hold a few million rows.

Results go to benchmarks/results/nsys.md. Run: ``.venv/bin/python benchmarks/bench_nsys.py``.
Exit status 0 when badput takes at most 3x the floor, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import badput
import machine
from badput.trace.load import load_trace

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results/nsys.md"
SOURCE = HERE.parent / "tests/data/traces/nsys/nsightful-t4/power_iteration__baseline.sqlite"
# The event tables the reader takes rows from; StringIds is read whole as well.
EVENT_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
)
MAX_RATIO = 3.0


def replicate(src: Path, dst: str, copies: int) -> dict[str, int]:
    """Copy the export and append `copies - 1` time-shifted copies of its event rows."""
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    present = [t for t in EVENT_TABLES if t in tables]
    lo, hi = None, None
    for t in present:
        a, b = conn.execute(f'SELECT min(start), max("end") FROM {t}').fetchone()
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    span = (hi or 0) - (lo or 0) + 1_000
    max_corr = max(
        conn.execute(f"SELECT coalesce(max(correlationId), 0) FROM {t}").fetchone()[0]
        for t in present
        if "correlationId" in {c[1] for c in conn.execute(f"PRAGMA table_info({t})")}
    )
    for t in present:
        cols = [c[1] for c in conn.execute(f"PRAGMA table_info({t})")]
        originals = conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for k in range(1, copies):
            exprs = []
            for c in cols:
                if c in ("start", "end"):
                    exprs.append(f'"{c}" + {k * span}')
                elif c == "correlationId":
                    exprs.append(f'"{c}" + {k * (max_corr + 1)}')
                elif c in ("id", "rowid"):
                    exprs.append("NULL")
                else:
                    exprs.append(f'"{c}"')
            names = ", ".join(f'"{c}"' for c in cols)
            conn.execute(
                f"INSERT INTO {t} ({names}) SELECT {', '.join(exprs)} FROM {t} "
                f"WHERE rowid <= {originals}"
            )
    conn.commit()
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in present}
    conn.close()
    return counts


def floor(path: str) -> int:
    """Every row of the tables the reader reads, fetched by the sqlite3 module."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    n = 0
    for t in (*EVENT_TABLES, "StringIds"):
        if t in tables:
            n += len(conn.execute(f"SELECT * FROM {t}").fetchall())
    conn.close()
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args()
    if not SOURCE.exists():
        print(f"{SOURCE}: missing (tests/data/traces is part of the repository)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.sqlite")
        counts = replicate(SOURCE, path, args.copies)
        size_mib = os.path.getsize(path) / 2**20
        t_floor, t_ours = [], []
        rows = events = 0
        for _ in range(args.rounds):  # interleaved: machine noise hits both sides alike
            start = time.perf_counter()
            rows = floor(path)
            t_floor.append(time.perf_counter() - start)
            start = time.perf_counter()
            trace = load_trace(path)
            t_ours.append(time.perf_counter() - start)
            events = len(trace)
            del trace
    f, o = statistics.median(t_floor), statistics.median(t_ours)
    ratio = o / f
    lines = [
        "# Nsight Systems export: badput's reader against fetching the rows with sqlite3",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by `benchmarks/bench_nsys.py`, "
        f"badput {badput.__version__}, Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, {machine.cpu_model()}, {os.cpu_count()} CPUs, "
        f"{machine.mem_gib():.0f} GiB.",
        "",
        f"Export: `nsightful-t4/power_iteration__baseline.sqlite` (real, T4, schema 3.20) "
        f"replicated {args.copies}x in time: {size_mib:,.0f} MiB, "
        + ", ".join(f"{t.replace('CUPTI_ACTIVITY_KIND_', '')} {n:,}" for t, n in counts.items())
        + " rows.",
        f"Median of {args.rounds} interleaved rounds.",
        "",
        "| side | what it does | rows | median s | rows/s |",
        "|---|---|---:|---:|---:|",
        f"| anchor: `sqlite3` | `SELECT *` + `fetchall()` of the same tables and StringIds | "
        f"{rows:,} | {f:.2f} | {rows / f:,.0f} |",
        f"| badput `load_trace` | the columnar Trace: strings interned, names, ids, sorted | "
        f"{events:,} events | {o:.2f} | {events / o:,.0f} |",
        "",
        f"**Ratio: badput takes {ratio:.2f}x the time of fetching every column of the rows** "
        f"(target at most {MAX_RATIO:.0f}x). badput selects only the columns it maps.",
        "",
        f"Load average at the end: {os.getloadavg()[0]:.2f}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.results.write_text(text)
    return 0 if ratio <= MAX_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
