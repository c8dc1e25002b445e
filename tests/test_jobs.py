"""Traces into jobs (`badput.diagnose.jobs`) and the straggler's waits attributed to it.

Synthetic rank sets (tests/synth_ranks.py) whose answers follow from their construction: every
rank's all-reduce ends at the same true instant, the slow rank arrives `extra_us` late, so each
other rank waits exactly `extra_us` per step in it, and its own exposed communication is
`comm_us` plus that wait. The real 8-rank DLRM traces stay one job with today's straggler.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from badput.cli.app import main
from badput.diagnose.jobs import MAX_APART_NS
from conftest import SHARED_TRACES, reference
from synth_ranks import write_rank_set

DAY_NS = 86_400 * 10**9


def analyze(tmp_path: Path, name: str, *args: object) -> bytes:
    out = tmp_path / name
    assert main(["analyze", *(str(a) for a in args), "--out", str(out)]) == 0
    return out.read_bytes()


def html_of(tmp_path: Path, *args: object) -> str:
    out = tmp_path / "a.html"
    assert main(["report", *(str(a) for a in args), "--out", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def doc_of(tmp_path: Path, *args: object) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(analyze(tmp_path, "a.json", *args, "--format", "json"))
    return doc


def rank_set(folder: Path, prefix: str, keep: set[int] | None = None, **kw: Any) -> list[Path]:
    """Write a rank set into a scratch folder, move its traces to `folder` as PREFIX_rankN."""
    scratch = folder.parent / f"scratch_{prefix}"
    scratch.mkdir()
    made = write_rank_set(scratch, **kw)
    folder.mkdir(exist_ok=True)
    out = []
    for r, path in enumerate(made.paths):
        if keep is None or r in keep:
            out.append(Path(shutil.move(path, folder / f"{prefix}_{path.name}")))
    return out


def findings_by(doc: dict[str, Any], rule: str) -> dict[int, dict[str, Any]]:
    return {f["rank"]: f for f in doc["findings"] if f["id"] == rule}


def evidence(f: dict[str, Any]) -> dict[str, Any]:
    return {k: v["value"] for k, v in f["evidence"].items()}


# ---- grouping ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def four_jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces of four jobs, world sizes 1, 2, 8 and 16, in one directory."""
    root = tmp_path_factory.mktemp("four")
    folder = root / "traces"
    for world in (1, 2, 8, 16):
        rank_set(folder, f"w{world:02d}", ranks=world, steps=3, seed=world)
    return folder


