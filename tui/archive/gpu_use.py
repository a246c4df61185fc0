"""GPU use of one job: NVML's per-GPU process list (the agent sends it) joined with Ray's list of
the job's worker pids per node, so a job's mean utilization and memory come from the GPUs its
own workers hold, not the whole host's.

Ray 2.60 has no job field on a worker (``/api/v0/workers``); actors and tasks have one: the
job's actors (``/api/v0/actors`` filtered on ``job_id``, ALIVE: ``pid``, ``node_id``) are verl's
workers, RUNNING tasks add plain task workers (``worker_pid``), and the Jobs API names the
driver's pid. ``node_id`` → node IP comes from ``/api/v0/nodes``, IP → host from hosts.yaml.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.cluster.models import HostSample

if TYPE_CHECKING:  # runtime imports stay light: the accumulator runs anywhere (bench on a GPU)
    from tui.cluster.dashboard import DashboardClient
    from tui.config.hosts import Inventory

LIMIT = 10000

SampleSource = Callable[[], Mapping[str, HostSample | None]]


def _filtered(key: str, value: str) -> dict[str, object]:
    return {
        "limit": LIMIT,
        "detail": "false",
        "filter_keys": key,
        "filter_predicates": "=",
        "filter_values": value,
    }


async def job_worker_pids(
    client: DashboardClient, job_id: str, inv: Inventory, driver: tuple[str, int] | None = None
) -> dict[str, set[int]]:
    """Host name → pids of the job's live actors, running task workers (and its driver, given
    as (node IP, pid)). `job_id` is Ray's hex job id (the Jobs API's ``job_id``)."""
    # Checked rows (tui/cluster/dashboard_schema.py): a field is its type or None.
    actors = await client.state_rows("actors", _filtered("job_id", job_id))
    tasks = await client.state_rows("tasks", _filtered("job_id", job_id))
    ip_of = {n["node_id"]: n["node_ip"] for n in await client.alive_nodes()}
    out: dict[str, set[int]] = {}

    def add(ip: Any, pid: Any) -> None:
        if isinstance(ip, str) and isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            out.setdefault(inv.host_of_ip(ip) or ip, set()).add(pid)

    for a in actors:
        if a.get("state") == "ALIVE":
            add(ip_of.get(a.get("node_id")), a.get("pid"))
    for t in tasks:
        if t.get("state") == "RUNNING":
            add(ip_of.get(t.get("node_id")), t.get("worker_pid"))
    if driver is not None:
        add(*driver)
    return out


@dataclass
class JobGpuUse:
    """Running means over every (GPU, sample) where one of the job's pids held the GPU."""

    samples: int = 0  # GPU samples counted
    util_sum: float = 0.0
    util_samples: int = 0
    mem_sum: float = 0.0  # bytes the job's processes held on the GPU
    mem_samples: int = 0
    mem_peak: int = 0
    gpus: set[str] = field(default_factory=set)  # "host:index"
    _seen: dict[str, int] = field(default_factory=dict)  # host → last sample seq counted

    def add(self, host: str, sample: HostSample, pids: Iterable[int]) -> int:
        """Count one host sample (once: a sample seen before is skipped); returns the number of
        the job's GPUs in it."""
        if self._seen.get(host) == sample.seq:
            return 0
        self._seen[host] = sample.seq
        wanted = set(pids)
        held = 0
        for gpu in sample.gpus:
            mine = [p for p in gpu.processes or () if p.pid in wanted]
            if not mine:
                continue
            held += 1
            self.samples += 1
            self.gpus.add(f"{host}:{gpu.index}")
            if gpu.util_percent is not None and math.isfinite(gpu.util_percent):
                self.util_sum += gpu.util_percent
                self.util_samples += 1
            known = [p.memory_bytes for p in mine if p.memory_bytes is not None]
            mem = sum(known) if known else gpu.memory_used_bytes
            if mem is not None:
                self.mem_sum += mem
                self.mem_samples += 1
                self.mem_peak = max(self.mem_peak, mem)
        return held

    def add_all(
        self, samples: Mapping[str, HostSample | None], pids: Mapping[str, set[int]]
    ) -> int:
        return sum(
            self.add(host, s, pids[host])
            for host, s in samples.items()
            if s is not None and pids.get(host)
        )

    def to_json(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        return {
            "samples": self.samples,
            "util_mean": self.util_sum / self.util_samples if self.util_samples else None,
            "mem_mean_bytes": self.mem_sum / self.mem_samples if self.mem_samples else None,
            "mem_peak_bytes": self.mem_peak or None,
            "gpus": sorted(self.gpus),
        }

    @classmethod
    def from_json(cls, d: Any) -> JobGpuUse:
        """Resume from an archived record (a follower after a restart goes on counting)."""
        use = cls()
        if not isinstance(d, dict) or not isinstance(d.get("samples"), int):
            return use
        use.samples = d["samples"]
        for mean_key, sum_attr, n_attr in (
            ("util_mean", "util_sum", "util_samples"),
            ("mem_mean_bytes", "mem_sum", "mem_samples"),
        ):
            mean = d.get(mean_key)
            if isinstance(mean, (int, float)) and math.isfinite(mean):
                setattr(use, sum_attr, mean * use.samples)
                setattr(use, n_attr, use.samples)
        peak = d.get("mem_peak_bytes")
        use.mem_peak = peak if isinstance(peak, int) else 0
        gpus = d.get("gpus")
        use.gpus = {g for g in gpus if isinstance(g, str)} if isinstance(gpus, list) else set()
        return use


def gpu_use_text(use: Any) -> str | None:
    """``kept its GPUs 41 % busy, 12.3 GiB each (8 GPUs)`` from an archived gpu_use record."""
    if not isinstance(use, dict):
        return None
    util, mem, gpus = use.get("util_mean"), use.get("mem_mean_bytes"), use.get("gpus")
    parts = []
    if isinstance(util, (int, float)):
        parts.append(f"kept its GPUs {util:.0f} % busy")
    if isinstance(mem, (int, float)):
        parts.append(f"{mem / (1 << 30):.1f} GiB each")
    if not parts:
        return None
    n = len(gpus) if isinstance(gpus, list) else 0
    return ", ".join(parts) + (f" ({n} GPU{'s' if n != 1 else ''})" if n else "")
