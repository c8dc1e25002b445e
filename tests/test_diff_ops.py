"""`badput diff` compares ops by (op, shapes, dtype): synthetic pairs with exact deltas, real runs.

The synthetic pair has 2 steps on each side, so every time per step is half the window's:

| op, dims                      | before (ms)  | after (ms)   | per step         |
|-------------------------------|--------------|--------------|------------------|
| aten::mm [[8,4],[4,2]]        | 6, 100 TF/s  | 10, 60 TF/s  | 3 -> 5: +2 ms    |
| aten::convolution 16x16       |  -           | 3            | new, +1.5 ms     |
| aten::convolution 8x8         | 1            |  -           | gone, -0.5 ms    |
| aten::softmax                 |  -           | 1            | new, +0.5 ms     |
| aten::relu                    | 0.5          |  -           | gone, -0.25 ms   |
| aten::add                     | 2            | 2            | unchanged        |

The conv whose input grew from 8x8 to 16x16 is one row gone and one new; the MFU drops from
20 % to 15 %.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from badput.analysis import analyze_trace
from badput.analysis.diff import GONE, MATCHED, NEW, canonical_dims, diff_traces, op_key
from badput.analysis.ops import Efficiency, ModelAnalysis, ModuleRow, OpRow
from badput.analysis.results import (
    Breakdown,
    CommSummary,
    DeviceAnalysis,
    IdleCauses,
    StepResult,
    WindowSource,
)
from badput.cli.app import main
from badput.report.diff_report import diff_document, op_shapes_text, render_diff
from badput.report.html_report import render_diff_html
from badput.report.json_report import encode_document
from badput.trace import load_trace

MS = 1_000_000
RESNET_A = "kineto-resnet50/worker0.1623143089861.pt.trace.json.gz"
RESNET_B = "kineto-resnet50/worker0.1623143566756.pt.trace.json.gz"
QWEN = "tracelens-h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"

MM_DIMS = [[8, 4], [4, 2]]
BF16 = ["c10::BFloat16", "c10::BFloat16"]


def _op(
    op: str,
    dims: object,
    types: list[str],
    count: int,
    kernel_ns: int,
    tflops: float | None = None,
    roof: float | None = None,
    module: str | None = "M/L",
    category: str | None = "GEMM",
) -> OpRow:
    return OpRow(
        op=op,
        category=category,
        input_dims=dims,
        input_types=types,
        count=count,
        kernel_ns=kernel_ns,
        flops=None if tflops is None else 1.0,
        bytes=None if tflops is None else 1.0,
        precision="bf16" if tflops is not None else None,
        tflops_per_s=tflops,
        tb_per_s=None,
        intensity=None,
        bound=None,
        roof_share=roof,
        module=module,
        kernels=["k"],
    )


def _model(
    ops: list[OpRow], modules: list[ModuleRow], mfu: float | None, has_shapes: bool = True
) -> ModelAnalysis:
    return ModelAnalysis(
        ops=ops,
        modules=modules,
        efficiency=Efficiency(
            modelled_flops=1.0,
            modelled_kernel_share=1.0,
            precision="bf16",
            peak_tflops=989.0,
            mfu=mfu,
        ),
        attributed_ns=sum(r.kernel_ns for r in ops),
        unattributed_ns=0,
        reasons={},
        unmodelled={},
        gpu_spec=None,
        has_shapes=has_shapes,
    )


def _device(model: ModelAnalysis | None, steps: int = 2, trace: str = "t.json") -> DeviceAnalysis:
    zero_b, zero_c = Breakdown(0, 0, 0, 0), IdleCauses(0, 0, 0, 0)
    return DeviceAnalysis(
        trace=trace,
        rank=None,
        world_size=None,
        device=0,
        gpu="NVIDIA H100 80GB HBM3",
        window_start_ns=0,
        window_ns=steps * 100 * MS,
        window_source=WindowSource.CPU_STEPS,
        goodput=0.5,
        breakdown=Breakdown(steps * 50 * MS, 0, 0, steps * 50 * MS),
        idle_causes=IdleCauses(0, 0, 0, steps * 50 * MS),
        comm=CommSummary(0, 0),
        steps=[
            StepResult(f"ProfilerStep#{i}", i * 100 * MS, 100 * MS, zero_b, zero_c)
            for i in range(steps)
        ],
        model=model,
    )


def _before() -> DeviceAnalysis:
    return _device(
        _model(
            [
                _op("aten::mm", MM_DIMS, BF16, 4, 6 * MS, 100.0, 0.5),
                _op("aten::add", [[8], [8]], ["float", "float"], 2, 2 * MS, category="Binary"),
                _op("aten::convolution", [[1, 3, 8, 8], [3, 3, 3, 3]], BF16, 2, 1 * MS),
                _op("aten::relu", [[8]], ["float"], 2, MS // 2, category="Unary"),
            ],
            [
                ModuleRow("M", 1, 19 * MS // 2, 10),
                ModuleRow("M/L", 2, 6 * MS, 4),
                ModuleRow("M/only_before", 2, 1 * MS, 2),
            ],
            mfu=0.20,
        ),
        trace="before.json",
    )


def _after() -> DeviceAnalysis:
    return _device(
        _model(
            [
                _op("aten::mm", MM_DIMS, BF16, 4, 10 * MS, 60.0, 0.3),
                _op("aten::convolution", [[1, 3, 16, 16], [3, 3, 3, 3]], BF16, 2, 3 * MS),
                _op("aten::add", [[8], [8]], ["float", "float"], 2, 2 * MS, category="Binary"),
                _op("aten::softmax", [[8, 8], []], ["float", "Int"], 2, 1 * MS),
            ],
            [
                ModuleRow("M", 1, 16 * MS, 10),
                ModuleRow("M/L", 2, 10 * MS, 4),
                ModuleRow("M/only_after", 2, 1 * MS, 2),
            ],
            mfu=0.15,
        ),
        trace="after.json",
    )


def test_ops_are_matched_by_op_shapes_and_types_with_exact_deltas() -> None:
    (d,) = diff_traces([_before()], [_after()]).devices
    o = d.ops
    assert o is not None and d.warnings == []
    got = [(c.op, c.status, c.delta_per_step_ns) for c in o.ops]
    assert got == [
        ("aten::mm", MATCHED, 2 * MS),  # 3 ms -> 5 ms per step: slower by 2 ms
        ("aten::convolution", NEW, 1.5 * MS),  # the 16x16 input
        ("aten::convolution", GONE, -0.5 * MS),  # the 8x8 input: a shape change is gone + new
        ("aten::softmax", NEW, 0.5 * MS),  # |delta| ties with the gone conv: by op name
        ("aten::relu", GONE, -0.25 * MS),
        ("aten::add", MATCHED, 0),
    ]
    mm, conv_new, conv_gone, softmax, relu, add = o.ops
    assert (mm.count_before, mm.count_after) == (4, 4)
    assert (mm.per_step_before_ns, mm.per_step_after_ns) == (3 * MS, 5 * MS)
    assert mm.rel_change == pytest.approx(2 / 3)
    assert (mm.tflops_before, mm.tflops_after) == (100.0, 60.0)
    assert (mm.roof_share_before, mm.roof_share_after) == (0.5, 0.3)
    assert mm.input_dims == MM_DIMS and mm.input_types == BF16 and mm.module == "M/L"
    assert conv_new.input_dims == [[1, 3, 16, 16], [3, 3, 3, 3]]
    assert conv_gone.input_dims == [[1, 3, 8, 8], [3, 3, 3, 3]]
    assert (conv_new.count_before, conv_new.count_after) == (0, 2)
    assert (conv_gone.count_before, conv_gone.count_after) == (2, 0)
    assert conv_new.rel_change is None and conv_gone.rel_change == -1.0
    assert conv_new.tflops_before is None and conv_new.roof_share_before is None
    assert softmax.per_step_after_ns == 0.5 * MS and relu.per_step_before_ns == 0.25 * MS
    assert add.delta_per_step_ns == 0 and add.rel_change == 0
    assert (o.count(MATCHED), o.count(NEW), o.count(GONE)) == (2, 2, 2)
    # MFU 20 % -> 15 %.
    assert (o.mfu_before, o.mfu_after) == (0.20, 0.15)
    assert o.mfu_delta == pytest.approx(-0.05)
    # Modules: only paths in both, by |delta| per step.
    assert [(m.path, m.delta_per_step_ns) for m in o.modules] == [
        ("M", 3.25 * MS),  # 9.5 / 2 -> 16 / 2
        ("M/L", 2 * MS),
    ]


def test_times_are_per_step_when_step_counts_differ() -> None:
    before = _before()
    assert before.model is not None
    doubled = replace(
        before.model,
        ops=[replace(r, kernel_ns=2 * r.kernel_ns, count=2 * r.count) for r in before.model.ops],
    )
    (d,) = diff_traces([before], [_device(doubled, steps=4)]).devices
    assert d.ops is not None
    assert all(c.status == MATCHED and c.delta_per_step_ns == 0 for c in d.ops.ops)
    mm = next(c for c in d.ops.ops if c.op == "aten::mm")
    assert (mm.count_before, mm.count_after) == (4, 8)  # calls are the window's


def test_keys_are_canonical_and_rows_sharing_one_merge() -> None:
    # Tuples and lists of the same shapes are the same key.
    a = _op("aten::mm", ((8, 4), (4, 2)), BF16, 1, MS)
    assert op_key(a) == op_key(_op("aten::mm", MM_DIMS, BF16, 1, MS))
    assert canonical_dims(MM_DIMS) == "[[8,4],[4,2]]"
    # Two rows of one side with the same key (the analysis kept apart types it read as
    # different text) merge: calls and time add, TFLOP/s weighted by time.
    rows = [
        _op("aten::mm", MM_DIMS, BF16, 1, 1 * MS, 30.0, 0.1),
        _op("aten::mm", MM_DIMS, BF16, 3, 3 * MS, 70.0, 0.5),
    ]
    before = _device(_model(rows, [], mfu=None))
    (d,) = diff_traces([before], [before]).devices
    assert d.ops is not None
    (c,) = d.ops.ops
    assert (c.count_before, c.per_step_before_ns) == (4, 2 * MS)
    assert c.tflops_before == pytest.approx(60.0)
    assert c.roof_share_before == pytest.approx(0.4)
    assert d.ops.mfu_delta is None


def test_no_model_on_either_side_means_no_op_section() -> None:
    (d,) = diff_traces([_device(None)], [_device(None)]).devices
    assert d.ops is None and d.warnings == []
    text = _render(diff_traces([_device(None)], [_device(None)]))
    assert "MFU" not in text and "ops by" not in text
    (dev,) = _doc(diff_traces([_device(None)], [_device(None)]))["devices"]
    assert dev["ops"] is None
    assert "<h3>Ops" not in render_diff_html(diff_traces([_device(None)], [_device(None)]))


def test_model_on_one_side_only_is_not_compared_with_a_warning() -> None:
    (d,) = diff_traces([_device(None)], [_after()]).devices
    assert d.ops is None
    assert d.warnings == ["ops not compared: before has no model view"]


def test_shapes_on_one_side_only_warn() -> None:
    before = _before()
    assert before.model is not None
    no_shapes = replace(before.model, has_shapes=False)
    (d,) = diff_traces([_device(no_shapes)], [_after()]).devices
    assert d.ops is not None and not d.ops.has_shapes_before and d.ops.has_shapes_after
    assert any("only after records Input Dims" in w for w in d.warnings)


#: Columns the text diffs of these tests are rendered at (`--out` files are 120 wide too).
WIDTH = 120


def _render(diff: Any, top: int = 10, width: int = WIDTH) -> str:
    buf = io.StringIO()
    render_diff(diff, Console(file=buf, width=width, no_color=True), top=top)
    return buf.getvalue()


def _doc(diff: Any, top: int = 10) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(encode_document(diff_document(diff, top=top)))
    return doc


def _op_section(text: str) -> list[str]:
    """The op and module tables of a one-GPU text diff (they come last, before warnings)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ops by"))
    return [line for line in lines[start:] if not line.startswith("warning")]


