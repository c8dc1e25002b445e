"""`badput doctor`: on this machine (no GPU), and on replayed GPU readings and fake /sys trees."""

from __future__ import annotations

import json
import os
import resource
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from badput.cli.app import main
from badput.telemetry.doctor import run_doctor
from badput.telemetry.gpu_checks import Status, gpu_checks
from badput.telemetry.host_checks import (
    Software,
    check_cpu_quota,
    check_env,
    check_governor,
    check_nofile,
    check_shm,
    check_torch,
    redact_env,
)
from badput.telemetry.sources import (
    FakeNvml,
    GpuInfo,
    GpuProcess,
    Host,
    NvmlUnavailable,
    RealNvml,
    record_nvml,
)

HEALTHY = GpuInfo(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    bus_id="00000000:06:00.0",
    persistence_mode=True,
    sm_clock_mhz=1980,
    sm_clock_max_mhz=1980,
    mem_clock_mhz=2619,
    mem_clock_max_mhz=2619,
    throttle_reasons=0,
    power_mw=650_000,
    power_limit_mw=700_000,
    power_default_limit_mw=700_000,
    temperature_c=60,
    temperature_slowdown_c=87,
    ecc_uncorrected=0,
    ecc_corrected=0,
    pcie_gen=5,
    pcie_gen_max=5,
    pcie_width=16,
    pcie_width_max=16,
    nvlink_up=(True,) * 18,
    mig_mode=False,
    mig_pending=False,
    utilization_pct=100,
    memory_used_bytes=70 << 30,
    memory_total_bytes=80 << 30,
    processes=(GpuProcess(os.getpid(), 70 << 30),),
)


def _ids(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["id"]: c for c in doc["checks"]}


