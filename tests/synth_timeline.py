"""One synthetic timeline, written both as a Kineto trace and as an Nsight Systems SQLite export.

A `Timeline` lists what a training run did in integer microseconds relative to the start of the
capture: host ranges (steps, `record_function`/NVTX annotations, DataLoader fetches), CUDA
runtime calls that launch kernels, memcpys and memsets on a GPU, and blocking synchronizations.
`write_kineto` writes it through `synth.TraceBuilder` the way the PyTorch profiler would;
`write_nsys` writes the same events into the tables `nsys export --type sqlite` produces
(the subset of export schema 3.20 that a CUDA + NVTX + OSRT capture fills), or with
`legacy=True` in the older layout (NVTX text inline, no `ENUM_*` or `META_DATA_EXPORT` tables,
no `eventClass`, `TARGET_INFO_CUDA_GPU`, kernels with a base name only).

The nsys writer does not use badput's reader tables: memcpy and memset names are spelled out
here (`KINETO_COPY`) with the values nsys writes, so a wrong mapping in the reader shows up as
a different breakdown.

Run `python tests/synth_timeline.py` for a self-check.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from synth import H100, NCCL_ALLREDUCE, TraceBuilder

__all__ = ["KINETO_COPY", "Launch", "Timeline", "standard_timeline", "write_kineto", "write_nsys"]

#: Session start of the nsys export (ns since the epoch).
SESSION_START_NS = 1_754_324_972_242_076_786

#: Kineto's memcpy/memset names -> (copyKind, srcKind, dstKind) or (memKind,) as nsys writes
#: them: ENUM_CUDA_MEMCPY_OPER (1 HtoD, 2 DtoH, 8 DtoD) and nsys's ENUM_CUDA_MEM_KIND
#: (0 Pageable, 1 Pinned, 2 Device).
KINETO_COPY: dict[str, tuple[int, ...]] = {
    "Memcpy HtoD (Pageable -> Device)": (1, 0, 2),
    "Memcpy DtoH (Device -> Pinned)": (2, 2, 1),
    "Memcpy DtoD (Device -> Device)": (8, 2, 2),
    "Memset (Device)": (2,),
}

# CUDA API version suffixes nsys appends to runtime call names.
_NSYS_API = {
    "cudaLaunchKernel": "cudaLaunchKernel_v7000",
    "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
    "cudaMemsetAsync": "cudaMemsetAsync_v3020",
    "cudaDeviceSynchronize": "cudaDeviceSynchronize_v3020",
    "cudaStreamSynchronize": "cudaStreamSynchronize_v3020",
}
_API = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}
_GLOBAL_PID_BASE = 1 << 48  # the high bits nsys sets in every serialized global id


@dataclass(frozen=True)
class Launch:
    """A runtime call on the host at `cpu` that put `name` on the GPU at `gpu` (us)."""

    name: str
    cpu: tuple[int, int]
    gpu: tuple[int, int]
    kind: str = "kernel"  # kernel, memcpy or memset
    stream: int = 7
    nbytes: int = 1 << 20


@dataclass
class Timeline:
    """What one process did on one GPU, in microseconds from the start of the capture."""

    pid: int = 4242
    tid: int = 4242
    device: int = 0
    gpu_name: str = H100
    steps: list[tuple[str, int, int]] = field(default_factory=list)  # (range text, start, end)
    annotations: list[tuple[str, int, int]] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    syncs: list[tuple[str, int, int]] = field(default_factory=list)  # (runtime call, start, end)


def standard_timeline(steps: int = 3, step_text: str = "ProfilerStep#{}") -> Timeline:
    """`steps` steps of 1 ms: DataLoader, forward, a GEMM and an elementwise kernel, a pageable
    HtoD copy, a memset, an NCCL all-reduce on its own stream, then a device synchronize.

    Per step (us from the step start): compute kernels 40-340 and 340-400 (360 us), copy
    420-470, memset 485-490, all-reduce 510-700, the step's host span 0-950.
    """
    t = Timeline()
    for k in range(steps):
        b = 1000 * k
        t.steps.append((step_text.format(k), b, b + 950))
        t.annotations.append(
            ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", b + 1, b + 15)
        )
        t.annotations.append(("forward", b + 16, b + 400))
        t.launches += [
            Launch("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", (b + 20, b + 30),
                   (b + 40, b + 340)),
            Launch("void at::native::vectorized_elementwise_kernel<4>(int, float*)",
                   (b + 50, b + 55), (b + 340, b + 400)),
            Launch("Memcpy HtoD (Pageable -> Device)", (b + 410, b + 415), (b + 420, b + 470),
                   kind="memcpy"),
            Launch("Memset (Device)", (b + 480, b + 482), (b + 485, b + 490), kind="memset",
                   nbytes=4096),
            Launch(NCCL_ALLREDUCE, (b + 500, b + 505), (b + 510, b + 700), stream=20),
        ]  # fmt: skip
        t.syncs.append(("cudaDeviceSynchronize", b + 700, b + 900))
    return t


def write_kineto(t: Timeline, path: str | Path) -> Path:
    """The timeline as a PyTorch profiler trace (modern schema)."""
    b = TraceBuilder(pid=t.pid, tid=t.tid, device=t.device)
    b.device_properties([t.device], t.gpu_name)
    for text, start, end in t.steps:
        b.annotation(text, start, end)
    for text, start, end in t.annotations:
        b.annotation(text, start, end)
    for launch in t.launches:
        b.launch(launch.name, cpu=launch.cpu, gpu=launch.gpu, kind=launch.kind,
                 stream=launch.stream, api=_API[launch.kind])  # fmt: skip
        if launch.kind != "kernel":
            b.events[-3]["args"]["bytes"] = launch.nbytes  # the GPU event, before its 2 flows
    for name, start, end in t.syncs:
        b.runtime(name, start, end)
        b.cuda_sync("Context Sync", start, end)
    return b.write(path)


_SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
  registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, blockX INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
  copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
  bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
  nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL,
  end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
  greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  deprecatedSyncType INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL,
  eventSyncId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL,
  returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER NOT NULL);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT,
  busLocation TEXT, cuDevice INTEGER);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT,
  localTime TEXT);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
"""

