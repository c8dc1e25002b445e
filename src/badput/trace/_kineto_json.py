"""The JSON shapes of a Kineto trace (msgspec structs and decoders) and their value conversions.

Private to `badput.trace.kineto`: the typed structs each event piece decodes into, the lenient
raw structs for events the typed path rejects, the category and phase tables, and the small
functions that turn raw JSON values (ids, labels, numbers as text, NCCL metadata) into what the
columns hold.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from badput._text import is_ascii_digits
from badput.trace.model import NO_ID, EventKind, FlowPhase

_EMPTY = msgspec.Raw(b"")
_MISSING = np.iinfo(np.int64).min  # ts of an event without one
_DROP = -1  # kind of rows the model does not keep (instant, metadata, counter events)

# Kineto category (lower-cased) -> kind. Both the modern and the 2021 spellings appear here.
_KIND_BY_CATEGORY: dict[str, EventKind] = {
    "kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
    "cuda_runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "python_function": EventKind.PYTHON,
    "python": EventKind.PYTHON,
    "cuda_sync": EventKind.SYNC,
}

# Kinds recorded on the GPU: their device and stream come from args, else pid and tid.
_GPU_SIDE = np.array(
    [
        int(k)
        for k in (
            EventKind.KERNEL,
            EventKind.MEMCPY,
            EventKind.MEMSET,
            EventKind.GPU_ANNOTATION,
            EventKind.SYNC,
        )
    ],
    dtype=np.int8,
)

_PHASE_BY_PH: dict[str, int] = {
    "X": int(FlowPhase.COMPLETE),
    "s": int(FlowPhase.FLOW_START),
    "f": int(FlowPhase.FLOW_END),
    "t": int(FlowPhase.FLOW_STEP),
    "i": int(FlowPhase.INSTANT),
    "I": int(FlowPhase.INSTANT),
}

_STREAM_LABEL = re.compile(r"^\s*stream\s+(-?\d+)\s*$", re.IGNORECASE)


class _Args(msgspec.Struct, frozen=True, gc=False):
    device: int = NO_ID
    stream: int = NO_ID
    correlation: int = NO_ID
    external_id: int = msgspec.field(default=NO_ID, name="External id")
    external_id_lower: int = msgspec.field(default=NO_ID, name="external id")
    bytes: int = NO_ID
    alloc_bytes: int = msgspec.field(default=NO_ID, name="Bytes")
    total_allocated: int = msgspec.field(default=NO_ID, name="Total Allocated")
    total_reserved: int = msgspec.field(default=NO_ID, name="Total Reserved")
    device_id: int = msgspec.field(default=NO_ID, name="Device Id")
    device_type: int = msgspec.field(default=NO_ID, name="Device Type")
    # Only marks NCCL metadata (any JSON type); `_comm_values` reads it from the args text.
    # One field, not six: each field makes msgspec's lookup of every other key slower.
    collective_name: msgspec.Raw = msgspec.field(default=_EMPTY, name="Collective name")
    # Shape arguments (record_shapes=True), the lists raw: `_piece_ops` keeps their text.
    input_dims: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=_EMPTY, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_EMPTY, name="Concrete Inputs")
    sequence: int = msgspec.field(default=NO_ID, name="Sequence number")
    fwd_tid: int = msgspec.field(default=NO_ID, name="Fwd thread id")


_NO_ARGS = _Args()
_PRESENT = msgspec.Raw(b"true")


def _int64(value: int) -> int:
    """An integer msgspec decoded (any size); NO_ID beyond int64."""
    return value if -(2**63) <= value < 2**63 else NO_ID


class _CommArgs(msgspec.Struct, frozen=True, gc=False):
    """The NCCL metadata of an args object, every value raw (judged in `_comm_values`)."""

    collective_name: msgspec.Raw = msgspec.field(default=_EMPTY, name="Collective name")
    in_nelems: msgspec.Raw = msgspec.field(default=_EMPTY, name="In msg nelems")
    out_nelems: msgspec.Raw = msgspec.field(default=_EMPTY, name="Out msg nelems")
    group_size: msgspec.Raw = msgspec.field(default=_EMPTY, name="Group size")
    dtype: msgspec.Raw = _EMPTY
    process_group: msgspec.Raw = msgspec.field(default=_EMPTY, name="Process Group Name")


class _WaitArgs(msgspec.Struct, frozen=True, gc=False):
    """Which record a cuda_sync row waited on (Kineto's `Event Sync` / `Stream Wait Event`)."""

    record_correlation: msgspec.Raw = msgspec.field(
        default=_EMPTY, name="wait_on_cuda_event_record_corr_id"
    )
    record_stream: msgspec.Raw = msgspec.field(default=_EMPTY, name="wait_on_stream")


def _wait_values(args_text: bytes) -> tuple[int, int] | None:
    """(record correlation id, recorded stream) of a cuda_sync row; None without either."""
    try:
        args = _decode_wait_args(args_text)
    except msgspec.MsgspecError:  # not an object
        return None
    corr, stream = _raw_int(args.record_correlation), _raw_int(args.record_stream)
    if corr == NO_ID and stream == NO_ID:
        return None
    return corr, stream


class _ArgsOnly(msgspec.Struct, gc=False):
    args: msgspec.Raw = _EMPTY


#: One row's NCCL metadata: collective name, in/out elements, group size, dtype, group name.
_CommValues = tuple[str, int, int, int, str | None, str | None]


def _comm_values(args_text: bytes) -> _CommValues | None:
    """The NCCL metadata in one event's args text; None without a non-empty "Collective name"."""
    try:
        args = _decode_comm_args(args_text)
    except msgspec.MsgspecError:  # not an object
        return None
    name = _raw_str(args.collective_name)
    if not name:
        return None
    return (
        name,
        _raw_int(args.in_nelems),
        _raw_int(args.out_nelems),
        _raw_int(args.group_size),
        _raw_str(args.dtype),
        _raw_str(args.process_group),
    )


def _raw_str(raw: msgspec.Raw) -> str | None:
    if not raw:
        return None
    value = _safe_decode(raw)
    return value if isinstance(value, str) else None


def _raw_int(raw: msgspec.Raw) -> int:
    return _as_int(_safe_decode(raw)) if raw else NO_ID


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = NO_ID
    tid: int | str = NO_ID
    ts: msgspec.Raw = _EMPTY
    dur: msgspec.Raw = _EMPTY
    id: int | str = NO_ID
    args: _Args = _NO_ARGS


class _RawEvent(msgspec.Struct, gc=False):
    """Every field kept as raw JSON: the lenient path for events the typed path rejects."""

    ph: msgspec.Raw = _EMPTY
    cat: msgspec.Raw = _EMPTY
    name: msgspec.Raw = _EMPTY
    pid: msgspec.Raw = _EMPTY
    tid: msgspec.Raw = _EMPTY
    ts: msgspec.Raw = _EMPTY
    dur: msgspec.Raw = _EMPTY
    id: msgspec.Raw = _EMPTY
    args: msgspec.Raw = _EMPTY


class _Document(msgspec.Struct):
    """The top level of a trace file, events left undecoded."""

    traceEvents: msgspec.Raw = _EMPTY
    deviceProperties: msgspec.Raw = _EMPTY
    computeProperties: msgspec.Raw = _EMPTY
    distributedInfo: msgspec.Raw = _EMPTY
    baseTimeNanoseconds: msgspec.Raw = _EMPTY
    cuda_runtime_version: msgspec.Raw = _EMPTY
    cuda_driver_version: msgspec.Raw = _EMPTY


_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_comm_args = msgspec.json.Decoder(_CommArgs).decode
_decode_wait_args = msgspec.json.Decoder(_WaitArgs).decode
_decode_args_only = msgspec.json.Decoder(list[_ArgsOnly]).decode
_decode_raw_events = msgspec.json.Decoder(list[_RawEvent]).decode
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_document = msgspec.json.Decoder(_Document).decode
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def _as_str(raw: msgspec.Raw) -> str:
    if not raw:
        return ""
    value = _decode_any(raw)
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _as_id(raw: msgspec.Raw) -> int | str:
    if not raw:
        return NO_ID
    value = _decode_any(raw)
    return value if isinstance(value, str) else _as_int(value)


def _as_number_text(raw: msgspec.Raw) -> msgspec.Raw:
    """The JSON text of a time field; a quoted number is unquoted; anything else is invalid."""
    if not raw:
        return _EMPTY
    text = bytes(raw).strip()
    if text.startswith(b'"') and text.endswith(b'"') and len(text) >= 2:
        text = text[1:-1].strip()
    if text in (b"null", b"true", b"false") or text[:1] in (b"{", b"["):
        return msgspec.Raw(b"?")  # parsed as invalid
    return msgspec.Raw(text)


def _as_int(value: object) -> int:
    """An integer field of any JSON type as int64; NO_ID where it holds no integer."""
    if isinstance(value, bool) or value is None:
        return NO_ID
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else NO_ID
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, str) and is_ascii_digits(value.strip().lstrip("-")):
        return _as_int(int(value.strip()))
    return NO_ID