def _doctor_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code = main(["doctor", "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


# ---- this machine -----------------------------------------------------------------------


def test_doctor_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doctor_json(capsys)
    assert set(doc) == {"checks"}
    for c in doc["checks"]:
        assert set(c) == {"id", "status", "evidence", "fix"}
        assert c["status"] in {"ok", "warn", "fail", "n/a"}
    checks = _ids(doc)
    if not Path("/proc/driver/nvidia/version").exists():
        assert checks["gpu.driver"]["status"] == "n/a"
        assert "no NVIDIA driver found" in checks["gpu.driver"]["evidence"]
        assert checks["topology.gpu_affinity"]["status"] == "n/a"
    for cid in (
        "topology.numa",
        "topology.rdma",
        "host.cpu",
        "host.cgroup_cpu",
        "host.cgroup_memory",
        "host.cpu_governor",
        "host.memory",
        "host.swap",
        "host.shm",
        "host.nofile",
        "storage.read",
        "software.torch",
        "software.env",
    ):
        assert cid in checks, cid
    # values read from this machine, checked against the same facts read another way
    affinity = len(os.sched_getaffinity(0))
    online = Host().online_cpus()
    assert (
        f"{len(online) or os.cpu_count()} CPUs online, {affinity} in this process"
        in (checks["host.cpu"]["evidence"])
    )
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    assert f"{total_kb * 1024 / 2**30:.1f} GiB total" in checks["host.memory"]["evidence"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert (
        f"open files limit {soft} (hard {hard})"
        == checks["host.nofile"]["evidence"][: len(f"open files limit {soft} (hard {hard})")]
    )
    st = os.statvfs("/dev/shm")
    assert f"/dev/shm {st.f_blocks * st.f_frsize / 2**30:.1f} GiB" in checks["host.shm"]["evidence"]
    nodes = [n for n in os.listdir("/sys/devices/system/node") if n[4:].isdigit()]
    assert f"{len(nodes)} NUMA node(s)" in checks["topology.numa"]["evidence"]
    assert checks["host.cgroup_cpu"]["status"] in {"ok", "warn", "n/a"}
    assert checks["storage.read"]["status"] == "n/a"
    assert checks["storage.read"]["fix"] == "--data DIR"


def test_doctor_text_and_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "host.cpu" in out and "badput doctor" in out
    target = tmp_path / "doctor.json"
    assert main(["doctor", "--format", "json", "--out", str(target)]) == 0
    assert capsys.readouterr().out == ""
    assert "checks" in json.loads(target.read_text())


def test_doctor_storage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(os.urandom(20 << 20))
    (data / "shard-1.bin").write_bytes(os.urandom(4 << 20))
    storage = _ids(_doctor_json(capsys, "--data", str(data)))["storage.read"]
    assert storage["status"] in {"ok", "warn"}
    assert f"{(24 << 20) / 1e6:.1f} MB from 2 files" in storage["evidence"]


def test_doctor_bad_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--data", str(tmp_path / "missing")])
    _out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "not a directory" in err and "Traceback" not in err


# ---- replayed GPU conditions ------------------------------------------------------------

CASES = [
    # (name, changes, check id, status, words the fix must contain)
    ("power capped", {"throttle_reasons": 0x4}, "throttle", "warn", "-pl"),
    ("thermal slowdown", {"throttle_reasons": 0x40}, "throttle", "fail", "cooling"),
    ("hw power brake", {"throttle_reasons": 0x80}, "throttle", "fail", "power supply"),
    ("app clocks", {"throttle_reasons": 0x2}, "throttle", "warn", "-rac"),
    ("pcie x8 of x16", {"pcie_width": 8}, "pcie", "warn", "x16 slot"),
    ("pcie gen3 of gen4 busy", {"pcie_gen": 3, "pcie_gen_max": 4}, "pcie", "warn", "BIOS"),
    ("mig enabled", {"mig_mode": True, "mig_instances": 7}, "mig", "warn", "-mig 0"),
    ("mig pending", {"mig_pending": True}, "mig", "warn", "-r"),
    ("ecc uncorrected", {"ecc_uncorrected": 3}, "ecc", "fail", "nvidia-smi -i 0 -r"),
    ("persistence off", {"persistence_mode": False}, "persistence", "warn", "-pm 1"),
    (
        "other processes",
        {"processes": (GpuProcess(os.getpid()), GpuProcess(999_999, 4 << 30))},
        "processes",
        "warn",
        "CUDA_VISIBLE_DEVICES",
    ),
    ("clocks below max", {"sm_clock_mhz": 1410}, "clocks", "warn", "-rac"),
    ("nvlink down", {"nvlink_up": (True,) * 17 + (False,)}, "nvlink", "warn", "fabricmanager"),
    ("power limit lowered", {"power_limit_mw": 500_000}, "power", "warn", "-pl 700"),
    ("at slowdown temperature", {"temperature_c": 88}, "temperature", "fail", "cooling"),
    ("near slowdown temperature", {"temperature_c": 84}, "temperature", "warn", "cooling"),
]


@pytest.mark.parametrize(
    ("changes", "check", "status", "remedy"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_replayed_gpu_condition(
    changes: dict[str, Any], check: str, status: str, remedy: str
) -> None:
    checks = {c.id: c for c in gpu_checks(replace(HEALTHY, **changes), {os.getpid()})}
    got = checks[f"gpu0.{check}"]
    assert got.status == status, got
    assert remedy in got.fix, got.fix
    others = [c for c in checks.values() if c.id != f"gpu0.{check}"]
    # one condition at a time: the rest stays healthy (clocks follow a throttle reason)
    assert all(c.status in {Status.OK, Status.NA} for c in others if c.id != "gpu0.clocks")


def test_healthy_gpu_is_ok() -> None:
    checks = gpu_checks(HEALTHY, {os.getpid()})
    assert [c.status for c in checks] == [Status.OK] * len(checks)
    assert all(c.fix == "" for c in checks)
    pcie = next(c for c in checks if c.id == "gpu0.pcie")
    assert pcie.evidence == "gen5 x16 of gen5 x16 (63.0 GB/s of 63.0 GB/s each way)"


def test_idle_gpu_lower_pcie_gen_and_clocks_are_fine() -> None:
    idle = replace(HEALTHY, utilization_pct=0, throttle_reasons=0x1, pcie_gen=1, sm_clock_mhz=345)
    checks = {c.id: c for c in gpu_checks(idle, {os.getpid()})}
    assert checks["gpu0.pcie"].status == Status.OK and "idle" in checks["gpu0.pcie"].evidence
    assert checks["gpu0.clocks"].status == Status.OK
    assert checks["gpu0.throttle"].status == Status.OK


def test_unsupported_fields_are_na() -> None:
    bare = GpuInfo(index=1, name="Tesla T4", bus_id="00000000:3b:00.0")
    statuses = {c.id: c.status for c in gpu_checks(bare, set())}
    assert statuses["gpu1.nvlink"] == Status.NA
    assert statuses["gpu1.mig"] == Status.NA
    assert statuses["gpu1.processes"] == Status.OK


# ---- fake /sys trees --------------------------------------------------------------------


def make_tree(root: Path, files: dict[str, str]) -> Host:
    for rel, text in files.items():
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return Host(str(root))


def two_socket_tree(root: Path, gpu_nodes: tuple[int, ...] = (1,)) -> Host:
    files = {
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node1/cpulist": "4-7\n",
        "/sys/devices/system/cpu/online": "0-7\n",
        "/proc/cpuinfo": "model name\t: Fake Xeon\n",
        "/proc/self/cgroup": "0::/job\n",
        "/sys/fs/cgroup/job/cpu.max": "200000 100000\n",
        "/sys/fs/cgroup/job/memory.max": str(64 << 30) + "\n",
        "/proc/meminfo": "MemTotal: 1048576 kB\nMemAvailable: 524288 kB\n"
        "SwapTotal: 0 kB\nSwapFree: 0 kB\n",
    }
    for i, node in enumerate(gpu_nodes):
        dev = f"/sys/bus/pci/devices/0000:{6 + i:02x}:00.0"
        files[f"{dev}/vendor"] = "0x10de\n"
        files[f"{dev}/class"] = "0x030200\n"
        files[f"{dev}/numa_node"] = f"{node}\n"
    return make_tree(root, files)


def _fake_nvml(*gpus: GpuInfo) -> FakeNvml:
    return FakeNvml(
        {
            "driver_version": "550.54.15",
            "cuda_driver_version": 12040,
            "gpus": [asdict(g) for g in gpus],
        }
    )


def _run(host: Host, affinity: set[int], env: dict[str, str], *gpus: GpuInfo) -> dict[str, Any]:
    checks = run_doctor(
        host=host,
        nvml=_fake_nvml(*gpus),
        env=env,
        affinity=affinity,
        software=Software(torch="2.4.0", cuda="12.4", cudnn=90100, nccl="2.20.5"),
        nofile=(65536, 65536),
        shm=(16 << 30, 16 << 30),
    )
    return {c.id: c for c in checks}


@pytest.mark.parametrize(
    ("affinity", "status"),
    [({0, 1, 2, 3}, Status.FAIL), (set(range(8)), Status.WARN), ({4, 5, 6, 7}, Status.OK)],
)
def test_numa_mismatch(tmp_path: Path, affinity: set[int], status: Status) -> None:
    host = two_socket_tree(tmp_path)
    checks = _run(host, affinity, {"LOCAL_RANK": "0"}, HEALTHY)
    got = checks["topology.gpu_affinity"]
    assert got.status == status, got
    assert "NUMA node 1 (CPUs 4-7)" in got.evidence
    if status != Status.OK:
        assert "badput.pin_to_gpu_numa(0)" in got.fix and "--cpunodebind=1" in got.fix
    assert checks["gpu.driver"].evidence.startswith("driver 550.54.15, CUDA 12.4; 1 GPU(s)")
    assert checks["topology.numa"].evidence == "2 NUMA node(s): node0: CPUs 0-3; node1: CPUs 4-7"


def test_numa_local_rank_and_visible_devices(tmp_path: Path) -> None:
    host = two_socket_tree(tmp_path, gpu_nodes=(0, 1))
    g1 = replace(HEALTHY, index=1, bus_id="00000000:07:00.0")
    checks = _run(host, {0, 1, 2, 3}, {"LOCAL_RANK": "1"}, HEALTHY, g1)
    assert checks["topology.gpu_affinity"].status == Status.FAIL
    assert "LOCAL_RANK=1 uses GPU 1" in checks["topology.gpu_affinity"].evidence
    checks = _run(
        host, {0, 1, 2, 3}, {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "1,0"}, HEALTHY, g1
    )
    assert checks["topology.gpu_affinity"].status == Status.OK


def test_fake_tree_host_checks(tmp_path: Path) -> None:
    host = two_socket_tree(tmp_path)
    checks = _run(host, set(range(8)), {}, HEALTHY)
    quota = checks["host.cgroup_cpu"]
    assert quota.status == Status.WARN and "CPU quota 2.00 CPUs" in quota.evidence
    assert "OMP_NUM_THREADS=2" in quota.fix
    assert checks["host.cgroup_memory"].evidence.startswith("memory limit 64.0 GiB")
    assert checks["host.cpu"].evidence == "Fake Xeon: 8 CPUs online, 8 in this process's affinity"
    assert checks["software.torch"].status == Status.OK


def test_cgroup_v1(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {
            "/proc/self/cgroup": "4:memory:/job\n3:cpu,cpuacct:/job\n",
            "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "150000\n",
            "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/memory/job/memory.limit_in_bytes": "9223372036854771712\n",
        },
    )
    # cgroup v1 mounts co-mounted controllers as "cpu,cpuacct"; this tree has only that
    # directory, so the reader must not find "cpu" there ...
    assert host.cgroup_cpu_quota() == (None, None)
    make_tree(tmp_path, {"/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us": "150000\n"})
    make_tree(tmp_path, {"/sys/fs/cgroup/cpu/job/cpu.cfs_period_us": "100000\n"})
    assert host.cgroup_cpu_quota() == (1.5, "/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us")
    assert host.cgroup_memory_limit_bytes() == (
        None,
        "/sys/fs/cgroup/memory/job/memory.limit_in_bytes",
    )


@pytest.mark.parametrize(
    ("check", "status", "remedy"),
    [
        (check_cpu_quota(1.0, "cpu.max", 4), Status.WARN, "OMP_NUM_THREADS=1"),
        (check_cpu_quota(None, "cpu.max", 4), Status.OK, ""),
        (check_shm(64 << 20, 60 << 20), Status.WARN, "--shm-size"),
        (check_nofile(1024, 4096), Status.WARN, "ulimit -n 4096"),
        (check_governor({"powersave": 8}), Status.WARN, "frequency-set -g performance"),
        (check_governor({"performance": 8}), Status.OK, ""),
    ],
)
def test_host_conditions(check: Any, status: Status, remedy: str) -> None:
    assert check.status == status
    assert remedy in check.fix


@pytest.mark.parametrize(
    ("sw", "driver", "gpus", "status"),
    [
        (Software("2.4.0", "12.4", 90100, "2.20.5"), 11080, 1, Status.FAIL),
        (Software("2.4.0", "12.4", 90100, "2.20.5"), 12020, 1, Status.WARN),
        (Software("2.4.0", "12.4", 90100, "2.20.5"), 12060, 1, Status.OK),
        (Software("2.4.0", None, None, None), None, 2, Status.FAIL),
        (Software("2.4.0", None, None, None), None, 0, Status.OK),
        (Software(), None, 0, Status.NA),
        (Software(error="torch import failed: OSError: libcudart"), None, 0, Status.FAIL),
    ],
)
def test_known_bad_software(sw: Software, driver: int | None, gpus: int, status: Status) -> None:
    check = check_torch(sw, driver, gpus)
    assert check.status == status, check
    if status == Status.FAIL and sw.torch:
        assert "install" in check.fix


@pytest.mark.parametrize(
    ("env", "status", "remedy"),
    [
        ({"CUDA_LAUNCH_BLOCKING": "1"}, Status.FAIL, "unset CUDA_LAUNCH_BLOCKING"),
        ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, Status.FAIL, "unset PYTORCH_NO_CUDA"),
        ({"NCCL_DEBUG": "INFO"}, Status.WARN, "NCCL_DEBUG=WARN"),
        ({"NCCL_P2P_DISABLE": "1"}, Status.WARN, "unset NCCL_P2P_DISABLE"),
        ({"CUDA_VISIBLE_DEVICES": ""}, Status.WARN, "unset CUDA_VISIBLE_DEVICES"),
        ({"OMP_NUM_THREADS": "64"}, Status.WARN, "OMP_NUM_THREADS=8"),
        ({"OMP_NUM_THREADS": "4", "NCCL_DEBUG": "WARN"}, Status.OK, ""),
    ],
)
def test_env_conditions(env: dict[str, str], status: Status, remedy: str) -> None:
    check = check_env(env, allowed_cpus=8, rdma=False)
    assert check.status == status, check
    assert remedy in check.fix


def test_ib_disabled_with_rdma() -> None:
    assert check_env({"NCCL_IB_DISABLE": "1"}, 8, rdma=True).status == Status.WARN
    assert check_env({"NCCL_IB_DISABLE": "1"}, 8, rdma=False).status == Status.OK


SECRETS = {
    "TORCH_HUB_TOKEN": "hf_SECRETtoken123",
    "NCCL_IB_PASSWORD": "pa55-SECRET-789",
    "CUDA_API_KEY": "sk-SECRETkey456",
    "PYTORCH_CREDENTIALS": "SECRETcred000",
}


def test_secrets_never_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = redact_env({**SECRETS, "NCCL_DEBUG": "WARN", "HOME": "/root"})
    assert shown == {**dict.fromkeys(SECRETS, "REDACTED"), "NCCL_DEBUG": "WARN"}
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")  # a failing check prints the env listing
    for fmt in ("json", "text"):
        code = main(["doctor", "--format", fmt])
        out, err = capsys.readouterr()
        assert code == 0
        for value in SECRETS.values():
            assert value not in out and value not in err
        assert "REDACTED" in out
    env = _ids(_doctor_json(capsys))["software.env"]
    assert env["status"] == "fail" and "TORCH_HUB_TOKEN=REDACTED" in env["evidence"]


# ---- the whole command on a recording, --strict -----------------------------------------


def test_replay_through_cli_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(record_nvml(_fake_nvml(HEALTHY))))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record_nvml(_fake_nvml(replace(HEALTHY, ecc_uncorrected=2)))))
    checks = _ids(_doctor_json(capsys, "--nvml-replay", str(bad)))
    assert checks["gpu0.ecc"]["status"] == "fail"
    assert checks["gpu.driver"]["evidence"] == (
        "driver 550.54.15, CUDA 12.4; 1 GPU(s): NVIDIA H100 80GB HBM3"
    )
    assert checks["gpu.mps"]["status"] == "ok"
    assert main(["doctor", "--nvml-replay", str(bad), "--strict"]) == 1
    capsys.readouterr()
    # this machine's own checks may fail (a CPU-only torch beside a replayed GPU); strict
    # exits 1 exactly when a check failed
    code = main(["doctor", "--nvml-replay", str(ok), "--strict", "--format", "json"])
    failed = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["status"] == "fail"]
    assert code == (1 if failed else 0)
    assert all(c["id"] != "gpu0.ecc" for c in failed)
    bogus = tmp_path / "bogus.json"
    bogus.write_text("[1, 2]")
    assert main(["doctor", "--nvml-replay", str(bogus)]) == 2
    assert "not an NVML recording" in capsys.readouterr().err


