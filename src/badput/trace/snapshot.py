"""CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot`), read safely.

A snapshot is a pickle of plain dicts, lists, strings and numbers (PyTorch's
`torch/cuda/memory.py`, `_snapshot`). A pickle can name any Python callable and have it
called while loading, so `load_snapshot` uses an unpickler that refuses every global
(`GLOBAL`, `STACK_GLOBAL`, `INST`, the copyreg extension opcodes `EXT1/2/4`) and every
persistent id: nothing in the file is ever imported or called. The loaded dicts are then
turned into typed, columnar data (one numpy row per trace entry), each entry's frames reduced
to a source site and a stack kind (`site_of`, `stack_kind`).
"""

from __future__ import annotations

import copyreg
import gzip
import io
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

import numpy as np
import numpy.typing as npt

from badput.errors import TraceFormatError
from badput.trace._files import require_regular_file
from badput.trace._limits import BoundedReader, held_bytes_limit
from badput.trace.model import NO_ID

__all__ = [
    "ACTIONS",
    "Annotation",
    "Block",
    "DeviceTrace",
    "Segment",
    "Snapshot",
    "load_snapshot",
    "parse_snapshot",
    "safe_unpickle",
    "site_of",
    "stack_kind",
]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

#: Trace-entry actions of the caching allocator, by code (`TraceEntry.action` in
#: `torch/cuda/memory.py`; `segment_map`/`segment_unmap` come from expandable segments).
ACTIONS: tuple[str, ...] = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
)
_ACTION_CODE = {a: i for i, a in enumerate(ACTIONS)}
OTHER_ACTION = len(ACTIONS)  # an action this reader does not know; counted, never replayed

#: Site of an entry without any frame (recorded with `stacks=None`, or an allocation from a
#: thread without Python, such as the autograd engine's).
UNKNOWN_SITE = "<unknown>"

_NATIVE_SUFFIXES = (".cpp", ".cc", ".cu", ".cuh", ".c", ".h", ".hpp", ".so")
_PICKLE_SHARE = 8
_GZIP_MAGIC = b"\x1f\x8b"


class _Refused(pickle.UnpicklingError):
    """A pickle asked for something a snapshot never holds (a global, a persistent id)."""


