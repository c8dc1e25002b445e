"""Where telemetry comes from: NVML for the GPUs, /proc and /sys for the host.

Every hardware read sits behind a small interface with a fake, so that the doctor and the
sampler are tested without a GPU: `Nvml` (`RealNvml` over nvidia-ml-py, `FakeNvml` replaying
recorded readings) and `Host` (a reader of /proc, /sys and cgroup files under a root directory;
tests point it at a fake tree).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, TypeVar

from badput.errors import BadputError

__all__ = [
    "FakeNvml",
    "GpuInfo",
    "GpuProcess",
    "GpuSample",
    "Host",
    "Nvml",
    "NvmlUnavailable",
    "PciGpu",
    "RealNvml",
    "TelemetryError",
    "open_nvml",
    "parse_cpulist",
    "record_nvml",
]

_T = TypeVar("_T")

NVIDIA_PCI_VENDOR = "0x10de"
# Without cumulative PCIe counters, throughput is measured by NVML over 20 ms per direction
# (blocking); read it at most this often per GPU.
PCIE_FALLBACK_INTERVAL_S = 1.0


class TelemetryError(BadputError):
    """A telemetry source or file cannot be used."""


class NvmlUnavailable(TelemetryError):
    """NVML cannot be used here: nvidia-ml-py missing, or no NVIDIA driver."""


# ---- NVML ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuProcess:
    """A process with a context on a GPU; memory in bytes (None when NVML hides it)."""

    pid: int
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class GpuInfo:
    """One reading of a GPU's state. None: the GPU or driver does not report it.

    Clocks in MHz, power in mW, temperatures in degrees C, memory in bytes. ECC counts are
    volatile (since the last driver load). `throttle_reasons` is NVML's bitmask of active clock
    event reasons. `nvlink_up` has one entry per NVLink the GPU has (None: no NVLink).
    """

    index: int
    name: str
    bus_id: str
    persistence_mode: bool | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    throttle_reasons: int | None = None
    power_mw: int | None = None
    power_limit_mw: int | None = None
    power_default_limit_mw: int | None = None
    temperature_c: int | None = None
    temperature_slowdown_c: int | None = None
    ecc_uncorrected: int | None = None
    ecc_corrected: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink_up: tuple[bool, ...] | None = None
    mig_mode: bool | None = None
    mig_pending: bool | None = None
    mig_instances: int | None = None
    utilization_pct: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    processes: tuple[GpuProcess, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuInfo:
        """Build from a recorded reading (the output of `record_nvml`); unknown keys ignored."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if kw.get("nvlink_up") is not None:
            kw["nvlink_up"] = tuple(bool(x) for x in kw["nvlink_up"])
        kw["processes"] = tuple(GpuProcess(**p) for p in d.get("processes", ()))
        return cls(**kw)


@dataclass(frozen=True)
class GpuSample:
    """One telemetry sample of a GPU: %, MHz, bytes, mW, degrees C, bytes/s."""

    utilization_pct: int | None = None
    sm_clock_mhz: int | None = None
    memory_used_bytes: int | None = None
    power_mw: int | None = None
    temperature_c: int | None = None
    pcie_tx_bytes_per_s: int | None = None
    pcie_rx_bytes_per_s: int | None = None


class Nvml(Protocol):
    """The few NVML reads badput needs."""

    def driver_version(self) -> str:
        """The driver version string, e.g. "550.127.05"."""
        ...

    def cuda_driver_version(self) -> int | None:
        """The CUDA version the driver supports, as NVML encodes it (12040 for 12.4)."""
        ...

    def device_count(self) -> int:
        """Number of GPUs NVML sees."""
        ...

    def device_info(self, index: int) -> GpuInfo:
        """The state of GPU `index`."""
        ...

    def sample(self, index: int) -> GpuSample:
        """One telemetry sample of GPU `index`."""
        ...

    def close(self) -> None:
        """Release NVML."""
        ...


