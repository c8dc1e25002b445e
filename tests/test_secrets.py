"""badput never prints secret values that a trace carries in its metadata.

Traces can hold the environment of the machine that recorded them (tokens, keys, passwords).
Whatever `analyze` prints, in any format, on success or on error, must not contain them.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_TRACES, reference
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
    doc: dict[str, Any] = json.loads(gzip.decompress(reference(SHARED_REAL).read_bytes()))
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


# ==== every command, every format, every kind of place a secret can sit =====================
#
# Values in the shapes of real credentials, planted in every kind of place a trace holds one:
# an environment dict, a list of K=V strings, {name, value} and {key, value} lists, top-level
# keys, traceName, distributedInfo, an event's args, kernel names, a thread label.

HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GH_PAT = "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
AKIA = "AKIAIOSFODNN7PLANT01"
XOXB = "xoxb-123456789012-1234567890123-PlantSlackTok"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.PLANTsig_dozjgNryP4J3jVmNHl0w5N"
SK = "sk-proj-PLANTabcDEF0123456789ghiJKL"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCPLANTkeybody"
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n"
# plain values: secret only by the key they sit under
NAME_VALUE = "PLANT-namevalue-0001"
KEY_VALUE = "PLANT-keyvalue-0002"
DIST_PASS = "PLANT-distpass-03"
DIST_TOKEN = "PLANT-diststore-04"
TOP_LEVEL = "PLANT-toplevel-05"
NESTED_KEY = "PLANT-wandb-06"
URL_PASS = "PLANT-url-07"

PLANTED = [*SECRETS.values(), HF, GHP, GH_PAT, AKIA, XOXB, JWT, SK, PEM_BODY]
PLANTED += [NAME_VALUE, KEY_VALUE, DIST_PASS, DIST_TOKEN, TOP_LEVEL, NESTED_KEY, URL_PASS]

KERNEL = f"gemm_kernel_{AKIA}"
TRACE_NAME = f"runs/exp-{GHP}/worker0.pt.trace.json"
DIST_INFO = {
    "backend": "nccl",
    "rank": 0,
    "world_size": 2,
    "init_method": f"tcp://admin:{DIST_PASS}@10.0.0.1:29500",
    "store_token": DIST_TOKEN,
}


def planted_trace(slower: int = 0) -> TraceBuilder:
    """Two profiler steps with a secret in every kind of place; `slower` stretches a kernel."""
    b = TraceBuilder("modern")
    b.device_properties([0, 1])
    b.set_top("distributedInfo", DIST_INFO)
    b.trace_name = TRACE_NAME
    for step, t0 in ((1, 0), (2, 400)):
        b.profiler_step(step, t0, t0 + 300)
        b.dataloader(t0, t0 + 100)
        b.launch(KERNEL, cpu=(t0 + 100, t0 + 110), gpu=(t0 + 115, t0 + 200 + slower))
        b.launch(f"fused_{HF}_kernel", cpu=(t0 + 110, t0 + 115), gpu=(t0 + 205, t0 + 230))
        b.launch(NCCL, cpu=(t0 + 115, t0 + 120), gpu=(t0 + 150, t0 + 280), stream=20)
        op = b.cpu_op("aten::mm", t0 + 100, t0 + 110)
        op["args"].update({"callback": f"Bearer {JWT}", "note": f"pat {GH_PAT}"})
        b.runtime("cudaDeviceSynchronize", t0 + 120, t0 + 290)
    thread = b.cpu_op("worker_loop", 10, 20)
    thread["tid"] = f"worker {XOXB}"  # a thread label
    b.set_top(
        "metadata",
        {
            "environment": dict(SECRETS, PATH="/usr/bin:/bin"),
            "envs": [*ENVS, f"OPENAI_API_KEY={SK}"],
            "env_list": [
                {"name": "WANDB_API_KEY", "value": NAME_VALUE},
                {"key": "DB_PASSWD", "value": KEY_VALUE},
                {"name": "PATH", "value": "/usr/bin"},
            ],
            "ssh": {"identity": PEM},
            "repo": f"https://bob:{URL_PASS}@git.example.com/x.git",
            "system": {"node": "trainer-17"},
        },
    )
    b.set_top("envs", ENVS)
    b.set_top("HF_TOKEN", TOP_LEVEL)
    b.set_top("wandb", {"project": "p", "api_key": NESTED_KEY})
    return b


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def assert_none_planted(what: str, text: str) -> None:
    for value in PLANTED:
        assert value not in text, f"{what}: {value!r} was written"
        assert value[-12:] not in text, f"{what}: part of {value!r} was written"


def read_output(path: Path) -> str:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def test_every_command_and_format_hides_planted_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = planted_trace().write(tmp_path / "a.pt.trace.json")
    b = planted_trace(slower=40).write(tmp_path / "b.pt.trace.json.gz")
    bad = truncated_after_secret(tmp_path)
    for path in (a, b):
        text = read_output(path)
        for value in PLANTED:
            assert value in text, f"the test trace lacks {value!r}"
    out = tmp_path / "out"
    out.mkdir()
    o = str(out)
    commands: list[tuple[int | None, list[object]]] = [
        (0, ["analyze", a]),
        (0, ["analyze", a, "--format", "json"]),
        (0, ["analyze", a, "--format", "markdown"]),
        (0, ["analyze", a, "--out", f"{o}/a.txt"]),
        (0, ["analyze", a, "--format", "json", "--out", f"{o}/a.json"]),
        (0, ["analyze", a, "--format", "markdown", "--out", f"{o}/a.md"]),
        (0, ["analyze", a, "--format", "markdown", "--out", f"{o}/a.md", "--append"]),
        (0, ["analyze", a, b, "--format", "json", "--top", "0"]),
        (0, ["analyze", a, b, "--jobs", "2"]),
        (0, ["analyze", a, bad]),  # a warning names the failed trace
        (2, ["analyze", a, bad, "--strict", "--format", "markdown"]),
        (1, ["analyze", a, "--min-goodput", "0.999", "--max-step-time-ms", "0.0001"]),
        (None, ["analyze", a, "--window", "steps:50-60"]),  # out of range
        (2, ["analyze", a, "--window", "steps:x"]),
        (2, ["analyze", a, "--top", "-1"]),
        (2, ["analyze", bad, "--format", "json"]),
        (0, ["report", a, "--out", f"{o}/r.html"]),
        (0, ["report", a, b, bad, "--out", f"{o}/r2.html"]),
        (None, ["report", a, "--out", f"{o}/r3.html", "--window", "steps:50-60"]),
        (0, ["diff", a, b]),
        (0, ["diff", a, b, "--format", "json", "--out", f"{o}/d.json"]),
        (0, ["diff", a, b, "--html", f"{o}/d.html", "--out", f"{o}/d.txt"]),
        (2, ["diff", a, bad]),
        (0, ["annotate", a, "--out", f"{o}/ann.json"]),
        (0, ["annotate", b, "--out", f"{o}/ann.json.gz"]),
        (None, ["annotate", a, "--out", f"{o}/ann2.json", "--window", "steps:50-60"]),
        (2, ["annotate", a, "--out", f"{o}/ann3.json", "--window", "bad"]),
        (2, ["annotate", a, "--out", a]),
        (2, ["annotate", bad, "--out", f"{o}/ann4.json"]),
    ]
    for expected, argv in commands:
        code, stdout, stderr = run_cli(capsys, *argv)
        what = " ".join(str(x) for x in argv)
        if expected is not None:
            assert code == expected, f"{what}: exit {code}; stderr: {stderr}"
        assert "Traceback" not in stderr, what
        assert_none_planted(f"{what} (stdout)", stdout)
        assert_none_planted(f"{what} (stderr)", stderr)
    written = sorted(out.iterdir())
    assert {p.name for p in written} >= {
        "a.txt", "a.json", "a.md", "r.html", "r2.html", "d.json", "d.html", "d.txt",
        "ann.json", "ann.json.gz",
    }  # fmt: skip
    for path in written:
        assert_none_planted(path.name, read_output(path))


def test_annotate_keeps_what_perfetto_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = planted_trace().write(tmp_path / "a.pt.trace.json.gz")
    out = tmp_path / "ann.json.gz"
    code, _, err = run_cli(capsys, "annotate", src, "--out", out)
    assert code == 0, err
    original = json.loads(gzip.decompress(src.read_bytes()))
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert list(doc) == list(original)  # every top-level key, in order
    assert doc["deviceProperties"] == original["deviceProperties"]
    assert doc["schemaVersion"] == original["schemaVersion"]
    assert doc["distributedInfo"] == {
        "backend": "nccl",
        "rank": 0,
        "world_size": 2,
        "init_method": "tcp://admin:<redacted>@10.0.0.1:29500",
        "store_token": "<redacted>",
    }
    assert doc["traceName"] == "runs/exp-<redacted>/worker0.pt.trace.json"
    assert doc["HF_TOKEN"] == "<redacted>"
    assert doc["wandb"] == {"project": "p", "api_key": "<redacted>"}
    meta = doc["metadata"]
    assert meta["environment"]["PATH"] == "/usr/bin:/bin"
    assert meta["environment"]["HF_TOKEN"] == "<redacted>"
    assert "CUDA_VISIBLE_DEVICES=0,1" in meta["envs"] and "HF_TOKEN=<redacted>" in meta["envs"]
    assert meta["env_list"] == [
        {"name": "WANDB_API_KEY", "value": "<redacted>"},
        {"key": "DB_PASSWD", "value": "<redacted>"},
        {"name": "PATH", "value": "/usr/bin"},
    ]
    assert meta["ssh"] == {"identity": "<redacted>\n"}
    assert meta["repo"] == "https://bob:<redacted>@git.example.com/x.git"
    assert meta["system"] == {"node": "trainer-17"}
    # Every original event is there; those without a planted value are unchanged.
    n = len(original["traceEvents"])
    kept = doc["traceEvents"][:n]
    assert "badput" not in {e.get("cat") for e in kept}
    names = {e.get("name") for e in kept}
    assert "gemm_kernel_<redacted>" in names and "fused_<redacted>_kernel" in names
    for before, after in zip(original["traceEvents"], kept, strict=True):
        text = json.dumps(before)
        if not any(v in text for v in PLANTED):
            assert after == before
    ops = [e for e in kept if e.get("name") == "aten::mm"]
    assert ops and all(e["args"]["callback"] == "Bearer <redacted>" for e in ops)
    assert all(e["args"]["note"] == "pat <redacted>" for e in ops)
    assert any(e.get("tid") == "worker <redacted>" for e in kept)


def test_analyze_shows_redacted_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kernel name that holds a token is shown with the token replaced, not dropped."""
    path = planted_trace().write(tmp_path / "a.pt.trace.json")
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json", "--top", "0")
    assert code == 0, err
    assert "gemm_kernel_<redacted>" in out and "fused_<redacted>_kernel" in out


