"""The model view in the reports: top ops, modules, MFU and its waterfall, the roofline.

Fixtures are `ModelAnalysis` values built by hand with the numbers of a real trace (Qwen1.5
0.5B inference on an H100, TraceLens' reference trace), so the layout is checked without the
analysis; the last tests run the whole pipeline on the real trace when it is there.
"""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from badput.analysis.ops import STAGES, Efficiency, ModelAnalysis, ModuleRow, OpRow, Stage
from badput.analysis.results import (
    Breakdown,
    CommSummary,
    DeviceAnalysis,
    IdleCauses,
    KernelStat,
    WindowSource,
)
from badput.estimate.hardware import lookup_gpu
from badput.report import html_report, markdown, text
from badput.report.units import format_ms

H100 = "NVIDIA H100 80GB HBM3"
GEMM_KERNEL = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas"
)
FLASH_KERNEL = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4,"
    " false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, false, true, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
MUL_KERNEL = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
    "MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::"
    "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
    "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>"
    " > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})"
)
CAT_KERNEL = (
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
    "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::"
    "OpaqueType<2u>*, int, unsigned int)"
)
BF16 = "c10::BFloat16"


def _op(
    op: str,
    dims: object,
    types: list[str],
    count: int,
    kernel_ns: int,
    flops: float | None,
    nbytes: float | None,
    kernels: list[str],
    **kw: object,
) -> OpRow:
    spec = lookup_gpu(H100, warn=False)
    assert spec is not None
    precision = kw.pop("precision", "bf16" if flops is not None else None)
    tflops = tbps = intensity = share = None
    bound = None
    if flops is not None and nbytes is not None:
        tflops = flops * count / kernel_ns / 1e3
        tbps = nbytes * count / kernel_ns / 1e3
        intensity = flops / nbytes
        peak = spec.peak(str(precision)) or 1.0
        bw = spec.memory_bw_gbs / 1e3
        bound = "compute" if intensity >= peak / bw else "memory"
        share = tflops / min(peak, intensity * bw)
    fields: dict[str, object] = {
        "op": op,
        "category": kw.pop("category", "GEMM" if flops else None),
        "input_dims": dims,
        "input_types": types,
        "count": count,
        "kernel_ns": kernel_ns,
        "flops": flops,
        "bytes": nbytes,
        "precision": precision,
        "tflops_per_s": tflops,
        "tb_per_s": tbps,
        "intensity": intensity,
        "bound": bound,
        "roof_share": share,
        "module": "Qwen2Model_0/Qwen2DecoderLayer_0/Qwen2MLP_0/Linear_3",
        "kernels": kernels,
    }
    fields.update(kw)
    return OpRow(**fields)  # type: ignore[arg-type]


def _ops() -> list[OpRow]:
    return [
        _op("aten::mm", [[8944, 1024], [1024, 2816]], [BF16, BF16], 48, 4_055_251,
            51_581_550_592.0, 74_457_088.0, [GEMM_KERNEL, "Memset (Device)"]),
        _op("aten::_flash_attention_forward", [[16, 559, 16, 64]] * 3 + [[]] * 4,
            [BF16] * 3 + ["", "", "Scalar", "Scalar"], 24, 2_722_705, 10_239_377_408.0,
            73_269_248.0, [FLASH_KERNEL], category="SDPA_fwd"),
        _op("aten::mul", [[16, 16, 559, 64], [1, 1, 559, 64]], [BF16, BF16], 96, 2_679_732,
            9_158_656.0, 36_706_176.0, [MUL_KERNEL], category="BinaryElementwise"),
        _op("aten::addmm", [[1024], [8944, 1024], [1024, 1024], [], []],
            [BF16, BF16, BF16, "Scalar", "Scalar"], 72, 2_329_075, 18_766_086_144.0,
            38_733_824.0, [GEMM_KERNEL]),
        _op("aten::cat", [[[16, 16, 559, 32], [16, 16, 559, 32]], []], ["TensorList", "Scalar"],
            48, 2_014_326, None, None, [CAT_KERNEL], reason="unknown op"),
        _op("aten::mul", [[16, 559, 1024], [16, 559, 1]], ["float", "float"], 49, 1_608_923,
            9_158_656.0, 73_305_024.0, [MUL_KERNEL], precision="fp32",
            category="BinaryElementwise"),
        _op("aten::copy_", [[16, 559, 1024], [16, 559, 1024], []], ["float", BF16, "Scalar"],
            49, 1_431_672, 9_158_656.0, 54_951_936.0, [MUL_KERNEL], precision="fp32",
            category="UnaryElementwise"),
    ]  # fmt: skip