class FakeNvml:
    """NVML replaying recorded readings (a dict or JSON file in `record_nvml`'s format).

    `sample()` cycles through each GPU's recorded `"samples"`, or derives one sample from the
    recorded state when there are none.

    Example:
        nvml = FakeNvml({"driver_version": "550.54.15", "cuda_driver_version": 12040,
                         "gpus": [{"index": 0, "name": "NVIDIA H100", "bus_id": "..."}]})
    """

    def __init__(self, record: Mapping[str, Any]) -> None:
        if not isinstance(record, Mapping) or not isinstance(record.get("gpus", []), list):
            raise TypeError("an NVML recording is a JSON object with a list of gpus")
        self._record = record
        self._gpus = [GpuInfo.from_dict(g) for g in record.get("gpus", [])]
        self._samples = [
            [GpuSample(**s) for s in g.get("samples", [])] for g in record.get("gpus", [])
        ]
        self._next = [0] * len(self._gpus)
        self.closed = False

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> FakeNvml:
        """Load a recording written by `badput doctor --record-nvml`.

        Raises:
            OSError: the file is missing, not a regular file (a FIFO would block the read), or
                cannot be read.
            ValueError: not JSON.
            TypeError: not an NVML recording.
        """
        from badput.trace._files import file_problem  # here: the trace package imports numpy

        if (problem := file_problem(os.fspath(path))) is not None:
            raise OSError(problem)
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    def driver_version(self) -> str:
        """The recorded driver version."""
        return str(self._record.get("driver_version", ""))

    def cuda_driver_version(self) -> int | None:
        """The recorded CUDA driver version."""
        v = self._record.get("cuda_driver_version")
        return int(v) if v is not None else None

    def device_count(self) -> int:
        """Number of recorded GPUs."""
        return len(self._gpus)

    def device_info(self, index: int) -> GpuInfo:
        """The recorded state of GPU `index`."""
        return self._gpus[index]

    def sample(self, index: int) -> GpuSample:
        """The next recorded sample of GPU `index` (cyclic)."""
        recorded = self._samples[index]
        if recorded:
            s = recorded[self._next[index] % len(recorded)]
            self._next[index] += 1
            return s
        g = self._gpus[index]
        return GpuSample(
            utilization_pct=g.utilization_pct,
            sm_clock_mhz=g.sm_clock_mhz,
            memory_used_bytes=g.memory_used_bytes,
            power_mw=g.power_mw,
            temperature_c=g.temperature_c,
        )

    def close(self) -> None:
        """Nothing to release."""
        self.closed = True


