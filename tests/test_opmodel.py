"""The per-op performance model (badput.analysis.opmodel) against TraceLens and by hand."""

from __future__ import annotations

import ast
import csv
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.analysis.opmodel import (
    CATEGORIES,
    MAX_ELEMENTS,
    OpModel,
    causal_fraction,
    is_modelled_op,
    model_op,
    tracelens_category,
)
from badput.estimate.hardware import PRECISIONS
from conftest import SHARED_TRACES

REFS = SHARED_TRACES / "tracelens-h100"
BF16 = "c10::BFloat16"
MIB = 2**20  # TraceLens's "Data Moved (MB)" is MiB: addmm 788x768x768 moves 3,601,920 B = 3.435 MB

# (csv, FLOPs tolerance, bytes tolerance): the acceptance bounds of issue 17.
SHEETS = [
    ("GEMM.csv", 1e-3, 0.05),
    ("SDPA_fwd.csv", 1e-3, 0.05),
    ("CONV_fwd.csv", 1e-3, 0.05),
    ("BinaryElementwise.csv", 0.05, 0.05),
    ("UnaryElementwise.csv", 0.05, 0.05),
    ("Normalization.csv", 0.05, 0.05),
    ("Reduce_fwd.csv", 0.05, 0.05),
]


def _rows() -> list[Any]:
    if not REFS.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no {REFS}"))]
    out = []
    for folder in sorted(REFS.glob("*_perf_report_csvs")):
        for sheet, ftol, btol in SHEETS:
            path = folder / sheet
            if not path.is_file():
                continue
            with path.open(newline="") as f:
                for i, row in enumerate(csv.DictReader(f)):
                    ident = f"{folder.name.split('__')[0]}/{sheet}/{i}"
                    out.append(pytest.param((row, ftol, btol), id=ident))
    return out


def _model_row(row: dict[str, str]) -> OpModel:
    return model_op(
        row["name"],
        ast.literal_eval(row["Input Dims_first"]),
        ast.literal_eval(row["Input type_first"]),
        ast.literal_eval(row["Concrete Inputs_first"]),
    )


@pytest.mark.parametrize("case", _rows())
def test_matches_tracelens_reference_rows(case: tuple[dict[str, str], float, float]) -> None:
    row, ftol, btol = case
    m = _model_row(row)
    assert m.modelled, m.reason
    assert m.flops is not None and m.bytes is not None
    want_flops = float(row["GFLOPS_first"]) * 1e9
    want_bytes = float(row["Data Moved (MB)_first"]) * MIB
    assert m.flops == pytest.approx(want_flops, rel=ftol)
    assert m.bytes == pytest.approx(want_bytes, rel=btol)
    assert m.precision in PRECISIONS
    assert m.category in CATEGORIES


def test_reference_rows_exist() -> None:
    if not Path(REFS).is_dir():
        pytest.skip(f"no {REFS}")
    counts = {sheet: 0 for sheet, _, _ in SHEETS}
    for p in _rows():
        row_sheet = p.id.split("/")[1]
        counts[row_sheet] += 1
    assert counts["GEMM.csv"] == 13
    assert counts["SDPA_fwd.csv"] == 3
    assert counts["CONV_fwd.csv"] == 1


# ---- hand-worked cases -------------------------------------------------------------------------


def test_bf16_mm() -> None:
    m = model_op("aten::mm", [[64, 128], [128, 32]], [BF16, BF16], ["", ""])
    assert m.flops == 2 * 64 * 32 * 128 == 524_288
    assert m.bytes == (64 * 128 + 128 * 32 + 64 * 32) * 2 == 28_672
    assert (m.precision, m.category) == ("bf16", "GEMM")
    assert (m.param("M"), m.param("N"), m.param("K"), m.param("B")) == (64, 32, 128, 1)


def test_addmm_counts_bias() -> None:
    m = model_op("aten::addmm", [[32], [64, 128], [128, 32], [], []], [BF16] * 3 + ["Scalar"] * 2)
    assert m.flops == 2 * 64 * 32 * 128 + 64 * 32
    assert m.bytes == (64 * 128 + 128 * 32 + 64 * 32 + 32) * 2


def test_fp8_scaled_mm() -> None:
    e4m3 = "c10::Float8_e4m3fn"
    m = model_op(
        "aten::_scaled_mm",
        [[128, 256], [256, 64], [], [], [], [], [], []],
        [e4m3, e4m3, "float", "float", "", "", "Scalar", "Scalar"],
        ["", "", "", "", "", "", "15", "False"],  # out_dtype 15 = bfloat16
    )
    assert m.flops == 2 * 128 * 64 * 256 == 4_194_304
    # A and B 1 byte each, bf16 out, two fp32 0-d scales
    assert m.bytes == 128 * 256 + 256 * 64 + 128 * 64 * 2 + 4 + 4 == 65_544
    assert m.precision == "fp8"  # from Input type, whatever the kernel name says


def _sdpa(causal: bool) -> OpModel:
    q = [2, 4, 128, 64]
    return model_op(
        "aten::_scaled_dot_product_flash_attention",
        [q, q, q, [], [], [], []],
        [BF16] * 3 + ["Scalar"] * 4,
        ["", "", "", "0.", str(causal), "False", "0.125"],
    )


