"""The HTML report's critical-path section (issue 19, views): breakdown bar, top ops, queues."""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from badput.analysis import analyze_trace
from badput.diagnose import RankOutcome, diagnose_job, outcome_of
from badput.report.html_report import PATH_PARTS, queue_plot, render_html
from badput.report.units import format_ms
from badput.trace import load_trace
from synth import NCCL_ALLREDUCE, TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
COPY = "copy<b>&</b>"  # an op name that must come out as text
_BAR_W = 900  # `_stacked_bars`: pixels of the longest bar


def _outcome(tmp_path: Path) -> RankOutcome:
    # Three steps of 100 us: an op launching two GEMMs on stream 7, a copy on stream 8 and
    # an all-reduce on stream 20, then a sync: host, launch delay, GPU work of each kind.
    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        t = 100 * i
        b.profiler_step(i + 1, t, t + 100)
        b.cpu_op("aten::mm", t + 2, t + 30)
        b.launch(GEMM, cpu=(t + 4, t + 8), gpu=(t + 12, t + 30))
        b.launch(GEMM, cpu=(t + 10, t + 14), gpu=(t + 31, t + 50))
        b.cpu_op(COPY, t + 32, t + 40)
        b.launch("Memcpy HtoD", kind="memcpy", cpu=(t + 33, t + 36), gpu=(t + 52, t + 60), stream=8)
        b.cpu_op("c10d::allreduce_", t + 41, t + 48)
        b.launch(NCCL_ALLREDUCE, cpu=(t + 42, t + 45), gpu=(t + 61, t + 80), stream=20)
        b.runtime("cudaDeviceSynchronize", t + 50, t + 82)
        b.cpu_op("aten::add", t + 84, t + 96)
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    return outcome_of(trace, analyze_trace(trace), top=10)


class _Svg(HTMLParser):
    """The rects of the critical-path bar and the queue-depth polylines of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.in_bar = False
        self.in_rect = False
        self.rects: list[tuple[float, float, str]] = []  # (x, width, fill)
        self.titles: list[str] = []
        self.polylines: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.in_bar = "path-bars" in (a.get("class") or "")
        if tag == "rect" and self.in_bar and a.get("class") == "seg":
            self.rects.append((float(a["x"] or 0), float(a["width"] or 0), a["fill"] or ""))
            self.in_rect = True
        if tag == "polyline" and a.get("class") == "queue-depth":
            self.polylines.append(a["points"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.in_bar = False
        if tag == "rect":
            self.in_rect = False

    def handle_data(self, data: str) -> None:
        if self.in_rect:
            self.titles.append(data)


def _parse(page: str) -> _Svg:
    p = _Svg()
    p.feed(page)
    p.close()
    return p


def test_critical_path_section(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path)
    (d,) = outcome.devices
    cp = d.critical_path
    assert cp is not None and cp.length_ns > 0
    assert cp.graph is None  # the compact copy a report gets
    page = render_html(diagnose_job([outcome]))
    assert page.count("<h3>Critical path</h3>") == 1
    section = page[page.index("<h3>Critical path</h3>") :]

    # One bar, its segments in PATH_PARTS order, widths proportional to the breakdown.
    svg = _parse(page)
    colours = {key: colour for key, _, colour in PATH_PARTS}
    labels = {key: label for key, label, _ in PATH_PARTS}
    parts = [(k, cp.breakdown_ns[k]) for k, _, _ in PATH_PARTS if cp.breakdown_ns[k] > 0]
    assert len(parts) >= 3
    assert [fill for _, _, fill in svg.rects] == [colours[k] for k, _ in parts]
    for (key, ns), (_, width, _), title in zip(parts, svg.rects, svg.titles, strict=True):
        assert width == pytest.approx(_BAR_W * ns / cp.length_ns, abs=0.006)
        assert title.startswith(f"{labels[key]}: ")
    assert sum(w for _, w, _ in svg.rects) == pytest.approx(_BAR_W, abs=0.01 * len(parts))
    xs = [x for x, _, _ in svg.rects]
    assert xs == sorted(xs)

    # Length, per step.
    length = re.search(r'<p class="path-length">(.*?)</p>', section)
    assert length is not None
    assert f"<b>{format_ms(cp.length_ns)} ms</b>" in length.group(1)
    assert f"{format_ms(cp.length_ns / 3)} ms per step" in length.group(1)
    assert "per step over 3 steps" in length.group(1)

    # The top ops, as the analysis ranks them.
    table = re.search(r'<table class="path-ops">(.*?)</table>', section, re.S)
    assert table is not None
    rows = re.findall(r"<tr><td[^>]*>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", table.group(1))
    assert [html.unescape(r[0]) for r in rows] == [op for op, _ in cp.top_ops[:10]]
    assert COPY in dict(cp.top_ops) and "copy&lt;b&gt;&amp;&lt;/b&gt;" in table.group(1)
    for (_, ms, _), (_, ns) in zip(rows, cp.top_ops, strict=False):
        assert ms == format_ms(ns)
    for (_, _, pct), (_, ns) in zip(rows, cp.top_ops, strict=False):
        assert pct == f"{100 * ns / cp.length_ns:.1f} %"

    # The queue depth over the typical step: one line per stream.
    assert d.launch is not None and d.launch.typical_queues
    assert "Queue depth over the typical step" in section
    assert len(svg.polylines) == len(d.launch.typical_queues)
    for q in d.launch.typical_queues:
        assert f"stream {q.stream}" in section
    assert "<script" not in page


def test_no_section_without_a_path(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path)
    bare = dataclasses.replace(
        outcome, devices=[dataclasses.replace(d, critical_path=None) for d in outcome.devices]
    )
    page = render_html(diagnose_job([bare]))
    assert "Critical path" not in page
    assert 'class="path-bar' not in page
    assert 'class="queue-depth"' not in page
    assert 'class="window-bar"' in page  # the rest of the section is there


def test_queue_plot_steps_and_escapes() -> None:
    import numpy as np

    from badput.analysis.launch import QueueSeries

    q = QueueSeries(7, np.array([0, 500, 1000], np.int64), np.array([1, 3, 0], np.int64), True)
    svg = queue_plot([q], (0, 2000))
    (points,) = re.findall(r'class="queue-depth"[^>]*points="([^"]*)"', svg)
    pts = [tuple(map(float, p.split(","))) for p in points.split()]
    # A step line: each depth holds to the next change, the last to the span's end.
    assert len(pts) == 6
    assert pts[0][0] == 70 and pts[-1][0] == pytest.approx(1060)
    assert pts[1][1] == pts[0][1] and pts[2][0] == pts[1][0]
    ys = [y for _, y in pts]
    assert min(ys) == pytest.approx(8)  # depth 3 at the top
    assert f">{format_ms(2000)} ms</text>" in svg  # the span's length at the axis' end
    assert "stream 7" in svg
    assert queue_plot([]) == ""
