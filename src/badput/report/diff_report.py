"""`badput diff` output: a text report (rich) and the `badput.diff/1` JSON document."""

from __future__ import annotations

from typing import Any

import msgspec
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from badput import __version__
from badput.analysis.diff import (
    GONE,
    MATCHED,
    MIN_DELTA_NS,
    MIN_REL_CHANGE,
    NEW,
    Change,
    DeviceDiff,
    KernelChange,
    ModuleChange,
    OpChange,
    OpDiff,
    TraceDiff,
)
from badput.report.json_report import us
from badput.report.names import distinct_names
from badput.report.table import Col, Fitted, fitted
from badput.report.units import NOT_AVAILABLE, format_share
from badput.report.units import format_ms as _ms

__all__ = ["SCHEMA", "diff_document", "op_shapes_text", "render_diff"]

SCHEMA = "badput.diff/1"


def _us(ns: float) -> Any:
    # Per-step values are means: rounded to the nanosecond, then written exactly.
    return us(round(ns))


def _change(c: Change) -> dict[str, Any]:
    return {"before": _us(c.before_ns), "after": _us(c.after_ns), "delta": _us(c.delta_ns)}


def _kernel(k: KernelChange) -> dict[str, Any]:
    return {
        "name": k.name,
        "category": k.category,
        "count_before": k.count_before,
        "count_after": k.count_after,
        "per_step_before_us": _us(k.per_step_before_ns),
        "per_step_after_us": _us(k.per_step_after_ns),
        "delta_per_step_us": _us(k.delta_per_step_ns),
        "rel_change": k.rel_change,
        "mean_before_us": _us(k.mean_before_ns),
        "mean_after_us": _us(k.mean_after_ns),
    }


def _cut(items: list[KernelChange], top: int) -> list[KernelChange]:
    return items[: top if top > 0 else None]


def _op(c: OpChange) -> dict[str, Any]:
    return {
        "op": c.op,
        "category": c.category,
        "input_dims": c.input_dims if isinstance(c.input_dims, list) else [],
        "input_types": c.input_types,
        "status": c.status,
        "count_before": c.count_before,
        "count_after": c.count_after,
        "per_step_before_us": _us(c.per_step_before_ns),
        "per_step_after_us": _us(c.per_step_after_ns),
        "delta_per_step_us": _us(c.delta_per_step_ns),
        "rel_change": c.rel_change,
        "tflops_per_s_before": c.tflops_before,
        "tflops_per_s_after": c.tflops_after,
        "roof_share_before": c.roof_share_before,
        "roof_share_after": c.roof_share_after,
        "module": c.module,
    }


def _module(c: ModuleChange) -> dict[str, Any]:
    return {
        "path": c.path,
        "depth": c.depth,
        "per_step_before_us": _us(c.per_step_before_ns),
        "per_step_after_us": _us(c.per_step_after_ns),
        "delta_per_step_us": _us(c.delta_per_step_ns),
        "rel_change": c.rel_change,
    }


def _ops(o: OpDiff | None, top: int) -> dict[str, Any] | None:
    if o is None:
        return None
    cut = top if top > 0 else None
    return {
        "mfu": {"before": o.mfu_before, "after": o.mfu_after, "delta": o.mfu_delta},
        "precision": {"before": o.precision_before, "after": o.precision_after},
        "has_shapes": {"before": o.has_shapes_before, "after": o.has_shapes_after},
        "counts": {
            MATCHED: o.count(MATCHED),
            NEW: o.count(NEW),
            GONE: o.count(GONE),
            "modules": len(o.modules),
        },
        "rows": [_op(c) for c in o.ops[:cut]],
        "modules": [_module(c) for c in o.modules[:cut]],
    }


def _device(d: DeviceDiff, top: int) -> dict[str, Any]:
    return {
        "trace_before": d.trace_before,
        "trace_after": d.trace_after,
        "device_before": d.device_before,
        "device_after": d.device_after,
        "per": d.per,
        "steps_before": d.steps_before,
        "steps_after": d.steps_after,
        "goodput": {
            "before": d.goodput_before,
            "after": d.goodput_after,
            "delta": d.goodput_delta,
        },
        "breakdown_us": {c.name: _change(c) for c in d.breakdown},
        "idle_causes_us": {c.name: _change(c) for c in d.idle_causes},
        "step_time_us": None
        if d.step_mean is None or d.step_median is None
        else {"mean": _change(d.step_mean), "median": _change(d.step_median)},
        "launches": {
            "before": d.launches_before,
            "after": d.launches_after,
            "delta": d.launches_after - d.launches_before,
        },
        "kernels": {
            "slower": [_kernel(k) for k in _cut(d.slower, top)],
            "faster": [_kernel(k) for k in _cut(d.faster, top)],
            "appeared": [_kernel(k) for k in _cut(d.appeared, top)],
            "disappeared": [_kernel(k) for k in _cut(d.disappeared, top)],
            "counts": {
                "slower": len(d.slower),
                "faster": len(d.faster),
                "appeared": len(d.appeared),
                "disappeared": len(d.disappeared),
                "unchanged": d.unchanged,
            },
        },
        "warnings": list(d.warnings),
        "ops": _ops(d.ops, top),
    }


