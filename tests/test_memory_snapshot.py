"""`badput memory SNAPSHOT`: the safe loader, the replay, fragmentation, findings, bad input.

Snapshots are built here in the format of PyTorch's `torch/cuda/memory.py` (`_snapshot`):
`segments` with `blocks`, `device_traces` with `alloc`/`free_requested`/`free_completed`/
`segment_alloc` entries carrying `frames` and `time_us`, and `external_annotations`.
"""

from __future__ import annotations

import copyreg
import gzip
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from badput.analysis.memory import BEFORE_TRACE, analyze_snapshot, segment_use
from badput.cli.app import main
from badput.diagnose.memory import FULL_RECOMPUTE_KEPT, ModelSize, diagnose_memory
from badput.errors import TraceFormatError
from badput.trace.snapshot import load_snapshot, site_of, stack_kind
from synth_snapshot import block, entry, frame, segment, segsum_totals
from test_html_browser import _browse, chromium  # noqa: F401  (a fixture, used by name)

MiB = 1 << 20
A = 0x7F0000000000  # a 20 MiB large segment, there before the history starts
B = 0x7F1000000000  # a 2 MiB small segment the history allocates


TORCH = "/usr/lib/python3/site-packages/torch"
CPP = frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1200, "c10::cuda::malloc")
INIT = [
    CPP,
    frame(f"{TORCH}/nn/modules/module.py", 900, "_apply"),
    frame("model.py", 10, "__init__"),
]
FWD = [
    CPP,
    frame(f"{TORCH}/nn/functional.py", 2000, "linear"),
    frame("model.py", 20, "forward"),
    frame("train.py", 5, "main"),
]
OPT = [CPP, frame(f"{TORCH}/optim/adam.py", 80, "_init_group"), frame("train.py", 30, "step")]


def known_snapshot(with_trace: bool = True) -> dict[str, Any]:
    """A snapshot whose numbers are worked out by hand (the comments give them).

    Before the history: X (4 MiB at A, from model.py:10) and Y (2 MiB at A+4) are alive,
    segment A (20 MiB) is reserved. History: a1 8 MiB (forward), segment B 2 MiB, a2 1 MiB
    (optimizer) -> allocated 6 + 8 + 1 = 15 MiB at entry 2, the peak; reserved 22 MiB from
    entry 1. Y freed (13), a3 2 MiB short-lived (15 again, not above), a1 freed (5 MiB).
    At the dump: X and a2 active; A holds 4 of 20 MiB, B 1 of 2 MiB.
    """
    segments = [
        segment(
            A,
            20 * MiB,
            "large",
            [
                block(A, 4 * MiB, "active_allocated", INIT),
                block(A + 4 * MiB, 16 * MiB, "inactive"),
            ],
        ),
        segment(
            B,
            2 * MiB,
            "small",
            [block(B, MiB, "active_allocated", OPT), block(B + MiB, MiB, "inactive")],
        ),
    ]
    trace = [
        entry("alloc", A + 6 * MiB, 8 * MiB, 110, FWD),  # 0: 14 MiB
        entry("segment_alloc", B, 2 * MiB, 120, OPT),  # 1: reserved 22 MiB
        entry("alloc", B, MiB, 121, OPT),  # 2: 15 MiB, the peak
        entry("free_requested", A + 4 * MiB, 2 * MiB, 200),  # 3: Y, still held
        entry("free_completed", A + 4 * MiB, 2 * MiB, 201),  # 4: 13 MiB
        entry("alloc", A + 4 * MiB, 2 * MiB, 210, FWD),  # 5: 15 MiB (a3)
        entry("free_requested", A + 4 * MiB, 2 * MiB, 215),  # 6
        entry("free_completed", A + 4 * MiB, 2 * MiB, 216),  # 7: 13 MiB
        entry("free_completed", A + 6 * MiB, 8 * MiB, 300),  # 8: 5 MiB
    ]
    return {
        "segments": segments,
        "device_traces": [trace if with_trace else []],
        "allocator_settings": {"expandable_segments": False},
        "external_annotations": [
            {"device": 0, "name": "ProfilerStep#0", "stage": "START", "time_us": 100},
            {"device": 0, "name": "ProfilerStep#0", "stage": "END", "time_us": 205},
            {"device": 0, "name": "ProfilerStep#1", "stage": "START", "time_us": 205},
            {"device": 0, "name": "ProfilerStep#1", "stage": "END", "time_us": 400},
        ],
    }