# ==== redact.py: the rules ===================================================================

SECRET_KEYS = [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "authToken", "hfToken", "token",
    "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "OPENAI_API_KEY", "WANDB_API_KEY", "apikey",
    "x-api-key", "SSH_KEY", "ENCRYPTION_KEY", "DB_PASSWORD", "PGPASSWORD", "passwd",
    "spring.datasource.password", "MYSQL_PWD", "DB_PASS", "client_secret", "SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS", "Authorization", "oauth", "HTTP_AUTH", "cookie",
    "SENTRY_DSN", "X-Amz-Signature", "HF_TOKEN_VALUE", "AZURE_STORAGE_CONNECTION_STRING",
    "SLACK_WEBHOOK_URL", "AccountKey", "private_key", "secret_key_base",
]  # fmt: skip
PLAIN_KEYS = [
    "key", "Key", "name", "value", "KEY_COLUMN", "sort_key", "public_key", "primary_key",
    "TOKENIZERS_PARALLELISM", "max_tokens", "num_tokens", "tokens_per_s", "token_type_ids",
    "HF_TOKEN_PATH", "TOKEN_FILE", "PWD", "PATH", "HOME", "keyring", "monkey", "hotkey",
    "author", "NCCL_IB_PKEY", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "passenger", "",
    "PRIVACY_POLICY_URL", "Vendor ID",
]  # fmt: skip


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys(key: str) -> None:
    from badput.trace.redact import is_secret_key

    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_plain_keys(key: str) -> None:
    from badput.trace.redact import is_secret_key

    assert not is_secret_key(key)