def test_text_report_shows_the_op_table_within_80_columns() -> None:
    text = _render(diff_traces([_before()], [_after()]))
    assert "MFU at bf16 20.00 % → 15.00 %  (-5.00 points)" in text
    assert "ops by |Δ| (6: 2 matched, 2 new, 2 gone)" in text
    assert "modules by |Δ| (2 in both)" in text
    section = _op_section(text)
    assert all(len(line.rstrip()) <= WIDTH for line in section)
    joined = "\n".join(section)
    mm = next(line for line in section if line.startswith("aten::mm "))
    assert re.search(r"4→4\s+3\.00→5\.00\s+\+2\.00\s+\+67 %\s+100→60\.0\s+50→30$", mm.rstrip())
    conv = [line for line in section if line.startswith("aten::convolution")]
    assert re.search(r"0→2\s+0\.00→1\.50\s+\+1\.50\s+new\s+–→–\s+–→–$", conv[0].rstrip())
    assert re.search(r"2→0\s+0\.50→0\.00\s+-0\.50\s+gone\s+–→–\s+–→–$", conv[1].rstrip())
    # The shapes line under each op: tensors as type[dims] (wrapped where too long).
    words = " ".join(joined.split())
    assert "aten::convolution 0→2" in words
    assert "BFloat16[1,3,16,16], BFloat16[3,3,3,3]" in words
    assert "BFloat16[1,3,8,8], BFloat16[3,3,3,3]" in words
    assert "aten::softmax 0→2 0.00→0.50 +0.50 new –→– –→– float[8,8] aten::relu" in words
    assert "M/L" in joined and "+3.25" in joined


