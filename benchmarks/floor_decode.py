"""Floor for ``badput analyze``: read a trace and decode it into typed structs, nothing else.

Run by bench_analyze.py in the repo's .venv. No analysis can be faster than reading the bytes
and turning every event into typed fields, so this sets the bar that badput's end-to-end time
is compared with. The fields are those an analysis of the timeline needs; msgspec skips the
others (call stacks, input dims) without building objects for them. Structs are gc=False:
they hold no cycles, and leaving millions of them out of the cyclic GC is what a tuned reader
would do too.

Prints one JSON line: event count, timings and the CPUs this process may run on.
"""

from __future__ import annotations

import json
import os
import sys
import time

import msgspec


class Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    gpu_external_id: int | None = msgspec.field(default=None, name="external id")
    device: int | None = None
    stream: int | None = None


class Event(msgspec.Struct, gc=False):
    ph: str
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Args | None = None


class Trace(msgspec.Struct, gc=False):
    events: list[Event] = msgspec.field(name="traceEvents")


def main() -> int:
    path = sys.argv[1]
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        data = fh.read()
    t1 = time.perf_counter()
    trace = msgspec.json.decode(data, type=Trace)
    t2 = time.perf_counter()
    result = {
        "events": len(trace.events),
        "read_s": round(t1 - t0, 3),
        "decode_s": round(t2 - t1, 3),
        "affinity": sorted(os.sched_getaffinity(0)),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
