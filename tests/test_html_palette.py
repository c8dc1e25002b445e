"""The HTML report's palette: parts stay apart in normal and colour-blind vision.

Colour differences are CIEDE2000 (Sharma, Wu and Dalal 2005) between colours in CIELAB (D65);
colour-blind vision is simulated with the severity-1.0 matrices of Machado, Oliveira and
Fernandes (2009) on linear sRGB. docs/html_report.md explains the floors.
"""

from __future__ import annotations

import itertools
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from badput.report.html_report import (
    OKABE_ITO,
    PARTS,
    PATH_PARTS,
    SHORT_PIECES_COLOUR,
    parts_for,
)
from synth import TraceBuilder

Lab = tuple[float, float, float]
Matrix = tuple[tuple[float, float, float], ...]

DOC = Path(__file__).resolve().parents[1] / "docs" / "html_report.md"

# Machado et al. 2009, Table 1 (severity 1.0: complete dichromacy), for linear RGB.
MACHADO: dict[str, Matrix] = {
    "protanopia": (
        (0.152286, 1.052583, -0.204868),
        (0.114503, 0.786281, 0.099216),
        (-0.003882, -0.048116, 1.051998),
    ),
    "deuteranopia": (
        (0.367322, 0.860646, -0.227968),
        (0.280085, 0.672501, 0.047413),
        (-0.011820, 0.042940, 0.968881),
    ),
    "tritanopia": (
        (1.255528, -0.076749, -0.178779),
        (-0.078411, 0.930809, 0.147602),
        (0.004733, 0.691367, 0.303900),
    ),
}
VISIONS = ("normal", *MACHADO)

# The floors (docs/html_report.md, "Why it is safe"): parts in normal vision, parts under
# complete dichromacy, the short-pieces grey against every part in every vision.
FLOOR_NORMAL = 20.0
FLOOR_DICHROMAT = 10.0
FLOOR_SHORT = 15.0


def _linear(hex_colour: str) -> tuple[float, float, float]:
    """An sRGB `#RRGGBB` as linear RGB in [0, 1] (IEC 61966-2-1 transfer function)."""
    h = hex_colour.lstrip("#")
    out = []
    for i in (0, 2, 4):
        c = int(h[i : i + 2], 16) / 255
        out.append(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
    return out[0], out[1], out[2]


def _simulate(rgb: tuple[float, float, float], m: Matrix) -> tuple[float, float, float]:
    r, g, b = (min(max(sum(m[i][j] * rgb[j] for j in range(3)), 0.0), 1.0) for i in range(3))
    return r, g, b


def _lab(rgb: tuple[float, float, float]) -> Lab:
    """Linear sRGB to CIELAB, D65 white (sRGB primaries' XYZ matrix)."""
    r, g, b = rgb
    x = 0.4124564 * r + 0.3575761 * g + 0.1804375 * b
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = 0.0193339 * r + 0.1191920 * g + 0.9503041 * b

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = f(x / 0.95047), f(y / 1.0), f(z / 1.08883)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def ciede2000(lab1: Lab, lab2: Lab) -> float:
    """CIEDE2000 colour difference, kL = kC = kH = 1 (Sharma, Wu and Dalal 2005, eq. 1-22)."""
    l1, a1, b1 = lab1
    l2, a2, b2 = lab2
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar**7 / (c_bar**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1 = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2 = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    elif abs(h2 - h1) <= 180:
        dh = h2 - h1
    else:
        dh = h2 - h1 - 360 if h2 - h1 > 180 else h2 - h1 + 360
    d_big_h = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1 + h2
    elif abs(h1 - h2) <= 180:
        h_bar = (h1 + h2) / 2
    else:
        h_bar = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(h_bar - 30))
        + 0.24 * math.cos(math.radians(2 * h_bar))
        + 0.32 * math.cos(math.radians(3 * h_bar + 6))
        - 0.20 * math.cos(math.radians(4 * h_bar - 63))
    )
    d_theta = 30 * math.exp(-(((h_bar - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_bar**7 / (cp_bar**7 + 25**7))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    s_c = 1 + 0.045 * cp_bar
    s_h = 1 + 0.015 * cp_bar * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt(
        (dl / s_l) ** 2
        + (dc / s_c) ** 2
        + (d_big_h / s_h) ** 2
        + r_t * (dc / s_c) * (d_big_h / s_h)
    )


def seen(hex_colour: str, vision: str) -> Lab:
    """A colour as a viewer with `vision` sees it, in CIELAB."""
    rgb = _linear(hex_colour)
    return _lab(rgb if vision == "normal" else _simulate(rgb, MACHADO[vision]))


def delta(c1: str, c2: str, vision: str) -> float:
    """CIEDE2000 between two sRGB colours as seen with `vision`."""
    return ciede2000(seen(c1, vision), seen(c2, vision))


def closest(colours: dict[str, str], vision: str) -> tuple[float, str, str]:
    """The closest pair of named colours with `vision`: (ΔE00, name, name)."""
    return min(
        (delta(colours[a], colours[b], vision), a, b) for a, b in itertools.combinations(colours, 2)
    )


# Sharma, Wu and Dalal 2005, Table 1: pairs 1, 7, 13, 17, 25 and 34 (ΔE00 to 4 decimals).
SHARMA = [
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0011), 7.2195),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((2.0776, 0.0795, -1.135), (0.9033, -0.0636, -0.5514), 0.9082),
]


@pytest.mark.parametrize(("lab1", "lab2", "expected"), SHARMA)
def test_ciede2000_matches_sharma_test_data(lab1: Lab, lab2: Lab, expected: float) -> None:
    # The paper prints 4 decimals: agreement to 1e-4 (its rounding) checks the formula.
    assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert ciede2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)


