"""`badput report --out report.html`: a self-contained HTML file, checked without a browser."""

from __future__ import annotations

import itertools
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
    # Nothing is loaded from anywhere; the only URLs are the findings' reference links, which
    # a reader follows by clicking, and those are http(s) only.
    assert [u for u in checker.urls if u[:2] != ("a", "href")] == []
    assert [u for u in checker.urls if not re.match(r"https?://[^/\s]+\S*$", u[2])] == []
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


class _Order(HTMLParser):
    """The report's landmarks in document order: (what, detail) events.

    `section` (a GPU section starts), `legend` (a legend's class), `plot` (an svg's class),
    `finding` (a finding's id, from its `<code>`), `step-label` (the label's bold text),
    `kernel-row` (the cells of a row of the kernel table).
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.events: list[tuple[str, str]] = []
        self.kernel_rows: list[list[str]] = []
        self.kernel_head: list[str] = []
        self._capture: str | None = None
        self._text = ""
        self._in_finding = False
        self._in_kernels = False
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "section" and "device" in classes:
            self.events.append(("section", ""))
        if tag == "div" and "legend" in classes:
            self.events.append(("legend", " ".join(c for c in classes if c != "legend")))
        if tag == "svg" and "plot" in classes:
            self.events.append(("plot", " ".join(c for c in classes if c != "plot")))
        if tag == "li" and "finding" in classes:
            self._in_finding = True
        if tag == "code" and self._in_finding:
            self._capture, self._text = "finding", ""
        if tag == "p" and "step-label" in classes:
            self._capture, self._text = "step-label", ""
        if tag == "table":
            self._in_kernels = "kernels" in classes
        if self._in_kernels and tag == "tr":
            self._row = []
        if self._in_kernels and tag in ("td", "th"):
            self._capture, self._text = "cell", ""

    def handle_endtag(self, tag: str) -> None:
        if self._capture == "finding" and tag == "code":
            self.events.append(("finding", self._text))
            self._capture, self._in_finding = None, False
        elif self._capture == "step-label" and tag == "b":
            self.events.append(("step-label", self._text))
            self._capture = None
        elif self._capture == "cell" and tag in ("td", "th") and self._row is not None:
            self._row.append(self._text)
            self._capture = None
        elif tag == "tr" and self._row is not None:
            if self._row and not self.kernel_head:
                self.kernel_head = self._row
            elif self._row:
                self.kernel_rows.append(self._row)
            self._row = None
        elif tag == "table":
            self._in_kernels = False

    def handle_data(self, data: str) -> None:
        if self._capture:
            self._text += data


def _order(doc: str) -> _Order:
    parsed = _Order()
    parsed.feed(doc)
    parsed.close()
    return parsed


DEMO = (
    Path(__file__).resolve().parents[1] / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
)


@pytest.mark.parametrize(
    "name", ["demo", "param-dlrm-8rank", "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]
)
def test_legend_comes_before_the_drawings(
    name: str, shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, 2: the parts' legend comes before the first drawing that uses it, page-wide
    and in every GPU section."""
    doc, _ = _report(capsys, DEMO if name == "demo" else shared_traces / name, tmp_path)
    events = _order(doc).events
    uses = ("window-bars", "step-bars", "rank-bars", "timeline", "step-pieces")
    first_plot = next(i for i, (k, v) in enumerate(events) if k == "plot" and v in uses)
    first_legend = next(i for i, (k, v) in enumerate(events) if k == "legend")
    assert events[first_legend][1] == "parts-legend"
    assert first_legend < first_plot
    sections = [i for i, (k, _) in enumerate(events) if k == "section"] + [len(events)]
    assert len(sections) > 1
    for start, end in itertools.pairwise(sections):
        inside = events[start:end]
        kinds = [(k, v) for k, v in inside if k in ("legend", "plot")]
        assert kinds[0] == ("legend", "parts-legend"), kinds[:3]
        # No parts legend after the drawings any more: one per section, at its top.
        assert [v for k, v in inside if k == "legend"].count("parts-legend") == 1