def test_long_names_wrap_and_numbers_are_never_cut() -> None:
    long_op = "aten::" + "very_long_op_name_" * 6
    dims = [[4096, 4096, 4096]] * 6
    types = ["c10::BFloat16"] * 6
    big = _op(long_op, dims, types, 123_456, 98_765 * MS, 987.6, 0.99)
    before = _device(_model([big], [ModuleRow("/".join(["Block_12345"] * 12), 12, MS, 1)], 0.5))
    bigger = replace(big, count=234_567, kernel_ns=123_456 * MS)
    after = _device(
        _model([bigger], [ModuleRow("/".join(["Block_12345"] * 12), 12, 2 * MS, 1)], 0.6)
    )
    text = _render(diff_traces([before], [after]))
    section = _op_section(text)
    assert all(len(line.rstrip()) <= WIDTH for line in section)
    joined = "\n".join(section)
    for number in ("123,456→234,567", "49,382.50→61,728.00", "+12,345.50", "+25 %", "988→988",
                   "99→99", "0.50", "1.00", "+0.50"):  # fmt: skip
        assert number in joined, number
    # The op wraps onto lines of its own cell (numbers stand beside its first line), not cut.
    op_lines = [line.split()[0] for line in section if line.startswith(("very_", "op_name"))]
    assert "".join(op_lines) == "very_long_op_name_" * 6


