"""Text and JSON renderings of `badput estimate` results."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from badput.estimate.cost import BadputCost
from badput.estimate.hardware import GpuSpec
from badput.estimate.infer import InferEstimate
from badput.estimate.memory import MemoryEstimate
from badput.estimate.train import TrainEstimate
from badput.report.table import Col, fitted

__all__ = ["document", "encode", "render", "wrap_cells"]

Row = tuple[str, str, str]


def document(kind: str, result: object) -> dict[str, Any]:
    """The JSON document of an estimate: its fields, plus schema and kind."""
    if isinstance(result, BadputCost):
        body: dict[str, Any] = dataclasses.asdict(result)
        body["badput_gpu_hours_per_day"] = result.badput_gpu_hours_per_day
    elif isinstance(result, list):
        body = {"gpus": [_gpu_dict(g) for g in result]}
    else:
        assert dataclasses.is_dataclass(result) and not isinstance(result, type)
        body = dataclasses.asdict(result)
    return {"schema": f"badput.estimate.{kind}/1", **body}


def _gpu_dict(g: GpuSpec) -> dict[str, Any]:
    return dataclasses.asdict(g)


def encode(doc: dict[str, Any]) -> bytes:
    """Indented JSON bytes, newline-terminated."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def _num(x: float) -> str:
    """A count or size in engineering notation with a readable prefix."""
    for value, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= value:
            return f"{x / value:,.4g}{suffix}"
    return f"{x:,.4g}"


def _gb(x: float | None) -> str:
    return "–" if x is None else f"{x / 1e9:,.2f} GB"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _usd(x: float | None) -> str:
    return "–" if x is None else f"${x:,.0f}"


def _train_rows(e: TrainEstimate) -> list[Row]:
    rows: list[Row] = [
        ("parameters", _num(e.params), f"active per token {_num(e.active_params)}"),
        ("tokens", _num(e.tokens), ""),
        ("training FLOPs", f"{e.flops:.4g}", e.flops_formula),
    ]
    if e.attention_flops:
        rows.append(("  of which attention", f"{e.attention_flops:.4g}", ""))
    rows.append(
        (
            "MFU denominator",
            f"{e.mfu_denominator_tflops:,.1f} TFLOP/s",
            f"{e.gpu_name}, dense {e.precision} peak per GPU",
        )
    )
    if e.mfu is not None:
        rows.append(("MFU (assumed)", _pct(e.mfu), e.mfu_source))
    if e.implied_mfu is not None:
        rows.append(("implied MFU", _pct(e.implied_mfu), "FLOPs / (denominator x GPU-hours)"))
    rows.append(("GPU-hours", f"{e.gpu_hours:,.0f}", ""))
    if e.days is not None:
        rows.append(("wall-clock days", f"{e.days:,.1f}", f"on {e.gpus:,} GPUs"))
    if e.cost_usd is not None:
        rows.append(("cost", _usd(e.cost_usd), f"at ${e.price_per_gpu_hour:g} per GPU-hour"))
    rows.append(("energy", f"{e.energy_kwh:,.0f} kWh", e.energy_assumption))
    if e.target:
        t = e.target
        rows.append(
            (
                "target FLOPs",
                f"{t['flops']:.4g}",
                f"= {t['flops_per_param_token']:.3g}·N·D"
                + (f": {t['matches']}" if t["matches"] else ""),
            )
        )
        rows.append(
            (
                "  at 6·N·D it needs",
                f"{_num(float(str(t['params_at_6nd'])))} params",
                f"or {_num(float(str(t['tokens_at_6nd'])))} tokens",
            )
        )
    return rows


def _memory_rows(e: MemoryEstimate) -> list[Row]:
    bpp = e.bytes_per_param
    layout = f"dp {e.dp} x tp {e.tp} x pp {e.pp}, ep {e.ep}, ZeRO-{e.zero_stage}"
    rows: list[Row] = [
        ("parameters", _num(e.params), layout),
        (
            "bytes per parameter",
            f"{bpp['total']:g}",
            f"weights {bpp['weights']:g} + gradients {bpp['gradients']:g} + optimizer "
            f"{bpp['optimizer']:g}",
        ),
        ("weights", _gb(e.weights_bytes), "per GPU"),
        ("gradients", _gb(e.grads_bytes), "per GPU"),
        ("optimizer states", _gb(e.optimizer_bytes), "per GPU"),
        (
            "activations",
            _gb(e.activations_bytes),
            e.activations_formula if e.activations_bytes is not None else "not counted",
        ),
        ("total", _gb(e.total_bytes), "per GPU"),
    ]
    if e.verdict is not None and e.margin_bytes is not None and e.gpu_memory_bytes is not None:
        left = "left" if e.margin_bytes >= 0 else "over"
        how = (
            f"{e.gpu}: {_gb(e.gpu_memory_bytes)} - {_gb(e.reserved_bytes)} CUDA context - "
            f"{_gb(e.total_bytes)} total = {_gb(abs(e.margin_bytes))} {left}"
        )
        if not e.activations_counted:
            how += "; activations not counted"
        rows.append(("fit", e.verdict, how))
    return rows


