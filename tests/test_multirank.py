"""Many ranks through `badput analyze`: the "ranks" and "collectives" sections, identical
output for any job count and input order, failed ranks, and a text report that stays short.

Uses the 8-rank PARAM DLRM traces (tests/data/traces/param-dlrm-8rank), and a 64-rank set
replicated from them in tmp_path with shifted clocks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from badput.cli.app import main
from conftest import SHARED_TRACES, reference
from synth_ranks import replicate_ranks

DLRM = SHARED_TRACES / "param-dlrm-8rank"
PER_RANK_KEYS = {"rank", "goodput", "breakdown_us", "comm_total_us"}
STRAGGLER_KEYS = {"rank", "score", "wait_caused_us"}
COLLECTIVE_KEYS = {"type", "rank", "count", "total_us", "exposed_us", "algbw_gbps", "busbw_gbps"}


@pytest.fixture(scope="module")
def dlrm() -> Path:
    return reference(DLRM)


def analyze(tmp_path: Path, name: str, *args: object, code: int = 0) -> bytes:
    out = tmp_path / name
    got = main(["analyze", *(str(a) for a in args), "--out", str(out)])
    assert got == code
    return out.read_bytes() if out.exists() else b""


def doc_of(data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(data)
    return doc


def test_jobs_give_identical_json(dlrm: Path, tmp_path: Path) -> None:
    one = analyze(tmp_path, "j1.json", dlrm, "--format", "json", "--jobs", "1")
    two = analyze(tmp_path, "j2.json", dlrm, "--format", "json", "--jobs", "2")
    default = analyze(tmp_path, "jd.json", dlrm, "--format", "json")
    assert one == two == default
    # the order the files are named in does not matter either: ranks come out in rank order
    files = sorted(dlrm.glob("*.json.gz"), reverse=True)
    reverse = analyze(tmp_path, "rev.json", *files, "--format", "json", "--jobs", "2")
    assert reverse == one


def test_ranks_and_collectives_shape(dlrm: Path, tmp_path: Path) -> None:
    doc = doc_of(analyze(tmp_path, "a.json", dlrm, "--format", "json"))
    ranks = doc["ranks"]
    per_rank = ranks["per_rank"]
    assert [r["rank"] for r in per_rank] == list(range(8))
    for r in per_rank:
        assert set(r) >= PER_RANK_KEYS
        assert 0 < r["goodput"] < 1
        assert set(r["breakdown_us"]) == {"compute", "communication", "memory", "idle"}
        assert len(r["step_dur_us"]) >= 1
    for s in ranks["stragglers"]:
        assert set(s) >= STRAGGLER_KEYS
        assert s["rank"] in range(8)
    assert ranks["failed"] == []
    assert ranks["count"] == 8
    extremes = {e["category"]: e for e in ranks["extremes"]}
    goodput = {r["rank"]: r["goodput"] for r in per_rank}
    g = extremes["goodput"]
    assert g["min"] == min(goodput.values()) and goodput[g["min_rank"]] == g["min"]
    assert g["max"] == max(goodput.values()) and goodput[g["max_rank"]] == g["max"]
    assert g["min"] <= g["median"] <= g["max"]
    collectives = doc["collectives"]
    assert collectives
    keys = [(c["rank"], c["type"]) for c in collectives]
    assert len(keys) == len(set(keys)), "one entry per (rank, type)"
    for c in collectives:
        assert set(c) >= COLLECTIVE_KEYS
        assert c["count"] > 0 and 0 <= c["exposed_us"] <= c["total_us"]


def test_comm_totals_agree(dlrm: Path, tmp_path: Path) -> None:
    doc = doc_of(analyze(tmp_path, "a.json", dlrm, "--format", "json"))
    by_device = {d["rank"]: d for d in doc["devices"]}
    for r in doc["ranks"]["per_rank"]:
        device = by_device[r["rank"]]
        assert r["comm_total_us"] == device["comm"]["total_us"]
        assert r["comm_exposed_us"] == device["breakdown_us"]["communication"]
        mine = [c for c in doc["collectives"] if c["rank"] == r["rank"]]
        assert sum(c["total_us"] for c in mine) == pytest.approx(r["comm_total_us"], abs=1e-3)
        assert sum(c["exposed_us"] for c in mine) == pytest.approx(
            device["breakdown_us"]["communication"], abs=1e-3
        )


def test_single_trace_keeps_its_report(dlrm: Path, tmp_path: Path) -> None:
    first = sorted(dlrm.glob("*.json.gz"))[0]
    doc = doc_of(analyze(tmp_path, "a.json", first, "--format", "json"))
    assert len(doc["devices"]) == 1
    assert len(doc["ranks"]["per_rank"]) == 1
    assert doc["ranks"]["extremes"] == [] and doc["ranks"]["stragglers"] == []


def corrupt_copy(dlrm: Path, tmp_path: Path, how: str) -> tuple[Path, Path]:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    files = sorted(dlrm.glob("*.json.gz"))
    for path in files:
        shutil.copy(path, ranks / path.name)
    bad = ranks / files[3].name
    if how == "truncated-gz":
        data = files[3].read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:  # invalid JSON, not gzipped
        bad.unlink()
        bad = ranks / "worker3_broken.pt.trace.json"
        bad.write_text('{"traceEvents": [{"ph": "X", "ts": \n')
    return ranks, bad


@pytest.mark.parametrize("how", ["truncated-gz", "invalid-json"])
def test_corrupt_rank_is_reported_and_the_rest_analysed(
    dlrm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    ranks, bad = corrupt_copy(dlrm, tmp_path, how)
    doc = doc_of(analyze(tmp_path, "a.json", ranks, "--format", "json", "--jobs", "2"))
    err = capsys.readouterr().err
    assert "badput: warning:" in err and str(bad) in err and "Traceback" not in err
    (failed,) = doc["ranks"]["failed"]
    assert failed["path"] == str(bad) and failed["reason"]
    assert [r["rank"] for r in doc["ranks"]["per_rank"]] == [0, 1, 2, 4, 5, 6, 7]
    assert len(doc["devices"]) == 7
    text = analyze(tmp_path, "a.txt", ranks).decode()
    assert "could not be analysed" in text and str(bad) in text
    # --strict: the same report, exit 2
    strict = analyze(tmp_path, "s.json", ranks, "--format", "json", "--strict", code=2)
    assert doc_of(strict)["ranks"]["failed"] == doc["ranks"]["failed"]


def test_all_ranks_failing_is_an_error(
    dlrm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i in range(3):
        (ranks / f"w{i}.pt.trace.json").write_text("not json")
    assert main(["analyze", str(ranks), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert err.count("badput: warning:") == 3
    assert err.splitlines()[-1].startswith("badput: error: ")


def test_text_report_at_64_ranks_is_short(dlrm: Path, tmp_path: Path) -> None:
    ranks = replicate_ranks(dlrm, tmp_path / "r64", copies=8)
    text = analyze(tmp_path, "a.txt", ranks, "--jobs", "2").decode()
    lines = text.splitlines()
    assert len(lines) <= 90, text
    assert "Across 64 ranks (world size 64)" in text
    assert "the 10 ranks furthest from the median (of 64)" in text
    assert "collectives by type" in text
    assert "top GPU operations" not in text  # no per-GPU sections
    # the 8-rank report still has its per-GPU sections and lists every rank
    eight = analyze(tmp_path, "b.txt", dlrm).decode()
    assert eight.count("top GPU operations") == 8
    assert "every rank" in eight


def test_replicated_ranks_match_their_originals(dlrm: Path, tmp_path: Path) -> None:
    ranks = replicate_ranks(dlrm, tmp_path / "r16", copies=2)
    doc = doc_of(analyze(tmp_path, "a.json", ranks, "--format", "json", "--jobs", "2"))
    per_rank = {r["rank"]: r for r in doc["ranks"]["per_rank"]}
    assert sorted(per_rank) == list(range(16))
    for r in range(8):
        a, b = per_rank[r], per_rank[r + 8]
        assert a["goodput"] == b["goodput"]
        assert a["breakdown_us"] == b["breakdown_us"]
        assert a["step_dur_us"] == b["step_dur_us"]
