"""The job form's view of the cluster it validates against: the live shape from Ray (through
the app's Ray monitor, which it watches without a request), else hosts.yaml's GPUs meanwhile,
and the debugpy probe the post-mortem toggle needs. A part of JobFormScreen."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.screen import Screen

from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_cluster import ClusterStatus, RayCluster
from tui.jobs.pipeline import live_resources, planned_resources, resources_from_status
from tui.jobs.rules import ClusterResources
from tui.sanitize import one_line
from tui.screens.error import ReportsWorkerFailures
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.jobs.formstate import Toggles
    from tui.jobs.profiles import Profile

RAY_NOT_RUNNING = "Ray is not running (u starts it)"
ASKING = "asking Ray for the cluster's shape…"


class FormCluster(ReportsWorkerFailures, Screen[str | None]):
    """JobFormScreen's cluster part (a base class: the form's state is the screen's)."""

    if TYPE_CHECKING:  # the screen's, used here
        cluster: RayCluster
        profile: Profile | None
        resources: ClusterResources | None
        resources_from: str | None
        cluster_note: str | None
        _probed_debugpy: bool
        _ray_seen: object

        @property
        def toggles(self) -> Toggles: ...
        def validate(self) -> Any: ...
        def _show_header(self) -> None: ...

    def _ray_view(self) -> Any:
        monitor = getattr(self.app, "ray_monitor", None)
        return monitor.view if monitor is not None else None

    @staticmethod
    def _ray_key(view: Any) -> object:
        """What the form's check depends on in the monitor's view: Ray's state and its alive
        nodes' GPUs. Nodes joining after Ray came up change it too (the header said "0 nodes"
        while 3 were alive when only the state was watched)."""
        if view is None:
            return None
        status = view.status
        nodes = (
            tuple(sorted((str(n.host or n.node_ip), n.gpus) for n in status.nodes if n.alive))
            if status is not None
            else None
        )
        return (view.state, nodes)

    def _planned(self) -> ClusterResources | None:
        """hosts.yaml's GPUs (or what each host's telemetry agent counted)."""
        counted: dict[str, tuple[int, int | None]] = {}
        telemetry = getattr(self.app, "monitor", None)
        for name, ht in (getattr(telemetry, "hosts", None) or {}).items():
            sample = ht.latest
            if sample is not None and sample.source != "none":
                counted[name] = (len(sample.gpus), sample.ncpu)
        return planned_resources(self.cluster.inv, counted)

    def _use_planned(self, note: str) -> None:
        self.resources = self._planned()
        self.resources_from = "hosts.yaml" if self.resources is not None else None
        self.cluster_note = note + (
            "; checked against hosts.yaml's GPUs meanwhile"
            if self.resources is not None
            else "; checked without the cluster (hosts.yaml gives no num_gpus)"
        )

    def _cluster_from_monitor(self) -> bool:
        """Take what the app's Ray monitor already knows; False when it knows nothing yet."""
        from tui.cluster.ray_monitor import RayState

        view = self._ray_view()
        state = view.state if view is not None else None
        self._ray_seen = self._ray_key(view)
        if state == RayState.UP and view.status is not None:
            self._set_live(resources_from_status(view.status))
            return True
        if state == RayState.DOWN:
            self._use_planned(RAY_NOT_RUNNING)
            return True
        self._use_planned(ASKING)
        return False

    def _set_live(self, resources: ClusterResources) -> None:
        self.resources, self.resources_from, self.cluster_note = resources, "ray", None

    def _watch_ray(self) -> None:
        """Ray started or stopped while the form is open (u, D), or its nodes changed: ask
        again."""
        view = self._ray_view()
        if view is not None and self._ray_key(view) != self._ray_seen and self.profile is not None:
            self.fetch_cluster()

    @work(exclusive=True, group="form-cluster", exit_on_error=False)
    async def fetch_cluster(self) -> None:
        from tui.cluster.ray_monitor import RayState

        view = self._ray_view()
        self._ray_seen = self._ray_key(view)
        status: ClusterStatus | None = None
        if view is not None and view.state == RayState.DOWN:
            self._use_planned(RAY_NOT_RUNNING)  # known: no request that would time out
        else:
            if view is not None and view.state == RayState.UP:
                status = view.status
            try:
                self._probed_debugpy = False
                want = self.toggles.post_mortem
                resources = await live_resources(self.cluster, want_debugpy=want, status=status)
                self._probed_debugpy = want
                self._set_live(resources)
            except DashboardError:
                self._use_planned(RAY_NOT_RUNNING)
            except (TransportError, OSError) as exc:
                self._use_planned(f"the head is not reachable ({one_line(exc, 200)})")
        self._show_header()
        self.validate()

    async def _probe_debugpy(self) -> None:
        from tui.cluster.probe import probe_all

        if self.resources is None or self._probed_debugpy or self.cluster.fleet is None:
            return
        facts = await probe_all(self.cluster.fleet, self.cluster.inv)
        self.resources.hosts_without_debugpy = [
            h for h, f in facts.items() if f.ok and not f.debugpy_version
        ]
        self._probed_debugpy = True

    @work(exclusive=True, group="form-probe", exit_on_error=False)
    async def probe_debugpy(self) -> None:
        await self._probe_debugpy()
        self.validate()
