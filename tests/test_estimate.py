"""badput estimate: published budgets and worked examples reproduced, bad input refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from badput.cli.app import main
from badput.errors import UsageError
from badput.estimate.flops import mfu, training_flops
from badput.estimate.hardware import lookup_gpu
from badput.estimate.memory import Recompute, estimate_memory

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    code = main(["estimate", *args, "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert isinstance(doc, dict)
    return doc


def run_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["estimate", *args])
    out = capsys.readouterr()
    assert code == 2, (out.out, out.err)
    assert "Traceback" not in out.err
    return out.err


# ---- DeepSeek-V3 technical report, Table 1 -----------------------------------------------------

DSV3 = ["--params", "671e9", "--active-params", "37e9", "--tokens", "14.8e12", "--gpu", "H800"]


def test_deepseek_v3_budget_and_implied_mfu(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "train", *DSV3, "--gpu-hours", "2664000", "--price", "2")
    h800 = lookup_gpu("H800")
    assert h800 is not None
    peak = h800.peak("bf16")
    assert peak is not None and peak == pytest.approx(989.5, abs=0.5)  # dense, not 1,979 sparse
    assert doc["precision"] == "bf16"
    assert doc["mfu_denominator_tflops"] == peak
    flops = 6 * 37e9 * 14.8e12  # 3.2856e24
    assert doc["flops"] == pytest.approx(flops, rel=1e-12)
    implied = flops / (peak * 1e12 * 2_664_000 * 3600)
    assert doc["implied_mfu"] == pytest.approx(implied, rel=1e-9)
    assert 0.34 < implied < 0.36  # "about 35 %"
    assert doc["gpu_hours"] == 2_664_000
    assert doc["cost_usd"] == pytest.approx(5.328e6)


def test_deepseek_v3_total_cost(capsys: pytest.CaptureFixture[str]) -> None:
    # 2,788K H800 GPU-hours at $2 = $5.576M (pre-training 2,664K + context extension 119K
    # + post-training 5K).
    doc = run_json(capsys, "train", *DSV3, "--gpu-hours", "2.788M", "--price", "2")
    assert doc["cost_usd"] == pytest.approx(5.576e6)


def test_deepseek_v3_forward_from_mfu(capsys: pytest.CaptureFixture[str]) -> None:
    # The same run the other way round: 2,048 H800s at the implied MFU give the GPU-hours back.
    first = run_json(capsys, "train", *DSV3, "--gpu-hours", "2664000")
    doc = run_json(
        capsys, "train", *DSV3, "--gpus", "2048", "--mfu", str(first["implied_mfu"]), "--price", "2"
    )
    assert doc["gpu_hours"] == pytest.approx(2_664_000, rel=1e-9)
    assert doc["days"] == pytest.approx(2_664_000 / 2048 / 24, rel=1e-9)  # ~54 days
    assert doc["cost_usd"] == pytest.approx(5.328e6, rel=1e-9)


def test_text_report_shows_the_denominator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "train", *DSV3, "--gpu-hours", "2664000", "--price", "2"]) == 0
    out = capsys.readouterr().out
    assert "MFU denominator" in out and "989.5 TFLOP/s" in out
    assert "implied MFU" in out and "34.6 %" in out
    assert "$5,328,000" in out


# ---- 100T dense parameters on 29T tokens -------------------------------------------------------


def test_100t_dense_6nd_and_what_other_figures_assume(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "train",
        "--params",
        "100e12",
        "--tokens",
        "29e12",
        "--gpu",
        "H100",
        "--mfu",
        "0.4",
        "--gpus",
        "100000",
    ]
    doc = run_json(capsys, *base)
    assert doc["flops"] == pytest.approx(1.74e28, rel=1e-12)
    # A figure of 5.8e27 is what a forward-pass-only (2ND) count gives.
    doc = run_json(capsys, *base, "--target-flops", "5.8e27")
    target = doc["target"]
    assert isinstance(target, dict)
    assert target["flops_per_param_token"] == pytest.approx(2.0)
    assert target["matches"] == "forward pass only (inference): 2·N·D"
    # 2.32e28 is 8ND: training with full activation recomputation.
    target = run_json(capsys, *base, "--target-flops", "2.32e28")["target"]
    assert isinstance(target, dict)
    assert target["flops_per_param_token"] == pytest.approx(8.0)
    # 1e28 matches no convention: at 6ND it would take 57.5T parameters or 16.7T tokens.
    target = run_json(capsys, *base, "--target-flops", "1e28")["target"]
    assert isinstance(target, dict)
    assert target["matches"] is None
    assert target["params_at_6nd"] == pytest.approx(1e28 / (6 * 29e12))
    assert target["tokens_at_6nd"] == pytest.approx(1e28 / (6 * 100e12))


def test_attention_term_palm_formula() -> None:
    # PaLM 540B (Chowdhery et al. 2022, appendix B): L=118, d_model=18432, T=2048.
    f = training_flops(540e9, 1.0, layers=118, seq_len=2048, d_model=18432)
    assert f.dense_flops == pytest.approx(6 * 540e9)
    assert f.attention_flops == pytest.approx(12 * 118 * 18432 * 2048)
    assert "12·L·d_model·T" in f.formula


def test_mfu_helper_returns_its_denominator() -> None:
    a100 = lookup_gpu("NVIDIA A100-SXM4-80GB")
    assert a100 is not None
    m = mfu(model_flops=312e12 * 0.5 * 10, seconds=10, gpu=a100, precision="bf16")
    assert m.mfu == pytest.approx(0.5)
    assert m.peak_tflops_per_gpu == 312
    assert m.precision == "bf16"
    m = mfu(1e15, 10, a100, "bf16", gpus=2, hardware_flops=4e15 / 3)
    assert m.hfu == pytest.approx(m.mfu * 4 / 3)
    v100 = lookup_gpu("Tesla V100-SXM2-32GB")
    assert v100 is not None
    with pytest.raises(UsageError, match="no bf16"):
        mfu(1e15, 10, v100, "bf16")


def test_measured_goodput_feeds_mfu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    analysis = tmp_path / "a.json"
    assert main(["analyze", str(DEMO), "--format", "json", "--out", str(analysis)]) == 0
    capsys.readouterr()
    doc = run_json(
        capsys,
        "train",
        "--params",
        "25.6e6",
        "--tokens",
        "1.28e9",
        "--gpu",
        "V100",
        "--precision",
        "fp16",
        "--gpus",
        "8",
        "--analysis",
        str(analysis),
        "--kernel-efficiency",
        "0.5",
    )
    assert doc["mfu"] == pytest.approx(0.5551408517 * 0.5, rel=1e-6)
    assert "goodput 0.555" in str(doc["mfu_source"])


# ---- ZeRO paper (Rajbhandari et al. 2020), figure 1 worked example ------------------------------


@pytest.mark.parametrize(("stage", "gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_example(stage: int, gb: float) -> None:
    e = estimate_memory(params=7.5e9, gpus=64, zero_stage=stage)
    assert e.bytes_per_param["total"] == 16  # mixed-precision Adam: 2 + 2 + 12
    assert e.total_bytes / 1e9 == pytest.approx(gb, abs=0.05)


def test_memory_cli_fsdp_and_fit(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "memory", "--params", "7.5B", "--gpus", "64", "--fsdp", "--gpu", "H100")
    assert doc["zero_stage"] == 3
    assert doc["total_bytes"] == pytest.approx(1.875e9)
    assert doc["fits"] is True
    doc = run_json(capsys, "memory", "--params", "70B", "--gpus", "8", "--gpu", "A100-80GB")
    assert doc["fits"] is False  # 1,120 GB of state on one 80 GB GPU


def test_activation_memory_korthikanti() -> None:
    # GPT-3 175B (Korthikanti et al. 2022, table 3): s=2048, b=1, h=12288, a=96, L=96, t=8.
    kw = dict(
        params=175e9,
        gpus=64,
        tp=8,
        pp=8,
        layers=96,
        d_model=12288,
        seq_len=2048,
        micro_batch=1,
        heads=96,
    )
    none = estimate_memory(**kw, recompute=Recompute.NONE)  # type: ignore[arg-type]
    sel = estimate_memory(**kw, recompute=Recompute.SELECTIVE)  # type: ignore[arg-type]
    full = estimate_memory(**kw, recompute=Recompute.FULL)  # type: ignore[arg-type]
    sbh = 2048 * 1 * 12288
    assert none.activations_bytes == pytest.approx(96 * sbh * (34 + 5 * 96 * 2048 / 12288) / 8)
    assert sel.activations_bytes == pytest.approx(96 * 34 * sbh / 8)
    assert full.activations_bytes == pytest.approx(96 * 2 * sbh / 8)
    assert full.activations_bytes < sel.activations_bytes < none.activations_bytes  # type: ignore[operator]


def test_expert_parallel_shards_experts() -> None:
    dense = estimate_memory(params=100e9, gpus=64)
    moe = estimate_memory(params=100e9, gpus=64, ep=8, expert_params=80e9)
    # 20B shared + 80B/8 experts per GPU, 16 bytes each.
    assert moe.total_bytes == pytest.approx(16 * (20e9 + 10e9))
    assert dense.total_bytes == pytest.approx(16 * 100e9)


# ---- inference ---------------------------------------------------------------------------------


def test_infer_llama_8b_on_h100(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(
        capsys,
        "infer",
        "--params",
        "8e9",
        "--gpu",
        "H100",
        "--batch",
        "1",
        "--context",
        "4096",
        "--layers",
        "32",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
    )
    h100 = lookup_gpu("H100")
    assert h100 is not None
    kv_token = 2 * 32 * 8 * 128 * 2  # K and V, layers, kv heads, head dim, bf16 = 131,072 B
    assert doc["kv_bytes_per_token"] == kv_token
    assert doc["kv_cache_bytes"] == kv_token * 4096
    step = (8e9 * 2 + kv_token * 4096) / (h100.memory_bw_gbs * 1e9)
    assert doc["decode_step_s"] == pytest.approx(step)
    assert doc["decode_bound"] == "memory bandwidth"
    assert doc["decode_tokens_per_s_per_gpu"] == pytest.approx(1 / step)
    flops_token = 2 * 8e9 + 4 * 32 * 32 * 128 * 4096
    peak = h100.peak("bf16")
    assert peak is not None
    assert doc["prefill_tokens_per_s_per_gpu"] == pytest.approx(peak * 1e12 / flops_token)


def test_infer_large_batch_turns_compute_bound(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(
        capsys, "infer", "--params", "8e9", "--gpu", "H100", "--batch", "4096", "--context", "16"
    )
    assert doc["decode_bound"] == "compute"


# ---- badput cost -------------------------------------------------------------------------------


def test_badput_cost_from_analysis(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    analysis = tmp_path / "a.json"
    assert main(["analyze", str(DEMO), "--format", "json", "--out", str(analysis)]) == 0
    a = json.loads(analysis.read_text())
    capsys.readouterr()
    doc = run_json(capsys, "cost", str(analysis), "--gpus", "1000", "--price", "2")
    lines = {x["category"]: x for x in doc["lines"]}  # type: ignore[union-attr]
    d = a["devices"][0]
    share = d["idle_causes_us"]["dataloader"] / d["window_us"]
    assert lines["idle: waiting on the DataLoader"]["share"] == pytest.approx(share)
    assert lines["idle: waiting on the DataLoader"]["gpu_hours_per_day"] == pytest.approx(
        share * 1000 * 24
    )
    assert lines["idle: waiting on the DataLoader"]["usd_per_day"] == pytest.approx(
        share * 1000 * 24 * 2
    )
    assert sum(x["share"] for x in lines.values()) == pytest.approx(1.0)
    assert doc["badput_gpu_hours_per_day"] == pytest.approx((1 - d["goodput"]) * 24000)


# ---- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["train", *DSV3, "--gpu-hours", "0"], "--gpu-hours must be positive"),
        (
            ["train", "--params", "-5", "--tokens", "1e9", "--gpu", "H100", "--mfu", "0.4"],
            "--params",
        ),
        (
            ["train", "--params", "1e9", "--tokens", "0", "--gpu", "H100", "--mfu", "0.4"],
            "--tokens must be positive",
        ),
        (
            ["train", "--params", "1e9", "--tokens", "1e9", "--gpu", "RTX 9999", "--mfu", "0.4"],
            "unknown GPU 'RTX 9999'",
        ),
        (
            ["train", "--params", "1e9", "--tokens", "1e9", "--gpu", "H100", "--mfu", "1.5"],
            "MFU must be in (0, 1]",
        ),
        (["train", "--params", "1e9", "--tokens", "1e9", "--gpu", "H100"], "either --mfu"),
        (
            ["train", "--params", "1e9", "--tokens", "1e9", "--gpu", "V100", "--mfu", "0.4"],
            "no bf16 peak",
        ),
        (
            [
                "train",
                "--params",
                "1e9",
                "--tokens",
                "1e9",
                "--gpu",
                "H100",
                "--mfu",
                "0.4",
                "--precision",
                "fp7",
            ],
            "fp7",
        ),
        (["memory", "--params", "0"], "--params must be positive"),
        (["memory", "--params", "1e9", "--gpus", "6", "--tp", "4"], "not a multiple"),
        (["infer", "--params", "1e9", "--gpu", "H100", "--batch", "0"], "must be positive"),
        (["cost", "/nonexistent.json", "--gpus", "8"], "cannot be read"),
    ],
)
def test_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    err = run_error(capsys, *args)
    assert err.startswith("badput: error: ")
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_gpus_table_lists_sources(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "gpus")
    keys = {g["key"] for g in doc["gpus"]}  # type: ignore[union-attr]
    assert {"H800", "MI300X"} <= keys
    assert all(g["sources"] for g in doc["gpus"])  # type: ignore[union-attr]


def test_meter_summary_goodput_feeds_mfu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = tmp_path / "meter.json"
    summary.write_text(json.dumps({"goodput": 0.8, "badput_s": {"data_wait": 1.0}, "steps": 10}))
    doc = run_json(
        capsys,
        "train",
        "--params",
        "1e9",
        "--tokens",
        "1e9",
        "--gpu",
        "H100",
        "--gpus",
        "8",
        "--analysis",
        str(summary),
        "--kernel-efficiency",
        "0.5",
    )
    assert doc["mfu"] == pytest.approx(0.4)
    assert "goodput 0.800" in str(doc["mfu_source"])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"goodput": None, "badput_s": {}, "steps": 0}))
    err = run_error(
        capsys,
        "train",
        "--params",
        "1e9",
        "--tokens",
        "1e9",
        "--gpu",
        "H100",
        "--analysis",
        str(empty),
        "--kernel-efficiency",
        "0.5",
    )
    assert "no goodput yet" in err


# ---- issue 20: an honest fit verdict ------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "verdict", "margin_gb"),
    [
        # 16 bytes/param; H100 80 GB - 1.3 GB CUDA context reserve - total = margin.
        ("4.96B", "does not fit", 80 - 1.3 - 79.36),  # 0.64 GB below capacity: used to "fit"
        ("4.5B", "tight", 80 - 1.3 - 72.0),  # 6.7 GB left, under 10 % of 80 GB
        ("4B", "fits", 80 - 1.3 - 64.0),  # 14.7 GB left
    ],
)
def test_fit_verdict_reserves_the_cuda_context(
    capsys: pytest.CaptureFixture[str], params: str, verdict: str, margin_gb: float
) -> None:
    doc = run_json(capsys, "memory", "--params", params, "--gpu", "H100")
    assert doc["verdict"] == verdict and doc["reserved_bytes"] == 1.3e9
    assert doc["margin_bytes"] == pytest.approx(margin_gb * 1e9, rel=1e-9)
    assert doc["fits"] is (margin_gb >= 0) and doc["activations_counted"] is False
    assert main(["estimate", "memory", "--params", params, "--gpu", "H100"]) == 0
    text = capsys.readouterr().out
    assert f"{verdict}" in text and "activations not counted" in text
    assert "1.3 GB reserved for the CUDA context" in text


@pytest.mark.parametrize(
    ("recompute", "activations"),
    [
        # Korthikanti et al. 2022: s=4096, b=1, h=4096, a=32, L=32, t=1; sbh = 16,777,216.
        ("full", 32 * 2 * 16_777_216),  # 1.07 GB: each layer's input only
        ("none", 32 * 16_777_216 * (34 + 5 * 32 * 4096 / 4096)),  # 104.15 GB
    ],
)
def test_fit_counts_activations_when_given(
    capsys: pytest.CaptureFixture[str], recompute: str, activations: float
) -> None:
    shape = ["--layers", "32", "--d-model", "4096", "--seq-len", "4096", "--micro-batch", "1"]
    doc = run_json(
        capsys,
        *("memory", "--params", "7B", "--gpus", "8", "--zero", "1", "--gpu", "H100"),
        *(*shape, "--heads", "32", "--recompute", recompute),
    )
    assert doc["activations_bytes"] == pytest.approx(activations, rel=1e-12)
    static = 7e9 * 2 + 7e9 * 2 + 7e9 * 12 / 8  # weights + gradients + ZeRO-1 optimizer: 38.5e9
    assert doc["total_bytes"] == pytest.approx(static + activations, rel=1e-12)
    assert doc["margin_bytes"] == pytest.approx(80e9 - 1.3e9 - static - activations, rel=1e-9)
    assert doc["verdict"] == ("fits" if recompute == "full" else "does not fit")
    assert doc["activations_counted"] is True


def test_infer_fit_reserves_the_cuda_context(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama-3-8B-like: 8e9 x 2 B of weights + KV 2 x 32 x 8 x 128 x 2 B x 2,048 tokens =
    # 268,435,456 B; on one H100: 80e9 - 1.3e9 - 16e9 - 0.268e9 = 62.43e9 B left.
    shape = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128"]
    doc = run_json(capsys, "infer", "--params", "8B", "--gpu", "H100", *shape)
    assert doc["margin_bytes"] == pytest.approx(80e9 - 1.3e9 - 16e9 - 268_435_456, rel=1e-12)
    assert doc["verdict"] == "fits" and doc["fits"] is True
    # 38B: 76 GB of weights + KV leave 2.43 GB on 80 GB: under 10 %, tight.
    doc = run_json(capsys, "infer", "--params", "38B", "--gpu", "H100", *shape)
    assert doc["verdict"] == "tight"
    assert doc["margin_bytes"] == pytest.approx(80e9 - 1.3e9 - 76e9 - 268_435_456, rel=1e-12)
