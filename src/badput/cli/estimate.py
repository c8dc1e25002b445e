"""`badput estimate ...`: compute, time, memory, cost and energy from sizes and hardware."""

from __future__ import annotations

import json
import re
import sys
import warnings
from typing import Annotated, Any

import typer

from badput.cli.common import Format, new_console
from badput.errors import UsageError

__all__ = ["estimate_app", "parse_quantity"]

estimate_app = typer.Typer(
    help="Estimate training and inference compute, time, memory, cost and energy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d+))?\s*([kmbgtp]?)\s*$", re.I)
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_quantity(text: str, option: str) -> float:
    """`671e9`, `671B`, `14.8T`, `2.788M` -> float.

    Raises:
        UsageError: not a non-negative number with an optional k/M/B/G/T/P suffix.
    """
    match = _QUANTITY.match(text)
    if not match:
        raise UsageError(f"{option} {text!r}: expected a number like 671e9 or 671B")
    mantissa, exponent, suffix = match.groups()
    value = float(mantissa) * 10.0 ** int(exponent or 0) * _SUFFIX[suffix.lower()]
    return value


def _opt_quantity(text: str | None, option: str) -> float | None:
    return None if text is None else parse_quantity(text, option)


def _gpu(name: str) -> Any:
    from badput.estimate.hardware import all_gpus, lookup_gpu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = lookup_gpu(name)
    if spec is None:
        known = ", ".join(g.key for g in all_gpus())
        raise UsageError(f"unknown GPU {name!r}; known: {known}")
    return spec


def _precision(text: str) -> str:
    from badput.estimate.hardware import resolve_precision

    try:
        return resolve_precision(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _emit(kind: str, result: object, fmt: Format) -> None:
    from badput.report.estimate_report import document, encode, render

    if fmt is Format.JSON:
        sys.stdout.buffer.write(encode(document(kind, result)))
        sys.stdout.flush()
    else:
        render(kind, result, new_console())


def _read_analysis(path: str) -> Any:
    """The JSON document of a `badput analyze --format json` file."""
    from badput.trace._files import file_problem

    # Stat before opening: a FIFO or a device given as the file would block the read.
    if (problem := file_problem(path)) is not None:
        raise UsageError(f"{path}: cannot be read ({problem})")
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror})") from None
    except ValueError:
        raise UsageError(f"{path}: not JSON (expected the output of badput analyze)") from None


def _goodput_of(path: str) -> float:
    """Goodput of an analysis or of a meter summary file.

    An analysis (`badput analyze --format json`) is time-weighted over its devices; a meter
    summary (`Meter.summary()`, `badput run --out`) carries its goodput.
    """
    doc = _read_analysis(path)
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not an analysis or a meter summary")
    if "devices" not in doc and "badput_s" in doc:
        goodput = doc.get("goodput")
        if not isinstance(goodput, int | float) or goodput <= 0:
            raise UsageError(f"{path}: the meter summary has no goodput yet")
        return float(goodput)
    devices = [d for d in doc.get("devices", []) if d.get("goodput") is not None]
    window = sum(float(d["window_us"]) for d in devices)
    if window <= 0:
        raise UsageError(f"{path}: no GPU activity in the analysis")
    return sum(float(d["breakdown_us"]["compute"]) for d in devices) / window


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]