def _modules() -> list[ModuleRow]:
    rows = [
        ModuleRow("Qwen2Model_0", 1, 31_905_473, 1198),
        ModuleRow("Qwen2Model_0/Embedding_0", 2, 50_000, 1),
    ]
    for i in range(24):
        layer = f"Qwen2Model_0/Qwen2DecoderLayer_{i}"
        rows += [
            ModuleRow(layer, 2, 1_319_000, 49),
            ModuleRow(f"{layer}/Qwen2Attention_{i}", 3, 648_000, 23),
            ModuleRow(f"{layer}/Qwen2MLP_{i}", 3, 335_000, 9),
            ModuleRow(f"{layer}/Qwen2MLP_{i}/Linear_{3 * i}", 4, 245_000, 3),
            ModuleRow(f"{layer}/Qwen2MLP_{i}/SiLU_{i}", 4, 38_000, 1),
        ]
    return sorted(rows, key=lambda r: (-r.kernel_ns, r.path))  # fmt: skip


def _efficiency() -> Efficiency:
    peak = 989.5
    values = [84.7056, 0.0, 4.1238, 58.7324, 513.3255, 163.3131, 165.2995]
    return Efficiency(
        modelled_flops=5_767_701_396_015.0,
        modelled_kernel_share=0.9348,
        precision="bf16",
        peak_tflops=peak,
        mfu=values[-1] / peak,
        waterfall=[Stage(s, v, v / peak) for s, v in zip(STAGES, values, strict=True)],
    )


def _model(**kw: object) -> ModelAnalysis:
    fields: dict[str, object] = {
        "ops": _ops(),
        "modules": _modules(),
        "efficiency": _efficiency(),
        "attributed_ns": 31_905_473,
        "unattributed_ns": 1_204_000,
        "reasons": {"launched before the trace": 1_204_000},
        "unmodelled": {"unknown op": 2_073_430},
        "gpu_spec": lookup_gpu(H100, warn=False),
        "has_shapes": True,
    }
    fields.update(kw)
    return ModelAnalysis(**fields)  # type: ignore[arg-type]


def _device(model: ModelAnalysis | None = None) -> DeviceAnalysis:
    kernels = [
        KernelStat(GEMM_KERNEL, "gemm", 168, 8_850_000),
        KernelStat(MUL_KERNEL, "elementwise", 145, 3_910_000),
        KernelStat(FLASH_KERNEL, "attention", 24, 2_720_000),
        KernelStat(CAT_KERNEL, "elementwise", 48, 2_010_000),
    ]
    return DeviceAnalysis(
        trace="/traces/qwen.json.gz",
        rank=None,
        world_size=None,
        device=0,
        gpu=H100,
        window_start_ns=0,
        window_ns=34_890_000,
        window_source=WindowSource.GPU_STEPS,
        goodput=0.91,
        breakdown=Breakdown(31_750_000, 0, 140_000, 3_000_000),
        idle_causes=IdleCauses(570_000, 0, 1_330_000, 1_100_000),
        comm=CommSummary(0, 0),
        kernels=kernels,
        kernel_ns=31_905_473,
        short_kernel_ns=190_000,
        model=_model() if model is None else model,
    )


def _text(d: DeviceAnalysis, width: int, top: int = 10) -> str:
    console = Console(width=width, record=True, no_color=True)
    console.print(text._device(d, top, [], console.width))
    return console.export_text()


# ---- text ------------------------------------------------------------------------------------


def _op_numbers(r: OpRow) -> list[str]:
    return [c for c in text.op_cells(r)[3:7] if c != "–"]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_text_fits_and_never_cuts_a_number(width: int) -> None:
    out = _text(_device(), width)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), [x for x in lines if len(x) > width]
    for r in _ops():
        row = next(
            (i for i, line in enumerate(lines) if all(n in line for n in _op_numbers(r))), None
        )
        assert row is not None, (r.op, _op_numbers(r))
    # The kernel table: every total and mean whole.
    for k in _device().kernels:
        assert any(format_ms(k.total_ns) in line and f"{k.count:,}" in line for line in lines)
    flat = " ".join(out.split())  # lines a narrow terminal wraps, joined
    assert "MFU 16.7 % of 989.5 TFLOP/s bf16 peak (model covers 93 % of kernel time)" in flat
    assert (
        "GPU time attributed to ops: 96.4 % (unattributed: 1.20 ms launched before the trace)"
        in flat
    )


