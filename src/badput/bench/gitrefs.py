"""Two git refs of a Python project, each checked out and installed in its own environment.

The A/B gate's git-refs mode (`badput bench ab --base-ref REF --head-ref REF`) compares two
commits rather than two commands: each ref is resolved to a commit, checked out into a
temporary worktree (`git worktree add --detach`), given its own venv, and installed there with
`pip install`. The benchmark command then runs in the worktree with that venv first on PATH.
Every worktree and venv is removed afterwards, on failure too.

Errors: an unknown ref or a directory outside a git repository is a `UsageError` (exit 2); a
checkout, venv or install that fails is a `BenchmarkInfraError` (exit 3). Nothing here prints;
progress goes to a callback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from badput.bench.ab import BenchmarkInfraError, Side
from badput.errors import UsageError

__all__ = ["Checkout", "checkouts", "merge_base", "repo_root", "resolve_commit"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Checkout:
    """One ref, checked out and installed: where it lives and how to run a command in it."""

    label: str
    ref: str
    commit: str
    worktree: Path
    project: Path
    venv: Path

    @property
    def bin_dir(self) -> Path:
        """The venv's scripts directory (bin, or Scripts on Windows)."""
        return self.venv / ("Scripts" if os.name == "nt" else "bin")

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.bin_dir / ("python.exe" if os.name == "nt" else "python")

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with the venv activated."""
        env = dict(os.environ if base is None else base)
        env.pop("PYTHONHOME", None)
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = os.pathsep.join(p for p in (str(self.bin_dir), env.get("PATH", "")) if p)
        return env

    def side(self, command: str, timeout_s: float = 600.0) -> Side:
        """`command` as an A/B side: run in the project directory, with the venv active."""
        return Side(command, timeout_s=timeout_s, cwd=str(self.project), env=self.environ())


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise BenchmarkInfraError("git is not installed (git-refs mode needs it)") from None


# pip's closing boilerplate: notes, hints, boxes, slugs ("error: metadata-generation-failed").
_BOILERPLATE = re.compile(r"^(note:|hint:|[×│╰╭]|\[end of output\]|error: [a-z-]+$)", re.IGNORECASE)


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The last line of a failed command's output that says what went wrong."""
    text = proc.stderr if proc.stderr.strip() else proc.stdout
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    telling = [ln for ln in lines if not _BOILERPLATE.match(ln)] or lines
    return telling[-1][:300] if telling else f"exit code {proc.returncode}"


def repo_root(directory: str | os.PathLike[str]) -> tuple[Path, str]:
    """The top of the git work tree holding `directory`, and `directory`'s path inside it.

    Raises:
        UsageError: `directory` is missing or not inside a git work tree.
    """
    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"{directory}: no such directory")
    proc = _git(d, "rev-parse", "--show-toplevel", "--show-prefix")
    if proc.returncode != 0:
        raise UsageError(f"{directory}: not inside a git repository")
    top, _, prefix = proc.stdout.partition("\n")
    return Path(top.strip()), prefix.strip()


def resolve_commit(repo: str | os.PathLike[str], ref: str) -> str:
    """The full sha of the commit `ref` names in `repo`.

    Raises:
        UsageError: `ref` names no commit there.
    """
    if not ref or ref.startswith("-"):
        raise UsageError(f"{ref!r} is not a git ref")
    proc = _git(
        Path(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"
    )
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not sha:
        raise UsageError(f"unknown git ref {ref!r} (no such commit in {repo})")
    return sha


def merge_base(repo: str | os.PathLike[str], a: str, b: str) -> str:
    """The best common ancestor of commits `a` and `b` (the PR gate's base).

    Raises:
        UsageError: the two have no common ancestor.
    """
    proc = _git(Path(repo), "merge-base", "--end-of-options", a, b)
    sha = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not sha:
        raise UsageError(f"commits {a[:12]} and {b[:12]} have no merge base")
    return sha[0]


def _run_step(argv: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            check=False,
            env=dict(env) if env is not None else None,
        )
    except OSError as e:
        raise BenchmarkInfraError(f"{what} failed: {e}") from None
    if proc.returncode != 0:
        raise BenchmarkInfraError(f"{what} failed: {_last_line(proc)}")


@contextmanager
def checkouts(
    repo: str | os.PathLike[str],
    refs: Sequence[tuple[str, str]],
    *,
    install_args: Sequence[str] = (),
    python: str | None = None,
    system_site_packages: bool = False,
    use_merge_base: bool = False,
    progress: Progress | None = None,
) -> Iterator[list[Checkout]]:
    """Check out and install each (label, ref) of `repo`; remove everything on exit.

    Every ref is resolved before anything is checked out, so a typo costs no install.

    Args:
        repo: A directory inside the repository; the project installed is the one there (a
            subdirectory of the repository works: its path is kept inside each worktree).
        refs: (label, ref) pairs, e.g. [("base", "main"), ("head", "HEAD")].
        install_args: Extra `pip install` arguments (e.g. --no-deps, --no-build-isolation).
        python: Interpreter that creates the venvs (default: this one).
        system_site_packages: Give the venvs access to that interpreter's site-packages.
        use_merge_base: Replace the first ref's commit by its merge base with the last ref's.
        progress: Called with a short line before each slow step.

    Raises:
        UsageError: `repo` is not in a git repository, or a ref is unknown.
        BenchmarkInfraError: a worktree, venv or install failed.
    """
    say = progress or (lambda _line: None)
    top, prefix = repo_root(repo)
    resolved = [(label, ref, resolve_commit(top, ref)) for label, ref in refs]
    if use_merge_base and len(resolved) >= 2:
        label, ref, sha = resolved[0]
        mb = merge_base(top, sha, resolved[-1][2])
        resolved[0] = (label, f"merge-base({ref}, {resolved[-1][1]})", mb)
    tmp = Path(tempfile.mkdtemp(prefix="badput-ab-"))
    added: list[Path] = []
    try:
        out: list[Checkout] = []
        for label, ref, sha in resolved:
            tree = tmp / label / "src"
            say(f"{label}: {ref} = {sha[:12]}: checking out")
            proc = _git(top, "worktree", "add", "--detach", str(tree), sha)
            if proc.returncode != 0:
                raise BenchmarkInfraError(f"{label}: git worktree add failed: {_last_line(proc)}")
            added.append(tree)
            project = tree / prefix if prefix else tree
            c = Checkout(label, ref, sha, tree, project, tmp / label / "venv")
            say(f"{label}: creating a venv")
            venv_argv = [python or sys.executable, "-m", "venv", str(c.venv)]
            if system_site_packages:
                venv_argv.insert(3, "--system-site-packages")
            _run_step(venv_argv, f"{label}: creating the venv")
            say(f"{label}: pip install {' '.join([*install_args, str(project)])}")
            env = c.environ()
            env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
            _run_step(
                [str(c.python), "-m", "pip", "install", "-q", *install_args, str(project)],
                f"{label}: installing {ref} ({sha[:12]})",
                env=env,
            )
            out.append(c)
        yield out
    finally:
        for tree in added:
            _git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        if added:
            _git(top, "worktree", "prune")
