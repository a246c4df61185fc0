"""The real cockpit with its telemetry replayed from recorded agent lines (no live hosts), so
the snapshot is the same on every run. Used by test_snapshots.py and scripts/screenshots.py."""

from __future__ import annotations

import json
import math

from snapshot_apps.steady import steady_input_cursor
from textual import events

from tui.app import VerlTuiApp
from tui.cluster.ray_cluster import ClusterStatus
from tui.cluster.ray_monitor import RayState, RayView
from tui.config.hosts import parse_inventory
from tui.transport.types import HostState, LinkStatus

GIB = 1024**3
MIB = 1024**2

HOSTS_YAML = """\
cluster: grpo-qwen32b
python: /opt/verl/.venv/bin/python3
ssh: {user: root, known_hosts: ~/.ssh/known_hosts}
hosts:
  - {name: gpu-node-01, address: 10.0.0.11, role: head}
  - {name: gpu-node-02, address: 10.0.0.12}
  - {name: gpu-node-03, address: 10.0.0.13}
  - {name: gpu-node-04, address: 10.0.0.14}
  - {name: login-cpu, address: 10.0.0.20}
  - {name: gpu-node-05, address: 10.0.0.15}
  - {name: gpu-node-06, address: 10.0.0.16}
"""


def _gpu(
    host_i: int,
    g: int,
    step: int,
    *,
    idle: bool = False,
    full: bool = False,
    hot: bool = False,
    lost: bool = False,
) -> dict:
    if lost:
        return {
            "index": g,
            "name": None,
            "uuid": None,
            "util_percent": None,
            "mem_util_percent": None,
            "memory_used_bytes": None,
            "memory_total_bytes": None,
            "temperature_c": None,
            "power_w": None,
            "power_limit_w": None,
            "processes": None,
            "error": "GPU is lost",
        }
    wave = 0.5 + 0.5 * math.sin((step + 7 * g + 3 * host_i) / 6.0)
    util = 2.0 if idle else round(72 + 26 * wave)
    used = 80_800 * MIB if full else int((52 + 20 * wave) * GIB)
    return {
        "index": g,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{host_i:02d}{g:02d}a1b2-0c3d-4e5f-8a9b-{host_i:04d}{g:08d}",
        "util_percent": util,
        "mem_util_percent": round(util * 0.6),
        "memory_used_bytes": used,
        "memory_total_bytes": 81_559 * MIB,
        "temperature_c": 86.0 if hot else float(round(55 + 14 * wave)),
        "power_w": round(180 + 480 * wave, 1) if not idle else 71.3,
        "power_limit_w": 700.0,
        "processes": []
        if idle
        else [
            {
                "pid": 41_200 + 10 * host_i + g,
                "name": "ray::WorkerDict",
                "memory_bytes": used - 600 * MIB,
            }
        ],
        "error": None,
    }


def _health(**bad: object) -> dict:
    """An H100's NVML health readings (tui/remote/nvml_health.py), healthy unless `bad` says."""
    return {
        "ecc_mode": True,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "retired_pages_pending": None,  # Not Supported on Hopper
        "remap_corrected": 0,
        "remap_uncorrected": 0,
        "remap_pending": False,
        "remap_failure": False,
        "clock_reasons": ["sw_power_cap"],
        "clock_reasons_mask": 4,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "persistence": True,
        "xid_count": 0,
        "xid_last": None,
        **bad,
    }


# (host, gpu) -> what its health readings say; every other GPU is healthy.
_UNHEALTHY = {
    (0, 2): {"ecc_volatile_uncorrected": 2, "ecc_aggregate_uncorrected": 2},
    (1, 4): {"clock_reasons": ["hw_slowdown"], "clock_reasons_mask": 8},
    (2, 1): {"pcie_width": 8},
}
HEALTH_EVERY = 10  # steps: the agent reads health every 10 s at 1 Hz


def sample_line(
    host_i: int, step: int, gpus: list[dict], *, source: str = "nvml", error: str | None = None
) -> str:
    return json.dumps(
        {
            "type": "sample",
            "seq": step,
            "t": 1_795_000_000.0 + step,
            "source": source,
            "error": error,
            "host": {
                "cpu_percent": 31.0 + host_i,
                "load1": 12.5 + host_i,
                "ncpu": 96,
                "mem_used_bytes": (410 + 7 * host_i) * GIB,
                "mem_total_bytes": 2015 * GIB,
            },
            "gpus": gpus,
        }
    )


_STATUS = ClusterStatus(
    nodes_alive=4,
    nodes=[],
    ray_version="2.60.0",
    python_version="3.11.7",
    dashboard="http://127.0.0.1:8265",
    missing=["login-cpu", "gpu-node-05", "gpu-node-06"],
)


class ReplayApp(VerlTuiApp):
    """VerlTuiApp whose fleet never dials out: link states and agent lines are replayed."""

    def __init__(self, steps: int = 90):
        super().__init__(parse_inventory(HOSTS_YAML, "hosts.yaml"))
        self.steps = steps
        self.animation_level = "none"  # scrolls land at once: a snapshot never catches one midway

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        steady_input_cursor(event)

    def start_telemetry(self) -> None:
        mon = self.monitor
        up = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "login-cpu"]
        for name in up:
            mon.on_link_status(LinkStatus(name, HostState.UP))
        mon.on_link_status(
            LinkStatus(
                "gpu-node-05", HostState.LOST, "connection lost: no keepalive reply", attempts=3
            )
        )
        mon.on_link_status(
            LinkStatus(
                "gpu-node-06",
                HostState.HOST_KEY_MISMATCH,
                "host key of 10.0.0.16 differs from /root/.ssh/known_hosts — possible "
                "impersonation; if the host was reinstalled: ssh-keygen -R 10.0.0.16",
            )
        )
        for step in range(self.steps):
            for i, name in enumerate(up[:4]):
                gpus = [
                    _gpu(
                        i,
                        g,
                        step,
                        idle=(i == 1 and g == 5),
                        full=(i == 2 and g == 3),
                        hot=(i == 3 and g == 6),
                        lost=(i == 3 and g == 7),
                    )
                    for g in range(8)
                ]
                if step % HEALTH_EVERY == 0:
                    for gpu in gpus:
                        if not gpu["error"]:
                            gpu["health"] = _health(**_UNHEALTHY.get((i, gpu["index"]), {}))
                mon.ingest_line(name, sample_line(i, step, gpus))
            mon.ingest_line(
                "login-cpu",
                sample_line(
                    9,
                    step,
                    [],
                    source="none",
                    error="NVML library not found (no NVIDIA driver on this host)",
                ),
            )
        # Ray as the head reports it: four GPU nodes alive, the lost host's node gone.
        nodes = {name: "alive" for name in up[:4]}
        nodes.update({"login-cpu": "absent", "gpu-node-05": "dead", "gpu-node-06": "absent"})
        self._on_ray_view(RayView(RayState.UP, None, _STATUS, nodes))


app = ReplayApp()
