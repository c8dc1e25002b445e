"""NUMA pinning: fake topologies, and the affinity really set and read back on this machine."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import badput
from badput.telemetry import Host, TelemetryWarning, pinning
from badput.telemetry.pinning import gpu_numa_cpus, pin_to_gpu_numa, worker_init_fn


def fake_topology(root: Path, gpu_nodes: list[int | None], node_cpus: dict[int, str]) -> Host:
    files: dict[str, str] = {}
    for node, cpus in node_cpus.items():
        files[f"sys/devices/system/node/node{node}/cpulist"] = cpus + "\n"
    for i, node in enumerate(gpu_nodes):
        dev = f"sys/bus/pci/devices/0000:{0x18 + i:02x}:00.0"
        files[f"{dev}/vendor"] = "0x10de\n"
        files[f"{dev}/class"] = "0x030200\n"
        files[f"{dev}/numa_node"] = f"{-1 if node is None else node}\n"
    # a non-NVIDIA device and an NVIDIA non-GPU function (audio) are not GPUs
    files["sys/bus/pci/devices/0000:00:01.0/vendor"] = "0x8086\n"
    files["sys/bus/pci/devices/0000:00:01.0/class"] = "0x030000\n"
    files["sys/bus/pci/devices/0000:17:00.1/vendor"] = "0x10de\n"
    files["sys/bus/pci/devices/0000:17:00.1/class"] = "0x040300\n"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return Host(str(root))


@pytest.fixture
def restore_affinity() -> Iterator[set[int]]:
    before = os.sched_getaffinity(0)
    try:
        yield before
    finally:
        os.sched_setaffinity(0, before)


def test_gpu_numa_cpus_fake_topology(tmp_path: Path) -> None:
    host = fake_topology(tmp_path, [0, 0, 1, 1], {0: "0-15,32-47", 1: "16-31,48-63"})
    assert gpu_numa_cpus(0, host, {}) == (0, set(range(16)) | set(range(32, 48)))
    assert gpu_numa_cpus(3, host, {})[0] == 1
    assert gpu_numa_cpus(0, host, {"CUDA_VISIBLE_DEVICES": "2,3"})[0] == 1
    with pytest.raises(LookupError, match="no NVIDIA GPU 4"):
        gpu_numa_cpus(4, host, {})
    with pytest.raises(LookupError, match="no GPU index"):
        gpu_numa_cpus(0, host, {"CUDA_VISIBLE_DEVICES": "GPU-8f0c"})


def test_no_numa_node_warns(tmp_path: Path, restore_affinity: set[int]) -> None:
    host = fake_topology(tmp_path, [None], {0: "0"})
    with pytest.warns(TelemetryWarning, match="no NUMA node"):
        assert pin_to_gpu_numa(0, host=host, env={}) is None
    assert os.sched_getaffinity(0) == restore_affinity


def test_pin_really_applied(tmp_path: Path, restore_affinity: set[int]) -> None:
    cpu = min(restore_affinity)
    host = fake_topology(tmp_path, [0], {0: str(cpu)})
    started = threading.Event()
    done = threading.Event()
    tids: list[int] = []

    def worker() -> None:  # a thread that exists before the pin is moved too
        tids.append(threading.get_native_id())
        started.set()
        done.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    started.wait(5)
    try:
        assert pin_to_gpu_numa(0, host=host, env={}) == {cpu}
        assert os.sched_getaffinity(0) == {cpu}
        assert os.sched_getaffinity(tids[0]) == {cpu}
    finally:
        done.set()
        t.join()


def test_pin_outside_cpuset_keeps_allowed_cpus(tmp_path: Path, restore_affinity: set[int]) -> None:
    cpu = min(restore_affinity)
    # the node lists a CPU this machine does not have (4095) beside one it may use
    host = fake_topology(tmp_path, [0], {0: f"{cpu},4095"})
    assert pin_to_gpu_numa(0, host=host, env={}) == {cpu}
    assert os.sched_getaffinity(0) == {cpu}


def test_pin_on_this_machine_without_gpu(restore_affinity: set[int]) -> None:
    if Host().pci_gpus():
        pytest.skip("this machine has NVIDIA GPUs")
    with pytest.warns(TelemetryWarning, match="no NVIDIA GPU 0 on the PCI bus"):
        assert badput.pin_to_gpu_numa(0) is None
    assert os.sched_getaffinity(0) == restore_affinity


def test_local_rank_from_env(tmp_path: Path, restore_affinity: set[int]) -> None:
    cpus = sorted(restore_affinity)
    host = fake_topology(tmp_path, [0, 1], {0: str(cpus[0]), 1: str(cpus[-1])})
    assert pin_to_gpu_numa(host=host, env={"LOCAL_RANK": "1"}) == {cpus[-1]}
    assert os.sched_getaffinity(0) == {cpus[-1]}


def test_worker_init_fn_in_dataloader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_affinity: set[int]
) -> None:
    torch = pytest.importorskip("torch")
    cpus = sorted(restore_affinity)
    root = tmp_path / "tree"
    fake_topology(root, [0, 1], {0: str(cpus[0]), 1: str(cpus[-1])})
    monkeypatch.setattr(pinning, "Host", lambda: Host(str(root)))
    monkeypatch.setenv("LOCAL_RANK", "1")

    class Affinity(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> list[int]:
            return sorted(os.sched_getaffinity(0))

    loader = torch.utils.data.DataLoader(
        Affinity(),
        batch_size=None,
        num_workers=1,
        worker_init_fn=badput.worker_init_fn,
        multiprocessing_context="fork",
    )
    seen = [[int(c) for c in batch] for batch in loader]
    assert seen == [[cpus[-1]], [cpus[-1]]]
    assert os.sched_getaffinity(0) == restore_affinity  # the main process is untouched
    worker_init_fn(0)  # in this process too: pinned like a worker
    assert os.sched_getaffinity(0) == {cpus[-1]}
