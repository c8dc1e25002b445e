"""The doctor's GPU checks: pure functions of one NVML reading (`GpuInfo`) -> `Check`.

Sources of the constants:
- Clock event (throttle) reason bits: NVML API reference, nvmlClocksEventReasons
  (docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
- PCIe bandwidth per lane and direction after line coding: PCI-SIG base specifications
  (gen1 2.5 GT/s 8b/10b, gen2 5 GT/s 8b/10b, gen3 8 GT/s, gen4 16 GT/s, gen5 32 GT/s
  128b/130b, gen6 64 GT/s PAM4 FLIT).
- The PCIe link of an idle GPU drops to a lower generation to save power (NVIDIA's
  nvidia-smi documentation: "the current link generation ... may be reduced when the GPU is
  not in use"), so a lower generation is only reported on a busy GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from badput.telemetry.sources import GpuInfo

__all__ = [
    "Check",
    "Status",
    "check_clocks",
    "check_ecc",
    "check_mig",
    "check_mps",
    "check_nvlink",
    "check_pcie",
    "check_persistence",
    "check_power",
    "check_processes",
    "check_temperature",
    "check_throttle",
    "gpu_checks",
    "reason_names",
]


class Status(StrEnum):
    """Outcome of a check."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    NA = "n/a"


@dataclass(frozen=True)
class Check:
    """One doctor item: an id such as `gpu0.pcie`, its status, the evidence and the fix ("")."""

    id: str
    status: Status
    evidence: str
    fix: str = ""


# ---- GPU ----------------------------------------------------------------------------------

# NVML nvmlClocksEventReasons bits (see module docstring)
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100

_REASONS = {
    GPU_IDLE: "gpu_idle",
    APPLICATIONS_CLOCKS: "applications_clocks_setting",
    SW_POWER_CAP: "sw_power_cap",
    HW_SLOWDOWN: "hw_slowdown",
    SYNC_BOOST: "sync_boost",
    SW_THERMAL: "sw_thermal_slowdown",
    HW_THERMAL: "hw_thermal_slowdown",
    HW_POWER_BRAKE: "hw_power_brake_slowdown",
    DISPLAY_CLOCKS: "display_clock_setting",
}

# GB/s per lane and direction, after line coding (see module docstring)
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# Clocks below this share of the maximum on a busy GPU are reported.
CLOCK_MIN_SHARE = 0.9
# A temperature this close to the slowdown threshold (degrees C) is a warning.
TEMPERATURE_MARGIN_C = 5