def diff_document(diff: TraceDiff, top: int = 10) -> dict[str, Any]:
    """The `badput.diff/1` document: times in microseconds per step (or per window, see `per`).

    Each device carries `ops`: null unless both GPUs carry the model view, else

    - `mfu`: `before`, `after`, `delta` (model FLOPs utilisation, a share; null where a side
      has no peak); `precision`: `before`, `after` (what the MFU is against);
      `has_shapes`: `before`, `after` (whether the trace records `Input Dims`);
    - `counts`: `matched`, `new`, `gone` (op keys), `modules` (paths in both), always of all;
    - `rows`: the first `top` op keys by |`delta_per_step_us`| descending, each with `op`,
      `category`, `input_dims` (`[]` without them), `input_types`, `status` (`matched`, `new`
      or `gone`), `count_before`, `count_after` (calls in the window), `per_step_before_us`,
      `per_step_after_us`, `delta_per_step_us` (GPU time of the calls), `rel_change` (null
      where before is 0), `tflops_per_s_before`, `tflops_per_s_after`, `roof_share_before`,
      `roof_share_after` (null without a model or where absent), `module`;
    - `modules`: the first `top` module paths in both by |`delta_per_step_us`|, each with
      `path`, `depth`, `per_step_before_us`, `per_step_after_us`, `delta_per_step_us`,
      `rel_change`.

    Ops are matched by (op, input dims, input types): an op whose shapes changed is one row
    `gone` and one `new`.

    Args:
        diff: the comparison.
        top: kernels, op rows and modules to list per group (0: all); the `counts` always
            cover every one.
    """
    return {
        "schema": SCHEMA,
        "badput_version": __version__,
        "threshold": {"min_rel_change": MIN_REL_CHANGE, "min_delta_per_step_us": _us(MIN_DELTA_NS)},
        "warnings": list(diff.warnings),
        "devices": [_device(d, top) for d in diff.devices],
    }


def _signed_ms(ns: float) -> str:
    return f"{ns / 1e6:+,.2f}"


#: Widest a kernel name column grows (then names are shortened to stay apart).
_KERNEL_NAME_CAP = 60


def _show(console: Console, title: str | None, fitted_table: Fitted) -> None:
    """A fitted table under its title, and the note naming columns it left out."""
    if title is not None:
        console.print(Text(title, style="bold"))
    console.print(fitted_table.table)
    note = fitted_table.note()
    if note is not None:
        console.print(Text(note, style="dim"))


def _kernel_table(items: list[KernelChange], top: int, width: int) -> Fitted:
    """The kernels of one change group; names give way, numbers are never cut."""
    shown = _cut(items, top)
    names = [k.name for k in shown]
    cols = [
        Col(
            "GPU operation",
            elastic=True,
            floor=24,
            cap=_KERNEL_NAME_CAP,
            shrink=lambda _cells, w: distinct_names(names, w),
        ),
        Col("category", drop=1),
        Col("count", right=True),
        Col("us/step", right=True),
        Col("Δ us/step", right=True),
        Col("mean us", right=True, drop=2),
    ]
    rows = []
    for name, k in zip(distinct_names(names, _KERNEL_NAME_CAP), shown, strict=True):
        rel = "" if k.rel_change is None else f" ({100 * k.rel_change:+.0f} %)"
        rows.append(
            [
                name,
                k.category,
                f"{k.count_before:,} → {k.count_after:,}",
                f"{k.per_step_before_ns / 1000:,.1f} → {k.per_step_after_ns / 1000:,.1f}",
                f"{k.delta_per_step_ns / 1000:+,.1f}{rel}",
                f"{k.mean_before_ns / 1000:,.1f} → {k.mean_after_ns / 1000:,.1f}",
            ]
        )
    return fitted(cols, rows, width)


def _full_shapes(c: OpChange) -> str:
    types = ",".join(t.removeprefix("c10::") for t in c.input_types)
    return f"{c.dims_key} {types}".strip() if c.dims_key != "null" else types


