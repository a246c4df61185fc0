"""GPU health from NVML, judged: one function turns a host's GPUs into findings.

The agent reads the values every few seconds (tui/remote/nvml_health.py); the boundary
(tui/cluster/agent_schema.py) types them into `GpuHealth`. This module decides what they mean,
for the Cluster screen, ``gpus`` and ``check`` alike:

error  an uncorrectable ECC error since the driver loaded (volatile > 0); a row-remapping
       failure; a row remap or page retirement pending (memory is unreliable until the GPU
       is reset)
warn   a clock slowdown now that is not routine (HW slowdown, HW thermal, HW power brake, SW
       thermal); a PCIe link narrower than its maximum, or a slower generation than its
       maximum while the GPU is busy (idle GPUs lower the generation to save power, so it is
       judged only under load); persistence mode off on a multi-GPU node; ECC off; an
       uncorrectable ECC error in the GPU's lifetime (aggregate); XID critical errors
ok     none of the above (power capping under load is routine: the device run on an H100
       showed SW power cap whenever the GPU was busy)
na     no reading at all (an old driver, a GPU without these counters)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tui.cluster.models import GpuHealth, GpuSample

Level = Literal["error", "warn", "ok", "na"]
LEVELS: tuple[Level, ...] = ("na", "ok", "warn", "error")  # best to worst
RANK: dict[str, int] = {level: i for i, level in enumerate(LEVELS)}

BUSY_UTIL = 50.0  # % utilization from which a PCIe generation below max is a finding
# Clock event reasons that mean the GPU is held back by something wrong (words of
# tui/remote/nvml_health.CLOCK_REASONS). SW power cap, idle, sync boost and application clocks
# are routine.
SLOWDOWNS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal": "HW thermal slowdown",
    "hw_power_brake": "HW power brake",
    "sw_thermal": "SW thermal slowdown",
}
_READINGS = (
    "ecc_mode",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_uncorrected",
    "retired_pages_pending",
    "remap_pending",
    "remap_failure",
    "clock_reasons",
    "pcie_width",
    "pcie_gen",
    "persistence",
    "xid_count",
)


@dataclass(frozen=True, slots=True)
class HealthFinding:
    level: Level
    gpu: int | None  # None: about the whole host
    message: str  # one line, no host name
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "gpu": self.gpu, "message": self.message, "fix": self.fix}


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def gpu_findings(h: GpuHealth, index: int, multi_gpu: bool) -> list[HealthFinding]:
    """The errors and warnings of one GPU's readings (empty: nothing wrong, or nothing read)."""
    out: list[HealthFinding] = []
    pre = f"gpu{index}: "
    reset = f"drain the node, then reset the GPU (nvidia-smi -r -i {index}) or reboot"

    def add(level: Level, text: str, fix: str = "") -> None:
        out.append(HealthFinding(level, index, pre + text, fix))

    if h.ecc_volatile_uncorrected:
        add(
            "error",
            f"{_n(h.ecc_volatile_uncorrected, 'uncorrectable ECC error')} since the driver loaded",
            f"{reset}; replace the GPU if it recurs",
        )
    if h.remap_failure:
        add("error", "row remapping failed", "the GPU's memory cannot be repaired: replace it")
    if h.remap_pending:
        add("error", "row remap pending", reset + " to apply it")
    if h.retired_pages_pending:
        add("error", "page retirement pending", reset + " to apply it")
    slow = [SLOWDOWNS[r] for r in h.clock_reasons or () if r in SLOWDOWNS]
    if slow:
        add(
            "warn",
            "clocks held back: " + ", ".join(slow),
            "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)",
        )
    if h.pcie_width is not None and h.pcie_width_max and h.pcie_width < h.pcie_width_max:
        add(
            "warn",
            f"PCIe link x{h.pcie_width} of x{h.pcie_width_max}",
            "reseat the GPU or check the riser/slot (nvidia-smi -q -d PCIE)",
        )
    busy = h.util_percent is not None and h.util_percent >= BUSY_UTIL
    if busy and h.pcie_gen is not None and h.pcie_gen_max and h.pcie_gen < h.pcie_gen_max:
        add(
            "warn",
            f"PCIe gen{h.pcie_gen} of gen{h.pcie_gen_max} while {h.util_percent:.0f}% busy",
            "check the slot's BIOS PCIe setting and the riser",
        )
    if multi_gpu and h.persistence is False:
        add(
            "warn",
            "persistence mode off (multi-GPU node)",
            "nvidia-smi -pm 1 (or enable nvidia-persistenced)",
        )
    if h.ecc_mode is False:
        add("warn", "ECC disabled: memory errors go undetected", "nvidia-smi -e 1, then reboot")
    if not h.ecc_volatile_uncorrected and h.ecc_aggregate_uncorrected:
        add(
            "warn",
            f"{_n(h.ecc_aggregate_uncorrected, 'uncorrectable ECC error')} in the GPU's life",
            "watch it: nvidia-smi -q -d ECC,ROW_REMAPPER",
        )
    if h.xid_count:
        last = f" (last: XID {h.xid_last})" if h.xid_last is not None else ""
        add(
            "warn",
            f"{_n(h.xid_count, 'XID critical error')} while the agent ran{last}",
            "see the host's kernel log (dmesg | grep -i xid)",
        )
    return out