def _write(tmp_path: Path, data: Any, name: str = "snap.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data, protocol=4))
    return path


# ---- the replay -------------------------------------------------------------------------------


def test_known_snapshot_numbers(tmp_path: Path) -> None:
    a = analyze_snapshot(load_snapshot(str(_write(tmp_path, known_snapshot()))))
    (d,) = a.devices
    assert d.entries == 9
    assert d.initial_allocated_bytes == 6 * MiB  # X (alive at the end) + Y (freed in the trace)
    assert d.initial_reserved_bytes == 20 * MiB
    assert d.peak_allocated_bytes == 15 * MiB
    assert d.peak_allocated_entry == 2  # the first time 15 MiB is reached
    assert d.peak_allocated_time_us == 121
    assert d.peak_step == "ProfilerStep#0"
    assert d.reserved_at_peak_bytes == 22 * MiB
    assert d.peak_reserved_bytes == 22 * MiB
    assert d.peak_reserved_entry == 1
    assert d.allocated_at_peak_reserved_bytes == 14 * MiB
    assert d.fragmentation_at_peak_reserved_bytes == 8 * MiB
    assert [(s.frame, s.bytes, s.count) for s in d.top_sites] == [
        ("model.py:20:forward", 8 * MiB, 1),
        ("model.py:10:__init__", 4 * MiB, 1),
        (BEFORE_TRACE, 2 * MiB, 1),
        ("train.py:30:step", MiB, 1),
    ]
    assert d.kinds_at_peak == {"forward": 8 * MiB, "before-trace": 6 * MiB, "optimizer": MiB}
    # Fragmentation at the dump: 22 MiB reserved, 5 MiB in active blocks.
    assert d.end.reserved_bytes == 22 * MiB
    assert d.end.allocated_bytes == 5 * MiB
    assert d.end.fragmentation_bytes == 17 * MiB
    assert d.end.largest_free_block_bytes == [16 * MiB, MiB]
    assert d.end.below_half == 1  # A (4 of 20); B is exactly half used, not below
    assert d.end.below_half_share == 0.5
    assert (d.allocs, d.frees, d.ooms) == (3, 3, 0)
    assert d.steps is not None
    assert [(s.name, s.allocs, s.frees, s.alloc_bytes) for s in d.steps] == [
        ("ProfilerStep#0", 2, 1, 9 * MiB),  # entries at 110..201
        ("ProfilerStep#1", 1, 2, 2 * MiB),  # entries at 210..300
    ]
    # a3 (2 MiB, freed 2 entries later) is short-lived and large (>= 1 MiB and 1 % of 15 MiB);
    # a1 lives 8 entries.
    assert [(s.frame, s.bytes, s.entries, s.lifetime_us) for s in d.short_lived] == [
        ("model.py:20:forward", 2 * MiB, 2, 6)
    ]
    assert d.warnings == []


def test_known_snapshot_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, known_snapshot())
    assert main(["memory", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "badput.memory/1"
    assert doc["peak_allocated_bytes"] == 15 * MiB
    assert doc["peak_reserved_bytes"] == 22 * MiB
    assert doc["fragmentation_bytes"] == 17 * MiB
    assert doc["fragmentation_at_peak_reserved_bytes"] == 8 * MiB
    assert [(s["frame"], s["bytes"]) for s in doc["top_sites"]] == [
        ("model.py:20:forward", 8 * MiB),
        ("model.py:10:__init__", 4 * MiB),
        (BEFORE_TRACE, 2 * MiB),
        ("train.py:30:step", MiB),
    ]
    ids = [f["id"] for f in doc["findings"]]
    assert ids == ["activation-memory", "memory-fragmentation"]
    act, frag = doc["findings"]
    # Activations: 8 MiB alive from forward; full recompute keeps 2/34 of them.
    assert act["savings_bytes"] == round(8 * MiB * (1 - FULL_RECOMPUTE_KEPT))
    assert act["savings_pct"] == pytest.approx(100 * 8 * (32 / 34) / 22, abs=1e-3)
    # Fragmentation: reserved peak 22 MiB - allocated peak 15 MiB.
    assert frag["savings_bytes"] == 7 * MiB
    assert frag["severity"] == "high"  # 7/22 = 31.8 % of the reserved peak
    assert frag["fix"][0].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert set(frag) == {
        "id",
        "title",
        "severity",
        "device",
        "evidence",
        "savings_bytes",
        "savings_pct",
        "fix",
        "refs",
    }
    assert doc["estimate"] is None
    (dev,) = doc["devices"]
    assert dev["steps"][0]["allocs"] == 2


def test_text_report(tmp_path: Path) -> None:
    path = _write(tmp_path, known_snapshot())
    out = tmp_path / "report.txt"
    assert main(["memory", str(path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "peak allocated 15.00 MiB (entry 2 of 9, t = 121 us, in ProfilerStep#0)" in text
    assert "peak reserved  22.00 MiB; allocated then 14.00 MiB (fragmentation 8.00 MiB)" in text
    assert "model.py:20:forward" in text
    # The per-step churn is a table: step, allocs, allocated bytes, frees.
    assert re.search(r"^ProfilerStep#1 +1 +2\.00 MiB +2 *$", text, re.M)
    assert "memory-fragmentation" in text and "activation-memory" in text


def test_without_history_the_dump_is_the_peak(tmp_path: Path) -> None:
    a = analyze_snapshot(load_snapshot(str(_write(tmp_path, known_snapshot(with_trace=False)))))
    (d,) = a.devices
    assert d.entries == 0
    assert d.peak_allocated_bytes == 5 * MiB  # X + a2, requested bytes
    assert d.peak_reserved_bytes == 22 * MiB
    assert [(s.frame, s.bytes) for s in d.top_sites] == [
        ("model.py:10:__init__", 4 * MiB),
        ("train.py:30:step", MiB),
    ]
    assert d.steps is None
    assert "no allocator history" in d.warnings[0]


def test_history_starting_late_counts_what_was_alive(tmp_path: Path) -> None:
    """Drop the first three entries (a ring buffer that wrapped): a1, B and a2 predate it."""
    snap = known_snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][3:]
    (d,) = analyze_snapshot(load_snapshot(str(_write(tmp_path, snap)))).devices
    # Alive at the start: X 4 + a2 1 (active at the dump, never allocated in the history),
    # Y 2 and a1 8 (freed without an alloc in the history) = 15 MiB.
    assert d.initial_allocated_bytes == 15 * MiB
    assert d.peak_allocated_bytes == 15 * MiB
    assert d.peak_allocated_entry == -1  # never exceeded: the start is the peak
    assert d.initial_reserved_bytes == 22 * MiB
    assert d.peak_reserved_bytes == 22 * MiB
    sites = {s.frame: s.bytes for s in d.top_sites}
    assert sites == {
        BEFORE_TRACE: 10 * MiB,
        "model.py:10:__init__": 4 * MiB,
        "train.py:30:step": MiB,
    }


def test_rounded_blocks_fragmentation_counts_block_sizes(tmp_path: Path) -> None:
    """A 1000-byte request in a 2 MiB block: allocated counts 1000, the segment is full."""
    full = block(A, 2 * MiB, "active_allocated", INIT, requested=1000)
    snap = {"segments": [segment(A, 2 * MiB, "large", [full])]}
    (d,) = analyze_snapshot(load_snapshot(str(_write(tmp_path, snap)))).devices
    assert d.peak_allocated_bytes == 1000  # requested bytes, as the history records them
    assert (d.end.reserved_bytes, d.end.allocated_bytes, d.end.fragmentation_bytes) == (
        2 * MiB,
        2 * MiB,
        0,
    )
    assert d.end.largest_free_block_bytes == [0] and d.end.below_half == 0
    assert segment_use([]).below_half_share == 0.0


def test_dump_state_agrees_with_pytorch_segsum(tmp_path: Path) -> None:
    """The dump-state numbers equal those of PyTorch's own `_memory_viz.segsum`.

    segsum splits free memory into external (free blocks) and internal (rounding inside
    active blocks) and prints totals through a byte formatter; an exact formatter is swapped
    in so the totals compare to the byte.
    """
    pytest.importorskip("torch.cuda._memory_viz")
    snap = known_snapshot()
    rounded = block(B + MiB, MiB, "active_allocated", OPT, requested=1000)
    snap["segments"][1]["blocks"][1] = rounded  # 1 MiB block holding a 1000-byte request
    totals, internal_pct = segsum_totals(snap)
    internal = MiB - 1000
    (d,) = analyze_snapshot(load_snapshot(str(_write(tmp_path, snap)))).devices
    assert d.end.reserved_bytes == int(totals["total_reserved"]) == 22 * MiB
    assert d.end.allocated_bytes == int(totals["total_allocated"]) + internal == 6 * MiB
    assert d.end.fragmentation_bytes == int(totals["total_free"]) - internal == 16 * MiB
    assert internal_pct == round(100 * internal / totals["total_free"], 1)


def test_gzip_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "snap.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(known_snapshot())))
    (d,) = analyze_snapshot(load_snapshot(str(path))).devices
    assert d.peak_allocated_bytes == 15 * MiB


def test_multi_device_top_level_is_the_largest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = known_snapshot()
    big = segment(0x10, 64 * MiB, "large", [block(0x10, 32 * MiB, "active_allocated", INIT)])
    big["device"] = 1
    snap["segments"].append(big)
    path = _write(tmp_path, snap)
    assert main(["memory", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["device"] == 1 and doc["peak_reserved_bytes"] == 64 * MiB
    assert [d["device"] for d in doc["devices"]] == [0, 1]
    assert main(["memory", str(path), "--format", "json", "--device", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_reserved_bytes"] == 22 * MiB
    assert main(["memory", str(path), "--device", "5"]) == 2
    assert "--device 5" in capsys.readouterr().err


# ---- sites and stack kinds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "site"),
    [
        (FWD, "model.py:20:forward"),
        (OPT, "train.py:30:step"),
        (
            [CPP, frame(f"{TORCH}/nn/functional.py", 7, "linear")],
            f"{TORCH}/nn/functional.py:7:linear",
        ),
        ([CPP], "/pytorch/c10/cuda/CUDACachingAllocator.cpp:1200:c10::cuda::malloc"),
        ([frame("??", 0, "??"), frame("a.py", 3, "f")], "a.py:3:f"),
        ([], "<unknown>"),
    ],
)
def test_site_of(frames: list[dict[str, Any]], site: str) -> None:
    assert site_of(frames) == site


@pytest.mark.parametrize(
    ("frames", "kind"),
    [
        (FWD, "forward"),
        (OPT, "optimizer"),
        (INIT, "other"),
        (
            [CPP, frame(f"{TORCH}/autograd/__init__.py", 200, "backward"), frame("t.py", 1, "f")],
            "backward",
        ),
        (
            [frame("torch::autograd::Engine::evaluate_function", 0, "autograd::Engine::thread")],
            "backward",
        ),
        ([], "unknown"),
    ],
)
def test_stack_kind(frames: list[dict[str, Any]], kind: str) -> None:
    assert stack_kind(frames) == kind


# ---- findings and the estimate cross-check ------------------------------------------------------


def _optimizer_heavy() -> dict[str, Any]:
    """12 MiB of Adam state and 4 MiB of weights alive; reserved exactly what is allocated."""
    seg = segment(
        A,
        16 * MiB,
        "large",
        [
            block(A, 4 * MiB, "active_allocated", INIT),
            block(A + 4 * MiB, 12 * MiB, "active_allocated", OPT),
        ],
    )
    return {"segments": [seg], "device_traces": []}


def test_optimizer_sharding_finding_and_estimate(tmp_path: Path) -> None:
    snap = load_snapshot(str(_write(tmp_path, _optimizer_heavy())))
    analysis = analyze_snapshot(snap)
    # 1M params, Adam: 2 + 2 + 12 bytes per parameter (ZeRO paper's K = 12).
    model = ModelSize(params=2**20, gpus=4)
    dx = diagnose_memory(analysis, model)
    (f,) = dx.findings  # no fragmentation: reserved == allocated; no forward allocations
    assert f.id == "optimizer-state-sharding"
    assert f.savings_bytes == 12 * MiB * 3 // 4  # sharded over 4 GPUs, each keeps a quarter
    assert f.evidence["data_parallel_gpus"].value == 4
    # The estimate's own ZeRO-1 saving for the same model: 12 B/param x 1M x (1 - 1/4).
    assert f.evidence["estimated_savings_from_model_size"].value == 9 * MiB
    assert dx.check is not None
    assert dx.check.estimate.optimizer_bytes == 12 * MiB
    assert dx.check.measured_optimizer_bytes == 12 * MiB
    # weights 2 MiB + grads 2 MiB + optimizer 12 MiB = 16 MiB over a 16 MiB peak.
    assert dx.check.static_share_of_peak == 1.0


def test_optimizer_cli_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _optimizer_heavy())
    assert main(["memory", str(path), "-f", "json", "--params", "1048576", "--gpus", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"][0]["savings_bytes"] == 6 * MiB
    est = doc["estimate"]
    assert est["optimizer_bytes"] == 12 * MiB and est["optimizer_bytes_zero1"] == 6 * MiB
    assert est["measured_optimizer_bytes"] == 12 * MiB
    assert main(["memory", str(path), "--params", "-3"]) == 2
    assert "--params" in capsys.readouterr().err


def test_expandable_segments_drops_the_first_fix(tmp_path: Path) -> None:
    snap = known_snapshot()
    for s in snap["segments"]:
        s["is_expandable"] = True
    dx = diagnose_memory(analyze_snapshot(load_snapshot(str(_write(tmp_path, snap)))))
    frag = next(f for f in dx.findings if f.id == "memory-fragmentation")
    assert not any("expandable_segments:True" in x for x in frag.fix)


def test_healthy_snapshot_has_no_finding(tmp_path: Path) -> None:
    seg = segment(A, 4 * MiB, "large", [block(A, 4 * MiB, "active_allocated", INIT)])
    dx = diagnose_memory(
        analyze_snapshot(load_snapshot(str(_write(tmp_path, {"segments": [seg]}))))
    )
    assert dx.findings == []


# ---- the safe loader: nothing in the file ever runs ---------------------------------------------


class _Evil:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.command,))


def _evil_pickles(sentinel: Path) -> dict[str, bytes]:
    cmd = f"touch {sentinel}"
    ev = f"__import__('os').system('{cmd}')"
    return {
        "GLOBAL os.system": f"cos\nsystem\n(S'{cmd}'\ntR.".encode(),
        "GLOBAL posix.system": f"cposix\nsystem\n(S'{cmd}'\ntR.".encode(),
        "GLOBAL builtins.eval": f'cbuiltins\neval\n(S"{ev}"\ntR.'.encode(),
        "INST os.system": f"(S'{cmd}'\nios\nsystem\n.".encode(),
        "STACK_GLOBAL via __reduce__": pickle.dumps(_Evil(cmd), protocol=4),
        "nested in a snapshot": pickle.dumps(
            {"segments": [], "device_traces": [[{"action": "alloc", "frames": _Evil(cmd)}]]},
            protocol=2,
        ),
        "persistent id": b"\x80\x02Pid\n.",
    }


@pytest.mark.parametrize("name", list(_evil_pickles(Path("x"))))
def test_pickled_globals_are_refused(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sentinel = tmp_path / "ran"
    path = tmp_path / "evil.pickle"
    path.write_bytes(_evil_pickles(sentinel)[name])
    with pytest.raises(TraceFormatError, match="refused"):
        load_snapshot(str(path))
    assert main(["memory", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("badput: error: ") and "refused" in err and err.count("\n") == 1
    assert not sentinel.exists()
    # The same bytes do run through a plain pickle.load (the sentinel is what it would do).
    if "persistent" not in name:
        pickle.loads(path.read_bytes())
        assert sentinel.exists()


@pytest.mark.parametrize(
    ("opcode", "code"), [(pickle.EXT1, 0xF0), (pickle.EXT2, 0x1234), (pickle.EXT4, 0x12345)]
)
def test_extension_codes_are_refused(tmp_path: Path, opcode: bytes, code: int) -> None:
    """EXT opcodes name a global through copyreg's registry; a cached one skips find_class."""
    sentinel = tmp_path / "ran"
    width = {pickle.EXT1: 1, pickle.EXT2: 2, pickle.EXT4: 4}[opcode]
    data = (
        b"\x80\x02"
        + opcode
        + code.to_bytes(width, "little")
        + pickle.dumps(f"touch {sentinel}", protocol=2)[2:-1]
        + b"\x85R."
    )
    path = tmp_path / "ext.pickle"
    path.write_bytes(data)
    # Not registered: nothing to resolve, refused all the same.
    with pytest.raises(TraceFormatError):
        load_snapshot(str(path))
    copyreg.add_extension("os", "system", code)
    try:
        with pytest.raises(TraceFormatError, match="refused"):
            load_snapshot(str(path))
        assert not sentinel.exists()
        pickle.loads(data)  # a plain load runs it and fills copyreg's cache
        assert sentinel.exists()
        sentinel.unlink()
        with pytest.raises(TraceFormatError, match="refused"):
            load_snapshot(str(path))  # cached now: the C unpickler would skip find_class
        assert not sentinel.exists()
    finally:
        copyreg.remove_extension("os", "system", code)


# ---- bad input: one line, exit 2 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not a pickle\n", "not a pickle"),
        (pickle.dumps(known_snapshot())[:-200], "truncated"),
        (b"", "truncated"),
        (pickle.dumps([1, 2, 3]), "not a CUDA memory snapshot: the pickle holds a list"),
        (pickle.dumps({"a": 1}), "not a CUDA memory snapshot: no 'segments' list"),
        (pickle.dumps({"segments": [1]}), "segment 0 is malformed"),
        (gzip.compress(b"not a pickle"), "not a pickle"),
        (b"\x1f\x8b\x08garbage", "truncated: the gzip-compressed pickle ends early"),
        (b"\x1f\x8bnot gzip at all", "not a readable gzip file"),
    ],
)
def test_bad_input(
    tmp_path: Path, content: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    assert main(["memory", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"badput: error: {path}: ")
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", str(tmp_path / "nope.pickle")]) == 2
    assert "no such file" in capsys.readouterr().err


# ---- speed ------------------------------------------------------------------------------------


def test_large_history(tmp_path: Path) -> None:
    """100,000 entries with 20 shared frames each load and replay."""
    frames = [frame(f"/src/lib{i}.cpp", i, f"f{i}") for i in range(18)] + FWD[1:3]
    n = 50_000  # alloc + free_completed pairs
    entries = []
    for i in range(n):
        addr = A + (i % 64) * MiB
        entries.append(entry("alloc", addr, MiB, 2 * i, frames))
        entries.append(entry("free_completed", addr, MiB, 2 * i + 1, frames))
    seg = segment(A, 64 * MiB, "large", [block(A, 64 * MiB, "inactive")])
    path = _write(tmp_path, {"segments": [seg], "device_traces": [entries]})
    a = analyze_snapshot(load_snapshot(str(path)))
    (d,) = a.devices
    assert d.entries == 2 * n and d.peak_allocated_bytes == MiB and d.allocs == n
    # its speed is measured by benchmarks/bench_memory.py, against PyTorch's own tools


# ---- the replayed timeline and the HTML page --------------------------------------------------


def test_timeline_follows_the_replay(tmp_path: Path) -> None:
    """The drawn curve has the replay's peaks and the totals after each entry (by hand)."""
    (d,) = analyze_snapshot(load_snapshot(str(_write(tmp_path, known_snapshot())))).devices
    m = d.timeline
    assert m is not None and m.events == 9
    assert (m.peak_allocated_bytes, m.peak_reserved_bytes) == (
        d.peak_allocated_bytes,
        d.peak_reserved_bytes,
    )
    assert m.peak_allocated_ts_ns == 121_000  # entry 2, at 121 us
    # after each entry: 14, 14, 15, 15, 13, 15, 15, 13, 5 MiB allocated; 20 then 22 reserved
    assert (m.allocated_bytes // MiB).tolist() == [14, 14, 15, 15, 13, 15, 15, 13, 5]
    assert (m.reserved_bytes // MiB).tolist() == [20] + [22] * 8
    assert m.ts_ns.tolist() == [t * 1000 for t in (110, 120, 121, 200, 201, 210, 215, 216, 300)]


def test_timeline_without_times_counts_entries(tmp_path: Path) -> None:
    snap = known_snapshot()
    for e in snap["device_traces"][0]:
        del e["time_us"]
    (d,) = analyze_snapshot(load_snapshot(str(_write(tmp_path, snap)))).devices
    assert d.timeline is not None and d.timeline.ts_ns.tolist() == list(range(9))
    assert d.timeline.peak_allocated_bytes == 15 * MiB


def test_html_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = known_snapshot()
    evil = frame("<script>alert(1)</script>.py", 7, "f&g")
    snap["device_traces"][0][0]["frames"] = [evil]
    page = tmp_path / "memory.html"
    assert main(["memory", str(_write(tmp_path, snap)), "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.py:7:f&amp;g" in text
    assert text.count('class="memory-allocated"') == 1
    assert "peak allocated <b>15.00 MiB</b>" in text
    assert "memory-fragmentation" in text and "expandable_segments:True" in text
    without = tmp_path / "without.html"
    path = _write(tmp_path, known_snapshot(with_trace=False), "no_history.pickle")
    assert main(["memory", str(path), "--html", str(without)]) == 0
    assert "No allocator history" in without.read_text(encoding="utf-8")
    assert main(["memory", str(path), "--html", str(tmp_path / "no" / "dir.html")]) == 2


def test_html_page_in_browser(
    chromium: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = tmp_path / "memory.html"
    assert main(["memory", str(_write(tmp_path, known_snapshot())), "--html", str(page)]) == 0
    capsys.readouterr()
    dom = _browse(chromium, page, tmp_path, "--dump-dom")
    for cls in ("memory-allocated", "memory-reserved", "memory-plot"):
        assert len(re.findall(rf'class="[^"]*\b{cls}\b', dom)) == 1


# ---- issue 20: the estimate cross-check's ratio; --html alone -----------------------------------


def test_measured_peak_as_a_share_of_the_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per sentence
    # 7e9 params x 16 bytes (bf16 weights 2 + gradients 2 + Adam 12) = 112e9 B = 104.31 GiB;
    # the peak 15 MiB is 15 x 2**20 / 112e9 = 0.0140 % of it (it used to print "746,667 %").
    path = _write(tmp_path, known_snapshot())
    assert main(["memory", str(path), "--params", "7B", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "measured allocated peak 15.00 MiB = 0.014 % of the 104.31 GiB estimate" in out
    # ZeRO-1 over 8 GPUs: optimizer 12 x 7e9 / 8 = 10.5e9 B = 9.78 GiB; total 38.5e9 = 35.86 GiB.
    assert re.search(r"^optimizer \(12 B/param\) +78\.23 GiB +9\.78 GiB *$", out, re.M)
    assert re.search(r"^total +104\.31 GiB +35\.86 GiB *$", out, re.M)
    assert main(["memory", str(path), "--params", "7B", "--gpus", "8", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    share = doc["estimate"]["measured_peak_share_of_estimate"]
    assert share == pytest.approx(15 * MiB / 112e9, rel=1e-12)
    assert doc["estimate"]["static_share_of_peak"] == pytest.approx(112e9 / (15 * MiB), rel=1e-12)


def test_html_alone_writes_the_page_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, page = _write(tmp_path, known_snapshot()), tmp_path / "m.html"
    assert main(["memory", str(path), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"wrote {page} ({page.stat().st_size / 1024:,.0f} KiB)"]
    assert main(["memory", str(path), "--html", str(page), "--format", "text"]) == 0
    assert "what to change" in capsys.readouterr().out
