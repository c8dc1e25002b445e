"""Build the trace shapes of issue 21's benchmark: three real traces, each replicated to ~1 GB.

Each shape is a real trace from tests/data/traces, written N times with every copy shifted in
time and in every identifier that links events, the way make_big_trace.py does it, and in the
layout the shape stands for:

* ``resnet``: the V100 ResNet50 Kineto trace (2021 schema), Kineto's pretty-printed layout (one
  block of indented lines per event). Built by ``make_big_trace.build`` as it is.
* ``dlrm``: PARAM's DLRM trace of rank 0 of 8 (NCCL collectives), written COMPACT: the whole
  document on one line without spaces (``{"ph":"X","cat":...},{...}``), as
  ``json.dumps(separators=(",", ":"))`` or msgspec would write it.
* ``tracelens``: TraceLens's Qwen1.5-0.5B trace on an H100, recorded with ``with_stack``: a
  quarter of its events are ``python_function`` frames linked by "Python id" / "Python parent
  id", and its timestamps are float µs with three decimals. Kept in its own layout: one line,
  ``json.dumps``'s default separators (", " and ": ").

``dlrm`` and ``tracelens`` are replicated at dict level: the source is decoded once (floats as
``Decimal``, so that shifting a float timestamp is exact and re-encoding gives back its text),
copy k sets each moving number to its source value plus k times its shift, and the copy is
encoded and written; one copy is held at a time. What moves (make_big_trace's rules, plus the
Python ids): ``ts`` and ``args["external ts"]`` by k * period (period = span + gap, whole µs);
``args["correlation"]`` and the ``id`` of flow events (ph s/f, the ac2g flows) by k * D_corr;
``args["External id"]`` / ``args["external id"]`` by k * D_ext; ``args["Sequence number"]`` by
k * D_seq; ``args["Python id"]`` / ``args["Python parent id"]`` by k * D_py; ``ProfilerStep#n``
by k * D_step. Each D is ``max - min + 1`` over the source; ids that are null or <= 0 mean "no
link" and are kept. Events about the whole trace (ph M, cat Trace, global instants) are written
once, after the copies, with the Trace span stretched over them and an instant at the end of
the window (Record Window End) moved to the end.

Checks, each build: copy 0 decodes to the source's events and copy 1 to make_big_trace's
independent dict-level transform (``shift_event``, plus the Python ids); the bytes written for
the header and copy 0 are read back from the file; and the file is loaded with
``badput analyze FILE --format json``, which must give about N times the source's events and
steps. Every shape also gets a ``gzip -1`` copy (FILE.gz, Python's gzip at compresslevel 1,
mtime 0). The output is deterministic: the same sources and options give the same bytes.

A manifest (manifest.json in the work dir) records each shape's files, copies, sizes and checks;
a shape is rebuilt when its files or the manifest entry do not match the options asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import make_big_trace  # noqa: E402  (beside this script, not an installed module)

BADPUT = REPO / ".venv/bin/badput"
TRACES = REPO / "tests/data/traces"
DEFAULT_WORK = HERE / "work/shapes"
DEFAULT_MIN_BYTES = 1_000_000_000
GAP_US = make_big_trace.DEFAULT_GAP_US
# Bumped when the output of a build changes, so that older files are rebuilt.
FORMAT_VERSION = 1
# "About N times the source's steps and events": the share they may be off by.
COUNT_TOLERANCE = 0.02

_DECODER = msgspec.json.Decoder(float_hook=Decimal)
_ENCODER = msgspec.json.Encoder(decimal_format="number")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_MARK = "__make_shapes_events__"


@dataclass(frozen=True)
class Shape:
    name: str
    source: Path
    layout: str  # "kineto" (make_big_trace), "compact" or "dumps"
    about: str


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape(
            "resnet",
            TRACES / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz",
            "kineto",
            "V100 ResNet50 (2021 Kineto schema), pretty-printed, built by make_big_trace.py",
        ),
        Shape(
            "dlrm",
            TRACES / "param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz",
            "compact",
            "PARAM DLRM rank 0 of 8 (NCCL collectives, V100), compact: one line, no spaces",
        ),
        Shape(
            "tracelens",
            TRACES / "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
            "dumps",
            "TraceLens Qwen1.5-0.5B on H100, with_stack (python_function frames), float µs "
            "timestamps; one line, json.dumps separators",
        ),
    )
}


def _read(path: Path) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(events: Iterable[dict[str, Any]], *keys: str) -> Iterator[int]:
    for e in events:
        args = e.get("args") or {}
        for k in keys:
            if _is_int(args.get(k)):
                yield args[k]


@dataclass(frozen=True)
class Plan:
    """What moves per copy: ``slots[i] = (container, key, source value, shift per copy)``."""

    shifts: make_big_trace.Shifts
    py: int  # shift of the Python ids
    t1: int  # end (µs) of the replicated content
    slots: list[tuple[dict[str, Any], str, Any, int]]
    steps: list[tuple[dict[str, Any], int]]  # (event, n) of ProfilerStep#n names


def plan(events: list[dict[str, Any]]) -> Plan:
    shifts, _t0, t1 = make_big_trace.compute_shifts(events, GAP_US)
    py = make_big_trace._span(_ints(events, "Python id", "Python parent id"))
    slots: list[tuple[dict[str, Any], str, Any, int]] = []
    steps: list[tuple[dict[str, Any], int]] = []

    def link(container: dict[str, Any], key: str, shift: int) -> None:
        v = container.get(key)
        if _is_int(v) and v > 0:  # null or <= 0: no link, kept
            slots.append((container, key, v, shift))

    for e in events:
        if "ts" in e:
            slots.append((e, "ts", e["ts"], shifts.period_us))
        if e.get("ph") in ("s", "f"):
            link(e, "id", shifts.corr)
        if m := _STEP_RE.match(str(e.get("name", ""))):
            steps.append((e, int(m.group(1))))
        args = e.get("args")
        if not isinstance(args, dict):
            continue
        if "external ts" in args:
            slots.append((args, "external ts", args["external ts"], shifts.period_us))
        link(args, "correlation", shifts.corr)
        link(args, "External id", shifts.ext)
        link(args, "external id", shifts.ext)
        link(args, "Sequence number", shifts.seq)
        link(args, "Python id", py)
        link(args, "Python parent id", py)
    return Plan(shifts, py, t1, slots, steps)


def set_copy(p: Plan, k: int) -> None:
    """Make the planned events those of copy k (in place)."""
    for container, key, value, shift in p.slots:
        container[key] = value + k * shift
    for event, n in p.steps:
        event["name"] = f"ProfilerStep#{n + k * p.shifts.step}"


def reference_copy(events: list[dict[str, Any]], p: Plan, k: int) -> list[dict[str, Any]]:
    """Copy k by make_big_trace's dict-level transform, plus the Python ids: the check."""
    out = [make_big_trace.shift_event(e, k, p.shifts) for e in events]
    for e in out:
        args = e.get("args") or {}
        for key in ("Python id", "Python parent id"):
            v = args.get(key)
            if _is_int(v) and v > 0:
                args[key] = v + k * p.py
    return out


