"""The doctor's host checks: topology, host limits, storage and software, as pure functions.

Sources:
- CUDA driver compatibility: NVIDIA "CUDA Compatibility" guide (a driver runs toolkits up to
  the CUDA version it reports; minor version compatibility within a major version works
  without PTX JIT).
- /dev/shm: PyTorch README, "Docker image" (DataLoader workers share memory through /dev/shm;
  use --ipc=host or --shm-size).
- Open files: PyTorch "Multiprocessing best practices", sharing strategies (the default
  file_descriptor strategy keeps a descriptor open per shared tensor).
- Environment variables: NCCL's environment variable documentation; PyTorch CUDA semantics
  (CUDA_LAUNCH_BLOCKING and PYTORCH_NO_CUDA_MEMORY_CACHING are debugging switches).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from badput._text import is_ascii_digits
from badput.telemetry.gpu_checks import Check, Status

__all__ = [
    "ReadResult",
    "Software",
    "check_cpu",
    "check_cpu_quota",
    "check_env",
    "check_governor",
    "check_gpu_affinity",
    "check_memory",
    "check_memory_limit",
    "check_nofile",
    "check_numa",
    "check_rdma",
    "check_shm",
    "check_storage",
    "check_swap",
    "check_torch",
    "measure_read",
    "read_software",
    "redact_env",
]


# ---- topology -----------------------------------------------------------------------------


def _cpus(cpus: set[int]) -> str:
    """CPU ids in the kernel's list format ("0-3,8")."""
    ranges: list[list[int]] = []
    for c in sorted(cpus):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges) or "none"


def check_numa(nodes: Mapping[int, set[int]]) -> Check:
    """The NUMA nodes and their CPUs."""
    if not nodes:
        return Check("topology.numa", Status.NA, "no NUMA information in /sys")
    desc = "; ".join(f"node{n}: CPUs {_cpus(c)}" for n, c in sorted(nodes.items()))
    return Check("topology.numa", Status.OK, f"{len(nodes)} NUMA node(s): {desc}")


def check_gpu_affinity(
    gpu: str | None,
    gpu_node: int | None,
    nodes: Mapping[int, set[int]],
    affinity: set[int],
    local_rank: int,
) -> Check:
    """Whether this process's CPU affinity is on the NUMA node of the GPU it would use.

    Args:
        gpu: the GPU this process would use (a label), None when there is none.
        gpu_node: that GPU's NUMA node, None when the firmware does not say.
        nodes: NUMA node -> CPUs.
        affinity: the CPUs this process may run on.
        local_rank: LOCAL_RANK (0 when unset).
    """
    cid = "topology.gpu_affinity"
    if gpu is None:
        return Check(cid, Status.NA, f"no NVIDIA GPU for LOCAL_RANK={local_rank}")
    if gpu_node is None or len(nodes) < 2:
        return Check(cid, Status.OK, f"{gpu}: one NUMA node (or none reported); nothing to pin")
    node_cpus = nodes.get(gpu_node, set())
    evidence = (
        f"LOCAL_RANK={local_rank} uses {gpu} on NUMA node {gpu_node} (CPUs {_cpus(node_cpus)}); "
        f"this process may run on CPUs {_cpus(affinity)}"
    )
    fix = (
        f"pin to the GPU's node: call badput.pin_to_gpu_numa({local_rank}) at start (and "
        f"worker_init_fn=badput.worker_init_fn in DataLoaders), or run under numactl "
        f"--cpunodebind={gpu_node} --membind={gpu_node}"
    )
    if affinity and affinity <= node_cpus:
        return Check(cid, Status.OK, evidence)
    if not affinity & node_cpus:
        return Check(cid, Status.FAIL, evidence + ": none of them on the GPU's node", fix)
    return Check(cid, Status.WARN, evidence + ": not pinned to the GPU's node", fix)


