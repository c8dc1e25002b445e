"""Build hook: the C scanner compiled with profile feedback where the compiler is GCC.

Everything else about the package is in pyproject.toml. The scanner (`badput.trace._scan`)
spends much of its time on branches whose outcome depends on the trace (which key comes next,
how long a literal runs), so GCC lays it out better once it has counted them: the scanner is
built with `-fprofile-generate`, scans a few real traces in a child process, and is built
again with `-fprofile-use`. The traces are of models that none of the benchmark shapes
(benchmarks/make_shapes.py) replicates, so that the benchmarks measure a profile learnt on
other traces. `-fprofile-partial-training` keeps the code the training never ran optimized as
usual (not for size).

Any failure (another compiler, no training trace in this source tree, a flag the compiler
lacks, a profile that does not match) gives the plain build, as before. `BADPUT_NO_PGO=1`
asks for the plain build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SCANNER = "badput.trace._scan"
# Real Kineto traces, none of them a benchmark shape's source: Hugging Face BERT and ViT
# inference on an H100 (TraceLens's), AlexNet and a toy add on an A100 (HTA's), a toy model
# trained on an AMD MI250 (ROCm). Pretty-printed and compact, with and without shapes.
TRAINING = (
    "tests/data/traces/tracelens-h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tests/data/traces/tracelens-h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tests/data/traces/hta-critical-path/alexnet_trace.json.gz",
    "tests/data/traces/hta-critical-path/simple_add_trace.json.gz",
    "tests/data/traces/hta-amd-mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
)
# Run in a child process (the counts are written when it exits): load the instrumented
# module from its path and scan each trace's event array as the reader does (`scan_events`,
# going on after an event it leaves to the complete decoder).
_TRAIN = r"""
import gzip, importlib.machinery, importlib.util, sys
loader = importlib.machinery.ExtensionFileLoader("_scan", sys.argv[1])
module = importlib.util.module_from_spec(importlib.util.spec_from_loader("_scan", loader))
loader.exec_module(module)
for path in sys.argv[2:]:
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    key = data.find(b'"traceEvents"')
    start, first = (data.find(b"[", key) + 1 if key >= 0 else 0), True
    while start > 0:  # an event refused (3) is the complete decoder's: go on past it
        status, end = module.scan_events(data, start, first)[-2:]
        if status != 3 or not data[end : end + 64].lstrip().startswith(b","):
            break
        start, first = data.index(b",", end) + 1, False
"""


def _is_gcc(command: list[str]) -> bool:
    try:
        out = subprocess.run(
            [command[0], "--version"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in out and "clang" not in out.lower()


class BuildExt(build_ext):
    """`build_ext` that builds the scanner with profile feedback where it can."""

    def build_extension(self, ext: Any) -> None:
        """Build one extension; the scanner trained first where the compiler is GCC."""
        if ext.name == SCANNER and self._trainable():
            try:
                if self._build_trained(ext):
                    return
            except Exception as exc:  # any failure: the plain build below
                print(f"badput: {ext.name} built without profile feedback ({exc})")
            force: Any = self.force
            self.force = True  # the instrumented object must not be kept as up to date
            try:
                super().build_extension(ext)
            finally:
                self.force = force
            return
        super().build_extension(ext)

    def _trainable(self) -> bool:
        if os.environ.get("BADPUT_NO_PGO", "0") not in ("", "0"):
            return False
        compiler: list[str] = getattr(self.compiler, "compiler_so", None) or []
        return self.compiler.compiler_type == "unix" and bool(compiler) and _is_gcc(compiler)

    def _build_trained(self, ext: Any) -> bool:
        traces = [str(HERE / t) for t in TRAINING if (HERE / t).is_file()]
        if not traces:
            print(f"badput: {ext.name} built without profile feedback (no training trace)")
            return False
        compile_args, link_args = ext.extra_compile_args, ext.extra_link_args
        base_compile, base_link = list(compile_args), list(link_args)
        profile = tempfile.mkdtemp(prefix="badput-pgo-")
        force: Any = self.force
        try:  # the extension's arguments and `force` as they were, whatever happens
            self.force = True
            ext.extra_compile_args = [*base_compile, f"-fprofile-generate={profile}"]
            ext.extra_link_args = [*base_link, f"-fprofile-generate={profile}"]
            super().build_extension(ext)
            built = self.get_ext_fullpath(ext.name)
            run = subprocess.run(
                [sys.executable, "-c", _TRAIN, built, *traces],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            if run.returncode != 0:
                last = (run.stderr.strip().splitlines() or [""])[-1]
                raise RuntimeError(f"the training run exited with {run.returncode}: {last}")
            if not any(Path(profile).rglob("*.gcda")):
                raise RuntimeError("the training wrote no profile")
            ext.extra_compile_args = [
                *base_compile, f"-fprofile-use={profile}", "-fprofile-partial-training",
                "-Werror=missing-profile",
            ]  # fmt: skip
            ext.extra_link_args = base_link
            super().build_extension(ext)
        finally:
            ext.extra_compile_args, ext.extra_link_args = compile_args, link_args
            self.force = force
            shutil.rmtree(profile, ignore_errors=True)
        print(f"badput: {ext.name} built with profile feedback from {len(traces)} traces")
        return True


setup(cmdclass={"build_ext": BuildExt})
