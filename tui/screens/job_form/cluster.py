"""The cluster a job form checks against: the live shape from Ray (read first from the cockpit's
Ray monitor, which is watched without a request), else hosts.yaml's GPUs meanwhile, and the
debugpy probe the post-mortem toggle needs. A plain class: the form holds one and shows it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_monitor import RayState
from tui.fmt import plural
from tui.jobs.pipeline import live_resources, planned_resources, resources_from_status
from tui.jobs.validate import cluster_shape
from tui.sanitize import one_line
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import ClusterStatus, RayCluster
    from tui.cluster.ray_monitor import RayMonitor, RayView
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.jobs.rules import ClusterResources

RAY_NOT_RUNNING = "Ray is not running (u starts it)"
ASKING = "asking Ray for the cluster's shape…"


def ray_key(view: RayView) -> object:
    """What a form's check depends on in the monitor's view: Ray's state and its alive nodes'
    GPUs. Nodes joining after Ray came up change it too (the header said "0 nodes" while 3
    were alive when only the state was watched)."""
    status = view.status
    nodes = (
        tuple(sorted((str(n.host or n.node_ip), n.gpus) for n in status.nodes if n.alive))
        if status is not None
        else None
    )
    return (view.state, nodes)


class ClusterShape:
    """The resources a form's check runs against, where they came from, and a note when they
    are not Ray's own answer."""

    def __init__(
        self, cluster: RayCluster, ray_monitor: RayMonitor, telemetry: TelemetryMonitor
    ) -> None:
        self.cluster = cluster
        self.ray_monitor = ray_monitor
        self.telemetry = telemetry
        self.resources: ClusterResources | None = None
        self.source: str | None = None  # "ray" | "hosts.yaml" | None
        self.note: str | None = ASKING
        self.probed_debugpy = False  # resources.hosts_without_debugpy is filled in
        self._seen: object = None  # the monitor's view last acted on (ray_key)

    @property
    def live(self) -> bool:
        return self.source == "ray" and self.resources is not None

    def planned(self) -> ClusterResources | None:
        """hosts.yaml's GPUs (or what each host's telemetry agent counted)."""
        counted: dict[str, tuple[int, int | None]] = {}
        for name, ht in self.telemetry.hosts.items():
            sample = ht.latest
            if sample is not None and sample.source != "none":
                counted[name] = (len(sample.gpus), sample.ncpu)
        return planned_resources(self.cluster.inv, counted)

    def use_planned(self, note: str) -> None:
        self.resources = self.planned()
        self.source = "hosts.yaml" if self.resources is not None else None
        self.note = note + (
            "; checked against hosts.yaml's GPUs meanwhile"
            if self.resources is not None
            else "; checked without the cluster (hosts.yaml gives no num_gpus)"
        )

    def set_live(self, resources: ClusterResources, *, probed_debugpy: bool | None = None) -> None:
        self.resources, self.source, self.note = resources, "ray", None
        if probed_debugpy is not None:
            self.probed_debugpy = probed_debugpy

    def from_monitor(self) -> bool:
        """Take what the Ray monitor already knows; False when it knows nothing yet."""
        view = self.ray_monitor.view
        self._seen = ray_key(view)
        if view.state == RayState.UP and view.status is not None:
            self.set_live(resources_from_status(view.status))
            return True
        if view.state == RayState.DOWN:
            self.use_planned(RAY_NOT_RUNNING)
            return True
        self.use_planned(ASKING)
        return False

    def ray_changed(self) -> bool:
        """Ray started or stopped (u, D), or its nodes changed, since the last read."""
        return ray_key(self.ray_monitor.view) != self._seen

    async def fetch(self, *, want_debugpy: bool) -> None:
        """Ray's answer now (the monitor's when it has one); hosts.yaml's GPUs, with a note
        saying why, when Ray is down or the head does not answer."""
        view = self.ray_monitor.view
        self._seen = ray_key(view)
        if view.state == RayState.DOWN:
            self.use_planned(RAY_NOT_RUNNING)  # known: no request that would time out
            return
        status: ClusterStatus | None = view.status if view.state == RayState.UP else None
        try:
            self.probed_debugpy = False
            resources = await live_resources(self.cluster, want_debugpy=want_debugpy, status=status)
            self.set_live(resources, probed_debugpy=want_debugpy)
        except DashboardError:
            self.use_planned(RAY_NOT_RUNNING)
        except (TransportError, OSError) as exc:
            self.use_planned(f"the head is not reachable ({one_line(exc, 200)})")

    async def probe_debugpy(self) -> None:
        """Which hosts lack debugpy (the post-mortem toggle's check), once per shape."""
        from tui.cluster.probe import probe_all

        if self.resources is None or self.probed_debugpy or self.cluster.fleet is None:
            return
        facts = await probe_all(self.cluster.fleet, self.cluster.inv)
        self.resources.hosts_without_debugpy = [
            h for h, f in facts.items() if f.ok and not f.debugpy_version
        ]
        self.probed_debugpy = True

    def text(self) -> str:
        """``3 Ray nodes × 1 GPU`` (every node alive has GPUs), else how many do."""
        assert self.resources is not None
        nnodes, per_node = cluster_shape(self.resources)
        total = len(self.resources.nodes)
        what = "Ray node" if self.source == "ray" else "node"
        source = "" if self.source == "ray" else f" ({self.source})"
        if nnodes and nnodes == total:
            return f"{plural(total, what)} × {plural(per_node, 'GPU')}{source}"
        gpus = f"{nnodes} with ≥{per_node} GPU" if nnodes else "no GPUs"
        return f"{plural(total, what)}, {gpus}{source}"
