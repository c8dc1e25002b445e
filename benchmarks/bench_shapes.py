"""Benchmark ``badput analyze`` on every trace shape (issue 21), beside HTA 0.5.0 and two floors.

The shapes (built by make_shapes.py when missing, each ~1 GB and a ``gzip -1`` copy): the
ResNet trace (Kineto's pretty layout), DLRM (compact: one line, no spaces; NCCL collectives)
and a TraceLens trace (with_stack: python_function frames, float timestamps, one line). Per
shape, each its own process, page cache warm:

* badput ``analyze FILE --format json --out /dev/null --jobs 1`` pinned to one core, and
  ``--jobs 2`` with two cores allowed, on the plain file and on the gzipped one;
* badput without the C scanner (``BADPUT_NO_C_SCAN=1``, the fallback), one core, plain;
* the msgspec floor (floor_decode.py: read the file, decode every event into typed structs);
* the read-and-scan floor (this script with ``--read-scan FILE``): read the file in 8 MiB
  pieces cut at event boundaries (any layout, compact included) and run badput's C scanner
  (``badput.trace._fastscan.scan``) over each, nothing else: what badput's reader costs before
  it builds anything, the bar of Build item 2 (end to end within 1.5x of it);
* HTA 0.5.0 load + temporal breakdown (hta_breakdown.py in .venv-bench, created when missing),
  once, one core, plain, under an address-space limit so that running out of memory fails HTA
  rather than waking the kernel's OOM killer on a shared machine.

badput and the floors run --repeat times (median wall and CPU, largest peak RSS); the
fallback and HTA once. badput's four runs of a shape (1 core, 2 cores; plain, gzipped) go
round-robin, first: the gzipped/plain ratios compare runs made side by side, under the same
load of the shared machine, and before the memory-heavy tools (the msgspec floor, the
fallback, HTA) run. Wall = spawn to exit (start-up and imports included); CPU and peak RSS
from ``os.wait4`` of that child. MB/s is always uncompressed bytes over wall time, for gzipped
input too.

It also checks that badput's JSON is byte for byte the same with and without the C scanner, and
with ``--jobs 1`` on one core and ``--jobs 2`` on two.

Targets (acceptance of issue 21), per shape: one core, plain, >= 300 MB/s; two cores >= 500 MB/s;
gzipped at most 1.3x the plain time; at least 50x HTA's time; peak RSS at most 0.15 of HTA's;
identical JSON. The read-and-scan ratio (Build item 2) is shown, not counted. Exit 0 when every
measured target passes, 1 when one fails (or a tool fails). ``--quick``: ~100 MB shapes in
benchmarks/work/shapes-quick, no HTA, results in benchmarks/work/shapes-quick.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

CHUNK_BYTES = 8 << 20


def read_scan(path: str) -> dict[str, Any]:
    """The read-and-scan floor: pieces of the events array through the C scanner, nothing more.

    Pieces are cut after the ``}`` of an event followed by ``,`` and ``{`` (whitespace allowed
    between), which finds event boundaries in the pretty layout and in the compact one alike.
    A piece the scanner refuses (a cut that fell inside a string, say) is not cut there: more is
    read and it is cut further on; such refusals are counted. The end of the array is the last
    ``]`` before which the text is a JSON array (msgspec checks the candidates of the last piece).
    """
    import gzip
    import re

    t_start = time.perf_counter()
    import msgspec

    from badput.trace import _fastscan

    t_imported = time.perf_counter()
    if not _fastscan.AVAILABLE or os.environ.get("BADPUT_NO_C_SCAN"):
        raise SystemExit("the C scanner is not available")
    cut = re.compile(rb"\}[ \t\r\n]*(,)[ \t\r\n]*\{")
    events_key = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
    read_s = scan_s = 0.0
    seen = pieces = refused = 0
    with open(path, "rb") as raw:
        stream: Any = gzip.GzipFile(fileobj=raw) if raw.read(2) == b"\x1f\x8b" else raw
        raw.seek(0)
        head = bytearray()
        while (m := events_key.search(head)) is None:
            t0 = time.perf_counter()
            chunk = stream.read(CHUNK_BYTES)
            read_s += time.perf_counter() - t0
            if not chunk:
                raise SystemExit(f"{path}: no traceEvents array")
            head += chunk
        rest = head[m.end() :]
        buf = bytearray(max(2 * CHUNK_BYTES, len(rest) + 1 + CHUNK_BYTES))
        buf[0:1] = b"["
        buf[1 : 1 + len(rest)] = rest
        filled = 1 + len(rest)
        lo = 1
        del head, rest

        def scan(view: memoryview) -> bool:
            nonlocal seen, pieces, scan_s
            t0 = time.perf_counter()
            scanned = _fastscan.scan(view)
            scan_s += time.perf_counter() - t0
            if scanned is None:
                return False
            seen += scanned.seen
            pieces += 1
            return True

        while True:
            if len(buf) - filled < CHUNK_BYTES:
                buf.extend(bytes(len(buf)))
            t0 = time.perf_counter()
            with memoryview(buf) as view:
                n = stream.readinto(view[filled : filled + CHUNK_BYTES])
            read_s += time.perf_counter() - t0
            if not n:
                break
            filled += n
            if filled < CHUNK_BYTES:
                continue
            last = None
            width = 1 << 16
            while last is None:  # the last cut, searched from the end in growing windows
                start = max(lo, filled - width)
                for last in cut.finditer(buf, start, filled):  # noqa: B007 (the last is wanted)
                    pass
                if start == lo:
                    break
                width *= 16
            if last is None:
                lo = max(1, filled - 64)
                continue
            comma = last.start(1)
            buf[comma] = 0x5D  # "]"
            with memoryview(buf) as view:
                ok = scan(view[: comma + 1])
            if not ok:
                buf[comma] = 0x2C
                refused += 1
                lo = comma + 1
                continue
            brace = last.end() - 1
            left = filled - brace
            buf[1 : 1 + left] = buf[brace:filled]
            filled = 1 + left
            lo = 1
        # The last piece: the array ends at the last "]" that leaves a JSON array before it.
        end = filled
        while True:
            end = buf.rfind(b"]", 0, end)
            if end < 0:
                raise SystemExit(f"{path}: the events array does not end")
            try:
                with memoryview(buf) as view:
                    msgspec.json.decode(view[: end + 1], type=list[msgspec.Raw])
            except msgspec.DecodeError:
                continue
            break
        with memoryview(buf) as view:
            if not scan(view[: end + 1]):
                refused += 1
    return {
        "events": seen,
        "pieces": pieces,
        "refused": refused,
        "import_s": round(t_imported - t_start, 3),
        "read_s": round(read_s, 3),
        "scan_s": round(scan_s, 3),
        "affinity": sorted(os.sched_getaffinity(0)),
    }


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--read-scan":
    # The floor runs in its own process; only what it needs is imported before it.
    print(json.dumps(read_scan(sys.argv[2])))
    raise SystemExit(0)

import bench_analyze as ba  # noqa: E402  (beside this script)
import make_shapes  # noqa: E402

DEFAULT_RESULTS = HERE / "results/shapes.md"
QUICK_RESULTS = HERE / "work/shapes-quick.md"
QUICK_WORK = HERE / "work/shapes-quick"
QUICK_MIN_BYTES = 100_000_000

TARGET_MBPS_1 = 300.0
TARGET_MBPS_2 = 500.0
TARGET_GZ_RATIO = 1.3
TARGET_HTA_SPEEDUP = 50.0
TARGET_RSS_FRACTION = 0.15
TARGET_SCAN_RATIO = 1.5  # Build item 2: shown, not counted in the exit status

# HTA may use at most this share of the memory available when it starts (and never more than
# HTA_MAX_BYTES): past it, it fails with MemoryError instead of calling the OOM killer.
HTA_MEMORY_SHARE = 0.8
HTA_MAX_BYTES = 18 << 30
HTA_TIMEOUT_S = 3600
BADPUT_TIMEOUT_S = 1800

LABELS = {
    "badput-1": "badput, 1 core, `--jobs 1`",
    "badput-2": "badput, 2 cores, `--jobs 2`",
    "badput-1-gz": "badput, 1 core, `--jobs 1`, gzipped",
    "badput-2-gz": "badput, 2 cores, `--jobs 2`, gzipped",
    "fallback": "badput without the C scanner (`BADPUT_NO_C_SCAN=1`), 1 core",
    "floor": "floor: msgspec typed decode (floor_decode.py)",
    "read-scan": "floor: read + C scanner only (`--read-scan`)",
    "hta": f"HTA {ba.HTA_VERSION}: load + temporal breakdown",
}


def threads_env(n: int) -> dict[str, str]:
    return {key: str(n) for key in ba.ONE_THREAD_ENV}


def measure(
    tool: str,
    command: list[str],
    cpus: set[int],
    env: dict[str, str] | None = None,
    address_space: int | None = None,
    timeout_s: float | None = None,
) -> ba.Run:
    """bench_analyze.measure for a set of CPUs, with extra env, a memory limit and a timeout."""
    run = ba.Run(tool, command)
    if not Path(command[0]).exists():
        run.returncode = 127
        run.stderr_tail = f"{command[0]} does not exist"
        return run
    full_env = {**os.environ, **threads_env(len(cpus)), **(env or {})}

    def child_setup() -> None:  # between fork and exec
        os.sched_setaffinity(0, cpus)
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.TemporaryDirectory(prefix="bench-shapes-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                command,
                stdout=fo,
                stderr=fe,
                stdin=subprocess.DEVNULL,
                env=full_env,
                preexec_fn=child_setup,
            )
            timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
            if timer is not None:
                timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                if timer is not None:
                    timer.cancel()
            run.wall_s = time.perf_counter() - t0
        run.returncode = os.waitstatus_to_exitcode(status)
        proc.returncode = run.returncode
        run.cpu_s = usage.ru_utime + usage.ru_stime
        run.max_rss_mib = usage.ru_maxrss / 1024
        run.stdout_tail, run.stderr_tail = ba._tail(out), ba._tail(err)
        if timeout_s and run.wall_s >= timeout_s:
            run.stderr_tail += f"\n(killed after the {timeout_s:.0f} s timeout)"
        run.ok = run.returncode == 0
        last = run.stdout_tail.splitlines()[-1] if run.stdout_tail else ""
        if last.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                run.info = json.loads(last)
    return run


def measure_repeated(
    tool: str, command: list[str], cpus: set[int], repeat: int, **kw: Any
) -> ba.Run:
    """Median wall (and that run's CPU), largest peak RSS; stops at a failure."""
    runs = []
    for _ in range(max(1, repeat)):
        run = measure(tool, command, cpus, **kw)
        runs.append(run)
        if not run.ok:
            return run
    if len(runs) == 1:
        return runs[0]
    result = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]
    result.walls = [r.wall_s for r in runs]
    result.max_rss_mib = max(r.max_rss_mib for r in runs)
    return result