class Writer:
    """Encodes a list of events (or a document) in one shape's layout."""

    def __init__(self, layout: str) -> None:
        self.layout = layout
        self.sep = b"," if layout == "compact" else b", "

    def encode(self, obj: Any) -> bytes:
        data = _ENCODER.encode(obj)
        return data if self.layout == "compact" else msgspec.json.format(data, indent=0)

    def items(self, events: list[dict[str, Any]]) -> bytes:
        """The events of a list, without its brackets."""
        return self.encode(events)[1:-1]


def _singletons(events: list[dict[str, Any]], extra: int, t1: int) -> list[dict[str, Any]]:
    """The whole-trace events, stretched over every copy (make_big_trace.render_singletons)."""
    out = []
    for e in events:
        e = copy.deepcopy(e)
        if e.get("ph") != "M":
            if e.get("cat") == "Trace" and "dur" in e:
                e["dur"] += extra
            elif "ts" in e and e["ts"] >= t1:
                e["ts"] += extra  # an instant at the end of the window, e.g. Record Window End
        out.append(e)
    return out


def _check_copy(text: bytes, want: list[dict[str, Any]], what: str) -> None:
    got = _DECODER.decode(b"[" + text + b"]")
    if len(got) != len(want):
        raise SystemExit(f"check: {what} has {len(got)} events, want {len(want)}")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            raise SystemExit(f"check: {what}, event {i} differs:\n{g}\n!=\n{w}")


