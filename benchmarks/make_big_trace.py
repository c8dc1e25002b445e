"""Build a big Kineto trace by replicating the steps of a real one.

The benchmark for ``badput analyze`` needs a trace of more than 1 GB of uncompressed JSON, and
none that big is stored (tests/data/traces keeps small ones). So this script takes the real
V100 ResNet50 trace (ProfilerStep#5..#10, old 2021 schema) and writes its events N times, each
copy shifted in time by the span of the original plus a small gap, with every identifier that
links events shifted so that it stays unique across copies and consistent within one:

* ``ts`` and ``args["external ts"]``: plus ``k * period`` (period = span + gap, whole µs);
* ``args["correlation"]`` and the flow ``id`` of ``s``/``f`` events (Kineto uses the correlation
  id as the flow id): plus ``k * D_corr``;
* ``args["External id"]`` (CPU ops) and ``args["external id"]`` (runtime and GPU events that
  point at them): plus ``k * D_ext``, so runtime -> op links stay right;
* ``args["Sequence number"]`` (autograd forward/backward pairing): plus ``k * D_seq``;
* ``ProfilerStep#n``: plus ``k * D_step`` so the steps count on (5..10, 11..16, ...).

Each ``D`` is ``max - min + 1`` over the source, so copy k+1's ids start right after copy k's.
Ids <= 0 mean "no link" in Kineto and are kept as they are.

Events that describe the trace as a whole appear once, after all copies, where Kineto puts
them: metadata (``ph: M``), the ``Trace`` span (stretched to cover every copy) and global
instants (``s: g``; the one at the end of the window, "Record Window End", moves to the end).

Layout: the events are written with their source text (Kineto's pretty-printed layout, one
block of lines per event), only the numbers above are rewritten. Every number rewrite is
checked once against an independent dict-level transform of the parsed source, so a regex slip
cannot go unnoticed. Output is streamed copy by copy (one copy's text at a time, about 35 MB),
written to a temporary name and renamed at the end, and it is deterministic: the same source and
options give the same bytes.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "tests/data/traces/kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
DEFAULT_OUT = REPO / "benchmarks/work/big_trace.json"
DEFAULT_MIN_BYTES = 1_100_000_000
DEFAULT_GAP_US = 1000

EVENTS_KEY = '"traceEvents": ['

# One alternation for every number that moves. The key text includes its quotes, so
# "External id" never matches as "id" and "external ts" never as "ts".
_FIELD_RE = re.compile(
    r'("ts": |"external ts": |"correlation": |"id": |"External id": |"external id": '
    r'|"Sequence number": |ProfilerStep#)(-?\d+)'
)
_KIND_OF_PREFIX = {
    '"ts": ': "time",
    '"external ts": ': "time",
    '"correlation": ': "corr",
    '"id": ': "corr",
    '"External id": ': "ext",
    '"external id": ': "ext",
    '"Sequence number": ': "seq",
    "ProfilerStep#": "step",
}
# Ids that are <= 0 mean "none"; shifting them would invent links that the source lacks.
_KEEP_NONPOSITIVE = frozenset({"corr", "ext", "seq"})
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Shifts:
    """Per-copy offsets: copy k adds k times each of these."""

    period_us: int
    corr: int
    ext: int
    seq: int
    step: int

    def for_kind(self, kind: str) -> int:
        return {
            "time": self.period_us,
            "corr": self.corr,
            "ext": self.ext,
            "seq": self.seq,
            "step": self.step,
        }[kind]


@dataclass
class Source:
    header: str  # everything up to and including '"traceEvents": ['
    footer: str  # from the "]" that closes the event array to the end
    replicated: list[str]  # event blocks without trailing comma, in source order
    replicated_events: list[dict[str, Any]]
    singletons: list[str]
    singleton_events: list[dict[str, Any]]


def _is_singleton(e: dict[str, Any]) -> bool:
    """Events about the whole trace rather than about one step's work."""
    return (
        e.get("ph") == "M" or e.get("cat") == "Trace" or (e.get("ph") == "i" and e.get("s") == "g")
    )