def measure_interleaved(
    specs: list[tuple[str, list[str], set[int]]], repeat: int, **kw: Any
) -> dict[str, ba.Run]:
    """`measure_repeated` of several tools, round-robin: run 1 of each, then run 2 of each...

    Tools whose times are compared (plain and gzipped) then meet the same load of a shared
    machine, rather than one tool's runs a quiet minute and the other's a busy one. A tool
    that fails is not run again.
    """
    done: dict[str, list[ba.Run]] = {tool: [] for tool, _, _ in specs}
    for _ in range(max(1, repeat)):
        for tool, command, cpus in specs:
            runs = done[tool]
            if runs and not runs[-1].ok:
                continue
            runs.append(measure(tool, command, cpus, **kw))
    out: dict[str, ba.Run] = {}
    for tool, runs in done.items():
        if not runs[-1].ok or len(runs) == 1:
            out[tool] = runs[-1]
            continue
        result = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]
        result.walls = [r.wall_s for r in runs]
        result.max_rss_mib = max(r.max_rss_mib for r in runs)
        out[tool] = result
    return out


def _log(run: ba.Run) -> None:
    print(
        f"  {run.status}: wall {run.wall_s:.2f} s, CPU {run.cpu_s:.2f} s, "
        f"peak RSS {run.max_rss_mib:,.0f} MiB",
        file=sys.stderr,
        flush=True,
    )