def build_dict_level(shape: Shape, out: Path, min_bytes: int) -> dict[str, Any]:
    """Replicate a source decoded to dicts; the layout is the shape's. Returns build facts."""
    doc = _DECODER.decode(_read(shape.source))
    events = doc["traceEvents"]
    replicated = [e for e in events if not make_big_trace._is_singleton(e)]
    singles = [e for e in events if make_big_trace._is_singleton(e)]
    source_events = copy.deepcopy(replicated)
    p = plan(replicated)
    w = Writer(shape.layout)

    doc["traceEvents"] = _MARK
    head, foot = w.encode(doc).split(f'"{_MARK}"'.encode())
    head += b"["
    foot = b"]" + foot
    copy0 = w.items(replicated)
    _check_copy(copy0, source_events, "copy 0 vs the source")
    set_copy(p, 1)
    _check_copy(w.items(replicated), reference_copy(source_events, p, 1), "copy 1")
    set_copy(p, 0)
    # Bytes of the tail with one copy; more copies only lengthen its numbers.
    tail_bytes = len(w.items(_singletons(singles, 0, p.t1))) + len(w.sep) + len(foot)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    copies = 0
    with open(tmp, "wb", buffering=16 << 20) as fh:
        written = fh.write(head)
        while written + tail_bytes < min_bytes or copies == 0:
            set_copy(p, copies)
            text = w.items(replicated)
            written += fh.write(text if copies == 0 else w.sep + text)
            copies += 1
        if singles:
            extra = (copies - 1) * p.shifts.period_us
            written += fh.write(w.sep + w.items(_singletons(singles, extra, p.t1)))
        written += fh.write(foot)
    with open(tmp, "rb") as fh:
        if fh.read(len(head) + len(copy0)) != head + copy0:
            raise SystemExit(f"check: {tmp} does not start with the header and copy 0")
    os.replace(tmp, out)
    return {
        "copies": copies,
        "replicated_events": len(replicated),
        "singleton_events": len(singles),
        "shifts": {**p.shifts.__dict__, "python_id": p.py},
    }


def build_plain(shape: Shape, out: Path, min_bytes: int) -> dict[str, Any]:
    if shape.layout == "kineto":
        copies = make_big_trace.build(shape.source, out, min_bytes, GAP_US, quiet=True)
        src = make_big_trace.load_source(shape.source)
        shifts, _, _ = make_big_trace.compute_shifts(src.replicated_events, GAP_US)
        return {
            "copies": copies,
            "replicated_events": len(src.replicated_events),
            "singleton_events": len(src.singleton_events),
            "shifts": shifts.__dict__,
        }
    return build_dict_level(shape, out, min_bytes)


