"""`badput doctor`: a one-shot check of the whole machine, each item with evidence and a fix.

`run_doctor` gathers the facts (NVML, /proc, /sys, the environment) and hands them to the
checks, pure functions in `gpu_checks` and `host_checks`. Nothing here prints.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping

from badput._text import is_ascii_digits
from badput.telemetry.gpu_checks import Check, Status, check_mps, gpu_checks
from badput.telemetry.host_checks import (
    Software,
    check_cpu,
    check_cpu_quota,
    check_env,
    check_governor,
    check_gpu_affinity,
    check_memory,
    check_memory_limit,
    check_nofile,
    check_numa,
    check_rdma,
    check_shm,
    check_storage,
    check_swap,
    check_torch,
    measure_read,
    read_software,
)
from badput.telemetry.sources import GpuInfo, Host, Nvml, NvmlUnavailable, open_nvml

__all__ = ["Check", "Status", "run_doctor"]


# ---- the whole run ------------------------------------------------------------------------


def _shm() -> tuple[int | None, int | None]:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _gpu_for_rank(local_rank: int, env: Mapping[str, str], count: int) -> int | None:
    """The NVML/PCI-order index of the GPU that LOCAL_RANK would use, or None."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [s.strip() for s in cvd.split(",") if s.strip()]
        if local_rank >= len(ids) or not is_ascii_digits(ids[local_rank]):
            return None  # UUIDs and MIG names need NVML to resolve; not done here
        index = int(ids[local_rank])
    else:
        index = local_rank
    return index if index < count else None


def run_doctor(
    *,
    host: Host | None = None,
    nvml: Nvml | None = None,
    env: Mapping[str, str] | None = None,
    data_dir: str | None = None,
    affinity: set[int] | None = None,
    software: Software | None = None,
    nofile: tuple[int, int] | None = None,
    shm: tuple[int | None, int | None] | None = None,
    own_pids: set[int] | None = None,
) -> list[Check]:
    """Gather the facts of this machine and run every check.

    Each argument left None is read from this machine; tests pass fakes.

    Args:
        host: the /proc and /sys reader.
        nvml: NVML; None opens the real one (if it cannot, the GPU checks say why).
        env: the environment (LOCAL_RANK, CUDA_VISIBLE_DEVICES, NCCL_*, ...).
        data_dir: a directory to read for the storage check.
        affinity: CPUs this process may run on.
        software: torch/CUDA/cuDNN/NCCL versions.
        nofile: (soft, hard) open file limits.
        shm: (size, free) of /dev/shm in bytes.
        own_pids: processes that belong to this job (not "other processes").

    Returns:
        The checks, GPU first, then topology, host, storage and software.

    Example:
        for c in run_doctor(data_dir="/data"): print(c.id, c.status, c.evidence)
    """
    host = host or Host()
    env = os.environ if env is None else env
    if affinity is None:
        affinity = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    local_rank = int(env.get("LOCAL_RANK", "0") or 0)
    checks: list[Check] = []

    # GPU
    own_nvml = nvml is None
    error: str | None = None
    if nvml is None:
        try:
            nvml = open_nvml()
        except NvmlUnavailable as e:
            error = str(e)
    gpus: list[GpuInfo] = []
    cuda_driver = None
    if nvml is not None:
        try:
            cuda_driver = nvml.cuda_driver_version()
            gpus = [nvml.device_info(i) for i in range(nvml.device_count())]
            drv = nvml.driver_version()
            cuda = f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}" if cuda_driver else "?"
            names = ", ".join(sorted({g.name for g in gpus})) or "none"
            checks.append(
                Check(
                    "gpu.driver",
                    Status.OK if gpus else Status.WARN,
                    f"driver {drv}, CUDA {cuda}; {len(gpus)} GPU(s): {names}",
                    "" if gpus else "no GPU visible to NVML: check the container's GPU access",
                )
            )
        except Exception as e:  # a driver that answers init but fails reads
            error = f"NVML failed: {type(e).__name__}: {e}"
        finally:
            if own_nvml:
                nvml.close()
    if error is not None:
        proc = host.nvidia_driver_version()
        pci = host.pci_gpus()
        if proc is None and not pci:
            if not error.startswith("no NVIDIA driver found"):
                error = f"no NVIDIA driver found (/proc/driver/nvidia/version absent; {error})"
            checks.append(Check("gpu.driver", Status.NA, f"{error}; no NVIDIA GPU on the PCI bus"))
        else:
            checks.append(
                Check(
                    "gpu.driver",
                    Status.FAIL if pci and proc is None else Status.WARN,
                    f"{error}; {len(pci)} NVIDIA GPU(s) on the PCI bus; "
                    f"driver: {proc or 'not loaded'}",
                    "load or install the NVIDIA driver"
                    if proc is None
                    else "pip install 'badput[nvml]' (nvidia-ml-py) for the GPU checks",
                )
            )
    pids = set(own_pids) if own_pids is not None else {os.getpid()}
    for g in gpus:
        checks.extend(gpu_checks(g, pids))
    if gpus:
        checks.append(check_mps(host.pids_named("nvidia-cuda-mps")))

    # topology: the GPU list from NVML, else from the PCI bus
    nodes = host.numa_nodes()
    checks.append(check_numa(nodes))
    bus_ids = [g.bus_id for g in gpus] if gpus else [p.bus_id for p in host.pci_gpus()]
    index = _gpu_for_rank(local_rank, env, len(bus_ids))
    label = node = None
    if index is not None:
        label = f"GPU {index} ({bus_ids[index]})"
        node = host.pci_numa_node(bus_ids[index])
    checks.append(check_gpu_affinity(label, node, nodes, affinity, local_rank))
    rdma = host.infiniband_devices()
    checks.append(check_rdma(rdma))

    # host
    meminfo = host.meminfo_bytes()
    online = host.online_cpus()
    checks.append(check_cpu(host.cpu_model(), len(online) or (os.cpu_count() or 0), len(affinity)))
    quota, qsrc = host.cgroup_cpu_quota()
    checks.append(check_cpu_quota(quota, qsrc, len(affinity)))
    limit, lsrc = host.cgroup_memory_limit_bytes()
    checks.append(check_memory_limit(limit, lsrc, meminfo.get("MemTotal")))
    checks.append(check_governor(host.cpu_governors()))
    checks.append(check_memory(meminfo, host.transparent_hugepages()))
    checks.append(check_swap(meminfo))
    checks.append(check_shm(*(shm if shm is not None else _shm())))
    checks.append(check_nofile(*(nofile or resource.getrlimit(resource.RLIMIT_NOFILE))))

    # storage
    if data_dir is None:
        checks.append(check_storage(None))
    else:
        try:
            checks.append(check_storage(measure_read(data_dir)))
        except OSError as e:
            checks.append(check_storage(None, f"{data_dir}: {e.strerror or 'not a directory'}"))

    # software
    sw = software if software is not None else read_software()
    checks.append(check_torch(sw, cuda_driver, len(gpus) or len(host.pci_gpus())))
    checks.append(check_env(env, len(affinity), bool(rdma)))
    return checks