REDACTED_TEXT = [
    ("gemm hf_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH kernel", "gemm <redacted> kernel"),
    (f"x={SK}", "x=<redacted>"),
    ("sk-ant-api03-AbCdEf0123456789AbCdEf0123", "<redacted>"),
    (GHP, "<redacted>"),
    ("gho_" + "a1B2" * 9, "<redacted>"),
    (GH_PAT, "<redacted>"),
    ("id AKIAIOSFODNN7EXAMPLE.", "id <redacted>."),
    ("ASIAIOSFODNN7EXAMPLE", "<redacted>"),
    (XOXB, "<redacted>"),
    (f"jwt {JWT} end", "jwt <redacted> end"),
    (f"key: {PEM}tail", "key: <redacted>\ntail"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE cut short", "<redacted>"),
    ("git clone https://bob:hunter2@example.com/x", "git clone https://bob:<redacted>@example.com/x"),
    ("https://ghs_abc@github.com", "https://ghs_abc@github.com"),  # short user: no password
    ("https://abcdef0123456789abcdef@o1.ingest.example.io/1", "https://<redacted>@o1.ingest.example.io/1"),
    ("postgres://u:p%40ss@db:5432/x", "postgres://u:<redacted>@db:5432/x"),
    ("HF_TOKEN=abc123 CUDA_VISIBLE_DEVICES=0", "HF_TOKEN=<redacted> CUDA_VISIBLE_DEVICES=0"),
    ("--hf-token=abc --epochs 3", "--hf-token=<redacted> --epochs 3"),
    ('{"DB_PASSWORD": "pa ss", "x": 1}', '{"DB_PASSWORD": "<redacted>", "x": 1}'),
    ("password: hunter2", "password: <redacted>"),
    ("Authorization: Bearer abcdefgh12345", "Authorization: Bearer <redacted>"),
    ("curl -H 'bearer abcdefgh12345'", "curl -H 'bearer <redacted>'"),
    ("A=1;AccountKey=abc==;B=2", "A=1;AccountKey=<redacted>;B=2"),
]  # fmt: skip
KEPT_TEXT = [
    "sk-learn-experiment-2024-01-05-run",  # no capital: not a key
    "hf_attention_forward_kernel",
    "ghp_short",
    "AKIA1234",
    "eyJhbGciOiJIUzI1NiJ9 alone",
    "google-auth==2.40.3",
    "SecretStorage==3.3.1",
    "aten::to",
    "token_embedding::forward",
    "torch/nn/modules/module.py(1501): _call_impl",
    "void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float>>(int)",
    "https://www.ubuntu.com/",
    "git@github.com:org/repo",
    "Vendor ID:   AuthenticAMD",
    "HF_TOKEN=REDACTED",
    "HF_TOKEN=",
    "DB_PASSWORD='***'",
    "TOKENIZERS_PARALLELISM=false",
    "PWD=/home/me",
    "cuda>=12.8 brand=tesla,driver>=470",
    "",
]


@pytest.mark.parametrize(("text", "expected"), REDACTED_TEXT)
def test_redact_text(text: str, expected: str) -> None:
    from badput.trace.redact import may_hold_secret, redact_text

    assert redact_text(text) == expected
    assert may_hold_secret(json.dumps(text).encode())  # the prefilter would decode it


@pytest.mark.parametrize("text", KEPT_TEXT)
def test_redact_text_keeps(text: str) -> None:
    from badput.trace.redact import redact_text

    assert redact_text(text) == text


def test_redact_metadata_shapes() -> None:
    from badput.trace.redact import redact_metadata

    value = {
        "environment": {"HF_TOKEN": "x1", "PATH": "/bin", "DB_PASSWORD": 1234},
        "envs": ("HF_TOKEN=x2", "A=1"),
        "pairs": [
            {"name": "DB_PASSWORD", "value": "x3"},
            {"Key": "GITHUB_TOKEN", "Value": {"nested": "x4"}},
            {"name": "PATH", "value": "/bin"},
        ],
        "kept": {"HF_TOKEN": None, "auth": True, "OPENAI_API_KEY": "", "x": 1.5},
        HF: "a token as a key",
    }
    assert redact_metadata(value) == {
        "environment": {"HF_TOKEN": "<redacted>", "PATH": "/bin", "DB_PASSWORD": "<redacted>"},
        "envs": ["HF_TOKEN=<redacted>", "A=1"],
        "pairs": [
            {"name": "DB_PASSWORD", "value": "<redacted>"},
            {"Key": "GITHUB_TOKEN", "Value": "<redacted>"},
            {"name": "PATH", "value": "/bin"},
        ],
        "kept": {"HF_TOKEN": None, "auth": True, "OPENAI_API_KEY": "", "x": 1.5},
        "<redacted>": "a token as a key",
    }
    assert value["environment"]["HF_TOKEN"] == "x1"  # a copy: the input is not changed


def test_redact_metadata_any_depth() -> None:
    from badput.trace.redact import redact_metadata

    depth = 100_000  # far past the recursion limit
    value: object = {"HF_TOKEN": "deep", "k": f"x {HF}"}
    for i in range(depth):
        value = [value] if i % 2 else {"level": value}
    out = redact_metadata(value)
    for i in reversed(range(depth)):
        out = out[0] if i % 2 else out["level"]  # type: ignore[index]
    assert out == {"HF_TOKEN": "<redacted>", "k": "x <redacted>"}


def test_redact_json_keeps_text_and_digits() -> None:
    from badput.trace.redact import redact_json

    clean = b'{"ts": 1712195495519689.047,  "name": "k", "n": 123456789012345678901234567890}'
    assert redact_json(clean) is clean  # the same text, not a copy
    dirty = b'{"ts": 1712195495519689.047, "HF_TOKEN": "s", "big": 1E+400, "l": [0.1, -0.0]}'
    assert redact_json(dirty) == (
        b'{"ts":1712195495519689.047,"HF_TOKEN":"<redacted>","big":1E+400,"l":[0.1,-0.0]}'
    )
    assert redact_json(b'"plain"', key="DB_PASSWORD") == b'"<redacted>"'
    assert redact_json(b"null", key="DB_PASSWORD") == b"null"
    # an escape cannot hide a token, nor a key
    hidden = json.dumps(HF).replace("h", "\\u0068").encode()
    assert redact_json(hidden, keys=False) == b'"<redacted>"'
    assert redact_json(b'{"HF_\\u0054OKEN": "s"}') == b'{"HF_TOKEN":"<redacted>"}'
    assert redact_json(b'"https:\\/\\/bob:pw@x.org"') == b'"https://bob:<redacted>@x.org"'
    # too deep to decode: replaced whole, it cannot be checked
    deep = b"[" * 50_000 + json.dumps(HF).encode() + b"]" * 50_000
    assert redact_json(deep) == b'"<redacted>"'


def test_redact_events() -> None:
    from badput.trace.redact import redact_events

    clean = b'[{"name": "a", "ts": 1.000}, {"name": "b"}]'
    assert redact_events(clean) == (None, 2)
    assert redact_events(b"[ ]") == (None, 0)
    array = f'[{{"name": "a", "ts": 1.000}},\n {{"name": "k {AKIA}", "ts": 2.500}}]'.encode()
    body, n = redact_events(array)
    assert n == 2
    assert body == b'{"name": "a", "ts": 1.000},{"name":"k <redacted>","ts":2.500}'
    # key rules are not applied to events (see redact_events): only the formats
    assert redact_events(b'[{"args": {"HF_TOKEN": "plain"}}]') == (None, 1)
    # a bytearray holding more than the array: `end` bounds it
    buf = bytearray(b'[{"a": 1}],{"b": 2}')
    assert redact_events(buf, 10) == (None, 1)
    buf.extend(b"x")  # no view of it is left behind
    with pytest.raises(msgspec.DecodeError):
        redact_events(b'[{"a": 1}')


# Pieces of text from which the property test builds strings: parts of every rule.
FRAGMENTS = [
    "hf_", "sk-", "ghp_", "github_pat_", "AKIA", "xoxb-", "eyJ", ".", "PRIVATE KEY",
    "-----BEGIN ", "-----", "://", "@", ":", "=", " ", "_", "-", "token", "KEY", "Pass", "wd",
    "Bearer ", "auth", '"', "'", "a1B2c3D4e5F6g7H8", "0123456789", "ZZZZ", "é",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14), st.booleans())