def check_rdma(devices: Sequence[str]) -> Check:
    """InfiniBand / RDMA devices (/sys/class/infiniband)."""
    if not devices:
        return Check(
            "topology.rdma",
            Status.OK,
            "no InfiniBand/RDMA devices: multi-node NCCL traffic goes over TCP sockets",
        )
    return Check("topology.rdma", Status.OK, f"RDMA devices: {', '.join(devices)}")


# ---- host ---------------------------------------------------------------------------------

# Below these, the check warns (DataLoader workers, many shards). See the module docstring.
SHM_WARN_BYTES = 1 << 30
NOFILE_WARN = 4096


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_cpu(model: str | None, online: int, allowed: int) -> Check:
    """CPU model and cores, and how many this process may use."""
    return Check(
        "host.cpu",
        Status.OK,
        f"{model or 'unknown CPU'}: {online} CPUs online, {allowed} in this process's affinity",
    )


def check_cpu_quota(quota_cpus: float | None, source: str | None, allowed: int) -> Check:
    """A cgroup CPU quota smaller than the CPUs the process sees oversubscribes its threads."""
    if source is None:
        return Check("host.cgroup_cpu", Status.NA, "no cgroup CPU controller found")
    if quota_cpus is None:
        return Check("host.cgroup_cpu", Status.OK, f"no CPU quota ({source})")
    evidence = f"CPU quota {quota_cpus:.2f} CPUs ({source}), {allowed} CPUs visible"
    if quota_cpus < allowed:
        return Check(
            "host.cgroup_cpu",
            Status.WARN,
            evidence + ": thread pools sized by the CPU count get throttled",
            f"size threads to the quota: OMP_NUM_THREADS={max(1, int(quota_cpus))}, "
            "torch.set_num_threads, DataLoader num_workers; or raise the container's CPU limit",
        )
    return Check("host.cgroup_cpu", Status.OK, evidence)


def check_memory_limit(limit: int | None, source: str | None, mem_total: int | None) -> Check:
    """The cgroup (container) memory limit against the machine's memory."""
    if source is None:
        return Check("host.cgroup_memory", Status.NA, "no cgroup memory controller found")
    if limit is None:
        return Check("host.cgroup_memory", Status.OK, f"no memory limit ({source})")
    evidence = f"memory limit {_gib(limit)} ({source})"
    if mem_total:
        evidence += f" of {_gib(mem_total)} in the machine"
    return Check("host.cgroup_memory", Status.OK, evidence)


def check_governor(governors: Mapping[str, int]) -> Check:
    """CPU frequency governors: powersave slows the host side of training."""
    if not governors:
        return Check("host.cpu_governor", Status.NA, "no cpufreq in /sys (usual in VMs)")
    evidence = ", ".join(f"{g} on {n} CPUs" for g, n in sorted(governors.items()))
    if set(governors) - {"performance"}:
        slow = {"powersave", "conservative"} & set(governors)
        if slow:
            return Check(
                "host.cpu_governor",
                Status.WARN,
                evidence,
                "sudo cpupower frequency-set -g performance",
            )
    return Check("host.cpu_governor", Status.OK, evidence)


def check_memory(meminfo: Mapping[str, int], thp: str | None) -> Check:
    """Memory total and available, huge pages."""
    total, avail = meminfo.get("MemTotal"), meminfo.get("MemAvailable")
    if total is None:
        return Check("host.memory", Status.NA, "/proc/meminfo not readable")
    evidence = f"{_gib(total)} total, {_gib(avail or 0)} available"
    huge = meminfo.get("HugePages_Total", 0)
    evidence += f"; huge pages: {huge} x {meminfo.get('Hugepagesize', 0) // 1024} KiB"
    if thp:
        evidence += f", transparent huge pages {thp}"
    return Check("host.memory", Status.OK, evidence)


