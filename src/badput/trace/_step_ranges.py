"""Named host ranges that delimit steps, renamed to the `ProfilerStep#N` the analyses know.

A PyTorch profiler trace marks each step with a `ProfilerStep#N` annotation. Other traces mark
steps with ranges of their own naming: an NVTX range `train_step` around each iteration, or
`Step 7`. `mark_step_ranges` renames the host ranges of one name to `ProfilerStep#N`, so every
analysis (window, per-step breakdown, `--window steps:A-B`) works on them unchanged, and says so
in the trace's warnings.

A range matches NAME when its text is NAME, or NAME followed by a number and optionally more
text (`train_step 7`, `Step 0 to 10`, `iteration#3`), case-insensitively. N is that number when
every matched range has a different one, else the range's position in time (0, 1, ...).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import numpy.typing as npt

from badput.trace.model import EventKind, Trace, name_head

__all__ = ["AUTO_STEP_NAMES", "mark_step_ranges", "step_name_pattern"]

#: Range names taken as steps when none is chosen and no `ProfilerStep#N` exists, in order.
AUTO_STEP_NAMES = ("train_step", "training_step", "step", "iteration")

_PROFILER_STEP = re.compile(r"^ProfilerStep#\d{1,18}$")  # as `profiler_step_number` reads
# Digits of a step number that are read: more than an int64 holds is not a step number (and
# int() refuses texts of over 4300 digits).
_MAX_STEP_DIGITS = 18
_HOST_KINDS = np.array([int(EventKind.ANNOTATION), int(EventKind.CPU_OP)], dtype=np.int8)


def step_name_pattern(name: str) -> re.Pattern[str]:
    """The pattern of range texts that `name` selects; group 1 is the step number, if any."""
    return re.compile(
        rf"^{re.escape(name.strip())}(?:[\s#:_\-]*(\d+)\b.*)?$", re.IGNORECASE | re.DOTALL
    )


def _matches(trace: Trace, name: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
    """Host range rows whose text matches `name`, and the number in each text (-1: none)."""
    pattern = step_name_pattern(name)
    hit = np.zeros(len(trace.names), dtype=np.bool_)
    number = np.full(len(trace.names), -1, dtype=np.int64)
    for i, text in enumerate(trace.names):
        match = pattern.match(name_head(text))
        if match:
            hit[i] = True
            digits = match.group(1)
            if digits is not None and len(digits) <= _MAX_STEP_DIGITS:
                number[i] = int(digits)
    rows = np.flatnonzero(np.isin(trace.kind, _HOST_KINDS) & hit[trace.name_id])
    return rows, number[trace.name_id[rows]]


def mark_step_ranges(trace: Trace, name: str | None, *, auto: bool, what: str) -> Trace:
    """Rename the ranges that delimit steps to `ProfilerStep#N`; a new Trace, or `trace` itself.

    Args:
        trace: any trace.
        name: the range name chosen by the user (`--step-range`); None to keep the trace's own
            `ProfilerStep#N`, or with `auto` to look for one of `AUTO_STEP_NAMES`.
        auto: without `name` and without `ProfilerStep#N` ranges, take the first of
            `AUTO_STEP_NAMES` that the trace has.
        what: what the ranges are, for the warnings ("NVTX ranges", "annotations").

    Returns:
        The trace with renamed rows and a warning that says which ranges delimit the steps.
        With `name`, other `ProfilerStep#N` rows (host or GPU) are renamed so that they no
        longer count as steps.
    """
    if name is None:
        if not auto:
            return trace
        is_step = trace.name_mask(lambda text: _PROFILER_STEP.match(text) is not None)
        existing = np.isin(trace.kind, _HOST_KINDS) & is_step[trace.name_id]
        if existing.any():
            note = f"steps: {int(existing.sum())} {what} named ProfilerStep#N delimit the steps"
            return dataclasses.replace(trace, warnings=[*trace.warnings, note])
        for candidate in AUTO_STEP_NAMES:
            rows, numbers = _matches(trace, candidate)
            if rows.shape[0]:
                return _rename(trace, rows, numbers, candidate, "found by name", what)
        return trace
    rows, numbers = _matches(trace, name)
    if rows.shape[0] == 0:
        note = (
            f"--step-range {name!r}: no {what} named so (or {name} followed by a number); "
            "steps are not marked"
        )
        return dataclasses.replace(trace, warnings=[*trace.warnings, note])
    return _rename(trace, rows, numbers, name, "--step-range", what, demote=True)


def _rename(
    trace: Trace,
    rows: npt.NDArray[np.intp],
    numbers: npt.NDArray[np.int64],
    name: str,
    source: str,
    what: str,
    *,
    demote: bool = False,
) -> Trace:
    order = np.argsort(trace.ts_ns[rows], kind="stable")
    rows, numbers = rows[order], numbers[order]
    example = trace.names[int(trace.name_id[rows[0]])]
    if (numbers < 0).any() or np.unique(numbers).shape[0] != numbers.shape[0]:
        numbers = np.arange(rows.shape[0], dtype=np.int64)
    names = list(trace.names)
    if demote:
        # The trace's own ProfilerStep#N (a Kineto trace given --step-range) no longer count.
        for i, text in enumerate(names):
            if _PROFILER_STEP.match(name_head(text)):
                names[i] = f"{text} (not a step: --step-range {name})"
    index = {text: i for i, text in enumerate(names)}
    name_id = trace.name_id.copy()
    new_ids = []
    for n in numbers.tolist():
        text = f"ProfilerStep#{n}"
        if text not in index:
            index[text] = len(names)
            names.append(text)
        new_ids.append(index[text])
    name_id[rows] = np.asarray(new_ids, dtype=np.int32)
    note = (
        f"steps: {rows.shape[0]} {what} matching {name!r} ({source}; first {example!r}) "
        f"delimit the steps, analysed as ProfilerStep#{int(numbers[0])} to #{int(numbers[-1])}"
    )
    return dataclasses.replace(
        trace, name_id=name_id, names=names, warnings=[*trace.warnings, note]
    )