def test_prefilter_never_misses(parts: list[str], escape: bool) -> None:
    """What the rules change, the fast prefilter flags: `may_hold_secret` False is a promise."""
    from badput.trace.redact import _redact_formats, may_hold_secret, redact_text

    text = "".join(parts)
    raw = json.dumps(text).encode()
    if escape:  # a writer may escape any character
        raw = b'"' + "".join(f"\\u{ord(c):04x}" for c in text).encode() + b'"'
    if redact_text(text) != text:
        assert may_hold_secret(raw)
    if _redact_formats(text) != text:
        assert may_hold_secret(raw, keys=False)


# ==== annotate streams ========================================================================


def _events_with_tokens(n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i in range(n):
        e: dict[str, Any] = {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0,
                             "tid": 7, "ts": 1000 + 10 * i, "dur": 5,
                             "args": {"device": 0, "stream": 7}}  # fmt: skip
        if i % 50 == 3:
            e["args"]["note"] = f"see {GHP}"
        if i % 40 == 5:  # objects in a list, and a string that looks like a cut
            e["args"]["shapes"] = [{"a": 1}, {"b": [{"c": 2}, {"d": "}, {"}]}]
            e["args"]["text"] = '"}, {"'
        events.append(e)
    return events


LAYOUTS = {
    "kineto": lambda doc: kineto_layout(doc),
    "one line": lambda doc: json.dumps(doc, separators=(",", ":")),
    "spaced": lambda doc: json.dumps(doc),
    "indented": lambda doc: json.dumps(doc, indent=2),
}


def kineto_layout(doc: Any) -> str:
    """Kineto's layout: one event per line inside `"traceEvents": [`, other keys around it."""
    if isinstance(doc, list):
        return "[\n" + ",\n".join(json.dumps(e) for e in doc) + "\n]\n"
    fields = []
    for key, value in doc.items():
        if key == "traceEvents":
            events = ",\n".join(json.dumps(e) for e in value)
            fields.append(f'  "traceEvents": [\n{events}\n  ]')
        else:
            fields.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def _documents() -> dict[str, Any]:
    events = _events_with_tokens(400)
    meta = {"environment": dict(SECRETS), "note": '"traceEvents": [ is not here'}
    return {
        "fields before": {"schemaVersion": 1, "metadata": meta, "decoy": {"traceEvents": []},
                          "traceEvents": events},
        "fields after": {"traceEvents": events, "traceName": TRACE_NAME,
                         "distributedInfo": DIST_INFO},
        "bare array": events,
        "no events": {"metadata": meta, "traceEvents": []},
    }  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("which", ["fields before", "fields after", "bare array", "no events"])
@pytest.mark.parametrize("gz", [False, True])
def test_annotate_streams_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, which: str, gz: bool
) -> None:
    """Cut into pieces of 1 KiB, any layout copies right: every event once, secrets gone."""
    from badput.report import perfetto
    from badput.trace.redact import redact_json, redact_metadata

    chunk = 1024
    monkeypatch.setattr(perfetto, "CHUNK_BYTES", chunk)
    held: list[int] = []
    check = perfetto.check_held
    monkeypatch.setattr(
        perfetto,
        "check_held",
        lambda path, n, *rest: (held.append(n), check(path, n, *rest))[1],
    )
    doc = _documents()[which]
    text = LAYOUTS[layout](doc).encode()
    src = tmp_path / ("t.json.gz" if gz else "t.json")
    src.write_bytes(gzip.compress(text) if gz else text)
    out = tmp_path / "out.json"
    added = [{"ph": "i", "name": "added", "pid": 9, "tid": 0, "ts": 1}]
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    assert perfetto.write_annotated(str(src), str(out), added) == len(events)
    written = out.read_text()
    assert_none_planted(f"{layout}/{which}", written)
    result = json.loads(written)
    expected_events = [json.loads(redact_json(json.dumps(e).encode(), keys=False)) for e in events]
    if isinstance(doc, list):
        assert result == expected_events + added
    else:
        assert list(result) == list(doc)
        assert result["traceEvents"] == expected_events + added
        for key, value in doc.items():
            if key != "traceEvents":
                assert result[key] == redact_metadata(value), key
    # Held text stays within two pieces and an event or two, whatever the file's size.
    longest = max((len(json.dumps(e)) for e in events), default=0)
    assert max(held) <= 2 * chunk + 2 * longest + 512, (max(held), len(text))


