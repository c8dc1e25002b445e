"""`badput bench ab` on two git refs (worktrees and venvs) and `--store`.

The project under test is a tiny pure-Python package in a temporary git repository. Its build
backend lives in the repository itself (`backend-path`), with no build requirements, so that
`pip install` needs no index and no setuptools/wheel: the tests run offline. Each install
costs a venv (a few seconds, most of it ensurepip), so the slow tests share one repository.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from badput.bench.gitrefs import _last_line, merge_base, repo_root, resolve_commit
from badput.bench.store import Store
from badput.cli.app import main
from badput.errors import UsageError

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or importlib.util.find_spec("ensurepip") is None,
    reason="needs git and a Python that can create venvs",
)

PYPROJECT = """\
[build-system]
requires = []
build-backend = "_backend"
backend-path = ["."]
"""

# A PEP 517 backend that packs abmod.py into a wheel: no setuptools, no downloads.
BACKEND = """\
import base64, hashlib, os, zipfile

DIST = "abdemo-0.1.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "abdemo-0.1-py3-none-any.whl"
    with open("abmod.py", "rb") as f:
        files = {"abmod.py": f.read()}
    files[DIST + "/METADATA"] = b"Metadata-Version: 2.1\\nName: abdemo\\nVersion: 0.1\\n"
    files[DIST + "/WHEEL"] = (
        b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    )
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        record.append(DIST + "/RECORD,,")
        z.writestr(DIST + "/RECORD", "\\n".join(record) + "\\n")
    return name
"""

# The benchmark: a pure-Python loop, N iterations (about 40 ms at N = 400k on a slow core).
MODULE = """\
N = {n}


def bench():
    total = 0
    for i in range(N):
        total += i * i
    return total
"""

COMMAND = "python -c 'import abmod; abmod.bench()'"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
         "-c", "commit.gpgsign=false", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # fmt: skip


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text, encoding="utf-8")
    _git(repo, "add", *files)
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


class Project(NamedTuple):
    repo: Path
    fast: str
    slow: str
    broken: str


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A git repository: `fast`, then `slow` (3x the work), then `broken` (bad pyproject);
    and a branch `side` off `fast` with one commit of its own."""
    repo = tmp_path_factory.mktemp("abrepo").resolve()
    _git(repo, "init", "-q")
    fast = _commit(
        repo,
        {"pyproject.toml": PYPROJECT, "_backend.py": BACKEND, "abmod.py": MODULE.format(n=400_000)},
        "fast",
    )
    _git(repo, "checkout", "-q", "-b", "side")
    _commit(repo, {"NOTES.txt": "a side branch\n"}, "side")
    _git(repo, "checkout", "-q", fast)
    slow = _commit(repo, {"abmod.py": MODULE.format(n=1_200_000)}, "slow: 3x the work")
    _git(repo, "tag", "v-slow")
    broken = _commit(repo, {"pyproject.toml": "[build-system\n"}, "broken pyproject")
    _git(repo, "checkout", "-q", slow)
    return Project(repo, fast, slow, broken)


def _worktrees(repo: Path) -> list[str]:
    out = _git(repo, "worktree", "list", "--porcelain")
    return [line for line in out.splitlines() if line.startswith("worktree ")]


def _ab_refs(repo: Path, base: str, head: str, *extra: str) -> int:
    # 8 rounds, extended up to 24 while inconclusive: a 3x change decides at the first look on
    # a quiet machine, and a loaded one (a CI runner, other tests) gets more rounds, not a flake.
    return main(
        [
            "bench", "ab", "--repo", str(repo), "--base-ref", base, "--head-ref", head,
            "--command", COMMAND, "--rounds", "8", "--max-rounds", "24", "--alpha", "0.05",
            "--min-effect", "0.2", *extra,
        ]
    )  # fmt: skip


# ---- the slow ones: each installs one or two venvs ------------------------------------------


