"""The GPU hardware table: sourced dense peaks, sane ratios, name matching, precision names."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

from badput.estimate import hardware
from badput.estimate.hardware import (
    PRECISIONS,
    GpuSpec,
    UnknownGpuWarning,
    all_gpus,
    lookup_gpu,
    resolve_precision,
)

GPUS = all_gpus()
BY_KEY = {g.key: g for g in GPUS}


def spec(key: str) -> GpuSpec:
    return BY_KEY[key]


# ---- the table itself ----------------------------------------------------------------------------


def test_table_holds_the_required_gpus() -> None:
    required = {
        "V100-SXM2-16GB",
        "V100-SXM2-32GB",
        "V100-PCIE-32GB",
        "V100-DGXS-32GB",
        "T4",
        "A100-SXM-40GB",
        "A100-SXM-80GB",
        "A100-PCIE-40GB",
        "A100-PCIE-80GB",
        "H100-SXM",
        "H100-PCIE",
        "H100-NVL",
        "H800",
        "H200-SXM",
        "H200-NVL",
        "B200",
        "GB200",
        "B300",
        "L4",
        "L40S",
        "MI300X",
    }
    assert required <= set(BY_KEY)
    assert len(BY_KEY) == len(GPUS)  # keys are unique


def test_table_is_loaded_once() -> None:
    assert all_gpus()[0] is all_gpus()[0]
    assert lookup_gpu("H100") is spec("H100-SXM")


def test_specs_hash_by_key() -> None:
    assert len({lookup_gpu("H100"), lookup_gpu("NVIDIA H100 80GB HBM3"), spec("H100-SXM")}) == 1
    assert hash(spec("B200")) == hash("B200")


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_every_field_set_has_a_source(gpu: GpuSpec) -> None:
    wanted = {"memory_bytes", "memory_bw_gbs", "interconnect", "pcie_gen", "tdp_w"}
    wanted |= {f"peak_tflops.{p}" for p in gpu.peak_tflops}
    if gpu.interconnect_gbs is not None:
        wanted.add("interconnect_gbs")
    assert wanted <= set(gpu.sources)
    for field in wanted:
        source = gpu.sources[field]
        assert "http" in source, (gpu.key, field)  # a document and a URL, not a bare claim
        assert "{" not in source, (gpu.key, field)  # every {doc} reference expanded
    assert gpu.notes.strip()


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_values_are_sane(gpu: GpuSpec) -> None:
    assert gpu.vendor in {"NVIDIA", "AMD"}
    assert list(gpu.peak_tflops) == [p for p in PRECISIONS if p in gpu.peak_tflops]
    assert all(v > 0 for v in gpu.peak_tflops.values())
    assert gpu.memory_bytes > 0 and gpu.memory_bytes % 10**9 == 0  # datasheet GB x 1e9
    assert gpu.memory_bw_gbs > 0
    assert gpu.tdp_w > 0
    assert gpu.pcie_gen in {3, 4, 5, 6}
    assert gpu.interconnect_gbs is None or gpu.interconnect_gbs > 0
    if gpu.interconnect == "PCIe only":
        assert gpu.interconnect_gbs is None
    # Tensor paths are never slower than the vector path they accelerate.
    fp32 = gpu.peak("fp32")
    for p in ("tf32", "bf16", "fp16"):
        value = gpu.peak(p)
        if value is not None and fp32 is not None:
            assert value > fp32, (gpu.key, p)
    assert dataclasses.asdict(gpu)["key"] == gpu.key  # serialisable as the CLI does


# ---- ratios the datasheets promise ---------------------------------------------------------------

# fp8 = 2 x bf16 (dense): exact on H100/H200 SXM, H800, Blackwell and MI300X; within datasheet
# rounding on the NVL cards (3,341*/1,671* halved), the L4 (485*/242* halved) and the L40S (its
# dense column: 733 vs 362.05; its sparse column, 1,466*/733*, is exact).
FP8_TWICE_BF16 = [
    ("H100-SXM", 1e-9),
    ("H100-PCIE", 1e-9),
    ("H100-NVL", 1e-3),
    ("H800", 1e-9),
    ("H200-SXM", 1e-9),
    ("H200-NVL", 1e-3),
    ("B200", 1e-9),
    ("GB200", 1e-9),
    ("B300", 1e-9),
    ("MI300X", 1e-4),
    ("L4", 5e-3),
    ("L40S", 2e-2),
]


@pytest.mark.parametrize(("key", "rel"), FP8_TWICE_BF16)
def test_fp8_is_twice_bf16(key: str, rel: float) -> None:
    g = spec(key)
    assert g.peak("fp8") == pytest.approx(2 * g.peak_tflops["bf16"], rel=rel)


@pytest.mark.parametrize(
    "key",
    [
        "A100-SXM-80GB",
        "A100-SXM-40GB",
        "A100-PCIE-80GB",
        "A100-PCIE-40GB",
        "H100-SXM",
        "H100-PCIE",
        "H100-NVL",
        "H800",
        "H200-SXM",
        "H200-NVL",
    ],
)
def test_bf16_is_twice_tf32_on_ampere_and_hopper(key: str) -> None:
    g = spec(key)
    # Hopper: 1,979*/989* halved gives 989.5 vs 2 x 494.5 = 989 (datasheet rounding).
    assert g.peak_tflops["bf16"] == pytest.approx(2 * g.peak_tflops["tf32"], rel=1e-3)


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_fp16_equals_bf16_where_both_exist(gpu: GpuSpec) -> None:
    if "bf16" in gpu.peak_tflops and "fp16" in gpu.peak_tflops:
        assert gpu.peak_tflops["fp16"] == gpu.peak_tflops["bf16"]


@pytest.mark.parametrize("key", ["B200", "GB200"])
def test_fp4_is_twice_fp8_on_blackwell(key: str) -> None:
    g = spec(key)
    assert g.peak_tflops["fp4"] == 2 * g.peak_tflops["fp8"]


def test_blackwell_ultra_fp4_and_fp64() -> None:
    b300, b200 = spec("B300"), spec("B200")
    assert b300.peak_tflops["fp4"] == 13500  # 108 PFLOPS dense / 8: more than 2 x FP8
    assert b300.peak_tflops["fp4"] > 2 * b300.peak_tflops["fp8"]
    assert b300.peak_tflops["fp64"] == 1.25 < b200.peak_tflops["fp64"] / 20
    assert b300.peak_tflops["bf16"] == b200.peak_tflops["bf16"] == 2250


def test_only_blackwell_has_fp4() -> None:
    assert {g.key for g in GPUS if "fp4" in g.peak_tflops} == {"B200", "GB200", "B300"}


# ---- dense, not sparse ---------------------------------------------------------------------------


def test_dense_spot_values() -> None:
    assert spec("H100-SXM").peak("bf16") == 989.5  # datasheet "1,979 TFLOPS*" with sparsity
    assert spec("H100-SXM").peak("fp8") == 1979
    assert spec("A100-SXM-80GB").peak("bf16") == 312  # "312 | 624*"
    assert spec("V100-SXM2-32GB").peak("fp16") == 125
    assert spec("V100-PCIE-32GB").peak("fp16") == 112
    assert spec("MI300X").peak("bf16") == 1307.4
    assert spec("MI300X").peak("fp8") == 2614.9
    assert spec("T4").peak("fp16") == 65
    assert spec("L4").peak("bf16") == 121
    assert spec("L40S").peak("bf16") == 362.05
    assert spec("B200").peak("bf16") == 2250
    assert spec("GB200").peak("bf16") == 2500


def test_h800_is_an_h100_sxm_with_cut_fp64_and_nvlink() -> None:
    h800, h100 = spec("H800"), spec("H100-SXM")
    assert h800.peak("bf16") == h100.peak("bf16") == 989.5
    for p in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8"):
        assert h800.peak(p) == h100.peak(p)
    assert h800.peak("fp64") == h800.peak("fp64_tensor") == 1
    assert h800.interconnect_gbs == 400 and h100.interconnect_gbs == 900
    assert h800.memory_bytes == h100.memory_bytes == 80 * 10**9
    assert h800.memory_bw_gbs == h100.memory_bw_gbs == 3350


def test_h200_has_h100_sxm_compute_and_more_memory() -> None:
    h200, h100 = spec("H200-SXM"), spec("H100-SXM")
    assert h200.peak_tflops == h100.peak_tflops
    assert h200.memory_bytes == 141 * 10**9 and h200.memory_bw_gbs == 4800
    assert h200.tdp_w == h100.tdp_w == 700


def test_nvl_cards_share_a_table() -> None:
    assert spec("H100-NVL").peak_tflops == spec("H200-NVL").peak_tflops


def test_dgxs_uses_sxm2_clocks() -> None:
    dgxs, sxm2 = spec("V100-DGXS-32GB"), spec("V100-SXM2-32GB")
    assert dgxs.peak_tflops == sxm2.peak_tflops
    assert dgxs.memory_bytes == sxm2.memory_bytes
    assert "SXM2" in dgxs.notes


@pytest.mark.parametrize("key", ["V100-SXM2-32GB", "V100-DGXS-32GB", "V100-PCIE-16GB", "T4"])
def test_no_bf16_before_ampere(key: str) -> None:
    g = spec(key)
    assert g.peak("bf16") is None
    assert g.peak("tf32") is None
    assert g.peak("fp8") is None


def test_no_fp8_on_ampere() -> None:
    assert spec("A100-SXM-80GB").peak("fp8") is None


@pytest.mark.parametrize("key", ["L4", "L40S", "T4", "V100-PCIE-32GB"])
def test_pcie_only_cards_have_no_gpu_link(key: str) -> None:
    g = spec(key)
    assert g.interconnect == "PCIe only"
    assert g.interconnect_gbs is None


def test_peak_accepts_precision_aliases() -> None:
    g = spec("H100-SXM")
    assert g.peak("BF16") == g.peak("bfloat16") == g.peak("torch.bfloat16") == 989.5
    assert g.peak("e4m3") == 1979
    with pytest.raises(ValueError, match="unknown precision"):
        g.peak("fp7")


# ---- name matching -------------------------------------------------------------------------------

LOOKUPS = [
    # as drivers, traces and tools report them
    ("Tesla V100-DGXS-32GB", "V100-DGXS-32GB"),
    ("Tesla V100-DGXS-16GB", "V100-DGXS-16GB"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
    ("Tesla V100-PCIE-32GB", "V100-PCIE-32GB"),
    ("Tesla V100-PCIE-16GB", "V100-PCIE-16GB"),
    ("Tesla T4", "T4"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"),
    ("A100-SXM4-40GB", "A100-SXM-40GB"),  # nccl-tests log
    ("NVIDIA A100-SXM-80GB", "A100-SXM-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "A100-SXM-80GB"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H100", "H100-SXM"),  # Kineto edge trace
    ("NVIDIA H100 PCIe", "H100-PCIE"),
    ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA H800", "H800"),
    ("NVIDIA H800 80GB HBM3", "H800"),
    ("NVIDIA H200", "H200-SXM"),
    ("NVIDIA H200 NVL", "H200-NVL"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA B300", "B300"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI300X OAM", "MI300X"),
    ("MI300X", "MI300X"),
    # short keys typed on the command line
    ("H800", "H800"),
    ("H100", "H100-SXM"),
    ("h100-sxm", "H100-SXM"),
    ("H100 SXM", "H100-SXM"),
    ("h100_sxm", "H100-SXM"),
    ("h100sxm", "H100-SXM"),
    ("  h100  ", "H100-SXM"),
    ("H100-PCIe", "H100-PCIE"),
    ("A100", "A100-SXM-80GB"),
    ("a100", "A100-SXM-80GB"),
    ("A100-80GB", "A100-SXM-80GB"),
    ("A100 80 GB", "A100-SXM-80GB"),
    ("A100-40GB", "A100-SXM-40GB"),
    ("A100 PCIe", "A100-PCIE-80GB"),
    ("a100-pcie-40gb", "A100-PCIE-40GB"),
    ("H200", "H200-SXM"),
    ("B200", "B200"),
    ("GB200 NVL72", "GB200"),
    ("B300", "B300"),
    ("MI300X", "MI300X"),
    ("mi300x", "MI300X"),
    ("V100", "V100-SXM2-32GB"),
    ("V100 16GB", "V100-SXM2-16GB"),
    ("V100 PCIe", "V100-PCIE-32GB"),
    ("T4", "T4"),
    ("t4", "T4"),
    ("L4", "L4"),
    ("l40s", "L40S"),
]


@pytest.mark.parametrize(("name", "key"), LOOKUPS)
def test_lookup(name: str, key: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known name never warns
        found = lookup_gpu(name)
    assert found is not None and found.key == key


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_keys_and_names_round_trip(gpu: GpuSpec) -> None:
    assert lookup_gpu(gpu.key) is gpu
    assert lookup_gpu(gpu.key.lower()) is gpu
    assert lookup_gpu(gpu.name) is gpu


UNKNOWN = [
    "NVIDIA GeForce RTX 4090",
    "",
    "   ",
    "Radeon",
    "AMD Radeon Graphics",
    "NVIDIA GH100",  # a die, not a product: "H100" must not match inside it
    "NVIDIA GH200 480GB",
    "NVIDIA L40",  # "L4" must not match it, and the L40 (non-S) is not in the table
    "NVIDIA H20",
    "NVIDIA A10G",
    "NVIDIA A800-SXM4-80GB",
    "Tesla V100S-PCIE-32GB",
    "AMD Instinct MI300A",
    "NVIDIA GB300",
    "H800 PCIe",  # only the SXM H800 is tabulated; never silently the SXM numbers
    "A100 96GB",  # no such A100
    "V100 NVL",
    "A100 SXM PCIe",  # contradictory
    "cpu",
]


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_names_give_none_and_warn(name: str) -> None:
    with pytest.warns(UnknownGpuWarning, match="unknown GPU"):
        assert lookup_gpu(name) is None


def test_unknown_name_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lookup_gpu("NVIDIA GeForce RTX 4090", warn=False) is None


def test_unknown_warning_lists_the_known_keys() -> None:
    with pytest.warns(UnknownGpuWarning) as record:
        lookup_gpu("Radeon")
    assert "H100-SXM" in str(record[0].message)


def test_l4_and_l40s_never_mix() -> None:
    l4, l40s = lookup_gpu("L4"), lookup_gpu("L40S")
    assert l4 is not None and l40s is not None and l4 is not l40s
    assert l4.key == "L4" and l40s.key == "L40S"


def test_a100_pcie_never_resolves_to_sxm() -> None:
    for name in ("A100 PCIe", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB", "a100-pcie"):
        found = lookup_gpu(name)
        assert found is not None and found.key.startswith("A100-PCIE"), name


# ---- precision names -----------------------------------------------------------------------------

RESOLVE = [
    ("bf16", "bf16"),
    ("BF16", "bf16"),
    ("bfloat16", "bf16"),
    ("torch.bfloat16", "bf16"),
    ("fp16", "fp16"),
    ("FP16", "fp16"),
    ("half", "fp16"),
    ("float16", "fp16"),
    ("torch.float16", "fp16"),
    ("tf32", "tf32"),
    ("TF32", "tf32"),
    ("tensorfloat32", "tf32"),
    ("TensorFloat-32", "tf32"),
    ("fp32", "fp32"),
    ("float32", "fp32"),
    ("float", "fp32"),
    ("single", "fp32"),
    ("fp64", "fp64"),
    ("double", "fp64"),
    ("float64", "fp64"),
    ("fp64_tensor", "fp64_tensor"),
    ("FP64 Tensor Core", "fp64_tensor"),
    ("fp64-tc", "fp64_tensor"),
    ("fp8", "fp8"),
    ("FP8", "fp8"),
    ("e4m3", "fp8"),
    ("E5M2", "fp8"),
    ("float8_e4m3fn", "fp8"),
    ("torch.float8_e5m2", "fp8"),
    ("fp8-e4m3", "fp8"),
    ("mxfp8", "fp8"),
    ("fp4", "fp4"),
    ("nvfp4", "fp4"),
    ("mxfp4", "fp4"),
    ("e2m1", "fp4"),
    ("int8", "int8"),
    ("INT8", "int8"),
    (" bf16 ", "bf16"),
]


@pytest.mark.parametrize(("text", "canonical"), RESOLVE)
def test_resolve_precision(text: str, canonical: str) -> None:
    assert resolve_precision(text) == canonical


@pytest.mark.parametrize("text", ["fp7", "", "int4", "bf17", "float128", "fp64tensorx"])
def test_resolve_precision_rejects_unknown_names(text: str) -> None:
    with pytest.raises(ValueError, match="valid precisions: fp64, fp64_tensor") as info:
        resolve_precision(text)
    for p in PRECISIONS:
        assert p in str(info.value)


def test_every_precision_resolves_to_itself() -> None:
    assert [resolve_precision(p) for p in PRECISIONS] == list(PRECISIONS)


# ---- the loader rejects bad data -----------------------------------------------------------------

GOOD = """
[docs]
ds = "Example datasheet, table 1, https://example.com/ds.pdf"

