"""The repository stands on its own: its docs link inside it, the reference traces are in it,
and `make demo` prints the report, not pip's output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA_TRACES, SHARED_TRACES

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target): a Markdown inline link; the target ends at a blank or ")".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_docs_have_links_to_check() -> None:
    # the link test below cannot pass by finding none
    assert len(relative_links(REPO / "README.md")) >= 20


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves_in_the_repo(doc: Path) -> None:
    for target in relative_links(doc):
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(REPO), f"{doc.name}: {target} leaves the repository"
        assert path.exists(), f"{doc.name}: {target} does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_points_outside_the_repo(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert "../shared" not in text and "/work/shared" not in text


# ---- the reference traces ------------------------------------------------------------------

MANIFEST = DATA_TRACES / "MANIFEST.md"
# A file name in backquotes: `worker0.1623143089861.pt.trace.json.gz`, `GEMM.csv`.
FILE_NAME = re.compile(r"`([\w.+-]+\.(?:json|gz|jsonl|csv|log|sqlite))`")


def manifest_entries() -> list[tuple[str, list[str]]]:
    """(folder, file names its row mentions) for each row of the MANIFEST's table."""
    rows = []
    for line in MANIFEST.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`([\w./-]+)/`\s*\|", line)
        if m:
            rows.append((m.group(1), FILE_NAME.findall(line)))
    return rows


def test_default_data_directory_is_in_the_repo() -> None:
    assert DATA_TRACES == REPO / "tests" / "data" / "traces"
    assert DATA_TRACES.is_dir() and MANIFEST.is_file()
    if "BADPUT_SHARED_TRACES" not in os.environ:
        assert SHARED_TRACES == DATA_TRACES


def test_every_manifest_entry_is_there() -> None:
    entries = manifest_entries()
    assert len(entries) == 10  # the table's rows; a MANIFEST that parses to none fails here
    for folder, names in entries:
        where = DATA_TRACES / folder
        assert where.is_dir(), folder
        assert (where / "LICENSE").is_file(), f"{folder}: no LICENSE"
        present = {p.name for p in where.rglob("*") if p.is_file()}
        for name in names:
            assert name in present, f"{folder}/{name}"
        assert present - {"LICENSE"}, f"{folder} holds no data"


def test_manifest_names_real_files() -> None:
    # the parse above finds the files named in backquotes (21 in today's MANIFEST)
    assert sum(len(names) for _, names in manifest_entries()) >= 20


def test_reference_traces_are_tracked_by_git() -> None:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "tests/data"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ignored == ""  # no .gitignore pattern (*.json, *.gz, ...) drops a reference file


# ---- make demo: the report, not pip's output -------------------------------------------------

FAKE_PY = r"""#!/bin/sh
# `python3 -m venv DIR` making a venv whose pip is noisy and whose badput prints its argv
[ "$1" = "-m" ] && [ "$2" = "venv" ] || exit 3
mkdir -p "$3/bin"
cat > "$3/bin/python" <<'EOF'
#!/bin/sh
i=0
while [ $i -lt 40 ]; do echo "WARNING: pip noise $i" >&2; i=$((i+1)); done
echo "pip $*"
[ -z "$FAKE_PIP_FAIL" ]
EOF
printf '#!/bin/sh\necho "REPORT $*"\n' > "$3/bin/badput"
chmod +x "$3/bin/python" "$3/bin/badput"
"""


def run_make(tmp: Path, target: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "-f", str(REPO / "Makefile"), target, f"PY={tmp / 'fakepy'}"],
        cwd=tmp,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def make_dir(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    (tmp_path / "fakepy").write_text(FAKE_PY)
    (tmp_path / "fakepy").chmod(0o755)
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def test_make_demo_prints_one_line_then_the_report(make_dir: Path) -> None:
    done = run_make(make_dir, "demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "badput: installing into .venv (pip's log: .venv/pip.log)",
        "REPORT analyze src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz",
    ]
    assert done.stderr == ""
    log = (make_dir / ".venv" / "pip.log").read_text()
    # both pip runs and the bytecode compile, kept for whoever asks
    assert log.count("WARNING: pip noise") == 120
    assert "pip -m compileall -q src/badput" in log
    # installed: the next demo is the report alone
    again = run_make(make_dir, "demo")
    assert again.returncode == 0
    assert again.stdout.splitlines() == [
        "REPORT analyze src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
    ]


def test_make_shows_pips_log_when_pip_fails(make_dir: Path) -> None:
    done = run_make(make_dir, "demo", FAKE_PIP_FAIL="1")
    assert done.returncode != 0
    assert "REPORT" not in done.stdout
    assert done.stderr.count("WARNING: pip noise") == 40  # the first pip run failed: its log
    assert "badput: pip failed; its log: .venv/pip.log" in done.stderr