def test_text_at_160_columns_shows_names_whole() -> None:
    out = _text(_device(), 160)
    assert "aten::_flash_attention_forward" in out
    assert "8944x1024 · 1024x2816" in out
    assert "16x559x16x64 · 16x559x16x64 · 16x559x16x64" in out
    assert "fp32/bf16" in out  # copy_ from float to bf16; the Scalar left out
    assert "[16x16x559x32 ×2]" in out
    row = next(line for line in out.splitlines() if "8944x1024 · 1024x2816" in line)
    assert re.search(
        r"aten::mm\s+8944x1024 · 1024x2816\s+bf16\s+48\s+4\.06\s+\S+\s+\S+ %\s+compute", row
    )


def test_text_at_80_columns_puts_shapes_under_the_op() -> None:
    out = _text(_device(), 80)
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("mm "))
    assert lines[i + 1].strip() == "8944x1024 · 1024x2816"
    assert "_flash_attention_forward" in out  # `aten::` gives way before the name does


def test_kernel_names_are_told_apart() -> None:
    out = _text(_device(), 80)
    assert "cutlass::Kernel<…>(…)" not in out and "elementwise_kernel<…>(…)" not in out
    assert "tilesize128x128x64" in _text(_device(), 160)
    assert "MulFunctor" in _text(_device(), 160)


def test_module_table_merges_instances_and_nests() -> None:
    out = _text(_device(), 80)
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("GPU time by module"))
    rows = lines[head + 1 : head + 8]
    assert rows[0].startswith("Qwen2Model ")
    assert rows[1].startswith("  Qwen2DecoderLayer ") and " 24 " in rows[1]
    assert rows[2].startswith("    Qwen2Attention ")
    assert any(r.startswith("      Linear ") for r in rows)
    assert "Qwen2DecoderLayer_3" not in out


def test_module_tree_limit_and_left_out() -> None:
    rows, left_out = text.module_tree(_modules(), 3)
    assert [p for p, *_ in rows] == [
        "Qwen2Model",
        "Qwen2Model/Qwen2DecoderLayer",
        "Qwen2Model/Qwen2DecoderLayer/Qwen2Attention",
    ]
    assert rows[1][3] == 24 and rows[1][2] == 24 * 1_319_000
    assert left_out == 7 - 3  # Model, Layer, Attention, MLP, Linear, SiLU, Embedding
    every, none_left = text.module_tree(_modules(), 0)
    assert none_left == 0 and len(every) == 7


def test_waterfall_rows_add_up_to_the_peak() -> None:
    out = _text(_device(), 80)
    assert "peak (bf16)" in out and "989.5" in out
    for stage in STAGES:
        assert stage in out
    assert "= achieved" in out and "165.3" in out


def test_mfu_line_says_why_not() -> None:
    d = _device()
    no_spec = _model(
        gpu_spec=None,
        efficiency=dataclasses.replace(_efficiency(), peak_tflops=None, mfu=None, waterfall=[]),
    )
    assert "not in badput's hardware table" in text.mfu_line(d, no_spec)
    no_shapes = _model(
        has_shapes=False,
        efficiency=Efficiency(0.0, 0.0, None, None, None),
        ops=[dataclasses.replace(r, flops=None, bytes=None, tflops_per_s=None) for r in _ops()],
    )
    assert "record_shapes=True" in text.mfu_line(d, no_shapes)
    out = _text(_device(no_shapes), 80)
    assert "MFU n/a" in out and "where the peak goes" not in out


def test_top_limits_op_rows_like_kernel_rows() -> None:
    out = _text(_device(), 160, top=2)
    assert "aten::mm" in out and "aten::_flash_attention_forward" in out
    assert "aten::addmm" not in out
    assert "5 more ops in --format json" in out
    assert "top ops" not in _text(_device(), 160, top=0)  # as the kernel table: none


def test_no_model_no_section() -> None:
    d = dataclasses.replace(_device(), model=None)
    out = _text(d, 80)
    assert "top ops" not in out and "MFU" not in out


def test_hostile_op_name_in_text_is_plain_text() -> None:
    evil = _model(ops=[dataclasses.replace(_ops()[0], op="[bold red]x[/]\x1b[2J")])
    out = _text(_device(evil), 160)
    assert "[bold red]x[/]" in out  # printed as text, not as rich markup


# ---- HTML ------------------------------------------------------------------------------------


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.svgs: list[str] = []
        self.titles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "svg":
            self.svgs.append(dict(attrs).get("class") or "")
        if tag == "title":
            self.titles += 1


def _html(d: DeviceAnalysis, top: int = 10) -> str:
    return html_report._device(d, [], top, [])


