"""`badput annotate`: the copy keeps every event and its added tracks add up to the analysis."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from badput.analysis import analyze_trace
from badput.cli.app import main
from badput.diagnose import diagnose_device
from badput.report.perfetto import (
    CRITICAL_PATH_TID,
    CRITICAL_PATH_TRACK,
    TRACKS,
    annotation_events,
    badput_pid,
    write_annotated,
)
from badput.trace import load_trace

TRACES = [
    "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz",
    "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "param-dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz",
]


def _load(path: Path) -> Any:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read(), parse_float=Decimal)  # exact, like the trace reader


def _canon(event: Any) -> str:
    return json.dumps(event, sort_keys=True, default=str)


def _ns(us_value: Decimal | int) -> int:
    ns = Decimal(us_value) * 1000
    assert ns == ns.to_integral_value(), us_value  # written to the nanosecond, no more
    return int(ns)


@pytest.mark.parametrize("name", TRACES)
def test_annotate_real_trace(shared_traces: Path, tmp_path: Path, name: str) -> None:
    src = shared_traces / name
    out = tmp_path / "annotated.json.gz"
    assert main(["annotate", str(src), "--out", str(out)]) == 0

    trace = load_trace(str(src))
    analyses = [d for d in analyze_trace(trace) if d.device >= 0]
    assert analyses
    original = _load(src)
    annotated = _load(out)
    # Every top-level field is kept, with the same value.
    assert annotated.keys() == original.keys()
    for key in original:
        if key != "traceEvents":
            assert annotated[key] == original[key], key

    pids = {badput_pid(d.device, trace.pid): d for d in analyses}
    assert not {e.get("pid") for e in original["traceEvents"]} & pids.keys()
    # The critical path's flow arrows sit on the original threads (their own category).
    arrows = [e for e in annotated["traceEvents"] if e.get("cat") == "badput-critical-path"]
    rest = [e for e in annotated["traceEvents"] if e.get("cat") != "badput-critical-path"]
    kept = [e for e in rest if e.get("pid") not in pids]
    added = [e for e in rest if e.get("pid") in pids]
    assert arrows and len(arrows) % 2 == 0
    assert Counter(e["id"] for e in arrows) == Counter({e["id"]: 2 for e in arrows})
    assert Counter(map(_canon, kept)) == Counter(map(_canon, original["traceEvents"]))
    assert len(kept) == len(original["traceEvents"])

    # Same clock as the original events (relative to baseTimeNanoseconds where there is one).
    starts = [_ns(e["ts"]) for e in original["traceEvents"] if e.get("ph") == "X"]
    first, last = min(starts), max(starts)
    assert all(first <= _ns(e["ts"]) <= last for e in added if "ts" in e)
    for pid, d in pids.items():
        mine = [e for e in added if e["pid"] == pid]
        names = {e["args"]["name"] for e in mine if e["name"] == "thread_name"}
        assert names == {"findings", CRITICAL_PATH_TRACK} | {track for _, track, _ in TRACKS}
        sums = {track: 0 for _, track, _ in TRACKS}
        w0, w1 = d.window_start_ns, d.window_start_ns + d.window_ns
        # The critical-path track: its slices add up to the path's length exactly.
        path = [e for e in mine if e.get("tid") == CRITICAL_PATH_TID and e["ph"] == "X"]
        assert d.critical_path is not None
        assert sum(_ns(e["dur"]) for e in path) == d.critical_path.length_ns
        mine = [e for e in mine if e.get("tid") != CRITICAL_PATH_TID]
        for e in mine:
            if e["ph"] == "X":
                start, dur = _ns(e["ts"]), _ns(e["dur"])
                assert w0 <= start and start + dur <= w1 and dur > 0
                sums[e["name"]] += dur
        assert sums == {
            "idle: runtime": d.idle_causes.runtime_ns,
            "idle: dataloader": d.idle_causes.dataloader_ns,
            "idle: cpu": d.idle_causes.cpu_ns,
            "idle: other": d.idle_causes.other_ns,
            "exposed communication": d.breakdown.communication_ns,
            "exposed memcpy/memset": d.breakdown.memory_ns,
        }
        assert sum(sums.values()) == d.breakdown.idle_ns + d.breakdown.communication_ns + (
            d.breakdown.memory_ns
        )
        findings = diagnose_device(trace, d)
        instants = [e for e in mine if e["ph"] == "i"]
        assert [e["args"]["id"] for e in instants] == [f.id for f in findings]
        for e, f in zip(instants, findings, strict=True):
            assert e["s"] == "p"
            assert _ns(e["ts"]) == w0
            assert e["args"]["title"] == f.title
            assert _ns(e["args"]["savings_us"]) == round(f.savings_ns)


def test_resnet50_values(shared_traces: Path) -> None:
    """Pinned numbers of the ResNet50 trace, so a change in what is written shows here."""
    trace = load_trace(str(shared_traces / TRACES[0]))
    (d,) = analyze_trace(trace)
    events = annotation_events([d], [diagnose_device(trace, d)], trace.pid)
    assert len(events) == 12643
    assert {e["pid"] for e in events} == {2**31 - 2**16}
    assert Counter(e["name"] for e in events if e["ph"] == "X") == {
        "idle: cpu": 5615,
        "idle: runtime": 3130,
        "idle: dataloader": 2648,
        "idle: other": 906,
        "exposed memcpy/memset": 324,
    }
    sums: Counter[str] = Counter()
    for e in events:
        if e["ph"] == "X":
            sums[e["name"]] += _ns(Decimal(bytes(e["dur"]).decode()))
    assert sums == {
        "idle: runtime": 17_445_000,
        "idle: dataloader": 355_571_000,
        "idle: cpu": 82_045_000,
        "idle: other": 6_934_000,
        "exposed memcpy/memset": 12_026_000,
    }
    instants = [e for e in events if e["ph"] == "i"]
    assert [(e["args"]["id"], bytes(e["args"]["savings_us"]).decode()) for e in instants] == [
        ("data-loading", "59261.833"),
        ("low-precision-math", "30828.083"),
        ("host-overhead", "17536.667"),
        ("pageable-memcpy", "1915.333"),
    ]
    assert {bytes(e["ts"]).decode() for e in instants} == {"1623142623460172"}


def test_plain_json_and_top_level_array(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1.0005, "dur": 2,
         "cat": "kernel", "args": {"device": 0}},
    ]  # fmt: skip
    src = tmp_path / "t.json"
    src.write_text(json.dumps(events))
    added = [{"ph": "i", "name": "x", "pid": 9, "tid": 0, "ts": 1}]
    out = tmp_path / "out.json"
    assert write_annotated(str(src), str(out), added) == 1
    assert json.loads(out.read_text()) == events + added
    # Raw text of the originals is kept: 1.0005 is not rewritten as a float repr.
    assert "1.0005" in out.read_text()


@pytest.mark.parametrize(
    "args",
    [
        ["annotate", "{missing}", "--out", "{out}"],
        ["annotate", "{bad}", "--out", "{out}"],
        ["annotate", "{src}", "--out", "{src}"],
        ["annotate", "{src}", "--out", "{out}", "--window", "steps:x"],
        ["annotate", "{src}", "--out", "{nodir}"],
    ],
)
def test_bad_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    src = tmp_path / "t.json"
    src.write_text(
        json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                              "ts": 10, "dur": 5, "args": {"device": 0, "stream": 7}}]}
        )
    )  # fmt: skip
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    paths = {
        "missing": str(tmp_path / "missing.json"),
        "bad": str(bad),
        "src": str(src),
        "out": str(tmp_path / "o.json"),
        "nodir": str(tmp_path / "no" / "such" / "o.json"),
    }
    assert main([a.format(**paths) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("badput: error: ")
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