class _SafeUnpickler(pickle.Unpickler):
    """The C unpickler with every route to a Python object other than plain data closed.

    Only `find_class` can produce a callable or a class for `REDUCE`, `BUILD`, `NEWOBJ` or
    `OBJ`; it refuses all. The extension opcodes also go through `find_class`, except for a
    code already in `copyreg`'s cache: `safe_unpickle` then uses `_PySafeUnpickler`.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"refers to the Python global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("uses a persistent id")


def _refuse_extension(_unpickler: Any) -> None:
    raise _Refused("uses a copyreg extension code (a reference to a Python global)")


_SAFE_DISPATCH: dict[int, Any] = {
    **pickle._Unpickler.dispatch,
    **{op[0]: _refuse_extension for op in (pickle.EXT1, pickle.EXT2, pickle.EXT4)},
}


class _PySafeUnpickler(pickle._Unpickler):
    """The pure-Python unpickler with the extension opcodes refused before any lookup."""

    dispatch: ClassVar[dict[int, Any]] = _SAFE_DISPATCH

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"refers to the Python global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("uses a persistent id")


def safe_unpickle(f: IO[bytes]) -> Any:
    """Load a pickle of plain data; refuse any reference to a Python global.

    Args:
        f: a binary file positioned at the pickle.

    Returns:
        The dicts, lists, tuples, strings, bytes and numbers the pickle holds.

    Raises:
        pickle.UnpicklingError: the pickle refers to a global, a persistent id or an extension
            code (nothing was imported or called), or is malformed.
        EOFError: the pickle ends early.
    """
    # A code already in copyreg's cache would bypass find_class in the C unpickler.
    registered = bool(copyreg._extension_registry) or bool(copyreg._extension_cache)  # type: ignore[attr-defined]
    unpickler = _PySafeUnpickler(f) if registered else _SafeUnpickler(f)
    return unpickler.load()


def load_snapshot(path: str) -> Snapshot:
    """Read a memory snapshot pickle (optionally gzip-compressed) without executing anything.

    Args:
        path: the `.pickle` file `torch.cuda.memory._dump_snapshot` wrote.

    Returns:
        The typed snapshot.

    Raises:
        TraceFormatError: missing file, not a regular file, not a pickle, truncated, refers to
            a Python global, or not a memory snapshot.

    Example:
        >>> load_snapshot("snapshot.pickle").segments[0].total_size  # doctest: +SKIP
        20971520
    """
    require_regular_file(path)  # a FIFO or a device would block the read below
    head = b""
    try:
        with open(path, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head == _GZIP_MAGIC:
                # Bounded: an unpickler takes its objects whole, so a gzip bomb would be
                # inflated into memory before anything could be said about it. Unpickled
                # objects take several times the bytes of their pickle: an eighth of the limit.
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    bounded = BoundedReader(gz, path, held_bytes_limit(_PICKLE_SHARE))
                    data = safe_unpickle(io.BufferedReader(bounded))
            else:
                data = safe_unpickle(raw)
    except TraceFormatError:
        raise  # the inflate limit
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, not a snapshot file") from None
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile) or "gzip" in str(e).lower():
            raise TraceFormatError(path, f"not a readable gzip file ({e})") from None
        raise TraceFormatError(path, f"cannot read: {e.strerror or e}") from None
    except _Refused as e:
        raise TraceFormatError(
            path,
            f"refused: the pickle {e}; a memory snapshot holds only plain data, so "
            "nothing was loaded or run",
        ) from None
    except EOFError:
        what = "the gzip-compressed pickle" if head == _GZIP_MAGIC else "the pickle"
        raise TraceFormatError(path, f"truncated: {what} ends early") from None
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError) as e:
        raise TraceFormatError(path, f"not a pickle ({type(e).__name__}: {e})") from None
    except (MemoryError, RecursionError) as e:
        raise TraceFormatError(path, f"cannot be loaded ({type(e).__name__})") from None
    except Exception as e:  # a malformed pickle can fail in many ways; none is ours to show
        raise TraceFormatError(path, f"not a pickle ({type(e).__name__}: {e})") from None
    return parse_snapshot(data, path)


@dataclass(frozen=True)
class Block:
    """A piece of a segment: allocated to a tensor, waiting to be freed, or free.

    Attributes:
        address: device address.
        size: bytes the allocator set aside (rounded up).
        requested_size: bytes the caller asked for.
        state: `active_allocated`, `active_pending_free` (`active_awaiting_free` in older
            versions) or `inactive` (free).
        site: index into `Snapshot.sites` of the allocation's source site.
        kind: index into `Snapshot.kinds` of the allocation's stack kind.
    """

    address: int
    size: int
    requested_size: int
    state: str
    site: int
    kind: int

    @property
    def active(self) -> bool:
        """Whether the block holds memory that cannot be reused yet."""
        return self.state != "inactive"


@dataclass(frozen=True)
class Segment:
    """One cudaMalloc (or one expandable segment) of the caching allocator, at snapshot time."""

    device: int
    address: int
    total_size: int
    stream: int
    segment_type: str
    is_expandable: bool
    blocks: list[Block]


@dataclass(frozen=True, eq=False)
class DeviceTrace:
    """The allocator's history on one device, one row per trace entry, oldest first.

    Attributes:
        device: CUDA device index.
        action: code into `ACTIONS` (`OTHER_ACTION` for an unknown action).
        addr: device address (`NO_ID` for an OOM).
        size: bytes (requested bytes for alloc and free entries).
        time_us: entry time in microseconds (`time_us` of newer PyTorch), `NO_ID` without.
        site: index into `Snapshot.sites`.
        kind: index into `Snapshot.kinds`.
    """

    device: int
    action: I8
    addr: I64
    size: I64
    time_us: I64
    site: I32
    kind: I32

    def __len__(self) -> int:
        """Number of entries."""
        return int(self.action.shape[0])

    @property
    def has_times(self) -> bool:
        """Whether every entry has a time."""
        return len(self) > 0 and bool((self.time_us != NO_ID).all())


@dataclass(frozen=True)
class Annotation:
    """A user annotation recorded beside the trace (`external_annotations` of newer PyTorch)."""

    device: int
    name: str
    stage: str
    time_us: int


@dataclass(frozen=True, eq=False)
class Snapshot:
    """A memory snapshot: segments at dump time, the allocator history, annotations.

    Attributes:
        path: the file.
        segments: every segment of every device at the time of the dump.
        traces: the history of each device that has one.
        annotations: user annotations with times, oldest first.
        sites: interned source sites (`file:line:function`, see `site_of`).
        kinds: interned stack kinds (see `stack_kind`).
        allocator_settings: `allocator_settings` as strings (empty when absent).
        warnings: what was read past.
    """

    path: str
    segments: list[Segment]
    traces: list[DeviceTrace]
    annotations: list[Annotation]
    sites: list[str]
    kinds: list[str]
    allocator_settings: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def devices(self) -> list[int]:
        """Devices with a segment or a trace, ascending."""
        return sorted({s.device for s in self.segments} | {t.device for t in self.traces})

    def trace_of(self, device: int) -> DeviceTrace | None:
        """The history of one device; None when it has none."""
        return next((t for t in self.traces if t.device == device), None)


def _is_native(frame: Mapping[str, Any]) -> bool:
    filename = str(frame.get("filename", ""))
    return not filename or filename == "??" or filename.endswith(_NATIVE_SUFFIXES)


def _is_library(filename: str) -> bool:
    """Whether a Python file belongs to torch itself (its internals are never the answer)."""
    f = filename.replace("\\", "/")
    return "/torch/" in f or f.startswith("torch/") or "/site-packages/torch" in f


def site_of(frames: Sequence[Mapping[str, Any]]) -> str:
    """The source site of an allocation: the innermost frame that is user code.

    Frames are innermost first. Skipped: native frames (no file, `??`, `.cpp`/`.h`/`.cu`/...)
    and Python files inside the torch package. When every frame is skipped the innermost
    Python frame is used, then the innermost frame at all; without frames `<unknown>`.

    Args:
        frames: the entry's `frames` (dicts with `filename`, `line`, `name`).

    Returns:
        `file:line:function`.
    """
    python: Mapping[str, Any] | None = None
    for frame in frames:
        if _is_native(frame):
            continue
        if python is None:
            python = frame
        if not _is_library(str(frame.get("filename", ""))):
            return _fmt(frame)
    if python is not None:
        return _fmt(python)
    return _fmt(frames[0]) if frames else UNKNOWN_SITE


def _fmt(frame: Mapping[str, Any]) -> str:
    return f"{frame.get('filename', '??')}:{frame.get('line', 0)}:{frame.get('name', '??')}"


def stack_kind(frames: Sequence[Mapping[str, Any]]) -> str:
    """What the program was doing when it allocated, from the whole stack.

    `optimizer`: a frame in a file whose path names an optimizer (`torch/optim/`, a user
    `optimizer.py`); `backward`: a frame named `backward`, in `torch/autograd/`, or the
    autograd engine's native frames; `forward`: a frame named `forward` (a module's forward);
    `other` otherwise; `unknown` without frames. Checked in this order: an optimizer step
    inside a backward hook counts as optimizer.
    """
    if not frames:
        return "unknown"
    backward = forward = False
    for frame in frames:
        filename = str(frame.get("filename", "")).replace("\\", "/")
        name = str(frame.get("name", ""))
        if not _is_native(frame) and (
            "/optim/" in filename or "optim" in filename.rsplit("/", 1)[-1]
        ):
            return "optimizer"
        if name == "backward" or "/torch/autograd/" in filename or "autograd::Engine" in name:
            backward = True
        elif name == "forward":
            forward = True
    if backward:
        return "backward"
    return "forward" if forward else "other"


class _Interner:
    """Strings to indices, and frames lists to (site, kind), cached by the frames' identity.

    PyTorch symbolizes each distinct frame once and shares it between entries, so the pickle
    memo gives the same dict objects back: caching on the frames list's first frames' ids
    keeps a 100k-entry trace fast.
    """

    def __init__(self) -> None:
        self.sites: list[str] = []
        self.kinds: list[str] = []
        self._site_ids: dict[str, int] = {}
        self._kind_ids: dict[str, int] = {}
        self._cache: dict[tuple[int, ...], tuple[int, int]] = {}
        self._lists: dict[int, tuple[int, int]] = {}
        self._keep: list[Any] = []  # the frames behind cached ids stay alive

    def _intern(self, table: list[str], ids: dict[str, int], value: str) -> int:
        i = ids.get(value)
        if i is None:
            i = ids[value] = len(table)
            table.append(value)
        return i

    def of(self, frames: Any) -> tuple[int, int]:
        # PyTorch shares one list per distinct traceback: most entries hit on the list itself.
        hit = self._lists.get(id(frames))
        if hit is not None:
            return hit
        if not isinstance(frames, list) or not all(isinstance(f, Mapping) for f in frames):
            frames = []
        key = tuple(id(f) for f in frames)
        hit = self._cache.get(key)
        if hit is None:
            site = self._intern(self.sites, self._site_ids, site_of(frames))
            kind = self._intern(self.kinds, self._kind_ids, stack_kind(frames))
            hit = self._cache[key] = (site, kind)
        self._keep.append(frames)
        self._lists[id(frames)] = hit
        return hit


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value:
        return int(value)
    return default


def parse_snapshot(data: Any, path: str = "<snapshot>") -> Snapshot:
    """Typed snapshot from the unpickled object (a dict, or a bare list of segments).

    Args:
        data: what `safe_unpickle` returned.
        path: the file, for messages.

    Raises:
        TraceFormatError: not a memory snapshot.
    """
    if isinstance(data, list) and all(isinstance(s, Mapping) and "blocks" in s for s in data):
        data = {"segments": data}  # `torch.cuda.memory_snapshot()`: the segments alone
    if not isinstance(data, Mapping):
        raise TraceFormatError(
            path, f"not a CUDA memory snapshot: the pickle holds a {type(data).__name__}"
        )
    if not isinstance(data.get("segments"), list):
        raise TraceFormatError(path, "not a CUDA memory snapshot: no 'segments' list")
    interner = _Interner()
    warnings: list[str] = []
    segments: list[Segment] = []
    for i, s in enumerate(data["segments"]):
        if not isinstance(s, Mapping) or not isinstance(s.get("blocks", []), list):
            raise TraceFormatError(path, f"not a CUDA memory snapshot: segment {i} is malformed")
        blocks = []
        for b in s.get("blocks", []):
            if not isinstance(b, Mapping):
                continue
            site, kind = interner.of(b.get("frames", []))
            size = _int(b.get("size"))
            blocks.append(
                Block(
                    address=_int(b.get("address")),
                    size=size,
                    requested_size=_int(b.get("requested_size"), size),
                    state=str(b.get("state", "inactive")),
                    site=site,
                    kind=kind,
                )
            )
        segments.append(
            Segment(
                device=_int(s.get("device")),
                address=_int(s.get("address")),
                total_size=_int(s.get("total_size")),
                stream=_int(s.get("stream")),
                segment_type=str(s.get("segment_type", "")),
                is_expandable=bool(s.get("is_expandable", False)),
                blocks=blocks,
            )
        )
    traces: list[DeviceTrace] = []
    device_traces = data.get("device_traces") or []
    if not isinstance(device_traces, list):
        raise TraceFormatError(path, "not a CUDA memory snapshot: 'device_traces' is not a list")
    unknown: set[str] = set()
    for device, entries in enumerate(device_traces):
        if not isinstance(entries, list) or not entries:
            continue
        n = len(entries)
        action = np.empty(n, np.int8)
        addr = np.empty(n, np.int64)
        sizes = np.empty(n, np.int64)
        time_us = np.empty(n, np.int64)
        sites = np.empty(n, np.int32)
        kinds = np.empty(n, np.int32)
        for j, e in enumerate(entries):
            if not isinstance(e, Mapping):
                raise TraceFormatError(
                    path, f"not a CUDA memory snapshot: trace entry {j} of device {device}"
                )
            name = str(e.get("action", ""))
            code = _ACTION_CODE.get(name, OTHER_ACTION)
            if code == OTHER_ACTION:
                unknown.add(name)
            action[j] = code
            addr[j] = _int(e.get("addr"), NO_ID)
            sizes[j] = _int(e.get("size"))
            time_us[j] = _int(e.get("time_us"), NO_ID)
            sites[j], kinds[j] = interner.of(e.get("frames", []))
        traces.append(DeviceTrace(device, action, addr, sizes, time_us, sites, kinds))
    if unknown:
        warnings.append(f"trace actions not replayed: {', '.join(sorted(unknown))}")
    annotations = _annotations(data.get("external_annotations", []))
    settings = data.get("allocator_settings", {})
    allocator_settings = (
        {str(k): str(v) for k, v in settings.items()} if isinstance(settings, Mapping) else {}
    )
    return Snapshot(
        path=path,
        segments=segments,
        traces=traces,
        annotations=annotations,
        sites=interner.sites,
        kinds=interner.kinds,
        allocator_settings=allocator_settings,
        warnings=warnings,
    )


def _annotations(raw: Any) -> list[Annotation]:
    """`external_annotations` entries with a name and a time; others are skipped."""
    if not isinstance(raw, list):
        return []
    out = []
    for a in raw:
        if not isinstance(a, Mapping):
            continue
        name = a.get("name")
        t = _int(a.get("time_us"), NO_ID)
        if not isinstance(name, str) or t == NO_ID:
            continue
        out.append(Annotation(_int(a.get("device")), name, str(a.get("stage", "START")), t))
    out.sort(key=lambda a: a.time_us)
    return out