def test_html_has_the_model_plots_and_table() -> None:
    page = _html(_device())
    parsed = _Collect()
    parsed.feed(page)
    for plot in ("waterfall", "roofline", "icicle"):
        assert f"plot {plot}" in parsed.svgs, parsed.svgs
    assert '<table class="ops">' in page
    assert "MFU 16.7 % of 989.5 TFLOP/s bf16 peak" in page
    assert page.count('class="op-dot"') == 6  # every op with FLOPs; cat has none
    assert page.count('class="roof"') == 2  # bf16 and fp32
    assert page.count('class="waterfall-stage"') == 1 + len(STAGES)
    assert "Qwen2Model_0/Qwen2DecoderLayer_0/Qwen2MLP_0: 0.34 ms" in page  # a rect's title
    assert "<script" not in page


def test_html_escapes_hostile_names() -> None:
    script = "<script>alert(1)</script>"
    img = '<img src=x onerror="alert(2)">'
    ops = [dataclasses.replace(r, op=script, kernels=[img]) for r in _ops()]
    mods = [dataclasses.replace(m, path=m.path.replace("Qwen2Model_0", img)) for m in _modules()]
    page = _html(_device(_model(ops=ops, modules=mods)))
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in page


def test_html_stays_small_for_a_big_model() -> None:
    mods = [ModuleRow("M_0", 1, 10_000_000, 10_000)]
    mods += [ModuleRow(f"M_0/L_{i}", 2, 10_000_000 // 5000, 2) for i in range(5000)]
    page = _html(_device(_model(modules=mods)))
    assert page.count('class="module"') <= html_report._MAX_ICICLE_RECTS
    assert len(page) < 600_000


def test_html_without_gpu_spec_or_flops() -> None:
    bare = _model(
        gpu_spec=None,
        efficiency=dataclasses.replace(_efficiency(), peak_tflops=None, mfu=None, waterfall=[]),
    )
    page = _html(_device(bare))
    assert "plot waterfall" not in page and 'class="roof"' not in page
    assert "plot roofline" in page  # the dots still place the ops
    none = _model(ops=[dataclasses.replace(r, intensity=None) for r in _ops()], modules=[])
    page = _html(_device(none))
    assert "plot roofline" not in page and "plot icicle" not in page


# ---- Markdown --------------------------------------------------------------------------------


def test_markdown_has_the_ops_table_and_mfu_line() -> None:
    lines = markdown._device_section(_device(), 10, [])
    doc = "\n".join(lines)
    assert "**MFU 16.7 % of 989.5 TFLOP/s bf16 peak (model covers 93 % of kernel time)**" in doc
    head = next(i for i, line in enumerate(lines) if line.startswith("| top ops |"))
    assert (
        lines[head] == "| top ops | shapes | dtype | calls | GPU ms | TFLOP/s | of roof | bound |"
    )
    assert lines[head + 2].startswith("| aten::mm | 8944x1024 · 1024x2816 | bf16 | 48 | 4.06 |")
    assert "aten::\\_flash\\_attention\\_forward" in doc
    assert "GPU time attributed to ops: 96.4 %" in doc
    kernels = [line for line in lines if "| gemm |" in line or "| elementwise |" in line]
    assert len({line.split(" | ")[0] for line in kernels}) == len(kernels)


def test_markdown_escapes_op_names() -> None:
    ops = [dataclasses.replace(r, op="a|b<script>*x*") for r in _ops()]
    doc = "\n".join(markdown._device_section(_device(_model(ops=ops)), 10, []))
    row = next(line for line in doc.splitlines() if "| 8944x1024 · 1024x2816 |" in line)
    assert row.startswith("| a\\|b\\<script") and row.count(" | ") == 7  # still 8 cells
    assert not re.search(r"(?<!\\)[<|]script", doc)  # every `<` and `|` escaped


# ---- the real trace ------------------------------------------------------------------------

QWEN = "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.parametrize("width", [80, 160])
def test_real_trace_text_fits(shared_traces: Path, width: int) -> None:
    from badput.analysis.device import analyze_trace
    from badput.diagnose import diagnose_job, outcome_of
    from badput.trace import load_trace

    trace = load_trace(str(shared_traces / QWEN))
    job = diagnose_job([outcome_of(trace, analyze_trace(trace), top=10)])
    console = Console(width=width, record=True, no_color=True)
    text.render_job(job, console, top=10)
    out = console.export_text()
    assert all(len(line) <= width for line in out.splitlines())
    model = job.analysed[0].devices[0].model
    assert model is not None and model.ops
    for r in model.ops[:10]:
        assert any(all(n in line for n in _op_numbers(r)) for line in out.splitlines()), r.op
    assert "GPU time by module" in out
    if model.efficiency.mfu is not None:
        assert "where the peak goes" in out