def test_refs_regression_recorded_in_store(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = project.repo
    out, db_path = tmp_path / "ab.json", tmp_path / "bench.sqlite"
    # --merge-base: the base is where `side` forked from v-slow's history, i.e. `fast`.
    code = _ab_refs(
        repo, "side", "v-slow", "--merge-base", "--json", str(out), "--store", str(db_path)
    )
    captured = capsys.readouterr()
    assert code == 1, captured.err
    doc = json.loads(out.read_text())
    (r,) = doc["results"]
    assert r["decision"] == "regression" and r["metric"] == "wall_s" and r["effect"] > 0.2
    assert f"base: merge-base(side, v-slow) = {project.fast}" in doc["notes"]
    assert f"head: v-slow = {project.slow}" in doc["notes"]
    assert "base: " in captured.err and "pip install" in captured.err  # progress lines
    assert _worktrees(repo) == [f"worktree {repo}"]  # temporary worktrees removed
    with Store.open(db_path) as db:
        points = db.series("command", "wall_s", purposes=("ab_base", "ab_head"))
        assert {(p.purpose, p.commit) for p in points} == {
            ("ab_base", project.fast),
            ("ab_head", project.slow),
        }
        (verdict,) = db.verdicts()
        assert verdict["decision"] == "regression"


def test_refs_improvement_with_venv_options(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = project.repo
    out = tmp_path / "ab.json"
    code = _ab_refs(
        repo,
        "v-slow",
        project.fast,
        "--install-args=--no-deps --no-build-isolation",
        "--python",
        sys.executable,
        "--system-site-packages",
        "--json",
        str(out),
    )
    assert code == 0, capsys.readouterr().err
    (r,) = json.loads(out.read_text())["results"]
    assert r["decision"] == "improvement" and r["effect"] < -0.2
    assert _worktrees(repo) == [f"worktree {repo}"]


def test_refs_install_failure_is_infrastructure(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = project.repo
    code = _ab_refs(repo, project.broken, "v-slow")
    err = capsys.readouterr().err
    assert code == 3
    assert "badput: error: base: installing" in err
    assert "TOMLDecodeError" in err or "']'" in err  # pip's own last line, not boilerplate
    assert _worktrees(repo) == [f"worktree {repo}"]


# ---- fast: usage errors and the store, no venv --------------------------------------------


def test_unknown_ref_exits_2_before_any_checkout(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = project.repo
    assert _ab_refs(repo, "v-slow", "no-such-branch") == 2
    err = capsys.readouterr().err
    assert err.startswith("badput: error: ") and "'no-such-branch'" in err
    assert _worktrees(repo) == [f"worktree {repo}"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--base", "true", "--head", "true", "--base-ref", "a", "--head-ref", "b"], "not both"),
        (["--base-ref", "a", "--head-ref", "b"], "--command"),
        (["--base-ref", "a", "--command", "true"], "--head-ref"),
        (["--base", "true"], "--head"),
        ([], "--base"),
        (["--base", "true", "--head", "true", "--command", "x"], "--command only go"),
        (["--base", "true", "--head", "true", "--merge-base"], "--merge-base only go"),
        (["--base", "true", "--head", "true", "--store", "ftp://host/db"], "store URL"),
        (["--base", "true", "--head", "true", "--store", "sqlite://rel"], "sqlite:///PATH"),
    ],
)
def test_usage_errors_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "ab", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("badput: error: ") and needle in err


def test_bad_store_url_fails_before_any_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    cmd = f"touch {marker}"
    assert main(["bench", "ab", "--base", cmd, "--head", cmd, "--store", "nope://x"]) == 2
    assert not marker.exists()
    assert "unknown store URL scheme" in capsys.readouterr().err


def test_not_a_git_repository_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _ab_refs(tmp_path, "main", "HEAD") == 2
    assert "not inside a git repository" in capsys.readouterr().err


def test_store_in_command_mode(tmp_path: Path) -> None:
    db_path = tmp_path / "s" / "bench.sqlite"

    def cmd(t: float) -> str:
        return f'{sys.executable} -c "print(\'{{\\"t\\": {t}}}\')"'

    code = main(
        [
            "bench", "ab", "--base", cmd(1.0), "--head", cmd(1.0), "--metric", "t",
            "--rounds", "4", "--max-rounds", "4", "--store", f"sqlite:///{db_path}",
        ]
    )  # fmt: skip
    assert code == 0
    with Store.open(db_path) as db:
        points = db.series("command", "t", purposes=("ab_base", "ab_head"))
        assert sorted(p.purpose for p in points) == ["ab_base", "ab_head"]
        assert all(p.commit == "" and p.value == 1.0 for p in points)
        assert [v["decision"] for v in db.verdicts()] == ["no_change"]


def test_resolve_merge_base_and_subdirectory(project: Project, tmp_path: Path) -> None:
    repo = project.repo
    assert resolve_commit(repo, "v-slow") == project.slow
    assert resolve_commit(repo, project.fast[:10]) == project.fast
    for bad in ("nope", "-x", ""):
        with pytest.raises(UsageError):
            resolve_commit(repo, bad)
    assert merge_base(repo, project.broken, project.slow) == project.slow
    sub = repo / "pkg"
    sub.mkdir(exist_ok=True)
    assert repo_root(sub) == (repo.resolve(), "pkg/")
    with pytest.raises(UsageError, match="no such directory"):
        repo_root(tmp_path / "missing")


def test_pip_error_line_skips_boilerplate() -> None:
    out = "\n".join(
        [
            "  error: subprocess-exited-with-error",
            "  │ exit code: 1",
            "      error: invalid command 'bdist_wheel'",
            "      [end of output]",
            "note: This error originates from a subprocess, and is likely not a problem with pip.",
            "error: metadata-generation-failed",
            "× Encountered error while generating package metadata.",
            "╰─> See above for output.",
            "hint: See above for details.",
        ]
    )
    proc = subprocess.CompletedProcess(["pip"], 1, stdout="", stderr=out)
    assert _last_line(proc) == "error: invalid command 'bdist_wheel'"
    assert _last_line(subprocess.CompletedProcess(["x"], 2, "", "")) == "exit code 2"


def test_store_failure_after_the_run_exits_3_and_keeps_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def locked(*_args: object, **_kwargs: object) -> list[str]:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(Store, "record_ab", locked)
    out = tmp_path / "ab.json"
    args = ["--base", "true", "--head", "true", "--rounds", "2", "--max-rounds", "2"]
    code = main(["bench", "ab", *args, "--json", str(out), "--store", str(tmp_path / "s.db")])
    assert code == 3
    assert json.loads(out.read_text())["results"]  # the verdict was written first
    err = capsys.readouterr().err
    assert "could not record the verdict in the store: OperationalError: database is locked" in err
