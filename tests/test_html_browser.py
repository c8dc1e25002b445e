"""The HTML report opened in real headless Chromium: no console error, plots in the DOM, no
script from a trace runs, and a screenshot of each report.

Needs Debian's `chromium` (`.ci/run` installs it). Skipped without it, except under CI, where
a missing browser fails. Screenshots go to `$BADPUT_TEST_ARTIFACTS` when set, else to the
test's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from synth import TraceBuilder, run_cli

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--log-level=0",
)

# Page console messages, as Chromium logs them: `INFO:CONSOLE:1] "message", source: ...`.
_CONSOLE = re.compile(r":CONSOLE[:(]")

# Every PyTorch profiler trace in ../shared/traces (the Nsight exports are issue 10's), and
# the 8 DLRM ranks together.
REAL = [
    "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz",
    "kineto-resnet50/worker0.1623143566756.pt.trace.json.gz",
    "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens-h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "kineto-edge/before_fix_trace.json",
    "kineto-edge/after_fix_trace.json",
    "kineto-edge/gpu_metrics_input.json",
    "param-dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz",
    "param-dlrm-8rank",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium not found (.ci/run installs the Debian package)")
        pytest.skip("chromium not found: apt-get install chromium")
    return found


def _browse(chromium: str, page: Path, tmp_path: Path, *mode: str) -> str:
    """Open `page` in a fresh profile; returns stdout, fails on any page console message."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    done = subprocess.run(
        [chromium, *_FLAGS, f"--user-data-dir={profile}", *mode, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if _CONSOLE.search(line)]
    assert console == []
    return done.stdout


def _report(capsys: pytest.CaptureFixture[str], path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "report.html"
    code, _, err = run_cli(capsys, "report", path, "--out", out)
    assert code == 0, err
    return out


def _screenshot(chromium: str, page: Path, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / "shot.png"
    _browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2000")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    artifacts = os.environ.get("BADPUT_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / f"report-{name}.png")
    return shot


@pytest.mark.parametrize("name", REAL)
def test_real_trace_in_browser(
    name: str,
    chromium: str,
    shared_traces: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = _report(capsys, shared_traces / name, tmp_path)
    source = page.read_text(encoding="utf-8")
    dom = _browse(chromium, page, tmp_path, "--dump-dom")
    # The browser built every plot element the file holds; every trace has a window bar, and
    # traces with steps have step bars, the timeline and the in-step pieces.
    steps = 'class="step-bar"' in source
    for cls in ("step-bar", "timeline-step", "piece", "window-bar", "seg"):
        expected = len(re.findall(rf'class="{cls}"', source))
        assert expected > 0 or (not steps and cls in ("step-bar", "timeline-step", "piece"))
        assert len(re.findall(rf'class="{cls}"', dom)) == expected
    assert dom.count("<svg") == source.count("<svg") > 0
    if name == "param-dlrm-8rank":
        assert len(re.findall(r'class="rank-bar"', dom)) == 8
    _screenshot(chromium, page, tmp_path, name.replace("/", "_"))


def test_payloads_do_not_run_in_browser(
    chromium: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = "document.body.setAttribute('data-pwned','1')"
    payloads = [
        "<script>alert(1)</script>",
        f"<script>{marker}</script>",
        f'<img src=x onerror="{marker}">',
    ]
    b = TraceBuilder()
    b.device_properties([0], name=payloads[2])
    b.profiler_step(1, 0, 300)
    b.dataloader(0, 100)
    b.launch(payloads[0], cpu=(100, 110), gpu=(115, 200))
    b.launch(payloads[1], cpu=(110, 120), gpu=(200, 280))
    b.set_top("metadata", {"note": payloads[2]})
    path = b.write(tmp_path / "<img src=x onerror=alert(2)>.pt.trace.json")
    page = _report(capsys, path, tmp_path)
    dom = _browse(chromium, page, tmp_path, "--dump-dom")
    assert "data-pwned" not in dom.replace(marker, "")
    assert "<script" not in dom and "<img" not in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # shown as text
    _screenshot(chromium, page, tmp_path, "payloads")
