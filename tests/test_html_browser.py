"""The HTML report opened in real headless Chromium: no console error, plots in the DOM, no
script from a trace runs, and a screenshot of each report at 1400 px width; the palette, the
legend's place and the step labels are read back from the laid-out page and its pixels.

Needs Debian's `chromium` (`.ci/run` installs it). Skipped without it, except under CI, where
a missing browser fails. Screenshots go to `$BADPUT_TEST_ARTIFACTS` when set, else to the
test's temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from badput.report.html_report import PARTS, parts_for
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
    "--force-device-scale-factor=1",  # one screenshot pixel per CSS pixel
    "--hide-scrollbars",
)
_WIDTH = 1400

# Page console messages, as Chromium logs them: `INFO:CONSOLE:1] "message", source: ...`.
_CONSOLE = re.compile(r":CONSOLE[:(]")

# Every PyTorch profiler trace in tests/data/traces (the Nsight exports are issue 10's), and
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


def _screenshot(chromium: str, page: Path, tmp_path: Path, name: str, height: int = 2000) -> Path:
    shot = tmp_path / "shot.png"
    _browse(chromium, page, tmp_path, f"--screenshot={shot}", f"--window-size={_WIDTH},{height}")
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


# Run by the test only, in its own copy of a report: after layout, the page's legend swatches
# (their computed colour and box), its plots' and step labels' boxes, as JSON in <pre id=probe>.
_PROBE = """<script>
addEventListener("load", () => {
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return [r.left + scrollX, r.top + scrollY, r.width, r.height];
  };
  const out = {swatches: [], plots: [], labels: []};
  document.querySelectorAll(".parts-legend").forEach((legend, n) => {
    legend.querySelectorAll("span[data-key]").forEach((s) => {
      const i = s.querySelector("i.swatch");
      out.swatches.push({legend: n, key: s.dataset.key, label: s.textContent,
                         colour: getComputedStyle(i).backgroundColor, box: box(i),
                         legend_box: box(legend)});
    });
  });
  document.querySelectorAll("svg.plot").forEach((p) =>
    out.plots.push({cls: p.getAttribute("class"), box: box(p)}));
  document.querySelectorAll("p.step-label b").forEach((b) =>
    out.labels.push({text: b.textContent, box: box(b)}));
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _probe(chromium: str, page: Path, tmp_path: Path) -> dict[str, Any]:
    """Lay out a copy of `page` with `_PROBE` in it; returns what the probe measured."""
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>", 1))
    dom = _browse(
        chromium, probed, tmp_path, "--dump-dom", f"--window-size={_WIDTH},2000",
        "--virtual-time-budget=10000",
    )  # fmt: skip
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    data: dict[str, Any] = json.loads(found[1].replace("&quot;", '"').replace("&amp;", "&"))
    return data


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG.

    Enough of the PNG specification (W3C, 2003: chunks, zlib stream, the five row filters)
    for Chromium's screenshots, with the standard library only.
    """
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(v for i, v in enumerate(line) if i % bpp < 3))
        prev = line
    return width, height, rows


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def test_png_reader_reads_what_zlib_wrote() -> None:
    # A 3x2 image with every filter type the reader undoes: it reads back the pixels.
    pixels = [
        [(230, 159, 0), (86, 180, 233), (0, 158, 115)],
        [(1, 2, 3), (250, 251, 252), (0, 0, 0)],
    ]

    def unfilter_none(row: list[tuple[int, int, int]]) -> bytes:
        return bytes(v for px in row for v in px)

    raw = b"".join(b"\x00" + unfilter_none(r) for r in pixels)
    sub_row = bytearray(unfilter_none(pixels[1]))
    sub = bytes([sub_row[i] - (sub_row[i - 3] if i >= 3 else 0) & 0xFF for i in range(9)])
    raw_sub = b"\x00" + unfilter_none(pixels[0]) + b"\x01" + sub
    for body in (raw, raw_sub):
        ihdr = struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0)

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + b"\0\0\0\0"

        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(body))
        w, h, rows = png_pixels(png + chunk(b"IEND", b""))
        assert (w, h) == (3, 2)
        assert [[tuple(r[3 * x : 3 * x + 3]) for x in range(3)] for r in rows] == pixels


@pytest.mark.parametrize(
    ("name", "runtime"),
    [("demo", "CUDA"), ("hta-amd-mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "HIP")],
)
def test_palette_legend_and_step_labels_in_browser(
    name: str,
    runtime: str,
    chromium: str,
    shared_traces: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The documented colours are what the browser paints, the legend is above the first
    step drawing, and "median step" comes before "longest step"."""
    demo = (
        Path(__file__).resolve().parents[1]
        / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"
    )
    page = _report(capsys, demo if name == "demo" else shared_traces / name, tmp_path)
    probe = _probe(chromium, page, tmp_path)
    expected = {key: (label, _rgb(colour)) for key, label, colour in parts_for(runtime)}
    first = [s for s in probe["swatches"] if s["legend"] == 0]
    assert [s["key"] for s in first] == [key for key, _, _ in PARTS]
    for s in probe["swatches"]:
        label, rgb = expected[s["key"]]
        assert s["label"] == label
        assert s["colour"] == "rgb({}, {}, {})".format(*rgb)
    # The legend is above the first step drawing (the steps' bars, timeline or pieces).
    steps = [p for p in probe["plots"] if re.search(r"step-bars|timeline|step-pieces", p["cls"])]
    assert steps, probe["plots"]
    legend_box = first[0]["legend_box"]
    assert legend_box[1] + legend_box[3] <= steps[0]["box"][1]
    window = next(p for p in probe["plots"] if "window-bars" in p["cls"])
    assert legend_box[1] + legend_box[3] <= window["box"][1]
    labels = [lab["text"] for lab in probe["labels"]]
    assert labels in (["median step", "longest step"], ["median step (also the longest)"])
    tops = [lab["box"][1] for lab in probe["labels"]]
    assert tops == sorted(tops)
    # The screenshot's pixel at the middle of each swatch of the first legend is its colour.
    bottom = max(int(s["box"][1] + s["box"][3]) for s in first)
    shot = _screenshot(chromium, page, tmp_path, f"palette-{runtime}", height=bottom + 200)
    width, height, rows = png_pixels(shot.read_bytes())
    assert width == _WIDTH and height >= bottom
    for s in first:
        x = int(s["box"][0] + s["box"][2] / 2)
        y = int(s["box"][1] + s["box"][3] / 2)
        assert tuple(rows[y][3 * x : 3 * x + 3]) == expected[s["key"]][1], s["key"]