@estimate_app.command()
def train(
    params: Annotated[str, typer.Option(help="Total parameters (671e9, 671B).")],
    tokens: Annotated[str, typer.Option(help="Training tokens (14.8T).")],
    gpu: Annotated[str, typer.Option(help="GPU type (H100, H800, A100-80GB, MI300X...).")],
    active_params: Annotated[
        str | None, typer.Option(help="Parameters active per token (mixture of experts).")
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs in the job (for days).")] = None,
    precision: Annotated[str, typer.Option(help="Precision of the matrix math.")] = "bf16",
    mfu: Annotated[float | None, typer.Option(help="Assumed MFU, e.g. 0.4.")] = None,
    gpu_hours: Annotated[
        str | None, typer.Option(help="GPU-hours the run took: prints the implied MFU.")
    ] = None,
    price: Annotated[float | None, typer.Option(help="Dollars per GPU-hour.")] = None,
    seq_len: Annotated[int | None, typer.Option(help="Sequence length (attention).")] = None,
    layers: Annotated[int | None, typer.Option(help="Layers (attention FLOPs).")] = None,
    d_model: Annotated[int | None, typer.Option(help="Model width (attention).")] = None,
    goodput: Annotated[
        float | None, typer.Option(help="Measured goodput; MFU = goodput x kernel efficiency.")
    ] = None,
    analysis: Annotated[
        str | None,
        typer.Option(help="badput analyze JSON or a meter summary: its goodput, as --goodput."),
    ] = None,
    kernel_efficiency: Annotated[
        float | None,
        typer.Option(help="Share of the dense peak reached while compute kernels run."),
    ] = None,
    power_util: Annotated[
        float, typer.Option(help="Average board power as a share of TDP (energy).")
    ] = 1.0,
    target_flops: Annotated[
        str | None, typer.Option(help="A published FLOPs figure to explain.")
    ] = None,
    output_format: FormatOpt = Format.TEXT,
) -> None:
    """Training FLOPs, GPU-hours, days, cost and energy; or the MFU implied by GPU-hours.

    Example:
        badput estimate train --params 70B --tokens 15T --gpu H100 --gpus 1024 --mfu 0.4
    """
    from badput.estimate.train import estimate_train

    source = "given"
    if analysis is not None or goodput is not None:
        if mfu is not None:
            raise UsageError("give --mfu or --goodput/--analysis, not both")
        if analysis is not None and goodput is not None:
            raise UsageError("give --goodput or --analysis, not both")
        if kernel_efficiency is None or not 0 < kernel_efficiency <= 1:
            raise UsageError("--goodput/--analysis need --kernel-efficiency in (0, 1]")
        g = _goodput_of(analysis) if analysis is not None else goodput
        assert g is not None
        if not 0 < g <= 1:
            raise UsageError(f"goodput must be in (0, 1] (got {g:g})")
        mfu = g * kernel_efficiency
        where = f"measured in {analysis}" if analysis else "given"
        source = f"goodput {g:.3f} ({where}) x kernel efficiency {kernel_efficiency:g}"
    result = estimate_train(
        params=parse_quantity(params, "--params"),
        tokens=parse_quantity(tokens, "--tokens"),
        gpu=_gpu(gpu),
        precision=_precision(precision),
        active_params=_opt_quantity(active_params, "--active-params"),
        gpus=gpus,
        mfu=mfu,
        mfu_source=source,
        gpu_hours=_opt_quantity(gpu_hours, "--gpu-hours"),
        price=price,
        layers=layers,
        seq_len=seq_len,
        d_model=d_model,
        power_utilization=power_util,
        target_flops=_opt_quantity(target_flops, "--target-flops"),
    )
    _emit("train", result, output_format)


@estimate_app.command()
def memory(
    params: Annotated[str, typer.Option(help="Total parameters.")],
    gpus: Annotated[int, typer.Option(help="GPUs in the job.")] = 1,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree.")] = 1,
    expert_params: Annotated[
        str | None, typer.Option(help="Parameters in experts (sharded over --ep).")
    ] = None,
    zero: Annotated[int, typer.Option(help="ZeRO stage 0-3 over data parallelism.")] = 0,
    fsdp: Annotated[bool, typer.Option(help="FSDP full sharding (= ZeRO-3).")] = False,
    weight_bytes: Annotated[float, typer.Option(help="Bytes per weight.")] = 2.0,
    grad_bytes: Annotated[float, typer.Option(help="Bytes per gradient.")] = 2.0,
    optimizer: Annotated[
        str, typer.Option(help="adam, adam-no-master, sgd-momentum, adafactor.")
    ] = "adam",
    layers: Annotated[int | None, typer.Option(help="Layers (activations).")] = None,
    d_model: Annotated[int | None, typer.Option(help="Model width (activations).")] = None,
    seq_len: Annotated[int | None, typer.Option(help="Sequence length (activations).")] = None,
    micro_batch: Annotated[int | None, typer.Option(help="Micro-batch size.")] = None,
    heads: Annotated[int | None, typer.Option(help="Attention heads.")] = None,
    recompute: Annotated[str, typer.Option(help="none, selective or full.")] = "none",
    gpu: Annotated[
        str | None, typer.Option(help="GPU type: fits, tight or does not fit, and the margin.")
    ] = None,
    output_format: FormatOpt = Format.TEXT,
) -> None:
    """Per-GPU memory of training: weights, gradients, optimizer states, activations.

    With --gpu, the verdict reserves 1.3 GB per GPU for the CUDA context and kernels and calls
    a margin under 10 % of the GPU's memory tight (fragmentation, NCCL buffers and workspaces
    are not counted). Activations count when --layers, --d-model, --seq-len and --micro-batch
    are given (Korthikanti et al. 2022; --recompute full keeps each layer's input only);
    otherwise the verdict says they are not counted.

    Example:
        badput estimate memory --params 7.5e9 --gpus 64 --zero 3
    """
    from badput.estimate.memory import Recompute, estimate_memory

    try:
        mode = Recompute(recompute)
    except ValueError:
        raise UsageError("--recompute must be none, selective or full") from None
    result = estimate_memory(
        params=parse_quantity(params, "--params"),
        gpus=gpus,
        tp=tp,
        pp=pp,
        ep=ep,
        expert_params=_opt_quantity(expert_params, "--expert-params") or 0.0,
        zero_stage=3 if fsdp else zero,
        weight_bytes=weight_bytes,
        grad_bytes=grad_bytes,
        optimizer=optimizer,
        layers=layers,
        d_model=d_model,
        seq_len=seq_len,
        micro_batch=micro_batch,
        heads=heads,
        recompute=mode,
        gpu=_gpu(gpu) if gpu else None,
    )
    _emit("memory", result, output_format)


@estimate_app.command()
def infer(
    params: Annotated[str, typer.Option(help="Total parameters.")],
    gpu: Annotated[str, typer.Option(help="GPU type.")],
    active_params: Annotated[str | None, typer.Option(help="Active parameters (MoE).")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs serving one replica (tensor parallel).")] = 1,
    precision: Annotated[str, typer.Option(help="Precision of weights and math.")] = "bf16",
    batch: Annotated[int, typer.Option(help="Concurrent sequences.")] = 1,
    context: Annotated[int, typer.Option(help="Tokens of context per sequence.")] = 2048,
    layers: Annotated[int | None, typer.Option(help="Layers.")] = None,
    heads: Annotated[int | None, typer.Option(help="Attention (query) heads.")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="Key/value heads (GQA).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension.")] = None,
    kv_precision: Annotated[str, typer.Option(help="Precision of the KV cache.")] = "bf16",
    efficiency: Annotated[
        float, typer.Option(help="Share of peak compute and bandwidth reached.")
    ] = 1.0,
    output_format: FormatOpt = Format.TEXT,
) -> None:
    """Prefill and decode token rates per GPU (roofline), and the KV cache size.

    Example:
        badput estimate infer --params 8B --gpu H100 --layers 32 --kv-heads 8 --head-dim 128
    """
    from badput.estimate.infer import estimate_infer

    result = estimate_infer(
        params=parse_quantity(params, "--params"),
        gpu=_gpu(gpu),
        precision=_precision(precision),
        active_params=_opt_quantity(active_params, "--active-params"),
        gpus=gpus,
        batch=batch,
        context=context,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        heads=heads,
        kv_precision=_precision(kv_precision),
        efficiency=efficiency,
    )
    _emit("infer", result, output_format)


@estimate_app.command()
def cost(
    analysis: Annotated[str, typer.Argument(help="JSON written by badput analyze --format json.")],
    gpus: Annotated[int, typer.Option(help="GPUs in the cluster.")],
    price: Annotated[float | None, typer.Option(help="Dollars per GPU-hour.")] = None,
    output_format: FormatOpt = Format.TEXT,
) -> None:
    """GPU-hours and dollars per day that each badput category costs a cluster.

    Example:
        badput estimate cost analysis.json --gpus 1024 --price 2
    """
    from badput.estimate.cost import badput_cost

    _emit("cost", badput_cost(_read_analysis(analysis), gpus, price), output_format)


@estimate_app.command()
def gpus(output_format: FormatOpt = Format.TEXT) -> None:
    """The hardware table: dense peaks, memory, interconnect, TDP (JSON adds sources)."""
    from badput.estimate.hardware import all_gpus

    _emit("gpus", all_gpus(), output_format)