def _tensor_shapes(c: OpChange) -> str:
    """The arguments with a shape, as `type[dims]`; empty when none has one."""
    dims = c.input_dims
    if not isinstance(dims, list):
        return ""
    parts = []
    for i, d in enumerate(dims):
        if isinstance(d, list) and d:
            t = c.input_types[i].removeprefix("c10::") if i < len(c.input_types) else ""
            parts.append(f"{t}{msgspec.json.encode(d, enc_hook=str).decode()}")
    return ", ".join(parts)


def op_shapes_text(changes: list[OpChange]) -> list[str]:
    """Each op key's shapes as one line a person can read, in the order given.

    The arguments with a shape as `type[dims]` (`BFloat16[8944,1024], BFloat16[1024,2816]`);
    the full key (every dim list as compact JSON, then every type) where an op has no shaped
    argument or where two of the given rows of one op would read the same.
    """
    short = [_tensor_shapes(c) for c in changes]
    seen: dict[tuple[str, str], int] = {}
    for c, text in zip(changes, short, strict=True):
        seen[c.op, text] = seen.get((c.op, text), 0) + 1
    return [
        text if text and seen[c.op, text] == 1 else _full_shapes(c)
        for c, text in zip(changes, short, strict=True)
    ]


def _rate(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}"


def _rel(c: OpChange | ModuleChange) -> str:
    if isinstance(c, OpChange) and c.status != MATCHED:
        return c.status
    r = c.rel_change
    return "" if r is None else f"{100 * r:+.0f} %"


def _wrap(text: str, width: int, seps: tuple[str, ...]) -> list[str]:
    """`text` in lines of at most `width`, broken after a separator.

    The first of `seps` found in a line's room is used (`", "` between arguments before `,`
    inside one shape); a piece with none of them is folded at the width.
    """
    width = max(width, 1)
    lines: list[str] = []
    rest = text
    while cell_len(rest) > width:
        at = 0
        for sep in seps:
            cut = rest.rfind(sep, 0, width - len(sep.rstrip()) + 1)
            if cut > 0:
                at = cut + len(sep.rstrip())
                break
        at = at or width
        lines.append(rest[:at].rstrip())
        rest = rest[at:].lstrip()
    lines.append(rest)
    return lines


def _wrapped(text: str, width: int, indent: str, seps: tuple[str, ...]) -> str:
    """`text` wrapped (`_wrap`) with `indent` before every line."""
    return "\n".join(indent + line for line in _wrap(text, width - len(indent), seps))


def _op_cells(cells: list[str], width: int) -> list[str]:
    """Two-line cells (op, indented shapes) within `width`, wrapped onto more lines.

    Op and shapes are what tells the rows apart, so both wrap (the op after a `::` or `_`,
    the shapes after a `, `) rather than lose a character; only a leading `aten::` goes when
    an op does not fit.
    """
    split = [cell.split("\n", 1) for cell in cells]
    if any(cell_len(op) > width for op, _ in split):  # `aten::` is the op of nearly every row
        split = [[op.removeprefix("aten::"), shapes] for op, shapes in split]
    out = []
    for op, shapes in split:
        wrapped_op = "\n".join(_wrap(op, width, ("::", "_")))
        out.append(wrapped_op + "\n" + _wrapped(shapes.strip(), width, "  ", (", ", ",")))
    return out


def _ops_table(o: OpDiff, per: str, top: int, width: int) -> tuple[str, Fitted]:
    shown = o.ops[: top if top > 0 else None]
    title = (
        f"ops by |Δ| ({len(o.ops)}: {o.count(MATCHED)} matched, {o.count(NEW)} new, "
        f"{o.count(GONE)} gone{'' if len(shown) == len(o.ops) else f'; top {len(shown)}'})"
    )
    cols = [
        Col("op, input dims and types", elastic=True, floor=24, shrink=_op_cells),
        Col("calls", right=True),
        Col(f"ms/{per}", right=True),
        Col("Δ ms", right=True),
        Col("Δ", right=True),
        Col("TFLOP/s", right=True, drop=2),
        Col("roof %", right=True, drop=1),
    ]
    rows = [
        [
            f"{c.op}\n  {shapes}",
            f"{c.count_before:,}→{c.count_after:,}",
            f"{_ms(c.per_step_before_ns)}→{_ms(c.per_step_after_ns)}",
            _signed_ms(c.delta_per_step_ns),
            _rel(c),
            f"{_rate(c.tflops_before)}→{_rate(c.tflops_after)}",
            f"{_pct(c.roof_share_before)}→{_pct(c.roof_share_after)}",
        ]
        for c, shapes in zip(shown, op_shapes_text(shown), strict=True)
    ]
    return title, fitted(cols, rows, width)