def test_simulation_keeps_greys_and_merges_red_green() -> None:
    # Each Machado matrix's rows sum to 1, so greys stay grey; a deuteranope cannot tell
    # pure red from a suitably dark green-yellow: the simulation does what it claims.
    for vision in MACHADO:
        assert delta("#808080", "#808080", vision) == 0
        grey = seen("#808080", vision)
        assert abs(grey[1]) < 0.5 and abs(grey[2]) < 0.5
    assert delta("#FF0000", "#00FF00", "normal") > 80
    assert delta("#D55E00", "#009E73", "deuteranopia") < delta("#D55E00", "#009E73", "normal")


def _colours(palette: tuple[tuple[str, str, str], ...]) -> dict[str, str]:
    return {key: colour for key, _, colour in palette}


@pytest.mark.parametrize("palette", [PARTS, PATH_PARTS], ids=["parts", "critical-path"])
@pytest.mark.parametrize("vision", VISIONS)
def test_parts_stay_apart(palette: tuple[tuple[str, str, str], ...], vision: str) -> None:
    colours = _colours(palette)
    assert len(set(colours.values())) == len(colours)
    floor = FLOOR_NORMAL if vision == "normal" else FLOOR_DICHROMAT
    d, a, b = closest(colours, vision)
    assert d >= floor, f"{a} and {b} are {d:.1f} apart with {vision}"


def test_the_old_palette_fails_the_floors() -> None:
    # The two reds of the report before (DataLoader, runtime): the checks catch them.
    old = {"idle_dataloader": "#e74c3c", "idle_runtime": "#c0392b"}
    normal = closest(old, "normal")[0]
    assert normal == pytest.approx(10.0, abs=0.1)  # the value docs/html_report.md quotes
    assert normal < FLOOR_NORMAL
    assert closest(old, "protanopia")[0] < FLOOR_DICHROMAT


@pytest.mark.parametrize("vision", VISIONS)
def test_short_pieces_grey_is_no_part(vision: str) -> None:
    parts = _colours(PARTS)
    assert SHORT_PIECES_COLOUR.upper() not in {c.upper() for c in parts.values()}
    d, key = min((delta(SHORT_PIECES_COLOUR, c, vision), k) for k, c in parts.items())
    assert d >= FLOOR_SHORT, f"short pieces are {d:.1f} from {key} with {vision}"


def test_palette_is_okabe_ito() -> None:
    # Okabe and Ito 2008, the eight colours as published (jfly.uni-koeln.de/color).
    assert OKABE_ITO == {
        "orange": "#E69F00",
        "sky blue": "#56B4E9",
        "bluish green": "#009E73",
        "yellow": "#F0E442",
        "blue": "#0072B2",
        "vermillion": "#D55E00",
        "reddish purple": "#CC79A7",
        "black": "#000000",
    }
    for palette in (PARTS, PATH_PARTS):
        assert set(_colours(palette).values()) <= set(OKABE_ITO.values())