def _split_blocks(body: str) -> list[str] | None:
    """Split Kineto's event array body into one text block per event.

    Kineto writes each event as lines starting with "  {" and ending with "  }" at an indent of
    exactly two, nested objects deeper. Returns None when the body is laid out differently.
    """
    blocks = re.findall(r"(?ms)^  \{$.*?^  \}(?=,?$)", body)
    if "\n" + ",\n".join(blocks) + "\n" != body:
        return None
    return blocks


def load_source(path: Path) -> Source:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        text = fh.read()
    start = text.index(EVENTS_KEY) + len(EVENTS_KEY)
    end = text.rindex("]")
    header, body, footer = text[:start], text[start:end], text[end:]
    blocks = _split_blocks(body)
    if blocks is None:
        # Not Kineto's layout (e.g. a compact file): fall back to one event per line. The
        # default separators keep the '"key": value' spelling that _FIELD_RE expects.
        events = json.loads(text)["traceEvents"]
        blocks = ["  " + json.dumps(e, ensure_ascii=False) for e in events]
    else:
        events = [json.loads(b) for b in blocks]
    src = Source(header, footer, [], [], [], [])
    for block, event in zip(blocks, events, strict=True):
        if _is_singleton(event):
            src.singletons.append(block)
            src.singleton_events.append(event)
        else:
            src.replicated.append(block)
            src.replicated_events.append(event)
    if not src.replicated:
        raise SystemExit(f"{path}: no events to replicate")
    return src


def _span(values: Iterator[int]) -> int:
    vals = [v for v in values if v > 0]
    return max(vals) - min(vals) + 1 if vals else 1


def compute_shifts(events: list[dict[str, Any]], gap_us: int) -> tuple[Shifts, int, int]:
    """Offsets for one copy, plus the start and end (µs) of the replicated content."""
    t0 = min(e["ts"] for e in events if "ts" in e)
    t1 = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e)
    period = math.ceil(t1 - t0) + gap_us

    def args_values(*keys: str) -> Iterator[int]:
        for e in events:
            args = e.get("args") or {}
            for k in keys:
                if isinstance(args.get(k), int):
                    yield args[k]

    corr = chain(args_values("correlation"), (e["id"] for e in events if e.get("ph") in ("s", "f")))
    steps = [int(m.group(1)) for e in events if (m := _STEP_RE.match(str(e.get("name", ""))))]
    shifts = Shifts(
        period_us=period,
        corr=_span(corr),
        ext=_span(args_values("External id", "external id")),
        seq=_span(args_values("Sequence number")),
        step=max(steps) - min(steps) + 1 if steps else 0,
    )
    return shifts, int(t0), math.ceil(t1)


class Template:
    """The replicated text split into fixed literals and the numbers that move per copy."""

    def __init__(self, text: str) -> None:
        parts = _FIELD_RE.split(text)
        # re.split with two groups gives [lit, prefix, num, lit, prefix, num, ..., lit].
        self.literals: list[str] = []
        self.kinds: list[str] = []
        self.values: list[int] = []
        lit = parts[0]
        for i in range(1, len(parts), 3):
            prefix, num, after = parts[i], parts[i + 1], parts[i + 2]
            self.literals.append(lit + prefix)
            self.kinds.append(_KIND_OF_PREFIX[prefix])
            self.values.append(int(num))
            lit = after
        self.last = lit

    def render(self, k: int, shifts: Shifts) -> str:
        offs = {kind: k * shifts.for_kind(kind) for kind in _KIND_OF_PREFIX.values()}
        nums = [
            str(v) if (v <= 0 and kind in _KEEP_NONPOSITIVE) else str(v + offs[kind])
            for kind, v in zip(self.kinds, self.values, strict=True)
        ]
        return "".join(chain.from_iterable(zip(self.literals, nums, strict=True))) + self.last


def shift_event(e: dict[str, Any], k: int, s: Shifts) -> dict[str, Any]:
    """Dict-level statement of the same transform, used only to check the text rewrite."""
    e = copy.deepcopy(e)

    def move(value: int, off: int) -> int:
        return value if value <= 0 else value + k * off

    if "ts" in e:
        e["ts"] += k * s.period_us
    if e.get("ph") in ("s", "f") and "id" in e:
        e["id"] = move(e["id"], s.corr)
    if m := _STEP_RE.match(str(e.get("name", ""))):
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * s.step}"
    args = e.get("args") or {}
    if "external ts" in args:
        args["external ts"] += k * s.period_us
    if "correlation" in args:
        args["correlation"] = move(args["correlation"], s.corr)
    for key in ("External id", "external id"):
        if key in args:
            args[key] = move(args[key], s.ext)
    if "Sequence number" in args:
        args["Sequence number"] = move(args["Sequence number"], s.seq)
    return e


