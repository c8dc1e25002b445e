"""Synthetic Kineto (PyTorch profiler) traces with exactly known answers.

`TraceBuilder` records host ops, ProfilerStep annotations, runtime launches paired with
kernels/memcpy/memset by correlation id, NCCL kernels, DataLoader spans and the top-level
metadata Kineto writes (`deviceProperties`, `distributedInfo`, ...), then writes them the way
Kineto does: one event per line inside `"traceEvents": [`, timestamps in microseconds with three
decimals (`1712195495519689.047`).

All times given to the builder are integers in `unit_ns` nanoseconds (default 1000, i.e. whole
microseconds), relative to `base_ns`. The default base is an epoch-like value so large that the
microsecond text does not survive a float64 round trip (above 2**50 us the spacing of doubles
is 0.25 us): a reader must parse the digits exactly to get the nanoseconds right.

Intervals are half-open `[start, end)` and given as `(start, end)`, not `(ts, dur)`, so that
hand-worked answers in the tests read as interval arithmetic.

Two schemas:
- `"modern"`: categories `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`, `cuda_driver`,
  `cpu_op`, `user_annotation`, `gpu_user_annotation`, `python_function`, `cuda_sync`; GPU events
  have `pid` = device, `tid` = stream; flows are `ac2g`.
- `"legacy"` (Kineto 2021): `Kernel`, `Memcpy`, `Memset`, `Runtime`, `Operator`, `Python`;
  `ProfilerStep#N` and DataLoader spans are `Operator`; GPU `tid` is `"stream 7"`, host `tid` a
  string; flows are `async`/`launch`; whole-microsecond times are written as integers.

Run `python tests/synth.py` for a self-check (writes a trace, loads it back with `json`).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "BASE_NS",
    "DATALOADER_NEXT",
    "DATALOADER_NEXT_MP",
    "DATAPIPE_NEXT",
    "H100",
    "NCCL_ALLREDUCE",
    "NCCL_ALLREDUCE_OLD",
    "NCCL_SENDRECV_OLD",
    "US",
    "TraceBuilder",
    "Us",
    "analyze_json",
    "run_cli",
]

#: Epoch-like trace base time in ns: 1712195495519689.047 us. ns > 2**53, and the us text
#: loses its fraction through float64.
BASE_NS = 1_712_195_495_519_689_047
#: Nanoseconds per microsecond (the default builder unit).
US = 1_000

H100 = "NVIDIA H100 80GB HBM3"
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_ALLREDUCE_OLD = (
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
)
NCCL_SENDRECV_OLD = (
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
)
DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DATALOADER_NEXT_MP = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
DATAPIPE_NEXT = "enumerate(DataPipe)#MapperIterDataPipe"

_CATS: dict[str, dict[str, str]] = {
    "modern": {
        "kernel": "kernel",
        "memcpy": "gpu_memcpy",
        "memset": "gpu_memset",
        "runtime": "cuda_runtime",
        "driver": "cuda_driver",
        "cpu_op": "cpu_op",
        "annotation": "user_annotation",
        "step": "user_annotation",
        "gpu_annotation": "gpu_user_annotation",
        "python": "python_function",
        "sync": "cuda_sync",
        "flow": "ac2g",
    },
    "legacy": {
        "kernel": "Kernel",
        "memcpy": "Memcpy",
        "memset": "Memset",
        "runtime": "Runtime",
        "driver": "Runtime",  # the 2021 schema has no driver category
        "cpu_op": "Operator",
        "annotation": "Operator",
        "step": "Operator",
        "gpu_annotation": "gpu_user_annotation",
        "python": "Python",
        "sync": "cuda_sync",
        "flow": "async",
    },
}

_DEFAULT_API = {
    "kernel": "cudaLaunchKernel",
    "memcpy": "cudaMemcpyAsync",
    "memset": "cudaMemsetAsync",
}
_CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cuLaunchKernel": 307,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaDeviceSynchronize": 165,
    "cudaStreamSynchronize": 131,
    "cudaStreamWaitEvent": 146,
    "cudaEventQuery": 138,
}


class Us:
    """A time in integer nanoseconds, written to JSON as microseconds with 3 decimals."""

    __slots__ = ("integer_us_ok", "ns")

    def __init__(self, ns: int, *, integer_us_ok: bool = False) -> None:
        if not isinstance(ns, int):
            raise TypeError(f"times must be integers, got {ns!r}")
        self.ns = ns
        self.integer_us_ok = integer_us_ok

    def text(self) -> str:
        sign = "-" if self.ns < 0 else ""
        whole, frac = divmod(abs(self.ns), 1000)
        if self.integer_us_ok and frac == 0:
            return f"{sign}{whole}"
        return f"{sign}{whole}.{frac:03d}"

    def __repr__(self) -> str:
        return f"Us({self.text()})"


def _dump(value: Any) -> str:
    if isinstance(value, Us):
        return value.text()
    return json.dumps(value)


def _dump_event(event: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in event.items()) + "}"


class TraceBuilder:
    """Collects events of one Kineto trace file; see the module docstring.

    Args:
        schema: "modern" or "legacy" (2021 categories).
        unit_ns: nanoseconds per time unit of every method (1000: whole microseconds).
        base_ns: absolute trace time of relative time 0.
        pid, tid: the host process and main thread.
        device: default GPU index of GPU events.
    """

    def __init__(
        self,
        schema: str = "modern",
        *,
        unit_ns: int = US,
        base_ns: int = BASE_NS,
        pid: int = 4242,
        tid: int = 4242,
        device: int = 0,
    ) -> None:
        if schema not in _CATS:
            raise ValueError(f"unknown schema {schema!r}")
        self.schema = schema
        self.unit_ns = unit_ns
        self.base_ns = base_ns
        self.pid = pid
        self.tid = tid
        self.device = device
        self.events: list[dict[str, Any]] = []
        self.top: dict[str, Any] = {}
        self.trace_name = "synthetic.pt.trace.json"
        self._next_corr = 100_000
        self._next_ext = 1
        self._gpu_threads: set[tuple[int, int]] = set()
        self._host_threads: set[tuple[int, int]] = {(pid, tid)}
        self._devices: set[int] = set()

    # ---- helpers -------------------------------------------------------------------------

    @property
    def legacy(self) -> bool:
        return self.schema == "legacy"

    def cat(self, kind: str) -> str:
        return _CATS[self.schema][kind]

    def t(self, units: int) -> Us:
        """Absolute time of a relative time in units."""
        return Us(self.base_ns + units * self.unit_ns, integer_us_ok=self.legacy)

    def d(self, start: int, end: int) -> Us:
        """Duration of [start, end) (negative when end < start: for bad-input tests)."""
        return Us((end - start) * self.unit_ns, integer_us_ok=self.legacy)

    def abs_us(self, units: int) -> float:
        """Absolute time of a relative time, in microseconds (correctly rounded float)."""
        return (self.base_ns + units * self.unit_ns) / 1000

    def _corr(self) -> int:
        self._next_corr += 1
        return self._next_corr

    def _ext(self) -> int:
        self._next_ext += 1
        return self._next_ext

    def _host_tid(self, tid: int | None) -> tuple[int, int | str]:
        real = self.tid if tid is None else tid
        self._host_threads.add((self.pid, real))
        return self.pid, (str(real) if self.legacy else real)

    def _gpu_tid(self, device: int, stream: int) -> int | str:
        self._gpu_threads.add((device, stream))
        self._devices.add(device)
        return f"stream {stream}" if self.legacy else stream

    def _x(
        self,
        kind: str,
        name: str,
        start: int,
        end: int,
        pid: int | str,
        tid: int | str,
        args: dict[str, Any] | None,
    ) -> dict[str, Any]:
        event: dict[str, Any] = {
            "ph": "X",
            "cat": self.cat(kind),
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": self.t(start),
            "dur": self.d(start, end),
        }
        if args is not None:
            event["args"] = args
        self.events.append(event)
        return event

    def _ext_key(self) -> str:
        return "external id" if self.legacy else "External id"

    # ---- host events ---------------------------------------------------------------------

    def cpu_op(self, name: str, start: int, end: int, *, tid: int | None = None) -> dict[str, Any]:
        """A `cpu_op` (`Operator`) on the host."""
        pid, t = self._host_tid(tid)
        return self._x("cpu_op", name, start, end, pid, t, {self._ext_key(): self._ext()})

    def annotation(
        self, name: str, start: int, end: int, *, tid: int | None = None
    ) -> dict[str, Any]:
        """A `record_function` span (`user_annotation`; `Operator` in the 2021 schema)."""
        pid, t = self._host_tid(tid)
        return self._x("annotation", name, start, end, pid, t, {self._ext_key(): self._ext()})

    def dataloader(
        self, start: int, end: int, *, name: str = DATALOADER_NEXT, tid: int | None = None
    ) -> dict[str, Any]:
        """The DataLoader `__next__` span."""
        return self.annotation(name, start, end, tid=tid)

    def python_frame(
        self, name: str, start: int, end: int, *, tid: int | None = None
    ) -> dict[str, Any]:
        """A Python stack frame (`python_function`; `Python` in the 2021 schema)."""
        pid, t = self._host_tid(tid)
        args = {"Python parent id": None, "Python id": self._ext()}
        return self._x("python", name, start, end, pid, t, args)

    def profiler_step(
        self,
        n: int,
        start: int,
        end: int,
        *,
        gpu: bool = False,
        device: int | None = None,
        stream: int = 7,
    ) -> dict[str, Any]:
        """`ProfilerStep#n` on the host, or with gpu=True the device-side annotation."""
        name = f"ProfilerStep#{n}"
        if gpu:
            dev = self.device if device is None else device
            tid = self._gpu_tid(dev, stream)
            return self._x("gpu_annotation", name, start, end, dev, tid, {"External id": 1})
        pid, t = self._host_tid(None)
        return self._x("step", name, start, end, pid, t, {self._ext_key(): self._ext()})

    def runtime(
        self,
        name: str,
        start: int,
        end: int,
        *,
        correlation: int | None = None,
        driver: bool = False,
        tid: int | None = None,
    ) -> int:
        """A CUDA runtime (or driver) call; returns its correlation id."""
        corr = self._corr() if correlation is None else correlation
        pid, t = self._host_tid(tid)
        args: dict[str, Any] = {self._ext_key(): self._ext(), "cbid": _CBID.get(name, 1)}
        args["correlation"] = corr
        self._x("driver" if driver else "runtime", name, start, end, pid, t, args)
        return corr

    def instant(self, name: str, at: int) -> dict[str, Any]:
        """A host instant event (e.g. `[memory]`)."""
        pid, t = self._host_tid(None)
        event: dict[str, Any] = {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": name,
            "pid": pid,
            "tid": t,
            "ts": self.t(at),
            "args": {"Total Allocated": 1003059712, "Bytes": 4608, "Device Id": self.device},
        }
        self.events.append(event)
        return event

    # ---- GPU events ----------------------------------------------------------------------

    def gpu(
        self,
        kind: str,
        name: str,
        start: int,
        end: int,
        *,
        stream: int = 7,
        device: int | None = None,
        correlation: int | None = None,
    ) -> dict[str, Any]:
        """A kernel, memcpy or memset on `device`/`stream` (no launch recorded unless given)."""
        if kind not in ("kernel", "memcpy", "memset"):
            raise ValueError(kind)
        dev = self.device if device is None else device
        tid = self._gpu_tid(dev, stream)
        corr = self._corr() if correlation is None else correlation
        args: dict[str, Any] = {}
        if kind == "kernel":
            args = {"queued": 0, "device": dev, "context": 1, "stream": stream}
            args["correlation"] = corr
            args[self._ext_key()] = corr
            args.update({"registers per thread": 32, "shared memory": 0, "grid": [80, 1, 1]})
            args.update({"block": [256, 1, 1], "est. achieved occupancy %": 50})
        else:
            args = {"device": dev, "context": 1, "stream": stream, "correlation": corr}
            args.update({self._ext_key(): corr, "bytes": 1048576})
            args["memory bandwidth (GB/s)"] = 512.0
        return self._x(kind, name, start, end, dev, tid, args)

    def kernel(self, name: str, start: int, end: int, **kw: Any) -> dict[str, Any]:
        return self.gpu("kernel", name, start, end, **kw)

    def nccl_metadata(
        self,
        event: dict[str, Any],
        collective: str,
        *,
        in_nelems: int,
        out_nelems: int | None = None,
        group_size: int,
        dtype: str = "Float",
        process_group: str = "0",
    ) -> dict[str, Any]:
        """Add the NCCL metadata newer Kineto traces carry to an event's args; returns it.

        The keys and value types are Kineto's (PyTorch `saveNcclMeta`): `"Collective name"`
        (c10d's name: `allreduce`, `_allgather_base`, `all_to_allv`, `send`, ...), `"In msg
        nelems"` and `"Out msg nelems"` (ints; out defaults to in), `"Group size"`, `"dtype"`
        (a c10 ScalarType name), process group name/description/ranks, split sizes (strings).
        """
        args = event.setdefault("args", {})
        args["Collective name"] = collective
        args["In msg nelems"] = in_nelems
        args["Out msg nelems"] = in_nelems if out_nelems is None else out_nelems
        args["Group size"] = group_size
        args["dtype"] = dtype
        args["In split size"] = "[]"
        args["Out split size"] = "[]"
        args["Process Group Name"] = process_group
        args["Process Group Description"] = "default_pg"
        args["Process Group Ranks"] = str(list(range(group_size)))
        return event

    def memcpy(
        self, start: int, end: int, *, name: str = "Memcpy HtoD (Pageable -> Device)", **kw: Any
    ) -> dict[str, Any]:
        return self.gpu("memcpy", name, start, end, **kw)

    def memset(
        self, start: int, end: int, *, name: str = "Memset (Device)", **kw: Any
    ) -> dict[str, Any]:
        return self.gpu("memset", name, start, end, **kw)

    def cuda_sync(
        self, name: str, start: int, end: int, *, stream: int = -1, device: int | None = None
    ) -> dict[str, Any]:
        """A GPU-side synchronization record (`cuda_sync`): never GPU activity."""
        dev = self.device if device is None else device
        corr = self._corr()
        args = {"External id": corr, "cuda_sync_kind": name, "wait_on_stream": 7}
        args.update({"stream": stream, "correlation": corr, "device": dev, "context": 1})
        # Kineto puts these on the device row with the (possibly fake) stream as tid.
        return self._x("sync", name, start, end, dev, stream, args)

    def launch(
        self,
        name: str,
        *,
        cpu: tuple[int, int],
        gpu: tuple[int, int],
        kind: str = "kernel",
        stream: int = 7,
        device: int | None = None,
        api: str | None = None,
        driver: bool = False,
        flows: bool = True,
        tid: int | None = None,
    ) -> int:
        """A runtime call on the host at `cpu` that launched GPU work at `gpu`; returns the
        correlation id. `kind` is kernel, memcpy or memset."""
        api_name = api or ("cuLaunchKernel" if driver else _DEFAULT_API[kind])
        corr = self.runtime(api_name, cpu[0], cpu[1], driver=driver, tid=tid)
        dev = self.device if device is None else device
        self.gpu(kind, name, gpu[0], gpu[1], stream=stream, device=dev, correlation=corr)
        if flows:
            pid, t = self._host_tid(tid)
            host_tid = int(t) if isinstance(t, str) else t
            fcat = self.cat("flow")
            fname = "launch" if self.legacy else "ac2g"
            start_flow: dict[str, Any] = {"ph": "s", "id": corr, "pid": pid, "tid": host_tid}
            start_flow.update({"ts": self.t(cpu[0]), "cat": fcat, "name": fname})
            end_flow: dict[str, Any] = {"ph": "f", "id": corr, "pid": dev}
            end_flow.update({"tid": self._gpu_tid(dev, stream), "ts": self.t(gpu[0])})
            end_flow.update({"cat": fcat, "name": fname, "bp": "e"})
            self.events.append(start_flow)
            self.events.append(end_flow)
        return corr

    # ---- top level -----------------------------------------------------------------------

    def distributed_info(self, rank: int, world_size: int, backend: str = "nccl") -> None:
        self.top["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": world_size}

    def device_properties(self, ids: Iterable[int], name: str = H100) -> None:
        props = []
        for i in ids:
            props.append(
                {
                    "id": i,
                    "name": name,
                    "totalGlobalMem": 85018279936,
                    "computeMajor": 9,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": 132,
                }
            )
        self.top["deviceProperties"] = props

    def set_top(self, key: str, value: Any) -> None:
        """Any other top-level key (`metadata`, `envs`, ...), written before `traceEvents`."""
        self.top[key] = value

    def raw_event(self, event: dict[str, Any]) -> None:
        """An event written as is (values may be `Us`)."""
        self.events.append(event)

    # ---- output --------------------------------------------------------------------------

    def _metadata_events(self) -> list[dict[str, Any]]:
        times = [e["ts"].ns for e in self.events if isinstance(e.get("ts"), Us)]
        ends = [e["ts"].ns + e["dur"].ns for e in self.events if isinstance(e.get("dur"), Us)]
        lo = min(times, default=self.base_ns)
        hi = max(ends + times, default=self.base_ns)
        lo_us = Us(lo, integer_us_ok=self.legacy)
        out: list[dict[str, Any]] = []

        def meta(name: str, pid: int | str, tid: int | str, args: dict[str, Any]) -> None:
            out.append({"name": name, "ph": "M", "ts": lo_us, "pid": pid, "tid": tid, "args": args})

        meta("process_name", self.pid, 0, {"name": "python3"})
        meta("process_labels", self.pid, 0, {"labels": "CPU"})
        for dev in sorted(self._devices):
            meta("process_name", dev, 0, {"name": "python3"})
            meta("process_labels", dev, 0, {"labels": f"GPU {dev}"})
            meta("process_sort_index", dev, 0, {"sort_index": 5000000 + dev})
        for dev, stream in sorted(self._gpu_threads):
            tid = f"stream {stream}" if self.legacy else stream
            meta("thread_name", dev, tid, {"name": f"stream {stream} "})
        for pid, tid in sorted(self._host_threads):
            meta("thread_name", pid, tid, {"name": f"thread {tid} (python3)"})
        out.append(
            {
                "ph": "X",
                "cat": "Trace",
                "ts": lo_us,
                "dur": Us(hi - lo, integer_us_ok=self.legacy),
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            }
        )
        out.append(
            {
                "name": "Iteration Start: PyTorch Profiler",
                "ph": "i",
                "s": "g",
                "pid": "Traces",
                "tid": "Trace PyTorch Profiler",
                "ts": lo_us,
            }
        )
        out.append(
            {
                "name": "Record Window End",
                "ph": "i",
                "s": "g",
                "pid": "",
                "tid": "",
                "ts": Us(hi, integer_us_ok=self.legacy),
            }
        )
        return out

    def text(self, *, shuffle: int | None = None) -> str:
        """The trace file text; `shuffle` is a seed to put the events in random order."""
        events = self.events + self._metadata_events()
        if shuffle is not None:
            events = list(events)
            random.Random(shuffle).shuffle(events)
        head: dict[str, Any] = {"schemaVersion": 1}
        head.update(self.top)
        if self.legacy:
            head.setdefault("deviceProperties", [])
        lines = ["{"]
        for key, value in head.items():
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)},")
        lines.append('  "traceEvents": [')
        body = [_dump_event(e) for e in events]
        lines.append(",\n".join(body))
        lines.append("  ],")
        lines.append(f'  "traceName": {json.dumps(self.trace_name)}')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def write(self, path: str | Path, *, shuffle: int | None = None) -> Path:
        """Write to `path`, gzip-compressed when it ends in `.gz`; returns the path."""
        path = Path(path)
        data = self.text(shuffle=shuffle).encode()
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(data, mtime=0))
        else:
            path.write_bytes(data)
        return path


# ---- running the CLI in-process --------------------------------------------------------------


def run_cli(capsys: Any, *argv: object) -> tuple[int, str, str]:
    """Run `badput` in-process; returns (exit code, stdout, stderr)."""
    from badput.cli.app import main  # imported late: tests collect before the CLI exists

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def analyze_json(capsys: Any, path: str | Path, *extra: object) -> dict[str, Any]:
    """`badput analyze PATH --format json`, checked for exit 0; returns the parsed report."""
    code, out, err = run_cli(capsys, "analyze", path, "--format", "json", *extra)
    assert code == 0, f"exit {code}; stderr: {err}"
    report: dict[str, Any] = json.loads(out)
    return report


def _self_check() -> None:
    import tempfile

    for schema in ("modern", "legacy"):
        b = TraceBuilder(schema)
        b.device_properties([0])
        b.distributed_info(0, 2)
        b.profiler_step(1, 0, 300)
        b.dataloader(0, 100)
        b.launch("gemm", cpu=(100, 110), gpu=(115, 200))
        b.launch(NCCL_ALLREDUCE, cpu=(110, 120), gpu=(150, 260), stream=20)
        b.launch("Memcpy DtoH (Device -> Pinned)", kind="memcpy", cpu=(120, 130), gpu=(260, 270))
        b.cpu_op("aten::mm", 100, 112)
        b.python_frame("train.py(1): <module>", -5, 305)
        b.instant("[memory]", 50)
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("t.json", "t.json.gz"):
                path = b.write(Path(tmp) / name, shuffle=3)
                raw = path.read_bytes()
                text = gzip.decompress(raw).decode() if name.endswith(".gz") else raw.decode()
                doc = json.loads(text)
                events = doc["traceEvents"]
                assert len(events) == len(b.events) + len(b._metadata_events())
                assert '"ts": 1712195495519689.047' in text or b.legacy
                step = next(e for e in events if e["name"] == "ProfilerStep#1")
                assert abs(step["ts"] - 1712195495519689.047) < 0.5
                assert step["dur"] == 300
                kernels = [e for e in events if e.get("cat") == b.cat("kernel")]
                assert {k["args"]["correlation"] for k in kernels} <= {
                    e["args"]["correlation"] for e in events if e.get("cat") == b.cat("runtime")
                }
                # one event per line inside traceEvents
                inside = text.split('"traceEvents": [\n', 1)[1].split("\n  ],", 1)[0]
                assert len(inside.splitlines()) == len(events)
    fb = TraceBuilder(unit_ns=1)
    fb.kernel("k", 1_047, 3_512)
    assert '"ts": 1712195495519690.094, "dur": 2.465' in fb.text()
    print("synth self-check ok")


if __name__ == "__main__":
    _self_check()