def test_identical_short_shapes_fall_back_to_the_full_key() -> None:
    a = _op("aten::softmax", [[8, 8], []], ["float", "Int"], 1, MS)
    b = _op("aten::softmax", [[8, 8], []], ["float", "Bool"], 1, MS)
    (d,) = diff_traces([_device(_model([a], [], None))], [_device(_model([b], [], None))]).devices
    assert d.ops is not None
    assert sorted(op_shapes_text(d.ops.ops)) == ["[[8,8],[]] float,Bool", "[[8,8],[]] float,Int"]


def test_json_ops_section() -> None:
    doc = _doc(diff_traces([_before()], [_after()]), top=3)
    (dev,) = doc["devices"]
    ops = dev["ops"]
    assert ops["mfu"] == {"before": 0.2, "after": 0.15, "delta": pytest.approx(-0.05)}
    assert ops["precision"] == {"before": "bf16", "after": "bf16"}
    assert ops["has_shapes"] == {"before": True, "after": True}
    assert ops["counts"] == {"matched": 2, "new": 2, "gone": 2, "modules": 2}
    assert len(ops["rows"]) == 3  # --top cuts the rows, never the counts
    mm = ops["rows"][0]
    assert mm == {
        "op": "aten::mm",
        "category": "GEMM",
        "input_dims": MM_DIMS,
        "input_types": BF16,
        "status": "matched",
        "count_before": 4,
        "count_after": 4,
        "per_step_before_us": 3000,
        "per_step_after_us": 5000,
        "delta_per_step_us": 2000,
        "rel_change": pytest.approx(2 / 3),
        "tflops_per_s_before": 100.0,
        "tflops_per_s_after": 60.0,
        "roof_share_before": 0.5,
        "roof_share_after": 0.3,
        "module": "M/L",
    }
    assert [(r["status"], r["delta_per_step_us"]) for r in ops["rows"][1:]] == [
        ("new", 1500),
        ("gone", -500),
    ]
    assert ops["modules"][0] == {
        "path": "M",
        "depth": 1,
        "per_step_before_us": 4750,
        "per_step_after_us": 8000,
        "delta_per_step_us": 3250,
        "rel_change": pytest.approx(3.25 / 4.75),
    }
    assert len(_doc(diff_traces([_before()], [_after()]), top=0)["devices"][0]["ops"]["rows"]) == 6