def _same(a: Any, b: Any) -> bool:
    # Fractional µs timestamps near 1.6e15 are only exact to ~0.25 as floats; the text rewrite
    # is exact, the dict-level one is not, so floats compare with a 1 µs tolerance.
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and abs(a - b) <= 1.0
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[x], b[x]) for x in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b) and type(a) is type(b)


def check_template(template: Template, events: list[dict[str, Any]], shifts: Shifts) -> None:
    """Copy 0 must reproduce the source and copy 1 must equal the dict-level transform."""
    for k in (0, 1):
        got = json.loads("[" + template.render(k, shifts) + "]")
        want = [shift_event(e, k, shifts) for e in events]
        if len(got) != len(want):
            raise SystemExit(f"template check: copy {k} has {len(got)} events, want {len(want)}")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if not _same(g, w):
                raise SystemExit(f"template check: copy {k} event {i} differs:\n{g}\n!=\n{w}")


def render_singletons(src: Source, copies: int, shifts: Shifts, t1: int) -> str:
    """The whole-trace events, stretched so that they cover all copies."""
    extra = (copies - 1) * shifts.period_us
    out = []
    for block, event in zip(src.singletons, src.singleton_events, strict=True):
        if event.get("ph") != "M":

            def stretch(m: re.Match[str], _is_span: bool = event.get("cat") == "Trace") -> str:
                key, value = m.group(1), int(m.group(2))
                if key == '"dur": ' and _is_span:
                    value += extra
                elif key == '"ts": ' and value >= t1:
                    value += extra  # an instant at the end of the window, e.g. Record Window End
                return f"{key}{value}"

            block = re.sub(r'("ts": |"dur": )(\d+)', stretch, block)
        out.append(block)
    return ",\n".join(out)


def build(source: Path, out: Path, min_bytes: int, gap_us: int, quiet: bool = False) -> int:
    """Write the big trace; returns the number of copies."""
    t_start = time.perf_counter()
    src = load_source(source)
    shifts, _t0, t1 = compute_shifts(src.replicated_events, gap_us)
    template = Template(",\n".join(src.replicated))
    check_template(template, src.replicated_events, shifts)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    # Bytes of the tail, measured with one copy; more copies only lengthen its numbers.
    tail_bytes = len(render_singletons(src, 1, shifts, t1).encode()) + len(src.footer.encode()) + 2
    copies = 0
    with open(tmp, "wb", buffering=16 << 20) as fh:
        written = fh.write(src.header.encode())
        while written + tail_bytes < min_bytes or copies == 0:
            text = ("\n" if copies == 0 else ",\n") + template.render(copies, shifts)
            written += fh.write(text.encode())
            copies += 1
        tail = render_singletons(src, copies, shifts, t1)
        if tail:
            written += fh.write((",\n" + tail).encode())
        written += fh.write(("\n" + src.footer).encode())
    os.replace(tmp, out)
    if not quiet:
        n_events = copies * len(src.replicated) + len(src.singletons)
        print(
            f"wrote {out}: {written:,} bytes, {copies} copies of {len(src.replicated):,} events "
            f"({n_events:,} events), steps shifted by {shifts.step}, period "
            f"{shifts.period_us:,} us, in {time.perf_counter() - t_start:.1f} s",
            file=sys.stderr,
        )
    return copies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="output .json path")
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real trace (.json[.gz])")
    p.add_argument(
        "--min-bytes",
        type=float,
        default=DEFAULT_MIN_BYTES,
        help="write copies until the file has at least this many bytes (default 1.1e9)",
    )
    p.add_argument("--gap-us", type=int, default=DEFAULT_GAP_US, help="idle gap between copies")
    args = p.parse_args(argv)
    build(args.source, args.out, int(args.min_bytes), args.gap_us)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