def _available_bytes() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def badput_state() -> dict[str, str]:
    """What badput code is measured: the commit, and a digest of src/badput's files.

    Others edit and rebuild the project on this machine; a digest that differs between the
    start and the end of a shape's runs says the code changed under the measurement.
    """
    import hashlib

    def git(*a: str) -> str:
        res = subprocess.run(
            ["git", "--no-optional-locks", *a], cwd=REPO, capture_output=True, text=True
        )
        return res.stdout.strip() if res.returncode == 0 else "?"

    digest = hashlib.sha256()
    for path in sorted((REPO / "src/badput").rglob("*")):
        if path.suffix in (".py", ".c", ".so") and path.is_file():
            st = path.stat()
            digest.update(f"{path.relative_to(REPO)} {st.st_size} {st.st_mtime_ns}\n".encode())
    dirty = git("status", "--porcelain", "--", "src").splitlines()
    return {
        "commit": git("rev-parse", "--short=12", "HEAD"),
        "src_dirty": str(len(dirty)),
        "digest": digest.hexdigest()[:12],
    }


def isal_version() -> str:
    return ba._pkg_versions(ba.VENV_PY, ["isal"]).get("isal", "?")


def badput_has_jobs() -> bool:
    res = subprocess.run(
        [str(ba.BADPUT), "analyze", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    return "--jobs" in res.stdout


def hta_source_check(source: Path, cpus: set[int], limit: int) -> str:
    """Whether HTA fails on the unreplicated source too (it is small: seconds)."""
    import gzip

    with tempfile.TemporaryDirectory(prefix="bench-shapes-src-") as tmp:
        plain = Path(tmp) / "source.json"
        with open(source, "rb") as fh:
            data = fh.read()
        plain.write_bytes(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        cmd = [str(ba.BENCH_PY), str(HERE / "hta_breakdown.py"), str(plain)]
        run = measure("hta-source", cmd, cpus, address_space=limit, timeout_s=600)
    if run.ok:
        return "succeeds"
    last = run.stderr_tail.strip().splitlines()[-1] if run.stderr_tail.strip() else "no output"
    where = " in get_temporal_breakdown" if hta_failed_after_load(run) else ""
    return f"fails too{where} ({last})"


def bench_shape(
    entry: dict[str, Any],
    one: set[int],
    two: set[int],
    repeat: int,
    hta_skip: str,
    jobs: bool,
    keep: Path,
) -> dict[str, Any]:
    """Every row of one shape, and its identity checks."""
    plain, gz = entry["plain"], entry["gz"]
    name = entry["name"]

    def badput(trace: str, n: int, out: str = os.devnull) -> list[str]:
        cmd = [str(ba.BADPUT), "analyze", trace, "--format", "json", "--out", out]
        return cmd + (["--jobs", str(n)] if jobs else [])

    runs: dict[str, ba.Run] = {}

    def timed(key: str, command: list[str], cpus: set[int], times: int, **kw: Any) -> ba.Run:
        print(f"[{name}] {key}: {shlex.join(command)}", file=sys.stderr, flush=True)
        run = measure_repeated(key, command, cpus, times, **kw)
        _log(run)
        runs[key] = run
        return run

    state_start = badput_state()
    warm = {"plain": ba.warm_page_cache(Path(plain)), "gz": ba.warm_page_cache(Path(gz))}
    # badput's four runs round-robin, before the memory-heavy tools: each gzipped/plain ratio
    # compares runs made side by side on this shared machine.
    together = [
        ("badput-1", badput(plain, 1), one),
        ("badput-1-gz", badput(gz, 1), one),
        ("badput-2", badput(plain, 2), two),
        ("badput-2-gz", badput(gz, 2), two),
    ]
    for key, command, _ in together:
        print(f"[{name}] {key}: {shlex.join(command)}", file=sys.stderr, flush=True)
    for key, run in measure_interleaved(together, repeat, timeout_s=BADPUT_TIMEOUT_S).items():
        print(f"[{name}] {key}", file=sys.stderr, flush=True)
        _log(run)
        runs[key] = run
    timed("floor", [str(ba.VENV_PY), str(HERE / "floor_decode.py"), plain], one, repeat)
    timed("read-scan", [str(ba.VENV_PY), str(Path(__file__)), "--read-scan", plain], one, repeat)

    # Identity: the same report from the C scanner and the fallback, from 1 job and 2.
    outs = {k: str(keep / f"{name}.{k}.json") for k in ("c-jobs1", "fallback", "c-jobs2")}
    timed(
        "fallback",
        badput(plain, 1, outs["fallback"]),
        one,
        1,
        env={"BADPUT_NO_C_SCAN": "1"},
        timeout_s=BADPUT_TIMEOUT_S,
    )
    extra = {
        "c-jobs1": measure("c-jobs1", badput(plain, 1, outs["c-jobs1"]), one),
        "c-jobs2": measure("c-jobs2", badput(plain, 2, outs["c-jobs2"]), two),
    }

    def same(a: str, b: str) -> bool | None:
        pa, pb = Path(outs[a]), Path(outs[b])
        if not (pa.exists() and pb.exists()):
            return None
        return pa.read_bytes() == pb.read_bytes()

    ok_runs = runs["fallback"].ok and all(r.ok for r in extra.values())
    identity = {
        "C scanner vs fallback (1 core)": same("c-jobs1", "fallback") if ok_runs else None,
        "--jobs 1 on 1 core vs --jobs 2 on 2 cores": same("c-jobs1", "c-jobs2")
        if ok_runs
        else None,
    }

    state_end = badput_state()  # HTA does not run badput's code
    hta_cmd = [str(ba.BENCH_PY), str(HERE / "hta_breakdown.py"), plain]
    hta_limit = 0
    hta_on_source = ""
    if hta_skip:
        runs["hta"] = ba.Run("hta", hta_cmd, skipped=hta_skip)
    else:
        ba.warm_page_cache(Path(plain))
        hta_limit = min(int(HTA_MEMORY_SHARE * _available_bytes()), HTA_MAX_BYTES)
        hta = timed("hta", hta_cmd, one, 1, address_space=hta_limit, timeout_s=HTA_TIMEOUT_S)
        if not hta.ok:
            hta_on_source = hta_source_check(Path(REPO / entry["source"]), one, hta_limit)
    return {
        "entry": entry,
        "runs": runs,
        "identity": identity,
        "identity_runs": extra,
        "warm": warm,
        "hta_limit": hta_limit,
        "hta_on_source": hta_on_source,
        "state": (state_start, state_end),
    }


def _ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def hta_failed_after_load(hta: ba.Run) -> bool:
    """HTA exited with an error raised inside its temporal breakdown (the trace was loaded)."""
    return not hta.ok and not hta.skipped and "get_temporal_breakdown" in hta.stderr_tail


def targets(result: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(target, value, result, counted pass) rows of one shape; pass None when not counted."""
    runs: dict[str, ba.Run] = result["runs"]
    mb = result["entry"]["bytes"] / 1e6
    rows: list[tuple[str, str, str, bool | None]] = []

    def missing(*keys: str) -> str:
        bad = [k for k in keys if not runs[k].ok]
        return ", ".join(f"{k} {runs[k].status}" for k in bad)

    def at_least(target: str, key: str, goal: float) -> None:
        if why := missing(key):
            rows.append((target, f"not measured: {why}", "FAIL", False))
            return
        mbps = mb / runs[key].wall_s
        value = f"{mbps:,.1f} (on CPU time: {mb / runs[key].cpu_s:,.1f})"
        rows.append((target, value, _verdict(mbps >= goal), mbps >= goal))

    at_least(f"1 core, plain: MB/s >= {TARGET_MBPS_1:.0f}", "badput-1", TARGET_MBPS_1)
    at_least(f"2 cores, plain: MB/s >= {TARGET_MBPS_2:.0f}", "badput-2", TARGET_MBPS_2)
    for cores in ("1", "2"):
        label = "1 core" if cores == "1" else "2 cores"
        target = f"{label}: gzipped time / plain time <= {TARGET_GZ_RATIO}"
        if why := missing(f"badput-{cores}", f"badput-{cores}-gz"):
            rows.append((target, f"not measured: {why}", "FAIL", False))
            continue
        gz, plain = runs[f"badput-{cores}-gz"], runs[f"badput-{cores}"]
        r = gz.wall_s / plain.wall_s
        value = f"{r:.2f} (CPU time: {gz.cpu_s / plain.cpu_s:.2f})"
        rows.append((target, value, _verdict(r <= TARGET_GZ_RATIO), r <= TARGET_GZ_RATIO))
    hta = runs["hta"]
    t_speed = f"HTA time / badput time (1 core, plain) >= {TARGET_HTA_SPEEDUP:.0f}"
    t_rss = f"badput peak RSS / HTA peak RSS <= {TARGET_RSS_FRACTION}"
    if hta.skipped:
        rows.append((t_speed, f"not measured: {hta.skipped}", "-", None))
        rows.append((t_rss, f"not measured: {hta.skipped}", "-", None))
    elif hta_failed_after_load(hta) and runs["badput-1"].ok:
        # HTA loaded the trace, then its breakdown failed: its time and peak RSS up to the
        # failure are lower bounds of what it needs, so the ratios are bounds. A bound that
        # meets the target proves it; one that does not leaves it unproven (FAIL).
        speed = hta.wall_s / runs["badput-1"].wall_s
        frac = runs["badput-1"].max_rss_mib / hta.max_rss_mib
        why = "HTA's breakdown failed after loading: bound from HTA's run up to the failure"
        ok_speed, ok_rss = speed >= TARGET_HTA_SPEEDUP, frac <= TARGET_RSS_FRACTION
        rows.append((t_speed, f">= {_ratio(speed)} ({why})", _verdict(ok_speed), ok_speed))
        rows.append((t_rss, f"<= {frac:.3f} ({why})", _verdict(ok_rss), ok_rss))
    elif why := missing("badput-1", "hta"):
        rows.append((t_speed, f"not measured: {why}", "FAIL", False))
        rows.append((t_rss, f"not measured: {why}", "FAIL", False))
    else:
        speed = hta.wall_s / runs["badput-1"].wall_s
        frac = runs["badput-1"].max_rss_mib / hta.max_rss_mib
        ok_speed, ok_rss = speed >= TARGET_HTA_SPEEDUP, frac <= TARGET_RSS_FRACTION
        cpu_speed = hta.cpu_s / runs["badput-1"].cpu_s
        value = f"{_ratio(speed)} (CPU time: {_ratio(cpu_speed)})"
        rows.append((t_speed, value, _verdict(ok_speed), ok_speed))
        rows.append((t_rss, f"{frac:.3f}", _verdict(ok_rss), ok_rss))
    for what, same in result["identity"].items():
        target = f"identical JSON: {what}"
        if same is None:
            rows.append((target, "not measured (a run failed)", "FAIL", False))
        else:
            rows.append((target, "yes" if same else "no", _verdict(same), same))
    t_scan = f"badput 1 core / read+scan floor <= {TARGET_SCAN_RATIO} (Build item 2; not counted)"
    if why := missing("badput-1", "read-scan"):
        rows.append((t_scan, f"not measured: {why}", "-", None))
    else:
        r = runs["badput-1"].wall_s / runs["read-scan"].wall_s
        rows.append((t_scan, _ratio(r), _verdict(r <= TARGET_SCAN_RATIO), None))
    if not (why := missing("badput-1", "floor")):
        r = runs["badput-1"].wall_s / runs["floor"].wall_s
        rows.append(("badput 1 core / msgspec floor (no target)", _ratio(r), "-", None))
    return rows


def shape_section(result: dict[str, Any], jobs: bool) -> list[str]:
    e, runs = result["entry"], result["runs"]
    mb = e["bytes"] / 1e6
    v = e.get("validation") or {}
    vs = v.get("shape") or {}
    src = v.get("source") or {}
    lines = [
        f"## {e['name']}",
        "",
        f"{e['about']}. Source `{e['source']}`; {e['copies']:,} copies of "
        f"{e['replicated_events']:,} events (+{e['singleton_events']} whole-trace events once).",
        f"Plain `{Path(e['plain']).name}`: {e['bytes']:,} bytes ({mb:,.0f} MB); gzipped "
        f"(`gzip -1`) `{Path(e['gz']).name}`: {e['gz_bytes']:,} bytes "
        f"({e['bytes'] / e['gz_bytes']:.1f}:1).",
    ]
    if vs.get("ok"):
        lines.append(
            f"badput loads it: {vs['events']:,} events, {vs['steps']:,} steps "
            f"(source: {src.get('events'):,} events, {src.get('steps')} step(s); "
            f"{e['copies']} x = {e['copies'] * src.get('steps', 0):,} steps)."
        )
    for problem in v.get("problems") or []:
        lines.append(f"**Validation problem:** {problem}.")
    start, end = result["state"]
    if start["digest"] != end["digest"] or start["commit"] != end["commit"]:
        lines.append(
            f"**badput's code changed during these runs** (commit {start['commit']} -> "
            f"{end['commit']}, files {start['digest']} -> {end['digest']}): the rows mix "
            "versions."
        )
    lines += [
        "",
        "| tool | wall (s) | CPU (s) | MB/s | peak RSS (MiB) | wall vs badput 1 core |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    base = runs["badput-1"]
    for key, run in runs.items():
        if not run.ok:
            lines.append(f"| {LABELS[key]} | {run.status} | | | | |")
            continue
        vs_base = _ratio(run.wall_s / base.wall_s) if base.ok else "n/a"
        lines.append(
            f"| {LABELS[key]} | {run.wall_s:.2f} | {run.cpu_s:.2f} | {mb / run.wall_s:,.1f} "
            f"| {run.max_rss_mib:,.0f} | {vs_base} |"
        )
    details = []
    for run in runs.values():
        if run.ok and len(run.walls) > 1:
            details.append(
                f"- {run.tool}: wall of each run (s): " + ", ".join(f"{w:.2f}" for w in run.walls)
            )
    two = runs["badput-2"]
    if two.ok:
        par = two.cpu_s / two.wall_s
        note = (
            "about one core busy on average: with two cores and `--jobs 2`, this single "
            "trace's run was not parallel to any extent that shows"
            if par < 1.3
            else "more than one core busy on average"
        )
        if not jobs:
            note = "this badput has no --jobs option; two cores were only allowed"
        details.append(f"- 2 cores, plain: CPU / wall = {par:.2f}: {note}")
    for key in ("read-scan", "floor"):
        run = runs[key]
        if run.ok and run.info:
            info = ", ".join(f"{k} {val}" for k, val in run.info.items())
            details.append(f"- {key} (inside the process, median run): {info}")
    hta = runs["hta"]
    if hta.ok:
        details.append(
            f"- HTA: import {hta.info.get('import_s')} s, load {hta.info.get('load_s')} s, "
            f"temporal breakdown {hta.info.get('breakdown_s')} s, CPUs {hta.info.get('affinity')}"
            f", address space limited to {result['hta_limit'] / 2**30:.1f} GiB"
        )
        details.append(f"- HTA breakdown: `{json.dumps(hta.info.get('breakdown'))}`")
    elif hta_failed_after_load(hta):
        error = hta.stderr_tail.strip().splitlines()[-1] if hta.stderr_tail.strip() else ""
        on_source = result.get("hta_on_source")
        details.append(
            f"- HTA loaded the trace and then failed in `get_temporal_breakdown` ({error}) "
            f"after {hta.wall_s:.1f} s at {hta.max_rss_mib:,.0f} MiB peak RSS"
            + (f"; on the unreplicated source trace HTA {on_source}" if on_source else "")
        )
    if not hta.skipped and not hta.ok:
        details.append(
            f"- HTA's address space was limited to {result['hta_limit'] / 2**30:.1f} GiB"
        )
    shared = [
        f"{r.tool} (wall {r.wall_s:.2f} s, CPU {r.cpu_s:.2f} s)"
        for k, r in runs.items()
        if r.ok and k not in ("badput-2", "badput-2-gz") and r.wall_s > 1.25 * r.cpu_s
    ]
    if shared:
        details.append(
            "- one-core runs whose wall exceeds their CPU time by more than 25 % (the pinned "
            "core was busy with other work on this shared machine): " + "; ".join(shared)
        )
    ident = result["identity_runs"]
    details.append(
        "- identity runs (one each, JSON to a file): "
        + ", ".join(f"{k} {r.status}, {r.wall_s:.2f} s" for k, r in ident.items())
    )
    for run in [*runs.values(), *ident.values()]:
        if not run.ok and not run.skipped:
            details += [
                "",
                f"{run.tool} failed: `{shlex.join(run.command)}` exited {run.returncode}:",
                "",
                "```",
                run.stderr_tail or run.stdout_tail or "(no output)",
                "```",
                "",
            ]
    return [*lines, "", *details, ""]


def report(
    results: list[dict[str, Any]], args: argparse.Namespace, cpus: tuple[set[int], set[int]]
) -> tuple[str, bool]:
    jobs = args.jobs_option
    lines = [
        "# `badput analyze` on every trace shape (issue 21)",
        "",
        f"Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        "",
        f"Command: `{shlex.join(['python', 'benchmarks/bench_shapes.py', *sys.argv[1:]])}`",
        "",
        f'Each run is its own process; "1 core" pins it to CPU {sorted(cpus[0])}, "2 cores" '
        f"allows CPUs {sorted(cpus[1])} (`sched_setaffinity`), thread pools at the number of "
        f"cores, page cache warm. badput (1 and 2 cores, plain and gzipped) and the two floors "
        f"run {args.repeat} time(s): median wall, the CPU time of that run, largest peak RSS; "
        "the fallback and HTA run once. badput's four runs of a shape go round-robin, first "
        "(run 1 of each, then run 2 of each, ...): each gzipped/plain ratio compares runs made "
        "side by side, before the memory-heavy tools run. "
        "Wall = spawn to exit, start-up and imports included. "
        "Peak RSS = `ru_maxrss` from `os.wait4`. MB/s = uncompressed bytes (10^6) / wall, for "
        "the gzipped file too. badput writes `--format json --out /dev/null`"
        + (" with `--jobs N`." if jobs else " (this badput has no `--jobs`).")
        + " The shapes are built by `benchmarks/make_shapes.py`. Targets are judged on wall "
        "time; the values on CPU time beside them show what contention for the cores by "
        "other work on this shared machine took away.",
        "",
    ]
    all_rows = []
    all_pass = True
    for result in results:
        lines += shape_section(result, jobs)
        for target, value, verdict, counted in targets(result):
            all_rows.append(f"| {result['entry']['name']} | {target} | {value} | {verdict} |")
            if counted is False:
                all_pass = False
    lines += [
        "## Targets",
        "",
        "| shape | target | value | result |",
        "|---|---|---:|---|",
        *all_rows,
        "",
        "Overall: "
        + ("PASS: every counted target passes." if all_pass else "FAIL: a counted target fails."),
        "",
        "## Machine",
        "",
        *ba.machine_description(),
        args.compiled,
        f"- isal (gzip inflater, optional): {isal_version()}",
        f"- badput code measured: commit {results[0]['state'][0]['commit'] if results else '?'}"
        + (
            f", {results[0]['state'][0]['src_dirty']} file(s) under src/ changed from it"
            if results and results[0]["state"][0]["src_dirty"] != "0"
            else ""
        ),
        "",
    ]
    return "\n".join(lines), all_pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--quick", action="store_true", help="~100 MB shapes, no HTA (a try-out)")
    p.add_argument(
        "--shapes",
        default=",".join(make_shapes.SHAPES),
        help="comma-separated: " + ",".join(make_shapes.SHAPES),
    )
    p.add_argument("--repeat", type=int, default=3, help="runs of badput and the floors")
    p.add_argument("--skip-hta", action="store_true", help="leave HTA out")
    p.add_argument("--rebuild", action="store_true", help="rebuild the shapes")
    p.add_argument("--work", type=Path, default=None, help="shapes dir")
    p.add_argument("--min-bytes", type=float, default=None, help="size of each shape")
    p.add_argument("--results", type=Path, default=None, help="markdown output")
    p.add_argument("--cpu", type=int, default=None, help="the one core (default: first allowed)")
    args = p.parse_args(argv)
    names = make_shapes.parse_names(args.shapes)
    work = (args.work or (QUICK_WORK if args.quick else make_shapes.DEFAULT_WORK)).resolve()
    default_size = QUICK_MIN_BYTES if args.quick else make_shapes.DEFAULT_MIN_BYTES
    min_bytes = int(args.min_bytes or default_size)
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        raise SystemExit(f"needs two CPUs, this process may use {allowed}")
    first = args.cpu if args.cpu is not None else allowed[0]
    if first not in allowed:
        raise SystemExit(f"--cpu {first}: this process may use {allowed}")
    second = next(c for c in allowed if c != first)
    cpus = ({first}, {first, second})

    entries = make_shapes.ensure(names, work, min_bytes, rebuild=args.rebuild)
    if args.quick or args.skip_hta:
        hta_skip = "--quick" if args.quick else "--skip-hta"
    else:
        hta_skip = ba.ensure_bench_venv()
    args.jobs_option = badput_has_jobs()
    args.compiled = ba.compile_badput()
    keep = work / "reports"
    keep.mkdir(exist_ok=True)
    results = [
        bench_shape(entries[n], *cpus, args.repeat, hta_skip, args.jobs_option, keep) for n in names
    ]
    text, all_pass = report(results, args, cpus)
    print(text)
    out = args.results or (QUICK_RESULTS if args.quick else DEFAULT_RESULTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0 if all_pass else 1


if __name__ == "__main__":
    raise SystemExit(main())