def _read_anything(h: GpuHealth) -> bool:
    return any(getattr(h, key) is not None for key in _READINGS)


def judge_host(gpus: Sequence[GpuSample]) -> list[HealthFinding]:
    """Every finding for one host's GPUs, worst first; one "ok" or "na" finding when nothing
    is wrong; empty when no GPU carries health readings (nothing to judge: AMD, no agent)."""
    multi = len(gpus) > 1
    judged = [g for g in gpus if g.health is not None and g.error is None]
    if not judged:
        return []
    out: list[HealthFinding] = []
    for g in judged:
        assert g.health is not None
        out += gpu_findings(g.health, g.index, multi)
    if out:
        return sorted(out, key=lambda f: -RANK[f.level])
    read = [g for g in judged if g.health is not None and _read_anything(g.health)]
    if not read:
        return [
            HealthFinding(
                "na",
                None,
                f"health n/a on {_n(len(judged), 'GPU')}: the driver or GPU does not report "
                "ECC, row remapping, clocks, PCIe or persistence",
            )
        ]
    return [HealthFinding("ok", None, f"{_n(len(read), 'GPU')} healthy ({_summary(read)})")]


def _summary(gpus: Sequence[GpuSample]) -> str:
    """What was read, as one short phrase: "ECC on, no remaps pending, PCIe gen5 x16, …"."""
    hs = [g.health for g in gpus if g.health is not None]
    parts = []
    if all(h.ecc_mode for h in hs):
        parts.append("ECC on, no uncorrectable errors")
    if all(h.remap_pending is not None for h in hs):
        parts.append("no row remaps pending")
    links = {(h.pcie_gen, h.pcie_width) for h in hs if h.pcie_width is not None}
    if len(links) == 1:
        gen, width = next(iter(links))
        parts.append(f"PCIe {'gen' + str(gen) + ' ' if gen else ''}x{width}")
    if all(h.persistence for h in hs):
        parts.append("persistence on")
    na = [
        label
        for label, key in (
            ("ECC", "ecc_mode"),
            ("row remapping", "remap_pending"),
            ("page retirement", "retired_pages_pending"),
            ("clocks", "clock_reasons"),
            ("PCIe", "pcie_width"),
            ("persistence", "persistence"),
            ("XID events", "xid_count"),
        )
        if all(getattr(h, key) is None for h in hs)
    ]
    if na:
        parts.append("n/a: " + ", ".join(na))
    return "; ".join(parts) if parts else "no findings"


def worst(findings: Iterable[HealthFinding], gpu: int | None = None) -> Level | None:
    """The worst level among `findings` (only those about `gpu` when given); None if none."""
    ranks = [RANK[f.level] for f in findings if gpu is None or f.gpu == gpu]
    return LEVELS[max(ranks)] if ranks else None


def gpu_level(gpu: GpuSample, multi_gpu: bool) -> Level | None:
    """One GPU's flag for a table row: "error" / "warn" / "ok"; None when not read."""
    h = gpu.health
    if h is None or gpu.error is not None:
        return None
    found = gpu_findings(h, gpu.index, multi_gpu)
    if found:
        return worst(found)
    return "ok" if _read_anything(h) else None