def test_sdpa_causal_halves_flops() -> None:
    full, causal = _sdpa(False), _sdpa(True)
    assert full.flops == 4 * 2 * 4 * 128 * 128 * 64 == 33_554_432
    assert causal.flops == full.flops / 2
    assert full.bytes == causal.bytes == 4 * (2 * 4 * 128 * 64) * 2
    assert causal.param("causal") is True and full.param("causal") is False
    assert full.category == "SDPA_fwd"


def test_causal_fraction_rectangular() -> None:
    assert causal_fraction(8, 8, "upper_left") == causal_fraction(8, 8, "lower_right") == 0.5
    assert causal_fraction(4, 8, "upper_left") == pytest.approx(8 / 32)  # 4²/2 of 4x8
    assert causal_fraction(4, 8, "lower_right") == pytest.approx((32 - 8) / 32)


def test_grouped_strided_conv() -> None:
    m = model_op(
        "aten::convolution",
        [[2, 8, 9, 9], [16, 2, 3, 3], [], [], [], [], [], [], []],
        [BF16, BF16, "", *["ScalarList"] * 3, "Scalar", "ScalarList", "Scalar"],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "4"],
    )
    # out spatial (9 + 2 - 2 - 1) // 2 + 1 = 5: y = [2, 16, 5, 5] = 800 elements
    assert m.flops == 2 * 800 * (2 * 3 * 3) == 28_800
    assert m.bytes == (2 * 8 * 81 + 16 * 2 * 9 + 800) * 2 == 4_768
    assert m.param("output") == str((2, 16, 5, 5))
    assert m.param("groups") == 4


def test_conv_backward_masks() -> None:
    dims = [[2, 16, 5, 5], [2, 8, 9, 9], [16, 2, 3, 3], [], [], [], [], [], [], [], []]
    types = [BF16] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    conc = ["", "", "", "[16]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "4"]
    m = model_op("aten::convolution_backward", dims, types, [*conc, "[True, True, False]"])
    assert m.flops == 2 * 28_800 and m.category == "CONV_bwd"
    m = model_op("aten::convolution_backward", dims, types, [*conc, "[False, True, True]"])
    assert m.flops == 28_800 + 800


def test_layer_norm_backward() -> None:
    f = "float"
    m = model_op(
        "aten::native_layer_norm_backward",
        [[4, 8], [4, 8], [], [4, 1], [4, 1], [8], [8], []],
        [f, f, "ScalarList", f, f, f, f, "ScalarList"],
        ["", "", "[8]", "", "", "", "", "[True, True, True]"],
    )
    assert m.flops == 10 * 32 + 2 * 32 + 32 == 416
    # dy, x read and dx written (3 x 32 x 4 B); mean and rstd (2 x 4 x 4 B); weight read,
    # grad_weight and grad_bias written (3 x 8 x 4 B)
    assert m.bytes == 384 + 32 + 96 == 512
    assert (m.category, m.precision) == ("NORM_bwd", "fp32")


def test_precision_never_from_kernel_name_and_mapping() -> None:
    assert model_op("aten::mm", [[2, 2], [2, 2]], ["c10::Half"] * 2).precision == "fp16"
    assert model_op("aten::mm", [[2, 2], [2, 2]], ["double"] * 2).precision == "fp64"
    assert tracelens_category("UnaryElementwise") == "elementwise"
    assert tracelens_category("GEMM") == "GEMM"
    assert tracelens_category(None) == "other"
    assert is_modelled_op("aten::addmm") and not is_modelled_op("aten::nonexistent")


# ---- bad input --------------------------------------------------------------------------------

BAD = [
    ("aten::mm", None, [BF16, BF16], "missing Input Dims"),
    ("aten::mm", [], [BF16, BF16], "missing Input Dims"),
    ("aten::mm", [[2, 3], [3, 4]], None, "missing Input type"),
    ("aten::mm", [[2, -3], [-3, 4]], [BF16, BF16], "negative size"),
    ("aten::mm", [[2**41, 3], [3, 4]], [BF16, BF16], "absurd size"),
    ("aten::mm", [[2**21, 2**20], [2**20, 2**21]], [BF16, BF16], "absurd size"),
    ("aten::mm", [[2, 3], [3, 4]], ["c10::Mystery", BF16], "unknown dtype"),
    ("aten::mm", [[2, 3], [3, 4]], [BF16], "malformed Input Dims"),
    ("aten::mm", [[2, 3]], [BF16], "malformed Input Dims"),
    ("aten::mm", [[2, 3], [4, 5]], [BF16, BF16], "shape mismatch"),
    ("aten::mm", [[2, 3, 1], [3, 4]], [BF16, BF16], "unexpected rank"),
    ("aten::mm", "[[2, 3], [3, 4]]", [BF16, BF16], "missing Input Dims"),
    ("aten::mm", [[2, "3"], [3, 4]], [BF16, BF16], "malformed Input Dims"),
    ("aten::mm", [[2, True], [3, 4]], [BF16, BF16], "malformed Input Dims"),
    ("aten::mm", [[2.5, 3], [3, 4]], [BF16, BF16], "malformed Input Dims"),
    ("aten::mm", [5, 6], [BF16, BF16], "malformed Input Dims"),
    ("aten::nonexistent", [[2]], [BF16], "unknown op"),
    (None, [[2]], [BF16], "unknown op"),
    ("aten::_scaled_dot_product_flash_attention", [[2, 3], [2, 3], [2, 3]], [BF16] * 3, None),
    ("aten::convolution", [[2, 3, 8, 8], [4, 3, 3, 3], []], [BF16, BF16, ""], None),
]


@pytest.mark.parametrize(("name", "dims", "types", "reason"), BAD)
def test_bad_input_has_no_model_and_a_reason(
    name: Any, dims: Any, types: Any, reason: str | None
) -> None:
    m = model_op(name, dims, types, ["", "", "x"])
    assert m.flops is None and m.bytes is None and not m.modelled
    assert m.reason
    if reason is not None:
        assert m.reason == reason


def test_zero_sized_tensor_is_zero_not_none() -> None:
    m = model_op("aten::mm", [[0, 3], [3, 4]], [BF16, BF16])
    assert (m.flops, m.bytes) == (0.0, (3 * 4) * 2.0)


def test_max_elements_is_the_guard() -> None:
    ok = model_op("aten::relu", [[MAX_ELEMENTS]], ["signed char"])
    assert ok.flops == float(MAX_ELEMENTS)
    assert model_op("aten::relu", [[MAX_ELEMENTS + 1]], ["signed char"]).reason == "absurd size"


# ---- never raises ----------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from([BF16, "float", "Scalar", "", "c10::Float8_e4m3fn", "[1, 2]", "True"]),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=30,
)
_names = st.sampled_from(
    sorted(
        {
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::matmul",
            "aten::linear",
            "aten::_scaled_mm",
            "aten::convolution",
            "aten::cudnn_convolution",
            "aten::convolution_backward",
            "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_efficient_attention_backward",
            "flash_attn::_flash_attn_forward",
            "aten::native_layer_norm",
            "aten::native_layer_norm_backward",
            "aten::rms_norm",
            "aten::native_batch_norm",
            "aten::cudnn_batch_norm_backward",
            "aten::native_group_norm",
            "aten::add",
            "aten::mul_",
            "aten::pow",
            "aten::gelu",
            "aten::copy_",
            "aten::_to_copy",
            "aten::_softmax",
            "aten::sum",
            "aten::mean",
            "aten::argmax",
            "aten::embedding",
        }
    )
) | st.text(max_size=20)


