"""`badput report --out report.html`: a self-contained HTML file, checked without a browser."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from synth import TraceBuilder, analyze_json, run_cli
from test_secrets import SECRETS, add_secrets

# Elements without an end tag in HTML; every other one must be closed, in order.
_VOID = {"meta", "br", "link", "img", "input", "hr", "col", "area", "base", "wbr", "source"}


class _Checker(HTMLParser):
    """Counts elements by class and checks that every element is closed in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.classes: dict[str, int] = {}
        self.tags: dict[str, int] = {}
        self.urls: list[tuple[str, str, str]] = []
        self.text: list[str] = []
        self._in: str | None = None
        self.cards: dict[str, str] = {}
        self._card: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        for cls in (a.get("class") or "").split():
            self.classes[cls] = self.classes.get(cls, 0) + 1
        for name in ("src", "href"):
            if a.get(name):
                self.urls.append((tag, name, a[name] or ""))
        if a.get("data-card"):
            self._card = a["data-card"]
        if self._card and a.get("class") == "value":
            self._in = self._card
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag == "div" and self._in:
            self._in = self._card = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in:
            self.cards[self._in] = self.cards.get(self._in, "") + data


def _report(capsys: Any, path: Path | str, tmp_path: Path, *extra: object) -> tuple[str, _Checker]:
    out = tmp_path / "report.html"
    code, stdout, err = run_cli(capsys, "report", path, "--out", out, *extra)
    assert code == 0, f"exit {code}; stderr: {err}"
    assert f"wrote {out}" in stdout
    doc = out.read_text(encoding="utf-8")
    checker = _Checker()
    checker.feed(doc)
    checker.close()
    assert checker.errors == []
    assert checker.stack == []
    return doc, checker


def _offline(doc: str, checker: _Checker) -> None:
    assert checker.tags.get("script", 0) == 0
    assert checker.tags.get("link", 0) == 0  # no external style sheet
    assert checker.tags.get("iframe", 0) == 0
    assert [u for u in checker.urls if re.match(r"\s*(https?:)?//", u[2])] == []
    assert "@import" not in doc and "url(" not in doc


def _goodput(devices: list[dict[str, Any]]) -> float:
    active = [d for d in devices if d["goodput"] is not None]
    window = sum(float(d["window_us"]) for d in active)
    return sum(float(d["breakdown_us"]["compute"]) for d in active) / window


TRACES = [
    "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz",
    "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "param-dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz",
    "param-dlrm-8rank",
]


@pytest.mark.parametrize("name", TRACES)
def test_real_trace_report(
    name: str, shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = shared_traces / name
    analysis = analyze_json(capsys, path)
    doc, checker = _report(capsys, path, tmp_path)
    _offline(doc, checker)
    devices = analysis["devices"]
    active = [d for d in devices if d["goodput"] is not None]
    assert checker.cards["goodput"] == f"{100 * _goodput(devices):.1f} %"
    gpus = sorted({d["gpu"] for d in active if d["gpu"]})
    assert checker.cards["GPU"] == (", ".join(gpus) or "unknown")
    # One stacked bar per step of each GPU, one timeline per GPU with steps.
    assert checker.classes.get("step-bar", 0) == sum(len(d["steps"]) for d in active)
    assert checker.classes.get("timeline-step", 0) == sum(len(d["steps"]) for d in active)
    assert checker.classes.get("timeline", 0) == sum(1 for d in active if d["steps"])
    assert checker.classes.get("window-bar", 0) == len(active)
    assert checker.classes.get("device", 0) == len(devices)
    ranks = {d["rank"] for d in active if d["rank"] is not None}
    assert checker.classes.get("rank-bar", 0) == (len(ranks) if len(ranks) >= 2 else 0)
    assert checker.classes.get("seg", 0) > 0
    # The top kernels are listed by name, escaped.
    for d in active:
        for k in d["kernels"][:3]:
            assert f'<td class="name">{_esc(k["name"])}</td>' in doc
    # Summaries only: far smaller than the trace, never its events.
    assert len(doc) < 1_000_000
    assert "traceEvents" not in doc


def _esc(s: str) -> str:
    import html

    return html.escape(s, quote=True)


def test_dlrm_ranks(
    shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, checker = _report(capsys, shared_traces / "param-dlrm-8rank", tmp_path)
    assert checker.classes["rank-bar"] == 8
    assert all(f">rank {r}</text>" in doc for r in range(8))
    assert "<h2>Communication</h2>" in doc


def test_html_payloads_render_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = "<script>alert(1)</script>"
    img = "<img src=x onerror=alert(1)>"
    b = TraceBuilder()
    b.device_properties([0], name=img)
    b.profiler_step(1, 0, 300)
    b.dataloader(0, 100)
    b.launch(script, cpu=(100, 110), gpu=(115, 200))
    b.launch("gemm_kernel", cpu=(110, 120), gpu=(200, 280))
    b.set_top("metadata", {"note": img, "environment": {"X": script}})
    add_secrets(b)
    path = b.write(tmp_path / "<svg onload=alert(1)>.pt.trace.json")
    doc, checker = _report(capsys, path, tmp_path)
    _offline(doc, checker)
    assert "<script" not in doc.lower()
    assert "<img" not in doc.lower()
    assert "<svg onload" not in doc.lower()
    assert checker.tags.get("img", 0) == 0
    assert _esc(script) in doc  # the kernel name is there, as text
    assert _esc(img) in doc  # the GPU name too
    assert script in "".join(checker.text)
    for value in SECRETS.values():
        assert value not in doc


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    code, _, err = run_cli(capsys, "report", missing, "--out", tmp_path / "r.html")
    assert code == 2
    assert err.count("\n") == 1 and str(missing) in err
    assert not (tmp_path / "r.html").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, "report", bad, "--out", tmp_path / "r.html")
    assert code == 2 and str(bad) in err and "Traceback" not in err
    ok = TraceBuilder()
    ok.profiler_step(1, 0, 100)
    ok.launch("k", cpu=(0, 10), gpu=(10, 90))
    good = ok.write(tmp_path / "ok.json")
    target = tmp_path / "no-such-dir" / "r.html"
    code, _, err = run_cli(capsys, "report", good, "--out", target)
    assert code == 2 and str(target) in err and err.count("\n") == 1


def test_failed_rank_is_left_out_and_strict_exits_2(
    shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report` shares `analyze`'s job runner: a bad trace is a warning, or exit 2 with --strict."""
    import shutil

    src = shared_traces / "param-dlrm-8rank"
    job = tmp_path / "job"
    job.mkdir()
    for f in sorted(src.glob("*.json.gz"))[:2]:
        shutil.copy(f, job / f.name)
    (job / "rank9.pt.trace.json").write_text("{not json")
    out = tmp_path / "r.html"
    code, _, err = run_cli(capsys, "report", job, "--out", out, "--jobs", "1")
    assert code == 0 and "rank9.pt.trace.json" in err and "left out; 2 of 3" in err
    assert out.read_text(encoding="utf-8").count('class="rank-bar"') == 2
    code, _, _ = run_cli(capsys, "report", job, "--out", out, "--strict")
    assert code == 2
    code, _, err = run_cli(capsys, "report", job, "--out", out, "--address", "auto")
    assert code == 2 and "--address needs --executor ray" in err