def check_swap(meminfo: Mapping[str, int]) -> Check:
    """Swap in use while memory is short means the host pages."""
    total, free = meminfo.get("SwapTotal"), meminfo.get("SwapFree")
    if total is None:
        return Check("host.swap", Status.NA, "/proc/meminfo not readable")
    if total == 0:
        return Check("host.swap", Status.OK, "no swap")
    used = total - (free or 0)
    evidence = f"swap {_gib(used)} used of {_gib(total)}"
    avail, mem = meminfo.get("MemAvailable", 0), meminfo.get("MemTotal", 1)
    if used > 0 and avail < 0.1 * mem:
        return Check(
            "host.swap",
            Status.WARN,
            f"{evidence}, {_gib(avail)} memory available",
            "the host is short of memory and swapping: fewer DataLoader workers or a smaller "
            "prefetch_factor, or more memory",
        )
    return Check("host.swap", Status.OK, evidence)


def check_shm(total: int | None, free: int | None) -> Check:
    """/dev/shm size: DataLoader workers pass batches through it."""
    if total is None:
        return Check("host.shm", Status.NA, "/dev/shm not mounted")
    evidence = f"/dev/shm {_gib(total)}, {_gib(free or 0)} free"
    if total < SHM_WARN_BYTES:
        return Check(
            "host.shm",
            Status.WARN,
            evidence + f" (under {_gib(SHM_WARN_BYTES)}): DataLoader workers can die with "
            "'bus error' or 'No space left on device'",
            "run the container with --ipc=host or --shm-size=16g (Kubernetes: an emptyDir "
            "with medium: Memory mounted at /dev/shm)",
        )
    return Check("host.shm", Status.OK, evidence)


def check_nofile(soft: int, hard: int) -> Check:
    """The open file limit: DataLoader workers share tensors through file descriptors."""
    evidence = f"open files limit {soft} (hard {hard})"
    if 0 <= soft < NOFILE_WARN:
        return Check(
            "host.nofile",
            Status.WARN,
            evidence + f": under {NOFILE_WARN}, many DataLoader workers hit 'Too many open files'",
            f"ulimit -n {hard if 0 < hard < 1 << 20 else 65536} before starting, or "
            "torch.multiprocessing.set_sharing_strategy('file_system')",
        )
    return Check("host.nofile", Status.OK, evidence)


