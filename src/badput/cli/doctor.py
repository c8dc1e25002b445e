"""`badput doctor`: check the whole machine, GPUs to storage, each item with evidence and fix."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from badput.cli.common import Format, FormatOption, OutOption, json_out, text_out
from badput.errors import UsageError

__all__ = ["doctor"]

EXIT_FAILED = 1


def doctor(
    output_format: FormatOption = Format.TEXT,
    out: OutOption = None,
    data: Annotated[
        str | None,
        typer.Option("--data", help="Measure read throughput of this data directory (bounded)."),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when any check fails.")] = False,
    nvml_replay: Annotated[
        str | None,
        typer.Option("--nvml-replay", help="Use a recorded NVML reading instead of the GPUs."),
    ] = None,
    nvml_record: Annotated[
        str | None,
        typer.Option("--nvml-record", help="Save this machine's NVML reading for replay."),
    ] = None,
) -> None:
    """Check GPUs, topology, host limits, storage and software; each with evidence and fix.

    Exit 0 unless --strict and a check failed (1); bad input exits 2.

    Example:
        badput doctor --data /datasets/imagenet --format json
    """
    from badput.report.doctor_report import encode_doctor, render_checks
    from badput.telemetry.doctor import Status, run_doctor
    from badput.telemetry.sources import FakeNvml, Nvml, NvmlUnavailable, RealNvml, record_nvml

    if data is not None and not os.path.isdir(data):
        raise UsageError(f"--data {data}: not a directory")
    nvml: Nvml | None = None
    if nvml_replay is not None:
        try:
            nvml = FakeNvml.from_json(nvml_replay)
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise UsageError(f"--nvml-replay {nvml_replay}: not an NVML recording ({e})") from None
    if nvml_record is not None:
        try:
            real = RealNvml()
        except NvmlUnavailable as e:
            raise UsageError(f"--nvml-record: {e}") from None
        try:
            with open(nvml_record, "w", encoding="utf-8") as f:
                json.dump(record_nvml(real), f, indent=2)
        except OSError as e:
            raise UsageError(f"--nvml-record {nvml_record}: {e.strerror}") from None
        finally:
            real.close()
    checks = run_doctor(nvml=nvml, data_dir=data)
    if output_format is Format.JSON:
        json_out(out, encode_doctor(checks).encode())
    else:
        with text_out(out, width=160) as console:
            render_checks(checks, console)
    if strict and any(c.status is Status.FAIL for c in checks):
        raise typer.Exit(EXIT_FAILED)