def test_annotate_bad_input_leaves_no_copy(tmp_path: Path) -> None:
    from badput.errors import TraceFormatError
    from badput.report.perfetto import write_annotated

    text = kineto_layout({"traceEvents": _events_with_tokens(3000)}).encode()
    src = tmp_path / "cut.json.gz"
    src.write_bytes(gzip.compress(text)[: len(gzip.compress(text)) // 2])
    out = tmp_path / "out.json"
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        write_annotated(str(src), str(out), [])
    assert not out.exists()
    for bad in (b"", b"   ", b"nope", b'{"a": 1}', b'{"traceEvents": [{"a": 1}'):
        src = tmp_path / "bad.json"
        src.write_bytes(bad)
        with pytest.raises(TraceFormatError):
            write_annotated(str(src), str(out), [])
        assert not out.exists()


_MEASURE = """
import resource, sys
from badput.cli.app import main
code = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(code)
"""


def _peak_rss_kib(*argv: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def _padded_trace(path: Path, events: int, pad: int) -> int:
    """A gzipped Kineto-layout trace of `events` kernels with `pad` bytes of args each."""
    fill = b"Q" * pad
    size = 0
    with gzip.open(path, "wb", compresslevel=1) as f:
        head = b'{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],\n'
        head += (
            b' "metadata": {"environment": {"HF_TOKEN": "hf_abcSECRET123"}},\n "traceEvents": [\n'
        )
        size += f.write(head)
        for i in range(events):
            line = b'%s{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, '
            line %= (b",\n" if i else b"", 1000 + 10 * i)
            size += f.write(
                line + b'"dur": 5, "args": {"device": 0, "stream": 7, "pad": "' + fill + b'"}}'
            )
        size += f.write(b'\n], "traceName": "big"}\n')
    return size


def test_annotate_does_not_hold_the_inflated_trace(tmp_path: Path) -> None:
    """A ~200 MB text (a 1 MB gzip file) is annotated in far less memory than its size."""
    small, big = tmp_path / "small.json.gz", tmp_path / "big.json.gz"
    _padded_trace(small, 20, 1000)
    inflated = _padded_trace(big, 2000, 100_000)
    assert inflated > 190 << 20 and big.stat().st_size < 4 << 20
    base = _peak_rss_kib("annotate", str(small), "--out", str(tmp_path / "small-out.json"))
    out = tmp_path / "big-out.json"
    peak = _peak_rss_kib("annotate", str(big), "--out", str(out))
    assert out.stat().st_size > inflated
    out.unlink()
    grown = (peak - base) * 1024
    assert grown < inflated // 2, f"peak RSS grew by {grown >> 20} MiB for {inflated >> 20} MiB"