# ---- storage ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadResult:
    """A bounded read of a directory's files: bytes read, seconds, files touched."""

    path: str
    bytes: int
    seconds: float
    files: int

    @property
    def bytes_per_s(self) -> float:
        """Throughput in bytes per second."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


STORAGE_WARN_BYTES_PER_S = 100e6
# Less data than this gives a figure dominated by per-file overhead.
STORAGE_MIN_BYTES = 16 << 20


def measure_read(
    directory: str, max_bytes: int = 512 << 20, max_seconds: float = 5.0
) -> ReadResult:
    """Read the files under `directory` (sorted walk) until `max_bytes` or `max_seconds`.

    Each file is first dropped from the page cache with POSIX_FADV_DONTNEED (best effort:
    pages another process has mapped stay cached), so the figure is closer to the storage than
    to memory.

    Raises:
        NotADirectoryError: `directory` is not a directory.
    """
    if not os.path.isdir(directory):
        raise NotADirectoryError(directory)
    chunk = 4 << 20
    total = files = 0
    start = time.perf_counter()
    deadline = start + max_seconds
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames):
            if total >= max_bytes or time.perf_counter() > deadline:
                break
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                files += 1
                while total < max_bytes and time.perf_counter() <= deadline:
                    data = os.read(fd, chunk)
                    if not data:
                        break
                    total += len(data)
            except OSError:
                pass
            finally:
                os.close(fd)
    return ReadResult(directory, total, time.perf_counter() - start, files)


def check_storage(result: ReadResult | None, error: str | None = None) -> Check:
    """Read throughput of the data directory."""
    if error is not None:
        return Check("storage.read", Status.FAIL, error, "pass a readable directory to --data")
    if result is None:
        return Check("storage.read", Status.NA, "no data directory given", "--data DIR")
    if result.bytes < STORAGE_MIN_BYTES:
        return Check(
            "storage.read",
            Status.NA,
            f"{result.path}: only {result.bytes / 1e6:.1f} MB of file data, too little to "
            "measure a throughput",
            "point --data at the training data",
        )
    mbps = result.bytes_per_s / 1e6
    evidence = (
        f"{result.path}: {result.bytes / 1e6:.1f} MB from {result.files} files in "
        f"{result.seconds:.2f} s = {mbps:.0f} MB/s"
    )
    if result.bytes_per_s < STORAGE_WARN_BYTES_PER_S:
        return Check(
            "storage.read",
            Status.WARN,
            evidence + f" (under {STORAGE_WARN_BYTES_PER_S / 1e6:.0f} MB/s)",
            "slow storage feeds the GPU slowly: stage data on local NVMe, use larger shards "
            "(WebDataset, tar), more DataLoader workers, or cache the dataset in memory",
        )
    return Check("storage.read", Status.OK, evidence)


# ---- software -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Software:
    """Versions of the ML stack; None where not installed or not built in."""

    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    nccl: str | None = None
    error: str | None = None


def read_software() -> Software:
    """Versions from torch, if it is installed (imported here, lazily)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return Software()
    try:
        import importlib

        torch: Any = importlib.import_module("torch")
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        nccl = None
        if torch.version.cuda and hasattr(torch.cuda, "nccl"):
            try:
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:  # NCCL not built in
                nccl = None
        return Software(str(torch.__version__), torch.version.cuda, cudnn, nccl)
    except Exception as e:  # a broken install: report it, never crash the doctor
        return Software(error=f"torch import failed: {type(e).__name__}: {e}")


def check_torch(sw: Software, cuda_driver_version: int | None, gpus: int) -> Check:
    """The torch build against the driver: the known-bad combinations.

    Args:
        sw: the versions.
        cuda_driver_version: the CUDA version the driver supports, NVML-encoded (12040).
        gpus: GPUs found.
    """
    if sw.error:
        return Check("software.torch", Status.FAIL, sw.error, "reinstall torch")
    if sw.torch is None:
        return Check("software.torch", Status.NA, "torch not installed")
    evidence = (
        f"torch {sw.torch}, CUDA {sw.cuda or 'none (CPU build)'}, cuDNN {sw.cudnn or 'none'}, "
        f"NCCL {sw.nccl or 'none'}"
    )
    if gpus and not sw.cuda:
        return Check(
            "software.torch",
            Status.FAIL,
            evidence + f"; {gpus} GPU(s) present",
            "a CPU-only torch cannot use the GPUs: install a CUDA build "
            "(pip install torch --index-url https://download.pytorch.org/whl/cuXXX)",
        )
    if sw.cuda and cuda_driver_version:
        maj, _, mnr = sw.cuda.partition(".")
        built = int(maj) * 1000 + int(mnr.split(".")[0] or 0) * 10
        drv = f"{cuda_driver_version // 1000}.{cuda_driver_version % 1000 // 10}"
        evidence += f"; driver supports CUDA {drv}"
        if cuda_driver_version // 1000 < built // 1000:
            return Check(
                "software.torch",
                Status.FAIL,
                evidence + ": the driver is older than torch's CUDA major version",
                "upgrade the NVIDIA driver, or install a torch built for the driver's CUDA",
            )
        if cuda_driver_version < built:
            return Check(
                "software.torch",
                Status.WARN,
                evidence + ": runs under minor version compatibility (no PTX JIT)",
                "upgrade the NVIDIA driver to one for CUDA "
                f"{sw.cuda}, or install a torch built for CUDA {drv}",
            )
    return Check("software.torch", Status.OK, evidence)


