"""Shares of the roof above 100 %: reported as measured, and explained from the trace.

The demo trace (ResNet50 on a V100, FP32) shows cuDNN convolution backward ops at 134-168 %
of the FP32 roof: their kernels are Winograd ones, which do less math than the direct
convolution the FLOP model counts. Its `aten::zero_` rows showed 160 % of the DRAM roof: the
model counted a read a fill never does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from badput.analysis import analyze_trace
from badput.analysis.opmodel import model_op
from badput.analysis.ops import OpRow, above_roof
from badput.report.text import above_roof_lines, attribution_lines
from badput.trace import load_trace

DEMO = Path(__file__).parents[1] / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"


def test_a_fill_writes_and_computes_nothing_else() -> None:
    n = 32 * 64 * 112 * 112
    m = model_op("aten::zero_", [[32, 64, 112, 112]], ["float"], [""])
    assert (m.flops, m.bytes, m.category) == (0.0, 4.0 * n, "UnaryElementwise")
    m = model_op("aten::fill_", [[1024], []], ["c10::BFloat16", "Scalar"], ["", "0"])
    assert (m.flops, m.bytes) == (0.0, 2048.0)
    m = model_op("aten::relu_", [[1024]], ["float"], [""])  # a unary op reads and writes
    assert (m.flops, m.bytes) == (1024.0, 8192.0)


def _row(**kw: object) -> OpRow:
    base = OpRow(
        op="aten::x", category="GEMM", input_dims=[], input_types=[], count=1, kernel_ns=1_000,
        flops=1.0, bytes=1.0, precision="fp32", tflops_per_s=1.0, tb_per_s=1.0, intensity=1.0,
        bound="compute", roof_share=0.5, module=None, kernels=["k"],
    )  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_reasons_come_from_the_kernels_and_the_bound() -> None:
    rows = [
        _row(category="CONV_bwd", roof_share=1.5, kernel_ns=3_000,
             kernels=["volta_sgemm_64x64_nt", "cudnn::winograd_nonfused::winogradWgradData4x4"]),
        _row(category="CONV_fwd", roof_share=1.2, kernels=["fft2d_r2c_32x32"]),
        # a convolution above its roof without a Winograd or FFT kernel: the model's doing
        _row(category="CONV_fwd", roof_share=1.1, kernels=["implicit_convolve_sgemm"]),
        _row(category="BinaryElementwise", bound="memory", roof_share=1.3, bytes=7e6),
        _row(roof_share=1.0),  # at the roof, not above it
        _row(roof_share=None),
    ]  # fmt: skip
    found = {a.reason: a for a in above_roof(rows)}
    assert set(found) == {"fast-algorithm", "cache", "model"}
    fast = found["fast-algorithm"]
    assert (fast.ops, fast.kernel_ns, fast.max_share) == (2, 4_000, 1.5)
    assert found["cache"].evidence == "at most 7.0 MB moved per call"
    assert (found["model"].ops, found["model"].max_share) == (1, 1.1)
    assert next(a.reason for a in above_roof(rows)) == "fast-algorithm"  # most GPU time first
    assert above_roof([_row(), _row(roof_share=0.99)]) == []


@pytest.fixture(scope="module")
def demo_model() -> object:
    (d,) = analyze_trace(load_trace(str(DEMO)))
    assert d.model is not None
    return d.model


def test_demo_convolutions_above_the_roof_are_winograd(demo_model: object) -> None:
    m = demo_model
    found = {a.reason: a for a in above_roof(m.ops)}  # type: ignore[attr-defined]
    fast = found["fast-algorithm"]
    assert fast.ops == 3 and fast.max_share == pytest.approx(1.681, abs=1e-3)
    zero = [r for r in m.ops if r.op == "aten::zero_"]  # type: ignore[attr-defined]
    assert zero and all(r.flops == 0 for r in zero)
    assert all(r.roof_share is None or r.roof_share < 1.0 for r in zero)  # None: no GPU time
    big = next(r for r in zero if r.input_dims == [[32, 64, 112, 112]])
    # 102.8 MB written in 142.5 us: 721 GB/s, 80.1 % of the V100's 900 GB/s
    assert big.roof_share == pytest.approx(0.801, abs=1e-3)
    lines = above_roof_lines(m)  # type: ignore[arg-type]
    assert lines[0].startswith("3 convolutions above 100 % of roof (up to 168.1 %, ")
    assert "Winograd or FFT" in lines[0]
    assert set(lines) <= set(attribution_lines(m))  # type: ignore[arg-type]