def _doc_tables() -> list[dict[str, tuple[str, str, str]]]:
    """The doc's colour tables: per table, part -> (label, Okabe-Ito name, colour)."""
    row = re.compile(r"^\| (\w+) \| ([^|]+) \| ([a-z ]+) \| `(#[0-9A-F]{6})` \|$")
    tables: list[dict[str, tuple[str, str, str]]] = []
    current: dict[str, tuple[str, str, str]] | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| part | label | Okabe-Ito name | colour |"):
            current = {}
            tables.append(current)
        elif current is not None and (m := row.match(line)):
            current[m[1]] = (m[2].strip(), m[3], m[4])
        elif not line.startswith("|"):
            current = None
    return tables


def test_doc_lists_the_palette_in_use() -> None:
    parts, path = _doc_tables()
    for table, palette in ((parts, PARTS), (path, PATH_PARTS)):
        assert list(table) == [key for key, _, _ in palette]
        for key, label, colour in palette:
            doc_label, name, doc_colour = table[key]
            assert (doc_label, doc_colour) == (label, colour)
            assert OKABE_ITO[name] == colour
    text = DOC.read_text(encoding="utf-8")
    assert f"**`{SHORT_PIECES_COLOUR}`**" in text
    # The measured closest pairs the doc quotes are the ones computed here.
    quoted_rows = re.findall(r"^\| (normal|\w+anopia) \| (.+) \|$", text, re.M)
    assert [vision for vision, _ in quoted_rows] == list(VISIONS)
    for vision, line in quoted_rows:
        quoted = float(line.rsplit("|", 1)[1])
        assert closest(_colours(PARTS), vision)[0] == pytest.approx(quoted, abs=0.05)


class _Fills(HTMLParser):
    """Legend swatches (`data-key` -> colour) and the fills of pieces and short pieces."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.swatches: dict[str, list[tuple[str, str]]] = {}  # legend class -> swatches
        self._legend = ""
        self.short: set[str] = set()
        self.pieces: set[str] = set()
        self._key: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div" and "legend" in classes:
            self._legend = " ".join(c for c in classes if c != "legend")
        if tag == "span" and a.get("data-key"):
            self._key = a["data-key"]
        if tag == "i" and self._key and "swatch" in (a.get("class") or ""):
            style = a.get("style") or ""
            colour = style.removeprefix("background:")
            self.swatches.setdefault(self._legend, []).append((self._key, colour))
            self._key = None
        if tag == "rect" and a.get("class") == "short-pieces":
            self.short.add(a.get("fill") or "")
        if tag == "rect" and a.get("class") == "piece":
            self.pieces.add(a.get("fill") or "")


def test_report_draws_the_documented_colours(tmp_path: Path) -> None:
    from badput.analysis import analyze_trace
    from badput.diagnose import diagnose_job, outcome_of
    from badput.report.html_report import render_html
    from badput.trace import load_trace

    b = TraceBuilder()
    b.device_properties([0])
    for i in range(3):
        t = 10_000 * i
        b.profiler_step(i + 1, t, t + 10_000)
        b.dataloader(t, t + 2_000)
        b.launch("gemm_kernel", cpu=(t + 2_100, t + 2_200), gpu=(t + 2_300, t + 7_000))
        # 40 kernels of 1 unit, 3 apart: each under 1/2,000 of the step, drawn only as the
        # short-pieces band.
        for k in range(40):
            at = t + 7_100 + 3 * k
            b.launch("tiny", cpu=(at - 60, at - 59), gpu=(at, at + 1))
    trace = load_trace(str(b.write(tmp_path / "t.json")))
    page = render_html(diagnose_job([outcome_of(trace, analyze_trace(trace))]))
    fills = _Fills()
    fills.feed(page)
    parts = [(key, colour) for key, _, colour in parts_for("CUDA")]
    assert fills.swatches["parts-legend"] == parts
    assert fills.swatches["path-legend"] == [(key, colour) for key, _, colour in PATH_PARTS]
    assert fills.short == {SHORT_PIECES_COLOUR}
    assert fills.pieces <= set(_colours(PARTS).values())