def test_record_replay_round_trip() -> None:
    fake = _fake_nvml(HEALTHY, replace(HEALTHY, index=1, nvlink_up=None, mig_mode=None))
    again = FakeNvml(json.loads(json.dumps(record_nvml(fake))))
    assert again.device_count() == 2
    assert again.device_info(0) == HEALTHY
    assert again.device_info(1).nvlink_up is None
    assert again.cuda_driver_version() == 12040


# ---- RealNvml over a stand-in pynvml module -----------------------------------------------


class NotSupported(Exception):
    pass


class FakePynvml:
    """The pynvml calls RealNvml makes, answering like an A100 with 2 NVLinks."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 0, 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC = 0
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1

    def __init__(self) -> None:
        self.shutdown = False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.104.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetPciInfo(self, h: str) -> Any:
        return type("Pci", (), {"busId": b"00000000:07:00.0"})()

    def nvmlDeviceGetPersistenceMode(self, h: str) -> int:
        return 0

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return 1200 if clock == 1 else 1593

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        return 1410 if clock == 1 else 1593

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return 0x4

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 398_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return 400_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: str) -> int:
        return 400_000

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 71

    def nvmlDeviceGetTemperatureThreshold(self, h: str, kind: int) -> int:
        raise NotSupported

    def nvmlDeviceGetTotalEccErrors(self, h: str, kind: int, counter: int) -> int:
        return 5 if kind == 0 else 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: str) -> int:
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: str) -> int:
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: str) -> int:
        return 8

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: str) -> int:
        return 16

    def nvmlDeviceGetNvLinkState(self, h: str, link: int) -> int:
        if link >= 2:
            raise NotSupported
        return 1 if link == 0 else 0

    def nvmlDeviceGetMigMode(self, h: str) -> tuple[int, int]:
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: str, i: int) -> str:
        if i >= 3:
            raise NotSupported
        return f"mig{i}"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return type("U", (), {"gpu": 97, "memory": 40})()

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return type("M", (), {"used": 10 << 30, "total": 80 << 30})()

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        return [type("P", (), {"pid": 4242, "usedGpuMemory": None})()]

    def nvmlDeviceGetPcieThroughput(self, h: str, counter: int) -> int:
        return 1000 if counter == 0 else 2000


def test_real_nvml_adapter() -> None:
    module = FakePynvml()
    nvml = RealNvml(module)
    assert nvml.driver_version() == "535.104.05"
    assert nvml.cuda_driver_version() == 12020
    g = nvml.device_info(0)
    assert g.bus_id == "00000000:07:00.0" and g.persistence_mode is False
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz) == (1200, 1410)
    assert g.throttle_reasons == 0x4 and g.temperature_slowdown_c is None
    assert (g.ecc_corrected, g.ecc_uncorrected) == (5, 0)
    assert (g.pcie_gen, g.pcie_width, g.pcie_width_max) == (4, 8, 16)
    assert g.nvlink_up == (True, False)
    assert (g.mig_mode, g.mig_pending, g.mig_instances) == (True, True, 3)
    assert g.processes == (GpuProcess(4242, None),)
    s = nvml.sample(0)
    assert (s.utilization_pct, s.pcie_tx_bytes_per_s, s.pcie_rx_bytes_per_s) == (
        97,
        1000 * 1024,
        2000 * 1024,
    )
    statuses = {c.id: c.status for c in gpu_checks(g, set())}
    assert statuses == {
        "gpu0.persistence": Status.WARN,
        "gpu0.throttle": Status.WARN,
        "gpu0.clocks": Status.WARN,
        "gpu0.power": Status.OK,
        "gpu0.temperature": Status.OK,
        "gpu0.ecc": Status.OK,
        "gpu0.pcie": Status.WARN,
        "gpu0.nvlink": Status.WARN,
        "gpu0.mig": Status.WARN,
        "gpu0.processes": Status.WARN,
    }
    nvml.close()
    assert module.shutdown


def test_real_nvml_without_driver() -> None:
    pytest.importorskip("pynvml")
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver found"):
        RealNvml()


def test_doctor_options() -> None:
    import typer

    from badput.cli.app import app

    doctor = typer.main.get_command(app).commands["doctor"]  # type: ignore[attr-defined]
    params = {p.name: p for p in doctor.params}
    assert sorted(params) == [
        "data",
        "nvml_record",
        "nvml_replay",
        "out",
        "output_format",
        "strict",
    ]
    assert set(params["output_format"].opts) == {"--format", "-f"}
    assert params["data"].opts == ["--data"] and params["strict"].opts == ["--strict"]


def test_real_nvml_pcie_fallback_is_rate_limited() -> None:
    nvml = RealNvml(FakePynvml())
    assert nvml.sample(0).pcie_tx_bytes_per_s == 1000 * 1024
    # the 20 ms-per-direction measurement is not repeated within a second
    again = nvml.sample(0)
    assert (again.pcie_tx_bytes_per_s, again.pcie_rx_bytes_per_s) == (None, None)
    assert again.utilization_pct == 97


class Field:
    def __init__(self, ts_us: int, value: int, ret: int = 0) -> None:
        self.timestamp, self.nvmlReturn = ts_us, ret
        self.value = type("V", (), {"ullVal": value})()


class CounterPynvml(FakePynvml):
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 197, 198

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def nvmlDeviceGetFieldValues(self, h: str, ids: list[int]) -> list[Field]:
        assert ids == [197, 198]
        self.reads += 1
        t = self.reads * 100_000  # a read every 100 ms
        return [Field(t, self.reads * 5_000_000), Field(t, self.reads * 1_000_000)]

    def nvmlDeviceGetPcieThroughput(self, h: str, counter: int) -> int:
        raise AssertionError("counters are there: no blocking throughput read")


def test_real_nvml_pcie_from_counters() -> None:
    nvml = RealNvml(CounterPynvml())
    first = nvml.sample(0)
    assert (first.pcie_tx_bytes_per_s, first.pcie_rx_bytes_per_s) == (None, None)
    second = nvml.sample(0)
    # 5 MB and 1 MB more in 100 ms
    assert (second.pcie_tx_bytes_per_s, second.pcie_rx_bytes_per_s) == (50_000_000, 10_000_000)


def test_gpus_on_the_bus_without_driver(tmp_path: Path) -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    host = two_socket_tree(tmp_path, gpu_nodes=(1,))
    checks = {
        c.id: c
        for c in run_doctor(
            host=host,
            env={},
            affinity={0, 1},
            software=Software(torch="2.4.0", cuda="12.4"),
            nofile=(65536, 65536),
            shm=(16 << 30, 16 << 30),
        )
    }
    driver = checks["gpu.driver"]
    assert driver.status == Status.FAIL
    assert "1 NVIDIA GPU(s) on the PCI bus; driver: not loaded" in driver.evidence
    assert driver.fix == "load or install the NVIDIA driver"
    # topology still works from the PCI bus
    assert checks["topology.gpu_affinity"].status == Status.FAIL
    assert "GPU 0 (0000:06:00.0) on NUMA node 1" in checks["topology.gpu_affinity"].evidence
