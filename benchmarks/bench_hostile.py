"""Hostile inputs end fast in bounded memory: gzip bombs and 10 MB kernel names (issue 22).

Builds, in a temporary directory, Kineto traces that attack the reader:
- gzip bombs of 3 GB and 6 GB of whitespace (a few MB compressed): inside the events array,
  and as blank lines between two events;
- a trace with two 10 MB kernel names (random template-like text), beside the same trace with
  short names.
Each is analysed by `badput analyze --format json` in its own process with the default limits;
wall time, exit code and peak RSS (`ru_maxrss` of that process) are recorded. The targets: a
bomb ends with exit 0 or 2 within 60 s at a peak RSS under 1.5 GB; a 10 MB name costs under
1 s over the short-named trace.

Run: `python benchmarks/bench_hostile.py` (writes benchmarks/results/hostile.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from machine import cpu_model, mem_gib

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "hostile.md"
MB = 1 << 20
GB = 10**9
KERNEL = (
    '{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":7,"ts":%d,"dur":5,'
    '"args":{"device":0,"stream":7,"correlation":%d}}'
)
_A = (KERNEL % (0, 1, 1)).encode()
_B = (KERNEL % (1, 10, 2)).encode()
LAYOUTS = {
    "whitespace inside the events array": (b'{"traceEvents": [', b" ", b"]}"),
    "blank lines between two events": (
        b'{"traceEvents": [\n' + _A + b",",
        b"\n",
        b"\n" + _B + b"]}",
    ),
}


def write_bomb(path: Path, inflated: int, layout: str) -> int:
    """Write a gzip bomb of `inflated` bytes of whitespace; returns its compressed size."""
    prefix, unit, suffix = LAYOUTS[layout]
    block = unit * MB
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(c.compress(prefix))
        for _ in range(inflated // len(block)):
            f.write(c.compress(block))
        f.write(c.compress(suffix))
        f.write(c.flush())
    return path.stat().st_size


def write_names(path: Path, long: bool) -> None:
    """Two kernels with 10 MB names (or short ones) and their launches."""
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + "_:<>, "
    events = []
    for i in range(3):
        name = f"k{i}"
        if long and i < 2:
            body = "".join(rng.choice(alphabet) for _ in range(10_000_000))
            name = f"void cutlass::Kernel<{body}>"
        events.append(json.loads(KERNEL % (i, 10 * i + 1, i + 1)) | {"name": name})
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 10 * i,
                "dur": 1,
                "args": {"correlation": i + 1},
            }
        )
    path.write_text(json.dumps({"traceEvents": events}))


_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "rc = subprocess.call([sys.executable, '-m', 'badput', *sys.argv[3:]],"
    " stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], 'w'))\n"
    "print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def measure(trace: Path, tmp: Path, command: str = "analyze") -> tuple[int, float, float, str]:
    """(exit code, wall s, peak RSS MiB, stderr) of `badput analyze` (or annotate) on `trace`."""
    env = {k: v for k, v in os.environ.items() if k != "BADPUT_MAX_HELD_BYTES"}
    argv = [command, str(trace), "--out", str(tmp / "out.json")]
    if command == "analyze":
        argv += ["--format", "json"]
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(tmp / "err"), "-", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=True,
    )
    rc, wall, kib = done.stdout.split()
    return int(rc), float(wall), int(kib) / 1024, (tmp / "err").read_text().strip()


def main() -> int:
    """Run every case; write the results file; exit 1 if a target is missed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sizes-gb", type=float, nargs="+", default=[3, 6])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    rows: list[str] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="badput-hostile-") as d:
        tmp = Path(d)
        for size in args.sizes_gb:
            for layout in LAYOUTS:
                bomb = tmp / "bomb.json.gz"
                packed = write_bomb(bomb, int(size * GB), layout)
                rc, wall, rss, err = measure(bomb, tmp)
                passed = rc in (0, 2) and wall < 60 and rss < 1.5 * GB / MB
                ok &= passed
                rows.append(
                    f"| {size:g} GB bomb, {layout} ({packed / MB:.1f} MiB gzip) | {rc} | "
                    f"{wall:.1f} | {rss:,.0f} | {'PASS' if passed else 'FAIL'} |"
                )
                print(rows[-1], err[:200], flush=True)
                if layout.startswith("blank lines"):
                    rc, wall, rss, err = measure(bomb, tmp, "annotate")
                    passed = rc == 0 and wall < 60 and rss < 1.5 * GB / MB
                    ok &= passed
                    rows.append(
                        f"| `badput annotate` of the {size:g} GB bomb, {layout} | {rc} | "
                        f"{wall:.1f} | {rss:,.0f} | {'PASS' if passed else 'FAIL'} |"
                    )
                    print(rows[-1], err[:200], flush=True)
                bomb.unlink()
        short, long = tmp / "short.json", tmp / "long.json"
        write_names(short, long=False)
        write_names(long, long=True)
        base = measure(short, tmp)
        heavy = measure(long, tmp)
        extra = (heavy[1] - base[1]) / 2
        passed = heavy[0] == 0 and extra < 1.0
        ok &= passed
        rows.append(
            f"| two 10 MB kernel names (vs the same trace with short ones: {base[1]:.2f} s) | "
            f"{heavy[0]} | {heavy[1]:.2f} ({extra:.2f} s per name) | {heavy[2]:,.0f} | "
            f"{'PASS' if passed else 'FAIL'} |"
        )
        print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Hostile inputs benchmark",
            "",
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            "",
            "`badput analyze --format json` (and `badput annotate`) in its own process, "
            "default limits (no `$BADPUT_MAX_HELD_BYTES`). Wall = spawn to exit, interpreter "
            "start-up included; "
            "peak RSS = `ru_maxrss` of that process. Targets: a bomb ends with exit 0 or 2 "
            "within 60 s at a peak RSS under 1.5 GB; a 10 MB name costs under 1 s.",
            "",
            "| case | exit | wall (s) | peak RSS (MiB) | result |",
            "|---|---:|---:|---:|---|",
            *rows,
            "",
            "Machine:",
            "",
            f"- CPU: {cpu_model()}, {os.cpu_count()} cores; RAM {mem_gib():.1f} GiB",
            f"- Python {sys.version.split()[0]}",
            "",
        ]
    )
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