def _as_args(raw: msgspec.Raw) -> _Args:
    if not raw:
        return _NO_ARGS
    value = _decode_any(raw)
    if not isinstance(value, dict):
        return _NO_ARGS
    return _Args(
        device=_as_int(value.get("device")),
        stream=_as_int(value.get("stream")),
        correlation=_as_int(value.get("correlation")),
        external_id=_as_int(value.get("External id")),
        external_id_lower=_as_int(value.get("external id")),
        bytes=_as_int(value.get("bytes")),
        alloc_bytes=_as_int(value.get("Bytes")),
        total_allocated=_as_int(value.get("Total Allocated")),
        total_reserved=_as_int(value.get("Total Reserved")),
        device_id=_as_int(value.get("Device Id")),
        device_type=_as_int(value.get("Device Type")),
        collective_name=_PRESENT if "Collective name" in value else _EMPTY,
        input_dims=_encoded_list(value.get("Input Dims")),
        input_type=_encoded_list(value.get("Input type")),
        input_strides=_encoded_list(value.get("Input Strides")),
        concrete_inputs=_encoded_list(value.get("Concrete Inputs")),
        sequence=_as_int(value.get("Sequence number")),
        fwd_tid=_as_int(value.get("Fwd thread id")),
    )


def _encoded_list(value: object) -> msgspec.Raw:
    """A decoded shape-argument list as JSON text again; `_EMPTY` for anything else."""
    return msgspec.Raw(_encode(value)) if isinstance(value, list) else _EMPTY


def _safe_decode(raw: msgspec.Raw) -> object:
    try:
        return _decode_any(raw)
    except msgspec.DecodeError:
        return None