def test_inside_a_step_is_labelled_median_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, 3: "median step" then "longest step", each over its own step's drawing."""
    analysis = analyze_json(capsys, DEMO)
    doc, _ = _report(capsys, DEMO, tmp_path)
    (d,) = analysis["devices"]
    by_length = sorted(d["steps"], key=lambda s: (s["dur_us"], s["start_us"]))
    median, longest = by_length[(len(by_length) - 1) // 2], by_length[-1]
    assert median["name"] != longest["name"]
    events = _order(doc).events
    labels = [(v, events[i + 1]) for i, (k, v) in enumerate(events) if k == "step-label"]
    assert [v for v, _ in labels] == ["median step", "longest step"]
    assert all(nxt == ("plot", "step-pieces") for _, nxt in labels)
    # The demo's longest step comes first in time: the order is by label, not by time.
    assert longest["start_us"] < median["start_us"]
    m = re.search(r"<b>median step</b> <small>([^:<]+):", doc)
    n = re.search(r"<b>longest step</b> <small>([^:<]+):", doc)
    assert m and n and (m[1], n[1]) == (median["name"], longest["name"])


@pytest.mark.parametrize(
    "name", ["demo", "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz"]
)
def test_kernel_table_has_share_of_kernel_time(
    name: str, shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, 4: each kernel row's share of the GPU's kernel time, memcpy/memset without."""
    path = DEMO if name == "demo" else shared_traces / name
    (d,) = analyze_json(capsys, path)["devices"]
    doc, _ = _report(capsys, path, tmp_path)
    parsed = _order(doc)
    assert parsed.kernel_head == [
        "name", "category", "count", "total ms", "% of kernel time", "mean us",
    ]  # fmt: skip
    assert len(parsed.kernel_rows) == min(10, len(d["kernels"]))
    for row, k in zip(parsed.kernel_rows, d["kernels"], strict=False):
        assert row[0] == k["name"]
        if k["category"] == "memory":
            assert row[4] == "–"
        else:
            # Printed to 0.1 %: within half a unit of the last digit.
            share = 100 * k["total_us"] / d["kernel_total_us"]
            assert float(row[4].removesuffix(" %")) == pytest.approx(share, abs=0.05)
    # The top-ops table has its share too, after the GPU time (of all GPU work: an op's time
    # holds its copies), to 0.1 %.
    assert "<th>GPU ms</th><th>% of GPU time</th>" in doc
    gpu_us = d["attribution"]["attributed_us"] + d["attribution"]["unattributed_us"]
    ops = re.search(r'<table class="ops">.*?</table>', doc, re.S)
    assert ops and d["ops"]
    rows = re.findall(r"<tr>(.*?)</tr>", ops[0].split("<tbody>", 1)[1], re.S)
    for row, op in zip(rows, d["ops"], strict=False):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        share = 100 * op["kernel_time_us"] / gpu_us
        assert float(cells[5].removesuffix(" %")) == pytest.approx(share, abs=0.05)


def _hostile_job_finding() -> Any:
    from badput.diagnose import Evidence, Finding

    return Finding(
        id="job_rule",
        title="<b>job</b> finding",
        severity="high",
        evidence={"kernels_per_step": Evidence(1216.0), "slow_ranks": Evidence(3, "ranks")},
        savings_ns=5e6,
        savings_share=0.2,
        fix=["do it"],
        refs=[
            'https://example.org/a?b=<c>&d="e"',
            "javascript:alert(1)",
            "http://",
            "docs/analysis.md",
            "https://ok.example/x y",
        ],
    )


def _job_with(tmp_path: Path, *extra: Any) -> Any:
    """A one-trace job with the demo-like synthetic trace, and `extra` job-level findings."""
    import dataclasses

    from badput.analysis import analyze_trace
    from badput.diagnose import Diagnosis, diagnose_job, outcome_of
    from badput.trace import load_trace

    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        t = 300 * i
        b.profiler_step(i + 1, t, t + 300)
        b.dataloader(t, t + 150)
        b.launch("gemm_kernel", cpu=(t + 150, t + 160), gpu=(t + 165, t + 290))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    job = diagnose_job([outcome_of(trace, analyze_trace(trace))])
    ranked = [*job.diagnosis.ranked, *extra]  # ranked last: the report must still lead with it
    return dataclasses.replace(job, diagnosis=Diagnosis(job.diagnosis.per_device, ranked))


def test_job_level_findings_come_first(
    shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, 5: job-level findings (a straggler, `device == -1`) before any GPU's."""
    from badput.report.html_report import render_html

    job = _job_with(tmp_path, _hostile_job_finding())
    assert job.diagnosis.ranked[0].id != "job_rule"
    events = _order(render_html(job)).events
    findings = [v for k, v in events if k == "finding"]
    assert findings[0] == "job_rule" and len(findings) > 1
    assert events.index(("finding", "job_rule")) < events.index(("section", ""))
    doc, _ = _report(capsys, shared_traces / "param-dlrm-8rank", tmp_path)
    events = _order(doc).events
    assert next(v for k, v in events if k == "finding") == "straggler"
    first_note = doc.find('class="note"')
    assert doc.index("<code>straggler</code>") < (first_note if first_note >= 0 else len(doc))


def test_evidence_has_labels_and_references_are_safe_links(tmp_path: Path) -> None:
    """Issue 20, 7: evidence in words with units; http(s) references as escaped links only."""
    from badput.report.html_report import render_html

    doc = render_html(_job_with(tmp_path, _hostile_job_finding()))
    assert "kernels_per_step" not in doc and " = 1216" not in doc
    assert "<dt>kernels per step</dt><dd>1,216</dd>" in doc
    assert "<dt>slow ranks</dt><dd>3 ranks</dd>" in doc
    checker = _Checker()
    checker.feed(doc)
    hrefs = [u[2] for u in checker.urls if u[:2] == ("a", "href")]
    # The job finding's link comes first (the parser unescapes attributes); the synthetic
    # trace's own findings link their documentation.
    assert hrefs[0] == 'https://example.org/a?b=<c>&d="e"'
    assert all(h.startswith("https://") for h in hrefs) and len(hrefs) > 1
    assert '<a href="https://example.org/a?b=&lt;c&gt;&amp;d=&quot;e&quot;"' in doc
    for text in ("javascript:alert(1)", "http://", "docs/analysis.md", "https://ok.example/x y"):
        assert f"<li><code>{_esc(text)}</code></li>" in doc
    assert "<b>job</b>" not in doc and "&lt;b&gt;job&lt;/b&gt; finding" in doc
    _offline(doc, checker)


def test_amd_trace_names_the_hip_runtime(
    shared_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, 8: an AMD/HIP trace's runtime part is "idle: HIP runtime/driver"."""
    path = shared_traces / "hta-amd-mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc, _ = _report(capsys, path, tmp_path)
    assert "CUDA runtime/driver" not in doc
    assert (
        '<span data-key="idle_runtime"><i class="swatch" style="background:#CC79A7"></i>'
        "idle: HIP runtime/driver</span>" in doc
    )
    assert "<title>idle: HIP runtime/driver: " in doc
    # A CUDA trace keeps its name.
    doc, _ = _report(capsys, DEMO, tmp_path)
    assert "HIP" not in doc and "idle: CUDA runtime/driver</span>" in doc


def test_diff_page_names_each_side(shared_traces: Path) -> None:
    """Issue 20, 6: each side's trace file and GPU name in the diff page's header."""
    import dataclasses

    from badput.analysis import analyze_trace
    from badput.analysis.diff import diff_traces
    from badput.report.html_report import render_diff_html
    from badput.trace import load_trace

    a = shared_traces / "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
    b = shared_traces / "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz"
    before, after = analyze_trace(load_trace(str(a))), analyze_trace(load_trace(str(b)))
    page = render_diff_html(diff_traces(before, after), before=before, after=after)
    heads = re.findall(r'<section class="diff-device"><h2>(.*?)</h2>', page)
    assert len(heads) == 1
    text = re.sub(r"<[^>]+>", "", heads[0])
    gpu_a = next(d.gpu for d in before if d.goodput is not None)
    gpu_b = next(d.gpu for d in after if d.goodput is not None)
    assert gpu_a and gpu_b and gpu_a != gpu_b
    assert text == f"before {a.name} · GPU 0 ({gpu_a}) → after {b.name} · GPU 0 ({gpu_b})"
    # A trace without a GPU name says so; without the analyses only files and indexes show.
    nameless = [dataclasses.replace(d, gpu=None) for d in after]
    page2 = render_diff_html(diff_traces(before, nameless), before=before, after=nameless)
    assert '(<span class="gpu-name">no GPU name in the trace</span>)</span></h2>' in page2
    bare = render_diff_html(diff_traces(before, after))
    assert "gpu-name" not in bare and f"<code>{b.name}</code> · GPU 0</span></h2>" in bare
    # Every change has its relative change beside it.
    assert "<th>change</th><th>change %</th>" in page