def gzip_copy(plain: Path, out: Path) -> None:
    """``gzip -1`` of the file, deterministic (no name, mtime 0)."""
    tmp = out.with_name(out.name + ".partial")
    with (
        open(plain, "rb") as src,
        open(tmp, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", compresslevel=1, fileobj=raw, mtime=0) as gz,
    ):
        shutil.copyfileobj(src, gz, 16 << 20)
    os.replace(tmp, out)


def badput_counts(path: Path) -> dict[str, Any]:
    """Events and steps that ``badput analyze FILE --format json`` finds, or why it failed."""
    with tempfile.TemporaryDirectory(prefix="shapes-") as tmp:
        report = Path(tmp) / "report.json"
        t0 = time.perf_counter()
        res = subprocess.run(
            [str(BADPUT), "analyze", str(path), "--format", "json", "--out", str(report)],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if res.returncode != 0 or not report.exists():
            return {"ok": False, "error": (res.stderr or res.stdout).strip()[-500:]}
        data = json.loads(report.read_text())
    devices = data.get("devices") or []
    return {
        "ok": True,
        "events": sum(int(t.get("events") or 0) for t in data.get("traces", [])),
        "steps": sum(len(d.get("steps") or []) for d in devices),
        "dropped_steps": sum(len(d.get("dropped_steps") or []) for d in devices),
        "devices": len(devices),
        "warnings": [w for t in data.get("traces", []) for w in t.get("warnings") or []],
        "wall_s": round(wall, 2),
    }


def _near(got: int, want: int) -> bool:
    return abs(got - want) <= max(1, COUNT_TOLERANCE * want)


def validate(shape: Shape, plain: Path, copies: int) -> dict[str, Any]:
    """Load the shape in badput; about `copies` times the source's events and steps."""
    src, big = badput_counts(shape.source), badput_counts(plain)
    problems = []
    if not src["ok"]:
        problems.append(f"badput cannot load the source: {src['error']}")
    if not big["ok"]:
        problems.append(f"badput cannot load the shape: {big['error']}")
    if src["ok"] and big["ok"]:
        for key in ("events", "steps"):
            want = copies * src[key]
            if not _near(big[key], want):
                problems.append(f"{key}: {big[key]:,}, want about {want:,} ({copies} x {src[key]})")
    return {"source": src, "shape": big, "problems": problems}


def _manifest_path(work: Path) -> Path:
    return work / "manifest.json"


def load_manifest(work: Path) -> dict[str, Any]:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        data: dict[str, Any] = json.loads(_manifest_path(work).read_text())
        return data
    return {}


def _save_manifest(work: Path, manifest: dict[str, Any]) -> None:
    path = _manifest_path(work)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def paths(work: Path, name: str) -> tuple[Path, Path]:
    plain = work / f"{name}.json"
    return plain, plain.with_name(plain.name + ".gz")


def _current(entry: dict[str, Any] | None, shape: Shape, work: Path, min_bytes: int) -> bool:
    if not entry:
        return False
    plain, gz = paths(work, shape.name)
    return (
        entry.get("format_version") == FORMAT_VERSION
        and entry.get("min_bytes") == min_bytes
        and entry.get("source_bytes") == shape.source.stat().st_size
        and plain.exists()
        and gz.exists()
        and plain.stat().st_size == entry.get("bytes")
        and gz.stat().st_size == entry.get("gz_bytes")
    )


def ensure(
    names: list[str],
    work: Path,
    min_bytes: int,
    rebuild: bool = False,
    check: bool = True,
) -> dict[str, dict[str, Any]]:
    """Build (or reuse) the named shapes; their manifest entries, by name."""
    work.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(work)
    for name in names:
        shape = SHAPES[name]
        entry = manifest.get(name)
        if not rebuild and _current(entry, shape, work, min_bytes):
            print(f"reusing shape {name} ({entry['bytes']:,} bytes)", file=sys.stderr)
            continue
        plain, gz = paths(work, name)
        need = 1.2 * min_bytes
        free = shutil.disk_usage(work).free
        if free < need:
            raise SystemExit(f"not enough disk for shape {name}: {free:,} bytes free")
        print(f"building shape {name} ({shape.layout}) into {plain}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        facts = build_plain(shape, plain, min_bytes)
        t1 = time.perf_counter()
        gzip_copy(plain, gz)
        t2 = time.perf_counter()
        entry = {
            "format_version": FORMAT_VERSION,
            "name": name,
            "layout": shape.layout,
            "about": shape.about,
            "source": str(shape.source.relative_to(REPO)),
            "source_bytes": shape.source.stat().st_size,
            "min_bytes": min_bytes,
            "plain": str(plain),
            "gz": str(gz),
            "bytes": plain.stat().st_size,
            "gz_bytes": gz.stat().st_size,
            "build_s": round(t1 - t0, 1),
            "gzip_s": round(t2 - t1, 1),
            **facts,
        }
        print(
            f"  {entry['bytes']:,} bytes, {facts['copies']} copies, in {t1 - t0:.1f} s; "
            f"gzip -1: {entry['gz_bytes']:,} bytes in {t2 - t1:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if check:
            entry["validation"] = validate(shape, plain, facts["copies"])
            v = entry["validation"]
            if v["shape"].get("ok"):
                print(
                    f"  badput: {v['shape']['events']:,} events, {v['shape']['steps']:,} steps "
                    f"(source {v['source'].get('events')}, {v['source'].get('steps')})",
                    file=sys.stderr,
                )
            for problem in v["problems"]:
                print(f"  VALIDATION: {problem}", file=sys.stderr)
        manifest[name] = entry
        _save_manifest(work, manifest)
    return {name: manifest[name] for name in names}


def parse_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        raise SystemExit(f"unknown shape(s) {unknown}: choose from {','.join(SHAPES)}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--work", type=Path, default=DEFAULT_WORK, help="output dir")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    p.add_argument(
        "--min-bytes",
        type=float,
        default=DEFAULT_MIN_BYTES,
        help="copies until each file has at least this many bytes (default 1e9)",
    )
    p.add_argument("--rebuild", action="store_true", help="rebuild even when up to date")
    p.add_argument("--no-check", action="store_true", help="skip loading each shape in badput")
    args = p.parse_args(argv)
    entries = ensure(
        parse_names(args.shapes),
        args.work.resolve(),
        int(args.min_bytes),
        rebuild=args.rebuild,
        check=not args.no_check,
    )
    failed = [n for n, e in entries.items() if (e.get("validation") or {}).get("problems")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