class RealNvml:
    """NVML through nvidia-ml-py (`pip install 'badput[nvml]'`), imported lazily.

    Each read that the GPU or driver does not support gives None instead of an error.

    Raises:
        NvmlUnavailable: nvidia-ml-py is not installed, or no NVIDIA driver was found.
    """

    def __init__(self, module: Any = None) -> None:
        if module is None:
            try:
                module = importlib.import_module("pynvml")
            except ImportError:
                raise NvmlUnavailable(
                    "nvidia-ml-py is not installed: pip install 'badput[nvml]'"
                ) from None
        self._m = module
        try:
            module.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {e})") from e
        self._handles: dict[int, Any] = {}
        self._pcie_counters_ok: dict[int, bool] = {}
        self._pcie_prev: dict[int, tuple[int, int, int]] = {}
        self._pcie_last: dict[int, float] = {}

    def _opt(self, fn: Callable[[], _T]) -> _T | None:
        try:
            return fn()
        except Exception:  # NVMLError_NotSupported, _NoPermission, ... : not reported
            return None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._m.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def driver_version(self) -> str:
        """The driver version string."""
        return _text(self._m.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int | None:
        """The CUDA version the driver supports (12040 for 12.4)."""
        v = self._opt(self._m.nvmlSystemGetCudaDriverVersion)
        return int(v) if v is not None else None

    def device_count(self) -> int:
        """Number of GPUs."""
        return int(self._m.nvmlDeviceGetCount())

    def device_info(self, index: int) -> GpuInfo:
        """Read the state of GPU `index`, one NVML call per field."""
        m, h, opt = self._m, self._handle(index), self._opt
        reasons_fn = (
            getattr(m, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or m.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        ecc_u = opt(
            lambda: m.nvmlDeviceGetTotalEccErrors(
                h, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC
            )
        )
        ecc_c = opt(
            lambda: m.nvmlDeviceGetTotalEccErrors(
                h, m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_VOLATILE_ECC
            )
        )
        links: list[bool] = []
        for link in range(int(getattr(m, "NVML_NVLINK_MAX_LINKS", 18))):
            state = opt(functools.partial(m.nvmlDeviceGetNvLinkState, h, link))
            if state is None:  # past the GPU's last link, or no NVLink at all
                break
            links.append(state == m.NVML_FEATURE_ENABLED)
        mig = opt(lambda: m.nvmlDeviceGetMigMode(h))
        mig_instances = None
        if mig is not None and mig[0]:
            count = 0
            for i in range(opt(lambda: m.nvmlDeviceGetMaxMigDeviceCount(h)) or 0):
                if opt(functools.partial(m.nvmlDeviceGetMigDeviceHandleByIndex, h, i)) is not None:
                    count += 1
            mig_instances = count
        util = opt(lambda: m.nvmlDeviceGetUtilizationRates(h))
        mem = opt(lambda: m.nvmlDeviceGetMemoryInfo(h))
        procs = opt(lambda: m.nvmlDeviceGetComputeRunningProcesses(h)) or []
        pci = m.nvmlDeviceGetPciInfo(h)
        return GpuInfo(
            index=index,
            name=_text(m.nvmlDeviceGetName(h)),
            bus_id=_text(getattr(pci, "busId", "")),
            persistence_mode=_bool(opt(lambda: m.nvmlDeviceGetPersistenceMode(h))),
            sm_clock_mhz=opt(lambda: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_SM)),
            sm_clock_max_mhz=opt(lambda: m.nvmlDeviceGetMaxClockInfo(h, m.NVML_CLOCK_SM)),
            mem_clock_mhz=opt(lambda: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_MEM)),
            mem_clock_max_mhz=opt(lambda: m.nvmlDeviceGetMaxClockInfo(h, m.NVML_CLOCK_MEM)),
            throttle_reasons=opt(lambda: reasons_fn(h)),
            power_mw=opt(lambda: m.nvmlDeviceGetPowerUsage(h)),
            power_limit_mw=opt(lambda: m.nvmlDeviceGetEnforcedPowerLimit(h)),
            power_default_limit_mw=opt(lambda: m.nvmlDeviceGetPowerManagementDefaultLimit(h)),
            temperature_c=opt(lambda: m.nvmlDeviceGetTemperature(h, m.NVML_TEMPERATURE_GPU)),
            temperature_slowdown_c=opt(
                lambda: m.nvmlDeviceGetTemperatureThreshold(
                    h, m.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
                )
            ),
            ecc_uncorrected=ecc_u,
            ecc_corrected=ecc_c,
            pcie_gen=opt(lambda: m.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            pcie_gen_max=opt(lambda: m.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            pcie_width=opt(lambda: m.nvmlDeviceGetCurrPcieLinkWidth(h)),
            pcie_width_max=opt(lambda: m.nvmlDeviceGetMaxPcieLinkWidth(h)),
            nvlink_up=tuple(links) if links else None,
            mig_mode=_bool(mig[0]) if mig is not None else None,
            mig_pending=_bool(mig[1]) if mig is not None else None,
            mig_instances=mig_instances,
            utilization_pct=int(util.gpu) if util is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            processes=tuple(
                GpuProcess(int(p.pid), _int_or_none(getattr(p, "usedGpuMemory", None)))
                for p in procs
            ),
        )

    def sample(self, index: int) -> GpuSample:
        """One telemetry sample of GPU `index`.

        PCIe throughput comes from the cumulative byte counters (NVML field values
        `NVML_FI_DEV_PCIE_COUNT_TX_BYTES`/`_RX_BYTES`, recent drivers), as a rate since the
        previous sample: no waiting. Where the driver lacks them, `nvmlDeviceGetPcieThroughput`
        is used, which measures over 20 ms per direction and so blocks for about 40 ms: it is
        read at most once per `PCIE_FALLBACK_INTERVAL_S` per GPU (None in between).
        """
        m, h, opt = self._m, self._handle(index), self._opt
        util = opt(lambda: m.nvmlDeviceGetUtilizationRates(h))
        mem = opt(lambda: m.nvmlDeviceGetMemoryInfo(h))
        tx, rx = self._pcie_rates(index, h)
        return GpuSample(
            utilization_pct=int(util.gpu) if util is not None else None,
            sm_clock_mhz=opt(lambda: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_SM)),
            memory_used_bytes=int(mem.used) if mem is not None else None,
            power_mw=opt(lambda: m.nvmlDeviceGetPowerUsage(h)),
            temperature_c=opt(lambda: m.nvmlDeviceGetTemperature(h, m.NVML_TEMPERATURE_GPU)),
            pcie_tx_bytes_per_s=tx,
            pcie_rx_bytes_per_s=rx,
        )

    def _pcie_counters(self, h: Any) -> tuple[int, int, int] | None:
        """(timestamp us, TX bytes, RX bytes) from the cumulative counters, or None."""
        m = self._m
        ids = (
            getattr(m, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", None),
            getattr(m, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", None),
        )
        if None in ids or not hasattr(m, "nvmlDeviceGetFieldValues"):
            return None
        values = self._opt(lambda: m.nvmlDeviceGetFieldValues(h, list(ids)))
        if values is None or len(values) != 2 or any(v.nvmlReturn != 0 for v in values):
            return None
        return int(values[0].timestamp), int(values[0].value.ullVal), int(values[1].value.ullVal)

    def _pcie_rates(self, index: int, h: Any) -> tuple[int | None, int | None]:
        """PCIe (TX, RX) bytes per second for a sample; see `sample`."""
        if self._pcie_counters_ok.get(index, True):
            now = self._pcie_counters(h)
            if now is not None:
                self._pcie_counters_ok[index] = True
                prev = self._pcie_prev.get(index)
                self._pcie_prev[index] = now
                if prev is None or now[0] <= prev[0]:
                    return None, None
                dt_s = (now[0] - prev[0]) / 1e6
                return round((now[1] - prev[1]) / dt_s), round((now[2] - prev[2]) / dt_s)
            self._pcie_counters_ok[index] = False
        mono = time.monotonic()
        if mono - self._pcie_last.get(index, -1e9) < PCIE_FALLBACK_INTERVAL_S:
            return None, None
        self._pcie_last[index] = mono
        m, opt = self._m, self._opt
        tx = opt(lambda: m.nvmlDeviceGetPcieThroughput(h, m.NVML_PCIE_UTIL_TX_BYTES))
        rx = opt(lambda: m.nvmlDeviceGetPcieThroughput(h, m.NVML_PCIE_UTIL_RX_BYTES))
        # nvmlDeviceGetPcieThroughput reports KB/s
        return (
            int(tx) * 1024 if tx is not None else None,
            int(rx) * 1024 if rx is not None else None,
        )

    def close(self) -> None:
        """Shut NVML down."""
        self._opt(self._m.nvmlShutdown)


def open_nvml() -> Nvml:
    """The real NVML.

    Raises:
        NvmlUnavailable: nvidia-ml-py missing or no NVIDIA driver.
    """
    return RealNvml()


def record_nvml(nvml: Nvml) -> dict[str, Any]:
    """A recording of every GPU's state, in the format `FakeNvml` replays."""
    gpus = []
    for i in range(nvml.device_count()):
        d = asdict(nvml.device_info(i))
        d["samples"] = [asdict(nvml.sample(i))]
        gpus.append(d)
    return {
        "driver_version": nvml.driver_version(),
        "cuda_driver_version": nvml.cuda_driver_version(),
        "gpus": gpus,
    }


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _bool(v: object) -> bool | None:
    return None if v is None else bool(v)


def _int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# ---- host ---------------------------------------------------------------------------------


def parse_cpulist(text: str) -> set[int]:
    """CPU ids from the kernel's list format ("0-3,8,10-11")."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA display/3D controller on the PCI bus, from sysfs; numa_node None if unknown."""

    bus_id: str
    numa_node: int | None


@dataclass
class Host:
    """Reads host facts from /proc, /sys and cgroup files under `root` ("/" for this machine).

    Every method returns None (or an empty collection) for a file that is absent or
    unreadable: a fact the machine does not expose is "not available", never an error.
    """

    root: str = "/"
    _disks: set[str] | None = field(default=None, repr=False)

    def path(self, rel: str) -> Path:
        """The path of `rel` (an absolute path on the real machine) under the root."""
        return Path(self.root) / rel.lstrip("/")

    def read(self, rel: str) -> str | None:
        """The text of a file, or None."""
        try:
            with open(os.path.join(self.root, rel.lstrip("/")), "rb") as f:
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return None

    def listdir(self, rel: str) -> list[str]:
        """Sorted entries of a directory, or []."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    # facts -----------------------------------------------------------------------------

    def cpu_model(self) -> str | None:
        """The CPU model name from /proc/cpuinfo."""
        for line in (self.read("/proc/cpuinfo") or "").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
        return None

    def online_cpus(self) -> set[int]:
        """CPUs online (/sys/devices/system/cpu/online)."""
        text = self.read("/sys/devices/system/cpu/online")
        return parse_cpulist(text) if text else set()

    def allowed_cpus(self) -> set[int]:
        """CPUs this process may run on (Cpus_allowed_list of /proc/self/status)."""
        for line in (self.read("/proc/self/status") or "").splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return parse_cpulist(line.split(":", 1)[1])
        return set()

    def meminfo_bytes(self) -> dict[str, int]:
        """/proc/meminfo in bytes (kB entries converted; counts such as HugePages_Total kept)."""
        out: dict[str, int] = {}
        for line in (self.read("/proc/meminfo") or "").splitlines():
            m = re.match(r"(\S+):\s+(\d+)(\s+kB)?", line)
            if m:
                out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
        return out

    def numa_nodes(self) -> dict[int, set[int]]:
        """NUMA node -> its CPUs (/sys/devices/system/node/nodeN/cpulist)."""
        nodes: dict[int, set[int]] = {}
        for name in self.listdir("/sys/devices/system/node"):
            m = re.fullmatch(r"node(\d+)", name)
            if m:
                text = self.read(f"/sys/devices/system/node/{name}/cpulist")
                nodes[int(m.group(1))] = parse_cpulist(text) if text else set()
        return nodes

    def pci_numa_node(self, bus_id: str) -> int | None:
        """The NUMA node of a PCI device; NVML's 8-digit domain is accepted. None if unknown."""
        text = self.read(f"/sys/bus/pci/devices/{normalize_bus_id(bus_id)}/numa_node")
        if text is None:
            return None
        node = int(text.strip())
        return node if node >= 0 else None  # -1: the firmware does not say (one node)

    def pci_gpus(self) -> list[PciGpu]:
        """NVIDIA GPUs on the PCI bus (vendor 0x10de, class 0x03xxxx), in bus order."""
        gpus = []
        for dev in self.listdir("/sys/bus/pci/devices"):
            base = f"/sys/bus/pci/devices/{dev}"
            vendor = (self.read(f"{base}/vendor") or "").strip()
            cls = (self.read(f"{base}/class") or "").strip()
            if vendor == NVIDIA_PCI_VENDOR and cls.startswith("0x03"):
                gpus.append(PciGpu(dev, self.pci_numa_node(dev)))
        return gpus

    def infiniband_devices(self) -> list[str]:
        """RDMA devices (/sys/class/infiniband)."""
        return self.listdir("/sys/class/infiniband")

    def nvidia_driver_version(self) -> str | None:
        """The first line of /proc/driver/nvidia/version, if the driver is loaded."""
        text = self.read("/proc/driver/nvidia/version")
        return text.splitlines()[0].strip() if text else None

    def _cgroup_paths(self) -> dict[str, str]:
        """Controller ("" for cgroup v2) -> this process's cgroup path."""
        out: dict[str, str] = {}
        for line in (self.read("/proc/self/cgroup") or "").splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3:
                for ctrl in parts[1].split(","):
                    out[ctrl] = parts[2]
        return out

    def _cgroup_file(self, ctrl: str, name: str) -> tuple[str, str] | None:
        """(path, text) of a cgroup file: the process's own cgroup first, then the mount root."""
        paths = self._cgroup_paths()
        candidates = []
        if ctrl and ctrl in paths:
            candidates += [
                f"/sys/fs/cgroup/{ctrl}{paths[ctrl]}/{name}",
                f"/sys/fs/cgroup/{ctrl}/{name}",
            ]
        if not ctrl:
            candidates += [f"/sys/fs/cgroup{paths.get('', '/')}/{name}", f"/sys/fs/cgroup/{name}"]
        for rel in candidates:
            rel = re.sub(r"/+", "/", rel)
            text = self.read(rel)
            if text is not None:
                return rel, text.strip()
        return None

    def cgroup_cpu_quota(self) -> tuple[float | None, str | None]:
        """(CPUs the cgroup quota allows, or None when unlimited; the file read)."""
        v2 = self._cgroup_file("", "cpu.max")
        if v2 is not None:
            quota, _, period = v2[1].partition(" ")
            if quota == "max":
                return None, v2[0]
            return int(quota) / int(period or "100000"), v2[0]
        q = self._cgroup_file("cpu", "cpu.cfs_quota_us")
        p = self._cgroup_file("cpu", "cpu.cfs_period_us")
        if q is None:
            return None, None
        quota_us = int(q[1])
        if quota_us < 0:
            return None, q[0]
        return quota_us / int(p[1] if p else "100000"), q[0]

    def cgroup_memory_limit_bytes(self) -> tuple[int | None, str | None]:
        """(the cgroup's memory limit in bytes, or None when unlimited; the file read)."""
        v2 = self._cgroup_file("", "memory.max")
        if v2 is not None:
            return (None if v2[1] == "max" else int(v2[1])), v2[0]
        v1 = self._cgroup_file("memory", "memory.limit_in_bytes")
        if v1 is None:
            return None, None
        limit = int(v1[1])
        # cgroup v1 writes "unlimited" as the largest page-aligned signed 64-bit value
        return (None if limit >= (1 << 62) else limit), v1[0]

    def cpu_governors(self) -> dict[str, int]:
        """Frequency governor -> number of CPUs using it (empty: no cpufreq, as in most VMs)."""
        counts: dict[str, int] = {}
        for name in self.listdir("/sys/devices/system/cpu"):
            if re.fullmatch(r"cpu\d+", name):
                gov = self.read(f"/sys/devices/system/cpu/{name}/cpufreq/scaling_governor")
                if gov:
                    counts[gov.strip()] = counts.get(gov.strip(), 0) + 1
        return counts

    def transparent_hugepages(self) -> str | None:
        """The THP mode in brackets of /sys/kernel/mm/transparent_hugepage/enabled."""
        text = self.read("/sys/kernel/mm/transparent_hugepage/enabled")
        m = re.search(r"\[(\w+)\]", text or "")
        return m.group(1) if m else None

    def pids_named(self, prefix: str) -> list[int]:
        """Processes whose /proc/PID/comm starts with `prefix`."""
        pids = []
        for name in self.listdir("/proc"):
            if name.isdigit():
                comm = self.read(f"/proc/{name}/comm")
                if comm and comm.startswith(prefix):
                    pids.append(int(name))
        return pids

    # counters for the sampler ----------------------------------------------------------

    def cpu_times(self) -> list[tuple[int, int]]:
        """Per core (busy, total) jiffies from /proc/stat (busy excludes idle and iowait)."""
        out = []
        for line in (self.read("/proc/stat") or "").splitlines():
            if line.startswith("cpu") and line[3:4].isdigit():
                v = [int(x) for x in line.split()[1:9]]
                total = sum(v)
                out.append((total - v[3] - v[4], total))
        return out

    def rss_bytes(self, pid: int | str = "self") -> int | None:
        """Resident set size of a process (VmRSS of /proc/PID/status)."""
        for line in (self.read(f"/proc/{pid}/status") or "").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    def disk_bytes(self) -> tuple[int, int] | None:
        """(read, written) bytes since boot over whole physical disks (/proc/diskstats)."""
        text = self.read("/proc/diskstats")
        if text is None:
            return None
        disks = self._disks
        if disks is None:  # listed once: disks do not come and go during a run
            disks = self._disks = {
                d
                for d in self.listdir("/sys/block")
                if self.path(f"/sys/block/{d}/device").exists()
            }
        read = written = 0
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 10 and f[2] in disks:
                read += int(f[5]) * 512  # sectors are 512 bytes in diskstats, whatever the disk
                written += int(f[9]) * 512
        return read, written

    def net_bytes(self) -> tuple[int, int] | None:
        """(received, sent) bytes since boot over interfaces other than lo (/proc/net/dev)."""
        text = self.read("/proc/net/dev")
        if text is None:
            return None
        rx = tx = 0
        for line in text.splitlines()[2:]:
            name, _, rest = line.partition(":")
            f = rest.split()
            if name.strip() != "lo" and len(f) >= 9:
                rx += int(f[0])
                tx += int(f[8])
        return rx, tx


def normalize_bus_id(bus_id: str) -> str:
    """The sysfs form of a PCI bus id: NVML's "00000000:06:00.0" -> "0000:06:00.0"."""
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    if rest and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}:{rest}" if rest else bus_id