# Older exports (nsys 2020.x): no enums or export metadata, NVTX text inline, no eventClass,
# the GPU table keyed by deviceId, kernels with a base name only.
_LEGACY_SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
  correlationId INTEGER, globalPid INTEGER, shortName INTEGER NOT NULL,
  registersPerThread INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
  correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
  srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
  correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
  memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
  returnValue INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL,
  end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  syncType INTEGER NOT NULL, eventId INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER);
CREATE TABLE TARGET_INFO_CUDA_GPU (deviceId INTEGER NOT NULL, name TEXT);
"""

_ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_NSYS_EVENT_TYPE": [
        (34, "NvtxMark", "NvtxMark"),
        (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"),
        (75, "NvtxDomainCreate", "NvtxDomainCreate"),
    ],
}


class _Strings(dict[str, int]):
    def __missing__(self, key: str) -> int:
        self[key] = len(self)
        return self[key]


def write_nsys(t: Timeline, path: str | Path, *, legacy: bool = False) -> Path:
    """The timeline as an Nsight Systems SQLite export (schema 3.20 subset, or `legacy`)."""
    path = Path(path)
    ns = 1000  # the timeline is in us; nsys writes ns from the session start
    global_pid = _GLOBAL_PID_BASE | (t.pid << 24)
    global_tid = global_pid | t.tid
    s = _Strings()
    kernels, memcpys, memsets, runtime, syncs, nvtx = [], [], [], [], [], []
    corr = 0
    for launch in t.launches:
        corr += 1
        api = _NSYS_API[_API[launch.kind]]
        runtime.append((launch.cpu[0] * ns, launch.cpu[1] * ns, 0, global_tid, corr, s[api], 0))
        g0, g1 = launch.gpu[0] * ns, launch.gpu[1] * ns
        head = (g0, g1, t.device, 1, launch.stream, corr, global_pid)
        if launch.kind == "kernel":
            # nsys's base name is the function name without template or parameters.
            short = launch.name.split("(")[0].split("<")[0].split()[-1]
            kernels.append((*head, s[launch.name], s[short]))
        elif launch.kind == "memcpy":
            memcpys.append((*head, launch.nbytes, *KINETO_COPY[launch.name]))
        else:
            memsets.append((*head, 0, launch.nbytes, *KINETO_COPY[launch.name]))
    for name, start, end in t.syncs:
        corr += 1
        runtime.append((start * ns, end * ns, 0, global_tid, corr, s[_NSYS_API[name]], 0))
        syncs.append((start * ns, end * ns, t.device, 1, 0xFFFFFFFF, corr, global_pid, 4))
    for text, start, end in t.steps + t.annotations:
        nvtx.append((start * ns, end * ns, 59, text, global_tid))
    nvtx.append((-5 * ns, None, 75, "NVTX domain", global_tid))  # not a range: skipped
    nvtx.append((3 * ns, None, 34, "a mark", global_tid))  # a mark: skipped

    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(_LEGACY_SCHEMA if legacy else _SCHEMA)
    q = "INSERT INTO {} VALUES ({})".format
    if legacy:
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,32)",
            [(*k[:7], k[8]) for k in kernels],
        )
        conn.executemany(q("CUPTI_ACTIVITY_KIND_MEMCPY", ",".join("?" * 11)), memcpys)
        conn.executemany(q("CUPTI_ACTIVITY_KIND_MEMSET", ",".join("?" * 10)), memsets)
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)",
            [(r[0], r[1], r[3], r[4], r[5], r[6]) for r in runtime],
        )
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?,-1)", syncs
        )
        conn.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?,?,?,?,?)",
            nvtx,
        )
        conn.execute("INSERT INTO TARGET_INFO_CUDA_GPU VALUES (?, ?)", (t.device, t.gpu_name))
    else:
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,NULL,?,?,?,?,?,NULL,32,80,256)",
            kernels,
        )
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,NULL,?,?,?,?,?,NULL,?,?)",
            memcpys,
        )
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,NULL,?,?,?,?,?,NULL,?)",
            memsets,
        )
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,NULL)", runtime
        )
        conn.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
            "VALUES (?,?,?,?,NULL,?,?,?,NULL,?,-1,NULL)",
            syncs,
        )
        # Registered strings go to StringIds (textId), others inline (text), as nsys does.
        rows = [
            (a, b, kind, None, s[text], tid) if text.startswith("ProfilerStep") else
            (a, b, kind, text, None, tid)
            for a, b, kind, text, tid in nvtx
        ]  # fmt: skip
        conn.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid) "
            "VALUES (?,?,?,?,?,?)",
            rows,
        )
        conn.execute(
            "INSERT INTO OSRT_API VALUES (?,?,27,?,?,0,0,0)",
            (2 * ns, 3 * ns, global_tid, s["pthread_mutex_lock"]),
        )
        conn.execute(
            "INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, '0000:00:04.0', 0)",
            (_GLOBAL_PID_BASE, t.device, t.gpu_name),
        )
        conn.execute(
            "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (SESSION_START_NS,)
        )
        conn.executemany(
            "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
            [("EXPORT_PRODUCT_VERSION", "2025.3.1.90"), ("EXPORT_SCHEMA_VERSION", "3.20.2")],
        )
        conn.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (global_pid, t.pid))
        conn.execute("INSERT INTO ThreadNames VALUES (?, 20, ?)", (s["python3"], global_tid))
        for table, values in _ENUMS.items():
            conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", values)
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in s.items()])
    conn.commit()
    conn.close()
    return path


def _self_check() -> None:
    import tempfile

    t = standard_timeline()
    with tempfile.TemporaryDirectory() as tmp:
        for legacy in (False, True):
            path = write_nsys(t, Path(tmp) / f"t{int(legacy)}.sqlite", legacy=legacy)
            conn = sqlite3.connect(path)
            (n,) = conn.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
            assert n == 9, n
            conn.close()
        text = write_kineto(t, Path(tmp) / "t.json").read_text()
        assert text.count('"cat": "kernel"') == 9
    print("synth_timeline self-check ok")


if __name__ == "__main__":
    _self_check()