def test_four_world_sizes_are_four_jobs(
    four_jobs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = doc_of(tmp_path, four_jobs)
    assert "the 27 traces are 4 jobs" in capsys.readouterr().err
    jobs = doc["jobs"]
    assert [j["world_size"] for j in jobs] == [16, 8, 2, 1]  # largest first
    for j in jobs:
        w = j["world_size"]
        assert j["ranks"] == list(range(w))
        assert j["traces"] == [str(four_jobs / f"w{w:02d}_rank{r}.pt.trace.json") for r in range(w)]
        others = ", ".join(str(x) for x in (1, 2, 8, 16) if x != w)
        assert j["notes"] == [f"world size {w}; traces of world size {others} are other jobs"]
        cross = j["cross_rank"]
        # each job's cross-rank view holds its own ranks only, and nothing disagrees
        assert [r["rank"] for r in cross["per_rank"]] == list(range(w))
        assert {r["world_size"] for r in cross["per_rank"]} == {w}
        assert not any("disagree" in x for x in cross["warnings"])
        if w == 1:
            assert cross["extremes"] == [] and cross["matching"] is None
        else:
            assert cross["matching"] == "steps" and cross["extremes"]
            assert all(r["clock_offset_us"] is not None for r in cross["per_rank"])
    # the run's own "ranks" mixes nothing: no cross-rank numbers over the four jobs
    top = doc["ranks"]
    assert top["extremes"] == [] and top["stragglers"] == [] and top["matching"] is None
    assert top["warnings"] == ["4 jobs: each job's cross-rank view is under jobs"]
    assert all(r["clock_offset_us"] is None for r in top["per_rank"])


def test_four_jobs_text_has_one_section_each(four_jobs: Path, tmp_path: Path) -> None:
    text = analyze(tmp_path, "a.txt", four_jobs).decode()
    assert "4 jobs among 27 traces: each is reported on its own" in text
    heads = [
        "Job 1 of 4: ranks 0-15, world size 16 (16 traces)",
        "Job 2 of 4: ranks 0-7, world size 8 (8 traces)",
        "Job 3 of 4: ranks 0, 1, world size 2 (2 traces)",
        "Job 4 of 4: rank 0, world size 1 (1 trace)",
    ]
    at = [text.index(h) for h in heads]
    assert at == sorted(at)
    for w in (16, 8, 2):
        assert text.count(f"Across {w} ranks (world size {w})") == 1
    assert "Across 27 ranks" not in text and "(world size 1, 2" not in text
    assert "note: world size 1; traces of world size 2, 8, 16 are other jobs" in text
    md = analyze(tmp_path, "a.md", four_jobs, "--format", "markdown").decode()
    assert "**4 jobs among 27 traces**" in md
    assert all(f"## {h}" in md for h in heads)
    page = html_of(tmp_path, four_jobs)
    assert page.count('<h2 class="job">') == 4


def test_grouping_does_not_depend_on_the_order(four_jobs: Path, tmp_path: Path) -> None:
    files = sorted(four_jobs.iterdir())
    forward = analyze(tmp_path, "f.json", *files, "--format", "json")
    backward = analyze(tmp_path, "b.json", *reversed(files), "--format", "json")
    assert forward == backward


def test_two_traces_of_one_rank_are_two_jobs(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    rank_set(folder, "a", ranks=2, steps=3)
    for path in sorted(folder.iterdir()):  # the same job again: every rank twice
        shutil.copy(path, folder / path.name.replace("a_", "b_"))
    doc = doc_of(tmp_path, folder)
    first, second = doc["jobs"]
    assert first["ranks"] == second["ranks"] == [0, 1]
    assert first["traces"] == [str(folder / f"a_rank{r}.pt.trace.json") for r in (0, 1)]
    assert second["traces"] == [str(folder / f"b_rank{r}.pt.trace.json") for r in (0, 1)]
    a0, b0 = folder / "a_rank0.pt.trace.json", folder / "b_rank0.pt.trace.json"
    assert first["notes"] == []
    assert second["notes"] == [
        f"{b0} is not with ranks 0, 1 ({a0}): rank 0 is there already ({a0}): a second trace of it"
    ]
    for j in (first, second):
        assert not any("appears twice" in w for w in j["cross_rank"]["warnings"])


def test_traces_recorded_days_apart_are_two_jobs(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    # ranks 0, 1 of a 4-rank job today, ranks 2, 3 of a run of the same program 3 days later
    rank_set(folder, "a", keep={0, 1}, ranks=4, steps=3)
    rank_set(folder, "b", keep={2, 3}, ranks=4, steps=3, offsets_ns=[3 * DAY_NS] * 4)
    doc = doc_of(tmp_path, folder)
    first, second = doc["jobs"]
    assert (first["ranks"], second["ranks"]) == ([0, 1], [2, 3])
    a0, b2 = folder / "a_rank0.pt.trace.json", folder / "b_rank2.pt.trace.json"
    assert second["notes"] == [f"{b2} is not with ranks 0, 1 ({a0}): recorded 3.0 days apart"]
    assert 3 * DAY_NS > MAX_APART_NS


def test_half_hour_apart_is_still_one_job(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    half_hour = 1_800 * 10**9
    rank_set(folder, "a", keep={0, 1}, ranks=4, steps=3)
    rank_set(folder, "b", keep={2, 3}, ranks=4, steps=3, offsets_ns=[half_hour] * 4)
    (job,) = doc_of(tmp_path, folder)["jobs"]
    assert job["ranks"] == [0, 1, 2, 3] and job["notes"] == []
    # the half hour is a clock offset: the collectives line up once it is taken out
    offsets = {r["rank"]: r["clock_offset_us"] for r in job["cross_rank"]["per_rank"]}
    assert offsets[2] == offsets[3] == half_hour / 1e3


def test_collectives_that_do_not_end_together_are_two_jobs(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    # the same steps and kinds, but steps of 2.0 and 2.5 ms: ends drift 0.5 ms per step apart
    rank_set(folder, "a", keep={0, 1}, ranks=4, steps=6, step_us=2000)
    rank_set(folder, "b", keep={2, 3}, ranks=4, steps=6, step_us=2500)
    doc = doc_of(tmp_path, folder)
    first, second = doc["jobs"]
    assert (first["ranks"], second["ranks"]) == ([0, 1], [2, 3])
    a0, b2 = folder / "a_rank0.pt.trace.json", folder / "b_rank2.pt.trace.json"
    # end differences k * 500 us (k = 0..5) + offset: 750 us from their median, median; one
    # job allows max(50 us, 5 % of the 2,250 us median step) = 112.5 us
    assert second["notes"] == [
        f"{b2} is not with ranks 0, 1 ({a0}): their collectives do not end together: "
        "750.0 us apart (median) once the clocks are aligned, above the 112.5 us of one job"
    ]


def test_other_collective_kinds_are_two_jobs(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    rank_set(folder, "a", keep={0, 1}, ranks=4, steps=3)
    for path in rank_set(folder, "b", keep={2, 3}, ranks=4, steps=3):
        text = path.read_text().replace("_AllReduce_Sum_f32_", "_AllGather_")
        path.write_text(text)
    doc = doc_of(tmp_path, folder)
    a0, b2 = folder / "a_rank0.pt.trace.json", folder / "b_rank2.pt.trace.json"
    assert [j["ranks"] for j in doc["jobs"]] == [[0, 1], [2, 3]]
    assert doc["jobs"][1]["notes"] == [
        f"{b2} is not with ranks 0, 1 ({a0}): collective kinds differ "
        "(all_reduce against all_gather)"
    ]


def test_traces_without_rank_stand_alone(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    for path in rank_set(folder, "a", ranks=2, steps=3):
        doc = json.loads(path.read_text())
        del doc["distributedInfo"]
        path.write_text(json.dumps(doc))
    report = doc_of(tmp_path, folder)
    jobs = report["jobs"]
    assert [j["ranks"] for j in jobs] == [[], []]
    assert [j["traces"] for j in jobs] == [
        [str(folder / "a_rank0.pt.trace.json")],
        [str(folder / "a_rank1.pt.trace.json")],
    ]
    for j in jobs:
        assert j["notes"] == ["no distributed rank (distributedInfo): reported on its own"]
        assert j["cross_rank"]["extremes"] == []
    assert not any(f["id"] == "straggler" for f in report["findings"])


# ---- the straggler first, its waits attributed to it ------------------------------------------


def test_straggler_first_and_the_others_wait_is_its(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    # 4 ranks, steps of 2 ms: 800 us compute, rank 2 300 us more; all-reduce 100 us after the
    # last arrival. Ranks 0, 1, 3 wait 300 us per step for rank 2 inside the all-reduce.
    rank_set(folder, "s", ranks=4, steps=6, slow_rank=2, extra_us=300, comm_us=100)
    doc = doc_of(tmp_path, folder)
    top = doc["findings"][0]
    assert (top["id"], top["rank"], top["savings_us"]) == ("straggler", 2, 300.0)
    assert top["savings_pct"] == 15.0  # of the 2 ms step
    assert evidence(top)["others_exposed_communication"] == (
        "its wait taken out on 3 rank(s), 0 left below the floor"
    )
    # before: every finding of any savings came first (host-overhead saves 800 us per step)
    assert max(f["savings_us"] for f in doc["findings"]) == 800.0
    comm = findings_by(doc, "exposed-communication")
    for r in (0, 1, 3):
        f = comm[r]
        assert f["savings_us"] == 100.0 and f["severity"] == "medium"
        assert evidence(f) | {"largest_collective": None} == evidence(f) | {
            "exposed_communication_per_step": 0.4,
            "waiting_for_straggler_per_step": 0.3,
            "own_exposed_communication_per_step": 0.1,
            "see": "straggler (rank 2)",
            "largest_collective": None,
        }
        # the rule's own title (its measured 0.40 ms), then what of it is the straggler's
        assert f["title"].startswith("0.40 ms per step (20.0 %) of ")
        assert f["title"].endswith(
            "; 0.30 ms per step of it is waiting for the straggler (rank 2), 0.10 ms (5.0 %) "
            "is its own"
        )
    # the straggler's own exposed communication is its own
    assert comm[2]["savings_us"] == 100.0
    assert "waiting_for_straggler_per_step" not in comm[2]["evidence"]
    # the per-GPU lists agree with the ranked list
    for d in doc["devices"]:
        mine = [f for f in d["findings"] if f["id"] == "exposed-communication"]
        assert [f["savings_us"] for f in mine] == [100.0]
    text = analyze(tmp_path, "a.txt", folder).decode()
    assert text.index("straggler (rank 2)") < text.index("top GPU operations")
    page = html_of(tmp_path, folder)
    assert page.index("Across ranks") < page.index("Per rank")
    md = analyze(tmp_path, "a.md", folder, "--format", "markdown").decode()
    assert md.index("**Across ranks**") < md.index("### ")


def test_wait_that_leaves_too_little_drops_the_finding(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    # all-reduce 10 us after the last arrival: 310 us exposed on ranks 0, 1, 3, of which 300 us
    # is the wait; 10 us of a 2 ms step is 0.5 %, under the 1 % reporting floor
    rank_set(folder, "s", ranks=4, steps=6, slow_rank=2, extra_us=300, comm_us=10)
    doc = doc_of(tmp_path, folder)
    top = doc["findings"][0]
    assert (top["id"], top["rank"], top["savings_us"]) == ("straggler", 2, 300.0)
    assert evidence(top)["others_exposed_communication"] == (
        "its wait taken out on 3 rank(s), 3 left below the floor"
    )
    assert findings_by(doc, "exposed-communication") == {}


def test_no_straggler_leaves_exposed_communication_alone(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    rank_set(folder, "e", ranks=4, steps=6, comm_us=100)
    doc = doc_of(tmp_path, folder)
    assert not any(f["id"] == "straggler" for f in doc["findings"])
    comm = findings_by(doc, "exposed-communication")
    assert sorted(comm) == [0, 1, 2, 3]
    assert {f["savings_us"] for f in comm.values()} == {100.0}
    assert all("see" not in f["evidence"] for f in comm.values())


# ---- the real 8-rank DLRM: one job, today's straggler ------------------------------------------


def test_dlrm_is_one_job_with_its_straggler_first(tmp_path: Path) -> None:
    dlrm = reference(SHARED_TRACES / "param-dlrm-8rank")
    doc = doc_of(tmp_path, dlrm)
    (job,) = doc["jobs"]
    assert job["ranks"] == list(range(8)) and job["world_size"] == 8 and job["notes"] == []
    (st,) = doc["ranks"]["stragglers"]
    # issue 7's reference: rank 7 arrives last at 5 of the 8 collectives, 1.31 ms per step
    assert (st["rank"], st["last_share"], st["wait_per_step_us"]) == (7, 5 / 8, 1310.0)
    assert st["wait_caused_us"] == 7 * 1310.0
    top = doc["findings"][0]
    assert (top["id"], top["rank"], top["savings_us"]) == ("straggler", 7, 1310.0)
    comm = findings_by(doc, "exposed-communication")
    assert 7 in comm and "see" not in comm[7]["evidence"]
    waiting = [r for r in comm if r != 7]
    assert waiting  # the other ranks' exposed communication is larger than their wait
    for r in waiting:
        e = evidence(comm[r])
        assert e["waiting_for_straggler_per_step"] == 1.31 and e["see"] == "straggler (rank 7)"
        assert comm[r]["savings_us"] == pytest.approx(
            1e3 * e["exposed_communication_per_step"] - 1310.0, abs=1e-3
        )
