"""What the cockpit's screens work with: the services the app makes once (in
`get_default_screen`, when the loop runs) and hands to a screen through its constructor. A
screen never looks a service up on the app by name; it is given this, typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.cluster.ray_monitor import RayMonitor
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.config.hosts import Inventory
    from tui.jobs.history import JobHistory
    from tui.supervisor.core import Supervisor
    from tui.transport.fleet import Fleet
    from tui.transport.types import Forward


@dataclass
class Services:
    """One cockpit's services. Mutable where the cockpit changes them while it runs: hosts.yaml
    read again replaces `inventory` (every screen holding this sees the new one), the supervisor
    is set once it starts (None while it has not, in a read-only cockpit, or with
    VERL_TUI_SUPERVISE=0)."""

    inventory: Inventory
    fleet: Fleet
    telemetry: TelemetryMonitor  # the hosts' GPU samples (the Cluster screen's)
    ray: RayCluster
    ray_monitor: RayMonitor  # Ray's state as the app last saw it (no request to read it)
    history: JobHistory  # this cluster's submissions
    read_only: bool = False  # shows everything, changes nothing (tui/screens/readonly.py)
    supervisor: Supervisor | None = None
    # SSH forwards handed to other programs (VS Code's debugger): open until the cockpit exits.
    kept_forwards: list[Forward] = field(default_factory=list)
