"""Pin a process (and DataLoader workers) to the CPUs of its GPU's NUMA node.

On a multi-socket machine each GPU hangs off one socket's PCIe root. A process whose threads
run on the other socket crosses the inter-socket link for every host-to-device copy and for
its pinned-memory staging; docs/telemetry.md has the evidence and sources. The GPU a rank
uses is found the way CUDA numbers GPUs with CUDA_DEVICE_ORDER=PCI_BUS_ID (and NVML always):
NVIDIA PCI devices in bus order, through CUDA_VISIBLE_DEVICES when it lists indices.

Fail open: when the node cannot be found or the affinity cannot be set, a warning says why
and the process runs unpinned.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Mapping

from badput._text import is_ascii_digits
from badput.telemetry.sampler import TelemetryWarning
from badput.telemetry.sources import Host

__all__ = ["gpu_numa_cpus", "pin_to_gpu_numa", "worker_init_fn"]


def gpu_numa_cpus(
    local_rank: int, host: Host | None = None, env: Mapping[str, str] | None = None
) -> tuple[int, set[int]]:
    """(NUMA node, its CPUs) of the GPU that `local_rank` uses.

    Args:
        local_rank: the rank on this machine (LOCAL_RANK).
        host: the /sys reader (a fake tree in tests).
        env: the environment (CUDA_VISIBLE_DEVICES); default os.environ.

    Raises:
        LookupError: no such GPU, or no NUMA node for it.
    """
    host = host or Host()
    env = os.environ if env is None else env
    gpus = host.pci_gpus()
    index = local_rank
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [s.strip() for s in cvd.split(",") if s.strip()]
        if local_rank >= len(ids) or not is_ascii_digits(ids[local_rank]):
            raise LookupError(
                f"CUDA_VISIBLE_DEVICES={cvd!r} has no GPU index for local rank {local_rank}"
            )
        index = int(ids[local_rank])
    if not 0 <= index < len(gpus):
        raise LookupError(f"no NVIDIA GPU {index} on the PCI bus ({len(gpus)} found)")
    gpu = gpus[index]
    if gpu.numa_node is None:
        raise LookupError(f"GPU {index} ({gpu.bus_id}): the firmware reports no NUMA node")
    cpus = host.numa_nodes().get(gpu.numa_node, set())
    if not cpus:
        raise LookupError(f"NUMA node {gpu.numa_node} of GPU {index} has no CPUs listed")
    return gpu.numa_node, cpus


def _apply(cpus: set[int]) -> set[int]:
    """Set the affinity of every thread of this process; return it as read back."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:  # CPUs outside the cgroup's cpuset: keep those we may use
        cpus = cpus & os.sched_getaffinity(0)
        if not cpus:
            raise
        os.sched_setaffinity(0, cpus)
    cpus = os.sched_getaffinity(0)  # the kernel drops CPUs that are not there
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpus)
    return cpus


def pin_to_gpu_numa(
    local_rank: int | None = None,
    *,
    host: Host | None = None,
    env: Mapping[str, str] | None = None,
) -> set[int] | None:
    """Set this process's CPU affinity to the CPUs of its GPU's NUMA node.

    Call it early, before DataLoader workers and thread pools start (they inherit the
    affinity of the thread that creates them); threads that already exist are moved too.

    Args:
        local_rank: the rank on this machine; default the LOCAL_RANK variable, else 0.
        host: the /sys reader (a fake tree in tests).
        env: the environment; default os.environ.

    Returns:
        The CPUs now set, or None when nothing was changed (a warning says why).

    Example:
        badput.pin_to_gpu_numa(int(os.environ["LOCAL_RANK"]))
    """
    env = os.environ if env is None else env
    try:
        rank = local_rank if local_rank is not None else int(env.get("LOCAL_RANK", "0") or 0)
        _, cpus = gpu_numa_cpus(rank, host, env)
        return _apply(cpus)
    except (LookupError, OSError, ValueError) as e:
        warnings.warn(
            f"badput: not pinned to the GPU's NUMA node: {e}", TelemetryWarning, stacklevel=2
        )
        return None


def worker_init_fn(worker_id: int) -> None:
    """`DataLoader(worker_init_fn=badput.worker_init_fn)`: pin each worker like its rank.

    Args:
        worker_id: given by the DataLoader; the rank comes from LOCAL_RANK.
    """
    del worker_id
    pin_to_gpu_numa()