def _infer_rows(e: InferEstimate) -> list[Row]:
    rows: list[Row] = [
        ("FLOPs per token", f"{e.flops_per_token:.4g}", e.flops_formula),
        (
            "prefill",
            f"{e.prefill_tokens_per_s_per_gpu:,.0f} tok/s per GPU",
            f"compute-bound at {_pct(e.efficiency)} of the dense {e.precision} peak",
        ),
        (
            "weights",
            _gb(e.weights_bytes),
            f"read per decode step {_gb(e.weights_read_per_step_bytes)}",
        ),
        ("KV cache", _gb(e.kv_cache_bytes), f"batch {e.batch} x context {e.context:,}"),
        (
            "decode",
            f"{e.decode_tokens_per_s_per_gpu:,.0f} tok/s per GPU",
            f"{e.decode_bound}-bound, {e.decode_tokens_per_s:,.0f} tok/s on {e.gpus} GPU(s), "
            f"step {1000 * e.decode_step_s:.2f} ms",
        ),
        (
            "fit",
            e.verdict,
            f"{e.gpus} x {e.gpu}: {_gb(abs(e.margin_bytes))} "
            f"{'left' if e.margin_bytes >= 0 else 'over'} after weights, KV cache and "
            "the CUDA context",
        ),
    ]
    return rows


def _cost_rows(c: BadputCost) -> list[Row]:
    rows: list[Row] = []
    for line in sorted(c.lines, key=lambda x: -x.gpu_hours_per_day):
        rows.append(
            (
                line.category,
                f"{line.gpu_hours_per_day:,.1f} GPU-h/day",
                f"{_pct(line.share)}"
                + (f", {_usd(line.usd_per_day)}/day" if line.usd_per_day is not None else ""),
            )
        )
    lost = c.badput_gpu_hours_per_day
    price = c.price_per_gpu_hour
    rows.append(
        (
            "badput in total",
            f"{lost:,.1f} GPU-h/day",
            f"on {c.gpus:,} GPUs" + (f", {_usd(lost * price)}/day" if price else ""),
        )
    )
    return rows


def _gpu_rows(gpus: list[GpuSpec]) -> list[list[str]]:
    rows = []
    for g in gpus:

        def peak(p: str, g: GpuSpec = g) -> str:
            v = g.peak(p)
            if v is None and p == "bf16" and g.peak("fp16") is not None:
                return f"{g.peak('fp16'):,.0f}*"  # no bf16 path: its fp16 peak, marked
            return "–" if v is None else f"{v:,.0f}"

        if g.interconnect_gbs:
            link = f"{g.interconnect_gbs:,.0f}"
        else:
            link = "PCIe" if g.interconnect == "PCIe only" else "?"  # unverified
        rows.append(
            [
                g.key,
                peak("bf16"),
                peak("fp8"),
                peak("fp4"),
                f"{g.memory_bytes / 1e9:,.0f} GB",
                f"{g.memory_bw_gbs:,.0f}",
                link,
                f"{g.tdp_w:,.0f}",
            ]
        )
    return rows


_GPU_COLS = (
    Col("key", elastic=True, floor=10),
    Col("bf16", right=True),
    Col("fp8", right=True),
    Col("fp4", right=True, drop=2),
    Col("memory", right=True),
    Col("HBM GB/s", right=True),
    Col("link GB/s", right=True, drop=3),
    Col("TDP W", right=True, drop=1),
)


def wrap_cells(cells: list[str], width: int) -> list[str]:
    """Prose cells folded onto lines of `width` at spaces: a word (a number) is never cut."""
    return [
        "\n".join(textwrap.wrap(c, width, break_long_words=False, break_on_hyphens=False)) or c
        for c in cells
    ]


def render(kind: str, result: object, console: Console) -> None:
    """Print an estimate as a table: what, value, and how it was computed.

    The table fits the console (`badput.report.table.fitted`): the "how" column folds onto
    more lines before any number is shortened.
    """
    width = console.width
    if isinstance(result, list):
        fit = fitted(_GPU_COLS, _gpu_rows(result), width)
        console.print(fit.table)
        if (note := fit.note()) is not None:
            console.print(Text(note, style="dim"))
        console.print(
            Text(
                "dense peak TFLOP/s (no sparsity); * no bf16: fp16 shown; "
                "names and sources: --format json",
                style="dim",
            )
        )
        return
    builders = {
        TrainEstimate: _train_rows,
        MemoryEstimate: _memory_rows,
        InferEstimate: _infer_rows,
        BadputCost: _cost_rows,
    }
    rows = builders[type(result)](result)  # type: ignore[operator]
    cols = (
        Col("", elastic=True, floor=12, shrink=wrap_cells),
        Col("value", right=True),
        Col("how", elastic=True, floor=20, shrink=wrap_cells, style="dim"),
    )
    fit = fitted(cols, [list(r) for r in rows], width)
    console.print(Text(f"badput estimate {kind}", style="bold"))
    console.print(fit.table)
    for note in getattr(result, "notes", []):
        console.print(Text(f"note: {note}", style="yellow"))