_RELEVANT_ENV = re.compile(r"^(NCCL_|CUDA_|TORCH_|PYTORCH_)|^OMP_NUM_THREADS$")


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The relevant variables (NCCL_*, CUDA_*, TORCH_*, PYTORCH_*, OMP_NUM_THREADS).

    Values of variables whose names look secret (`badput.trace.redact.is_secret_key`, the
    rule every output of badput uses: TOKEN, SECRET, PASSWORD, API_KEY, ...) are replaced by
    "REDACTED"; other values lose any credential they hold (`redact_text`).
    """
    from badput.trace.redact import is_secret_key, redact_text

    return {
        k: ("REDACTED" if is_secret_key(k) else redact_text(v))
        for k, v in sorted(env.items())
        if _RELEVANT_ENV.search(k)
    }


def check_env(env: Mapping[str, str], allowed_cpus: int, rdma: bool) -> Check:
    """Environment variables known to slow training or hide GPUs.

    Args:
        env: the environment.
        allowed_cpus: CPUs this process may use.
        rdma: whether RDMA devices are present.
    """
    shown = redact_env(env)
    listing = ", ".join(f"{k}={v}" for k, v in shown.items()) or "none set"
    problems: list[tuple[Status, str, str]] = []

    def val(name: str) -> str | None:
        return shown.get(name)

    if val("CUDA_LAUNCH_BLOCKING") not in (None, "0", ""):
        problems.append(
            (
                Status.FAIL,
                "CUDA_LAUNCH_BLOCKING serializes every kernel launch",
                "unset CUDA_LAUNCH_BLOCKING (a debugging switch)",
            )
        )
    if val("PYTORCH_NO_CUDA_MEMORY_CACHING") not in (None, "0", ""):
        problems.append(
            (
                Status.FAIL,
                "PYTORCH_NO_CUDA_MEMORY_CACHING turns the caching allocator off",
                "unset PYTORCH_NO_CUDA_MEMORY_CACHING (a debugging switch)",
            )
        )
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1", "none", "NoDevFiles"):
        problems.append(
            (
                Status.WARN,
                f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU",
                "unset CUDA_VISIBLE_DEVICES or list the GPUs",
            )
        )
    if (val("NCCL_DEBUG") or "").upper() in ("INFO", "TRACE"):
        problems.append(
            (
                Status.WARN,
                f"NCCL_DEBUG={val('NCCL_DEBUG')} logs every communicator and collective",
                "unset NCCL_DEBUG or use NCCL_DEBUG=WARN outside debugging",
            )
        )
    for name, what in (
        ("NCCL_P2P_DISABLE", "GPU peer-to-peer (NVLink/PCIe P2P)"),
        ("NCCL_SHM_DISABLE", "shared-memory transport"),
    ):
        if val(name) == "1":
            problems.append((Status.WARN, f"{name}=1 turns off NCCL's {what}", f"unset {name}"))
    if val("NCCL_IB_DISABLE") == "1" and rdma:
        problems.append(
            (
                Status.WARN,
                "NCCL_IB_DISABLE=1 although RDMA devices are present: NCCL uses TCP sockets",
                "unset NCCL_IB_DISABLE",
            )
        )
    omp = val("OMP_NUM_THREADS")
    if omp and is_ascii_digits(omp) and allowed_cpus and int(omp) > allowed_cpus:
        problems.append(
            (
                Status.WARN,
                f"OMP_NUM_THREADS={omp} is more than the {allowed_cpus} CPUs available",
                f"OMP_NUM_THREADS={allowed_cpus} or fewer (per process)",
            )
        )
    if not problems:
        return Check("software.env", Status.OK, listing)
    status = Status.FAIL if any(p[0] is Status.FAIL for p in problems) else Status.WARN
    return Check(
        "software.env",
        status,
        "; ".join(p[1] for p in problems) + f" ({listing})",
        "; ".join(p[2] for p in problems),
    )