[gpu.X1]
name = "Example X1"
vendor = "NVIDIA"
family = "x1"
forms = ["sxm"]
memory_gb = 10
memory_bw_gbs = 100
interconnect = "PCIe only"
pcie_gen = 4
tdp_w = 100
notes = "test"

[gpu.X1.peak_tflops]
bf16 = 10
fp32 = 1

[gpu.X1.sources]
"*" = "{ds}"
tdp_w = "Board spec, https://example.com/board"
"""


def test_loader_accepts_a_minimal_table() -> None:
    table = hardware._parse(GOOD)
    (entry,) = table.entries
    g = entry.spec
    assert list(g.peak_tflops) == ["fp32", "bf16"]  # table order
    assert g.memory_bytes == 10 * 10**9
    assert g.interconnect_gbs is None
    assert g.sources["tdp_w"] == "Board spec, https://example.com/board"
    assert g.sources["peak_tflops.bf16"] == "Example datasheet, table 1, https://example.com/ds.pdf"
    assert "interconnect_gbs" not in g.sources


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"*" = "{ds}"', 'tdp = "x"', "names no field"),
        ('"*" = "{ds}"', 'memory_bw_gbs = "{ds}"', "no source for"),
        ('"*" = "{ds}"', '"*" = "{nope}"', "unknown document reference"),
        ("bf16 = 10", "bf17 = 10", "unknown precisions"),
        ("bf16 = 10", "bf16 = 0", "must be positive"),
        ("tdp_w = 100", "tdp_w = -1", "must be positive"),
        ("tdp_w = 100", "", "missing 'tdp_w'"),
        ('vendor = "NVIDIA"', 'vendor = "Intel"', "vendor"),
        ('forms = ["sxm"]', "forms = []", "forms"),
        ("pcie_gen = 4", 'pcie_gen = "4"', "wrong type"),
        ('notes = "test"', 'notes = "test"\ncolour = "green"', "unknown fields"),
    ],
)
def test_loader_rejects_bad_data(old: str, new: str, message: str) -> None:
    assert old in GOOD
    with pytest.raises(RuntimeError, match=message):
        hardware._parse(GOOD.replace(old, new, 1))


def test_loader_rejects_a_name_shared_by_two_gpus() -> None:
    twin = GOOD[GOOD.index("[gpu.X1]") :].replace("X1", "X2").replace('"x1"', '"x2"')
    twin = twin.replace('name = "Example X2"', 'name = "Example X1"')
    with pytest.raises(RuntimeError, match="names both"):
        hardware._parse(GOOD + twin)


def _gpu_names_in_shared_traces(shared: Path) -> set[str]:
    """Every GPU name the real traces carry: Kineto deviceProperties/computeProperties, Nsight
    Systems TARGET_INFO_GPU, and the nccl-tests device lines."""
    import gzip
    import json
    import re
    import sqlite3

    names: set[str] = set()
    for path in shared.glob("*/*.json*"):
        if not path.name.endswith((".json", ".json.gz")):
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        for key in ("deviceProperties", "computeProperties"):
            for entry in doc.get(key) or []:
                if isinstance(entry, dict) and entry.get("name"):
                    names.add(entry["name"])
    for path in shared.glob("nsys/*/*.sqlite"):
        with sqlite3.connect(path) as db:
            names.update(row[0] for row in db.execute("SELECT name FROM TARGET_INFO_GPU"))
    for line in (shared / "nccl-tests/nccl_allreduce.log").read_text().splitlines():
        m = re.search(r"device\s+\d+ \[0x[0-9a-f]+\] (.+)$", line)
        if m:
            names.add(m.group(1).strip())
    return names


def test_every_gpu_in_the_shared_traces_resolves(shared_traces: Path) -> None:
    names = _gpu_names_in_shared_traces(shared_traces)
    assert {"Tesla T4", "NVIDIA A100-SXM4-80GB", "A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"} <= names
    # ROCm names a device "AMD Radeon Graphics" when it has no marketing name (the MI250 of
    # hta-amd-mi250): the name identifies no GPU, and must stay unknown rather than guessed.
    generic = {"AMD Radeon Graphics"}
    for name in sorted(names - generic):
        assert lookup_gpu(name) is not None, name
    for name in sorted(names & generic):
        with pytest.warns(UserWarning):
            assert lookup_gpu(name) is None, name