def _module_paths(cells: list[str], width: int) -> list[str]:
    """Module paths within `width`: wrapped after a `/` or `.`, never shortened."""
    return ["\n".join(_wrap(c, width, ("/", "."))) for c in cells]


def _modules_table(o: OpDiff, per: str, top: int, width: int) -> tuple[str, Fitted]:
    shown = o.modules[: top if top > 0 else None]
    cut = "" if len(shown) == len(o.modules) else f"; top {len(shown)}"
    title = f"modules by |Δ| ({len(o.modules)} in both{cut})"
    cols = [
        Col("module (rolled up)", elastic=True, floor=24, shrink=_module_paths),
        Col(f"ms/{per} before", right=True),
        Col("after", right=True),
        Col("Δ ms", right=True),
        Col("Δ", right=True),
    ]
    rows = [
        [
            c.path,
            _ms(c.per_step_before_ns),
            _ms(c.per_step_after_ns),
            _signed_ms(c.delta_per_step_ns),
            _rel(c),
        ]
        for c in shown
    ]
    return title, fitted(cols, rows, width)


def _render_ops(o: OpDiff, per: str, console: Console, top: int) -> None:
    console.print()
    delta = o.mfu_delta
    dtext = "" if delta is None else f"  ({100 * delta:+.2f} points)"
    prec = o.precision_after or o.precision_before
    ptext = f" at {prec}" if prec and o.precision_before == o.precision_after else ""
    console.print(Text(f"MFU{ptext} {_share2(o.mfu_before)} → {_share2(o.mfu_after)}{dtext}"))
    if o.ops:
        _show(console, *_ops_table(o, per, top, console.width))
    if o.modules:
        console.print()
        _show(console, *_modules_table(o, per, top, console.width))


def _share2(v: float | None) -> str:
    return NOT_AVAILABLE if v is None else f"{100 * v:.2f} %"


def _render_device(d: DeviceDiff, console: Console, top: int) -> None:
    console.rule(f"GPU {d.device_before} → GPU {d.device_after}")
    console.print(f"before: {d.trace_before} ({d.steps_before} steps)")
    console.print(f"after:  {d.trace_after} ({d.steps_after} steps)")
    delta = d.goodput_delta
    dtext = "" if delta is None else f"  ({100 * delta:+.1f} points)"
    console.print(
        Text(f"goodput {format_share(d.goodput_before)} → {format_share(d.goodput_after)}{dtext}")
    )
    cols = [
        Col(f"ms per {d.per}", elastic=True, floor=12),
        Col("before", right=True),
        Col("after", right=True),
        Col("Δ", right=True),
    ]
    changes = list(d.breakdown) + [
        Change(f"  └ idle: {c.name}", c.before_ns, c.after_ns) for c in d.idle_causes
    ]
    if d.step_mean is not None and d.step_median is not None:
        changes += [d.step_mean, d.step_median]
    rows = [[c.name, _ms(c.before_ns), _ms(c.after_ns), _signed_ms(c.delta_ns)] for c in changes]
    rows.append(
        [
            f"launches per {d.per}",
            f"{d.launches_before:,.1f}",
            f"{d.launches_after:,.1f}",
            f"{d.launches_after - d.launches_before:+,.1f}",
        ]
    )
    _show(console, None, fitted(cols, rows, console.width))
    for title, items in (
        ("slower", d.slower),
        ("faster", d.faster),
        ("appeared", d.appeared),
        ("disappeared", d.disappeared),
    ):
        if items:
            console.print()
            _show(console, f"{title} ({len(items)})", _kernel_table(items, top, console.width))
    console.print(
        Text(
            f"{d.unchanged} operations unchanged (under {100 * MIN_REL_CHANGE:.0f} % or "
            f"{MIN_DELTA_NS / 1000:.0f} us per {d.per})",
            style="dim",
        )
    )
    if d.ops is not None:
        _render_ops(d.ops, d.per, console, top)
    for w in d.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))


def render_diff(diff: TraceDiff, console: Console, top: int = 10) -> None:
    """Print the comparison: goodput, categories, step time, launches, kernels, ops.

    The MFU, op and module changes come where both sides carry the model view. Every table
    fits the console's width (`badput.report.table.fitted`): names give way (kernel names
    are shortened and told apart, shapes and module paths wrap), then low-value columns drop
    with a note naming them; numbers are never cut.

    Args:
        diff: the comparison.
        console: where to print.
        top: kernels, op rows and modules to list per group (0: all).
    """
    for w in diff.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    for d in diff.devices:
        _render_device(d, console, top)