def reason_names(mask: int) -> list[str]:
    """Names of the set bits of an NVML clock event reasons mask."""
    names = [name for bit, name in _REASONS.items() if mask & bit]
    unknown = mask & ~sum(_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


def _gid(g: GpuInfo, what: str) -> str:
    return f"gpu{g.index}.{what}"


def _idle(g: GpuInfo) -> bool:
    return bool((g.throttle_reasons or 0) & GPU_IDLE) or g.utilization_pct == 0


def check_persistence(g: GpuInfo) -> Check:
    """Persistence mode keeps the driver loaded between jobs (off: seconds of init per job)."""
    if g.persistence_mode is None:
        return Check(_gid(g, "persistence"), Status.NA, "persistence mode not reported")
    if g.persistence_mode:
        return Check(_gid(g, "persistence"), Status.OK, "persistence mode on")
    return Check(
        _gid(g, "persistence"),
        Status.WARN,
        "persistence mode off: the driver unloads when no process holds the GPU, and every "
        "job pays GPU initialization again",
        f"sudo nvidia-smi -i {g.index} -pm 1 (or run the nvidia-persistenced daemon)",
    )


def check_throttle(g: GpuInfo) -> Check:
    """Active clock event reasons: power and thermal slowdowns, in hardware or software."""
    cid = _gid(g, "throttle")
    if g.throttle_reasons is None:
        return Check(cid, Status.NA, "clock event reasons not reported")
    mask = g.throttle_reasons
    names = ", ".join(reason_names(mask)) or "none"
    evidence = f"active clock event reasons: {names} (mask 0x{mask:x})"
    if mask & (HW_THERMAL | SW_THERMAL | HW_SLOWDOWN | HW_POWER_BRAKE):
        fixes = []
        if mask & (HW_THERMAL | SW_THERMAL):
            fixes.append(
                "thermal slowdown: improve cooling (airflow, fan curves, inlet temperature); "
                "nvidia-smi -q -d TEMPERATURE,PERFORMANCE shows the thresholds"
            )
        if mask & (HW_SLOWDOWN | HW_POWER_BRAKE):
            fixes.append(
                "hardware slowdown or power brake: the board or PSU asserted it; check power "
                "supply and cooling with the operator"
            )
        return Check(cid, Status.FAIL, evidence, "; ".join(fixes))
    if mask & SW_POWER_CAP:
        return Check(
            cid,
            Status.WARN,
            evidence,
            "power capped: clocks drop to stay under the power limit; check the limit with "
            f"nvidia-smi -q -d POWER and raise it (sudo nvidia-smi -i {g.index} -pl WATTS, up "
            "to the max limit) or accept it for power-bound work",
        )
    if mask & APPLICATIONS_CLOCKS:
        return Check(
            cid,
            Status.WARN,
            evidence,
            f"application clocks are set below the maximum: sudo nvidia-smi -i {g.index} -rac",
        )
    return Check(cid, Status.OK, evidence)


def check_clocks(g: GpuInfo) -> Check:
    """Current SM and memory clocks against their maxima, on a GPU that is busy."""
    cid = _gid(g, "clocks")
    if g.sm_clock_mhz is None or not g.sm_clock_max_mhz:
        return Check(cid, Status.NA, "clocks not reported")
    evidence = f"SM {g.sm_clock_mhz} of {g.sm_clock_max_mhz} MHz"
    if g.mem_clock_mhz is not None and g.mem_clock_max_mhz:
        evidence += f", memory {g.mem_clock_mhz} of {g.mem_clock_max_mhz} MHz"
    if _idle(g):
        return Check(cid, Status.OK, evidence + " (GPU idle: clocks are lowered at idle)")
    share = g.sm_clock_mhz / g.sm_clock_max_mhz
    if share < CLOCK_MIN_SHARE:
        return Check(
            cid,
            Status.WARN,
            f"{evidence}: {100 * share:.0f} % of max while busy",
            "clocks below max under load: see the throttle check for the reason (power, "
            f"thermal, application clocks); sudo nvidia-smi -i {g.index} -rac resets clock "
            "settings, -lgc locks them for benchmarking",
        )
    return Check(cid, Status.OK, evidence)


def check_power(g: GpuInfo) -> Check:
    """Power draw against the enforced limit, and a limit lowered below the default."""
    cid = _gid(g, "power")
    if g.power_mw is None or not g.power_limit_mw:
        return Check(cid, Status.NA, "power not reported")
    evidence = (
        f"draw {g.power_mw / 1000:.0f} W of {g.power_limit_mw / 1000:.0f} W limit "
        f"({100 * g.power_mw / g.power_limit_mw:.0f} %)"
    )
    if g.power_default_limit_mw and g.power_limit_mw < g.power_default_limit_mw:
        return Check(
            cid,
            Status.WARN,
            f"{evidence}; the limit is below the default {g.power_default_limit_mw / 1000:.0f} W",
            f"power limit lowered: sudo nvidia-smi -i {g.index} -pl "
            f"{g.power_default_limit_mw // 1000} restores the default",
        )
    return Check(cid, Status.OK, evidence)


def check_temperature(g: GpuInfo) -> Check:
    """GPU temperature against its slowdown threshold."""
    cid = _gid(g, "temperature")
    if g.temperature_c is None:
        return Check(cid, Status.NA, "temperature not reported")
    if g.temperature_slowdown_c is None:
        return Check(cid, Status.OK, f"{g.temperature_c} C (slowdown threshold not reported)")
    evidence = f"{g.temperature_c} C, slowdown at {g.temperature_slowdown_c} C"
    fix = (
        "improve cooling (airflow, fan curves, inlet temperature); the GPU slows its clocks "
        "at the slowdown threshold"
    )
    if g.temperature_c >= g.temperature_slowdown_c:
        return Check(cid, Status.FAIL, evidence, fix)
    if g.temperature_c >= g.temperature_slowdown_c - TEMPERATURE_MARGIN_C:
        return Check(cid, Status.WARN, evidence, fix)
    return Check(cid, Status.OK, evidence)


def check_ecc(g: GpuInfo) -> Check:
    """Volatile ECC error counts: uncorrected errors are a failure."""
    cid = _gid(g, "ecc")
    if g.ecc_uncorrected is None and g.ecc_corrected is None:
        return Check(cid, Status.NA, "ECC not reported (ECC off or not supported)")
    evidence = (
        f"volatile ECC errors: {g.ecc_uncorrected or 0} uncorrected, "
        f"{g.ecc_corrected or 0} corrected"
    )
    if g.ecc_uncorrected:
        return Check(
            cid,
            Status.FAIL,
            evidence,
            f"uncorrected memory errors: drain the node, reset the GPU (sudo nvidia-smi -i "
            f"{g.index} -r) and check row remapping (nvidia-smi -q -d ROW_REMAPPER); if errors "
            "come back, report the GPU to the operator for replacement",
        )
    return Check(cid, Status.OK, evidence)


def check_pcie(g: GpuInfo) -> Check:
    """PCIe link generation and width, current against maximum."""
    cid = _gid(g, "pcie")
    if None in (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max):
        return Check(cid, Status.NA, "PCIe link not reported")
    gen, gen_max = int(g.pcie_gen or 0), int(g.pcie_gen_max or 0)
    width, width_max = int(g.pcie_width or 0), int(g.pcie_width_max or 0)

    def gbps(gen_: int, width_: int) -> str:
        lane = PCIE_LANE_GBPS.get(gen_)
        return f"{lane * width_:.1f} GB/s" if lane else "?"

    evidence = (
        f"gen{gen} x{width} of gen{gen_max} x{width_max} "
        f"({gbps(gen, width)} of {gbps(gen_max, width_max)} each way)"
    )
    if width < width_max:
        return Check(
            cid,
            Status.WARN,
            evidence,
            "link narrower than the GPU supports: reseat the card or move it to a full x16 "
            "slot, check risers and the BIOS lane bifurcation setting",
        )
    if gen < gen_max:
        if _idle(g):
            return Check(cid, Status.OK, evidence + " (GPU idle: the link drops its speed at idle)")
        return Check(
            cid,
            Status.WARN,
            evidence + " while busy",
            "link slower than the GPU supports: check the slot's generation, the BIOS PCIe "
            "speed setting and risers",
        )
    return Check(cid, Status.OK, evidence)


def check_nvlink(g: GpuInfo) -> Check:
    """NVLink links: every link the GPU has should be up."""
    cid = _gid(g, "nvlink")
    if not g.nvlink_up:
        return Check(cid, Status.NA, "no NVLink")
    up = sum(g.nvlink_up)
    down = [i for i, ok in enumerate(g.nvlink_up) if not ok]
    evidence = f"{up} of {len(g.nvlink_up)} NVLinks up"
    if down:
        return Check(
            cid,
            Status.WARN,
            f"{evidence}; down: {', '.join(map(str, down))}",
            "NVLink down: collectives fall back to slower paths; check nvidia-smi nvlink -s, "
            "the fabric manager (systemctl status nvidia-fabricmanager on NVSwitch systems), "
            "then reset the GPU or report it to the operator",
        )
    return Check(cid, Status.OK, evidence)


def check_mig(g: GpuInfo) -> Check:
    """MIG mode: enabled means a job sees one slice of the GPU, not all of it."""
    cid = _gid(g, "mig")
    if g.mig_mode is None:
        return Check(cid, Status.NA, "MIG not supported")
    if g.mig_mode:
        n = "?" if g.mig_instances is None else str(g.mig_instances)
        return Check(
            cid,
            Status.WARN,
            f"MIG enabled with {n} GPU instances: a process sees one instance, not the GPU",
            f"if the job should use the whole GPU: sudo nvidia-smi -i {g.index} -mig 0 (takes "
            "effect after a GPU reset)",
        )
    if g.mig_pending:
        return Check(
            cid,
            Status.WARN,
            "MIG disabled, enable pending a GPU reset",
            f"reset the GPU (sudo nvidia-smi -i {g.index} -r) or cancel with -mig 0",
        )
    return Check(cid, Status.OK, "MIG disabled")


def check_processes(g: GpuInfo, own_pids: set[int]) -> Check:
    """Other processes with a context on the GPU share its compute and memory."""
    cid = _gid(g, "processes")
    others = [p for p in g.processes if p.pid not in own_pids]
    if not others:
        return Check(cid, Status.OK, "no other processes on the GPU")
    listed = ", ".join(
        f"pid {p.pid}"
        + (f" ({p.used_memory_bytes / 2**30:.1f} GiB)" if p.used_memory_bytes else "")
        for p in others
    )
    return Check(
        cid,
        Status.WARN,
        f"{len(others)} other process(es) on the GPU: {listed}",
        "they share its compute and memory: stop them, or pick another GPU with "
        "CUDA_VISIBLE_DEVICES",
    )


def gpu_checks(g: GpuInfo, own_pids: set[int]) -> list[Check]:
    """Every per-GPU check, in a fixed order."""
    return [
        check_persistence(g),
        check_throttle(g),
        check_clocks(g),
        check_power(g),
        check_temperature(g),
        check_ecc(g),
        check_pcie(g),
        check_nvlink(g),
        check_mig(g),
        check_processes(g, own_pids),
    ]


def check_mps(pids: Sequence[int]) -> Check:
    """Whether an MPS control daemon runs (processes then share GPUs through it)."""
    if pids:
        return Check(
            "gpu.mps",
            Status.OK,
            f"MPS control daemon running (pid {', '.join(map(str, pids))}): CUDA processes "
            "share the GPUs through it",
        )
    return Check("gpu.mps", Status.OK, "no MPS control daemon running")