@settings(max_examples=400, deadline=None)
@given(name=_names, dims=_json, types=_json, concrete=_json)
def test_any_json_like_input_never_raises(name: str, dims: Any, types: Any, concrete: Any) -> None:
    m = model_op(name, dims, types, concrete)
    assert isinstance(m, OpModel)
    if m.modelled:
        assert m.flops is not None and m.bytes is not None
        assert math.isfinite(m.flops) and m.flops >= 0
        assert math.isfinite(m.bytes) and m.bytes >= 0
        assert m.reason is None
    else:
        assert m.flops is None and m.bytes is None and m.reason


@settings(max_examples=200, deadline=None)
@given(
    name=_names,
    dims=st.lists(st.lists(st.integers(min_value=-3, max_value=2**42), max_size=5), max_size=9),
    types=st.lists(st.sampled_from([BF16, "float", "Scalar", "", "long int"]), max_size=9),
)
def test_shaped_input_never_raises(name: str, dims: Any, types: Any) -> None:
    m = model_op(name, dims, types, [""] * len(dims))
    assert m.modelled or m.reason


def test_cudnn_convolution_backward_of_old_traces() -> None:
    # ResNet50 (PyTorch 1.8): self, grad_output, weight, then padding, stride, ... unrecorded.
    dims = [[32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1], [], [], [], [], [], [], [], []]
    types = ["float"] * 3 + ["GenericList"] * 3 + ["Int", "Bool", "Bool", "Bool", "GenericList"]
    m = model_op("aten::cudnn_convolution_backward", dims, types)
    conv = 2 * (32 * 2048 * 7 * 7) * (512 * 1 * 1)
    assert m.category == "CONV_bwd" and m.precision == "fp32"
    assert m.flops == 2 * conv
    x, dy, w = 32 * 512 * 49 * 4, 32 * 2048 * 49 * 4, 2048 * 512 * 4
    assert m.bytes == (dy + w + x) + (x + dy + w)
    only_dw = model_op(
        "aten::cudnn_convolution_backward", dims, types, [""] * 10 + ["[False, True]"]
    )
    assert only_dw.flops == conv
    mismatch = [[32, 512, 7, 7], [32, 1024, 7, 7], [2048, 512, 1, 1]]
    bad = model_op("aten::cudnn_convolution_backward", mismatch, ["float"] * 3)
    assert bad.flops is None and bad.reason == "shape mismatch"
