"""badput never prints secret values that a trace carries in its metadata.

Traces can hold the environment of the machine that recorded them (tokens, keys, passwords).
Whatever `analyze` prints, in any format, on success or on error, must not contain them.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_TRACES
from synth import TraceBuilder, run_cli

SECRETS = {
    "HF_TOKEN": "hf_abcSECRET123",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRET456",
    "DB_PASSWORD": "pa55w0rd-SECRET-789",
    "OPENAI_API_KEY": "sk-proj-SECRETabcdef0123456789",
    "GITHUB_TOKEN": "ghp_SECRET0123456789abcdefABCDEF",
}
ENVS = [f"{name}={value}" for name, value in SECRETS.items()] + ["CUDA_VISIBLE_DEVICES=0,1"]

SHARED_REAL = SHARED_TRACES / "tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz"


def add_secrets(b: TraceBuilder) -> TraceBuilder:
    b.set_top(
        "metadata",
        {
            "environment": dict(SECRETS, PATH="/usr/bin:/bin"),
            "envs": ENVS,
            "system": {"node": "trainer-17"},
        },
    )
    b.set_top("envs", ENVS)
    return b


def synthetic(schema: str) -> TraceBuilder:
    b = TraceBuilder(schema)
    b.distributed_info(rank=0, world_size=2)
    b.device_properties([0, 1])
    b.profiler_step(1, 0, 300)
    b.dataloader(0, 100)
    b.launch("gemm_kernel", cpu=(100, 110), gpu=(115, 200))
    b.launch(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        cpu=(110, 120),
        gpu=(150, 280),
        stream=20,
    )
    b.runtime("cudaDeviceSynchronize", 120, 290)
    return add_secrets(b)


def assert_no_secrets(*texts: str) -> None:
    for text in texts:
        for name, value in SECRETS.items():
            assert value not in text, f"the value of {name} was printed"
            # nor a recognizable part of it
            assert value[-12:] not in text, f"part of the value of {name} was printed"


# ---- traces that analyze fine --------------------------------------------------------------


def modern_trace(tmp: Path) -> Path:
    return synthetic("modern").write(tmp / "secrets.pt.trace.json")


def legacy_trace_gz(tmp: Path) -> Path:
    return synthetic("legacy").write(tmp / "secrets.pt.trace.json.gz")


def real_trace(tmp: Path) -> Path:
    if not SHARED_REAL.is_file():
        pytest.skip("shared real traces not available")
    doc: dict[str, Any] = json.loads(gzip.decompress(SHARED_REAL.read_bytes()))
    meta = doc.setdefault("metadata", {})
    meta["environment"] = dict(SECRETS)
    meta["envs"] = ENVS
    doc["envs"] = ENVS
    path = tmp / "real-with-secrets.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


GOOD = [modern_trace, legacy_trace_gz, real_trace]


@pytest.mark.parametrize("make", GOOD, ids=lambda f: f.__name__)
@pytest.mark.parametrize("fmt", [None, "json"])
def test_analyze_does_not_print_secrets(
    make: Callable[[Path], Path],
    fmt: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = make(tmp_path)
    assert SECRETS["HF_TOKEN"].encode() in (
        gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    )
    argv: list[object] = ["analyze", path]
    if fmt:
        argv += ["--format", fmt]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert out.strip(), "no output"
    assert_no_secrets(out, err)


def test_report_file_has_no_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = modern_trace(tmp_path)
    out_file = tmp_path / "report.json"
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json", "--out", out_file)
    assert code == 0, err
    assert_no_secrets(out, err, out_file.read_text())


# ---- bad input that carries secrets ----------------------------------------------------------


def no_trace_events(tmp: Path) -> Path:
    path = tmp / "meta-only.json"
    path.write_text(json.dumps({"metadata": {"environment": SECRETS, "envs": ENVS}}))
    return path


def events_not_a_list(tmp: Path) -> Path:
    path = tmp / "events-object.json"
    doc = {"metadata": {"environment": SECRETS}, "traceEvents": dict(SECRETS)}
    path.write_text(json.dumps(doc))
    return path


def negative_duration(tmp: Path) -> Path:
    b = synthetic("modern")
    b.kernel("broken_kernel", 250, 200)
    return b.write(tmp / "negative.pt.trace.json")


def truncated_after_secret(tmp: Path) -> Path:
    text = synthetic("modern").text()
    cut = text.index(SECRETS["HF_TOKEN"]) + len(SECRETS["HF_TOKEN"])
    path = tmp / "truncated.pt.trace.json"
    path.write_text(text[:cut])
    return path


def truncated_after_secret_gz(tmp: Path) -> Path:
    text = synthetic("modern").text()
    cut = text.index(SECRETS["OPENAI_API_KEY"]) + len(SECRETS["OPENAI_API_KEY"]) + 2
    data = gzip.compress(text.encode())
    path = tmp / "truncated.pt.trace.json.gz"
    # a gzip stream whose text stops after the secret: compress the cut text, then cut the
    # stream's trailer so that it is also a truncated gzip file
    data = gzip.compress(text[:cut].encode())
    path.write_bytes(data[:-6])
    return path


BAD = [
    no_trace_events,
    events_not_a_list,
    negative_duration,
    truncated_after_secret,
    truncated_after_secret_gz,
]


@pytest.mark.parametrize("make", BAD, ids=lambda f: f.__name__)
@pytest.mark.parametrize("fmt", [None, "json"])
def test_errors_do_not_print_secrets(
    make: Callable[[Path], Path],
    fmt: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = make(tmp_path)
    argv: list[object] = ["analyze", path]
    if fmt:
        argv += ["--format", fmt]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, f"exit {code}; stderr: {err}"
    assert err.startswith("badput: error: ")
    assert "Traceback" not in err
    assert_no_secrets(out, err)