def test_html_ops_table_escapes_trace_strings() -> None:
    before = _before()
    assert before.model is not None
    evil = _op("aten::<script>x</script>", [["<b>"]], ["<i>"], 1, MS, module="<M>")
    tampered = _device(replace(before.model, ops=[*before.model.ops, evil]))
    page = render_diff_html(diff_traces([tampered], [_after()]), top=0)
    assert "<script" not in page and "<b>" not in page and "<M>" not in page
    assert "&lt;script&gt;" in page
    assert page.count('<tr class="op-matched">') == 2
    assert page.count('<tr class="op-new">') == 2
    assert page.count('<tr class="op-gone">') == 3
    assert "Ops (7: 2 matched, 2 new, 3 gone)" in page
    assert "20.00 % → 15.00 %" in page and "Modules in both (2" in page
    from html.parser import HTMLParser

    HTMLParser().feed(page)


# ---- real traces through the CLI ---------------------------------------------------------------


def _cli_json(tmp_path: Path, before: Path, after: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "diff.json"
    assert main(["diff", str(before), str(after), "--format", "json", "-o", str(out), *extra]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.mark.parametrize("name", [RESNET_A, QWEN])
def test_a_trace_against_itself_has_zero_op_deltas(
    shared_traces: Path, tmp_path: Path, name: str
) -> None:
    path = shared_traces / name
    doc = _cli_json(tmp_path, path, path, "--top", "0")
    (dev,) = doc["devices"]
    ops = dev["ops"]
    assert ops is not None and ops["rows"]
    assert ops["counts"]["new"] == ops["counts"]["gone"] == 0
    assert ops["counts"]["matched"] == len(ops["rows"])
    assert all(r["delta_per_step_us"] == 0 and r["status"] == "matched" for r in ops["rows"])
    assert all(m["delta_per_step_us"] == 0 for m in ops["modules"])
    assert ops["mfu"]["delta"] == 0
    (model,) = (d.model for d in analyze_trace(load_trace(str(path))))
    assert model is not None and ops["counts"]["matched"] == len({op_key(r) for r in model.ops})
    text = tmp_path / "diff.txt"
    assert main(["diff", str(path), str(path), "-o", str(text)]) == 0
    assert "ops by |Δ|" in text.read_text() and "MFU" in text.read_text()


def test_two_resnet_windows(shared_traces: Path, tmp_path: Path) -> None:
    a, b = shared_traces / RESNET_A, shared_traces / RESNET_B
    doc = _cli_json(tmp_path, a, b, "--top", "0")
    (dev,) = doc["devices"]
    ops = dev["ops"]
    assert ops["counts"]["matched"] > 100
    deltas = [abs(r["delta_per_step_us"]) for r in ops["rows"]]
    assert deltas == sorted(deltas, reverse=True) and deltas[0] > 0
    assert ops["mfu"]["before"] is not None and ops["mfu"]["after"] is not None
    # The per-step time of every op matches the analysis of each side.
    (ma,) = (d.model for d in analyze_trace(load_trace(str(a))))
    assert ma is not None
    total_before_us = sum(r["per_step_before_us"] for r in ops["rows"])
    assert total_before_us == pytest.approx(sum(r.kernel_ns for r in ma.ops) / 6 / 1000, rel=1e-6)
    page = tmp_path / "diff.html"
    text = tmp_path / "diff.txt"
    assert main(["diff", str(a), str(b), "-o", str(text), "--html", str(page)]) == 0
    assert "<h3>Ops (" in page.read_text()
    section = _op_section(text.read_text())
    assert all(len(line.rstrip()) <= WIDTH for line in section)


def test_traces_without_a_model_have_no_op_section(tmp_path: Path) -> None:
    cpu_only = tmp_path / "cpu.json"
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 10, "pid": 1,
             "tid": 1, "args": {}}  # fmt: skip
    cpu_only.write_text(json.dumps({"traceEvents": [event]}))
    doc = _cli_json(tmp_path, cpu_only, cpu_only)
    (dev,) = doc["devices"]
    assert dev["ops"] is None
    text = tmp_path / "diff.txt"
    assert main(["diff", str(cpu_only), str(cpu_only), "-o", str(text)]) == 0
    assert "MFU" not in text.read_text() and "ops by" not in text.read_text()
