"""Tables that fit the terminal and never cut a number.

Every table a badput command prints goes through `fitted`. At the width it is given (80
columns and up), in this order:

1. name columns (`Col(elastic=True)`) give way: shortened by their `shrink` (middle elision
   by default), the widest first, down to their `floor`; two different names never print
   the same string (`distinct`);
2. then low-value columns drop (`Col(drop=k)`, the highest `k` first), and the caller gets
   the headers that were dropped to name them under the table;
3. then rows wrap: name columns fold onto more lines at their floor.

Numbers are never shortened: a number column always gets its natural width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from badput.report.units import elide_middle, trim_head, trim_tail

__all__ = ["Col", "Fitted", "distinct", "fitted", "fitted_table"]

GAP = 2  # blanks between columns


@dataclass(frozen=True)
class Col:
    """A column of a table fitted to the terminal (see `fitted`)."""

    header: str
    right: bool = False
    elastic: bool = False  # a name: gives way (is shortened) before any number is cut
    floor: int = 8  # narrowest an elastic column gets before rows wrap
    cap: int | None = None  # widest an elastic column grows
    shrink: Callable[[list[str], int], list[str]] | None = None  # default: middle-elide
    style: str | None = None
    drop: int | None = None  # may be left out when the table cannot fit; higher goes first


@dataclass
class Fitted:
    """A fitted table and the headers of the columns left out to make it fit."""

    table: Table
    dropped: list[str] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)

    def note(self) -> str | None:
        """One line naming the columns left out, or None when all are shown."""
        if not self.dropped:
            return None
        names = ", ".join(h.replace("\n", " ") for h in self.dropped)
        return "columns left out to fit the terminal: " + names


def _lines_len(cell: str) -> int:
    """Width of a cell (or a header): of its longest line."""
    return max(cell_len(line) for line in cell.split("\n"))


def _fit_widths(natural: list[int], cols: Sequence[Col], width: int) -> tuple[list[int], int]:
    """Column widths within `width` and how far the table is still over it."""
    widths = [
        min(n, max(c.cap, _lines_len(c.header))) if c.elastic and c.cap is not None else n
        for n, c in zip(natural, cols, strict=True)
    ]
    budget = width - GAP * (len(cols) - 1)
    elastic = [i for i, c in enumerate(cols) if c.elastic]
    floors = {i: min(widths[i], cols[i].floor) for i in elastic}
    excess = sum(widths) - budget
    while excess > 0:
        room = [i for i in elastic if widths[i] > floors[i]]
        if not room:
            break
        widest = max(room, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
        excess -= 1
    return widths, max(excess, 0)


def distinct(original: list[str], shown: list[str], width: int) -> list[str]:
    """`shown` with every collision resolved: different originals never print alike.

    Two different names shortened to the same string are told apart by where they differ:
    the part of each original around its first difference from the others is kept. Should
    even that collide, a `~k` tag is appended (still within `width`).
    """
    out = list(shown)
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(out):
        groups.setdefault(s, []).append(i)
    for idx in groups.values():
        names = {original[i] for i in idx}
        if len(names) < 2:
            continue
        for i in idx:
            others = [original[j] for j in idx if original[j] != original[i]]
            out[i] = _around_difference(original[i], others, width)
    # Whatever still collides gets a tag.
    seen: dict[str, str] = {}
    tags: dict[str, int] = {}
    for i, s in enumerate(out):
        first = seen.setdefault(s, original[i])
        if first != original[i]:
            k = tags.get(s, 1) + 1
            tags[s] = k
            tag = f"~{k}"
            out[i] = elide_middle(s, max(width - len(tag), 1)) + tag
    return out


def _first_difference(a: str, b: str) -> int:
    """Index of the first character where `a` and `b` differ."""
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return min(len(a), len(b))


def _around_difference(name: str, others: list[str], width: int) -> str:
    """`name` in `width` characters keeping its start and the part where it differs."""
    if len(name) <= width:
        return name
    at = min(_first_difference(name, o) for o in others)
    head = max(width // 3, 1)
    if at < width - 1:
        return elide_middle(name, width)
    keep = width - head - 1
    start = max(min(at - keep // 2, len(name) - keep), head)
    while start > head and (name[start].isdigit() or name[start - 1].isdigit()):
        start -= 1  # a number where the part kept starts is kept whole
    tail = name[start : start + keep]
    if start + keep < len(name) and keep > 1:
        tail = trim_head(tail[:-1]) + "…"
    return trim_head(name[:head]) + "…" + trim_tail(tail)


def fitted(
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    width: int,
    label_styles: Sequence[str | None] | None = None,
) -> Fitted:
    """A table that fits `width` columns; numbers are never cut.

    Names give way first, then columns drop, then rows wrap (see the module's docstring).
    `label_styles`, one per row, styles the first cell of each row (a breakdown's colours).
    """
    shown = list(cols)
    table_rows = [list(r) for r in rows]
    dropped: list[str] = []
    while True:
        natural = [
            max([_lines_len(c.header), *(_lines_len(r[i]) for r in table_rows)])
            for i, c in enumerate(shown)
        ]
        widths, excess = _fit_widths(natural, shown, width)
        droppable = [i for i, c in enumerate(shown) if c.drop is not None]
        if excess == 0 or not droppable:
            break
        gone = max(droppable, key=lambda i: (shown[i].drop or 0, i))
        dropped.append(shown[gone].header)
        del shown[gone]
        table_rows = [r[:gone] + r[gone + 1 :] for r in table_rows]
    wrap = excess > 0
    columns = [[r[i] for r in table_rows] for i in range(len(shown))]
    for i, c in enumerate(shown):
        if c.elastic and widths[i] < natural[i] and not wrap:
            shrink = c.shrink or (lambda cells, w: [elide_middle(x, w) for x in cells])
            columns[i] = distinct(columns[i], shrink(columns[i], widths[i]), widths[i])
    table = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
    for i, c in enumerate(shown):
        table.add_column(
            c.header,
            justify="right" if c.right else "left",
            no_wrap=not (wrap and c.elastic),
            overflow="fold",
            width=widths[i] if c.elastic else None,
            min_width=None if c.elastic else natural[i],
            style=c.style,
        )
    for r in range(len(table_rows)):  # Text: a trace's `[...]` is shown, never read as markup
        cells = [Text(columns[i][r]) for i in range(len(shown))]
        if label_styles is not None and cells and label_styles[r]:
            cells[0].stylize(label_styles[r] or "")
        table.add_row(*cells)
    return Fitted(table, dropped, widths)


def fitted_table(
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    width: int,
    label_styles: Sequence[str | None] | None = None,
) -> Table:
    """`fitted(...).table`, for tables whose columns never drop."""
    return fitted(cols, rows, width, label_styles).table
