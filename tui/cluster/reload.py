"""hosts.yaml read again into a running cockpit (its ctrl+r): the fleet, the telemetry and the
Ray cluster follow the new file, and nothing else is touched (screens, drafts and connections
to hosts that did not change stay as they are).

A file that does not load (a YAML or field error) is a ConfigError naming file:line, and the
cockpit keeps the inventory it has. A file of another `cluster:` is refused too: the job history,
queue and drafts are kept per cluster name, so switching clusters is a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tui.config.hosts import Inventory, load_inventory
from tui.config.yamlfile import ConfigError
from tui.fmt import plural
from tui.transport.fleet import Fleet, FleetChange

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.cluster.telemetry import TelemetryMonitor


def read_inventory(path: Path, current: Inventory) -> Inventory:
    """The hosts file as it is now (blocking: run it in a thread); ConfigError (one line) for
    a file that does not load or names another cluster."""
    inventory = load_inventory(path)
    if inventory.cluster != current.cluster:
        raise ConfigError(
            f"{path}: cluster: is now {inventory.cluster!r}, not {current.cluster!r}: the "
            "history, queue and drafts are kept per cluster; restart verl-tui to switch"
        )
    return inventory


async def apply_inventory(
    fleet: Fleet,
    monitor: TelemetryMonitor | None,
    ray: RayCluster | None,
    inventory: Inventory,
) -> FleetChange:
    """Every part that holds the inventory follows it, in the order that keeps each consistent:
    the agents of removed or changed hosts stop, the fleet applies the file (closes, connects,
    keeps), the telemetry follows, and the Ray cluster's dashboard tunnel is closed when the
    head or its port moved (it reopens on the next use)."""
    if monitor is not None:
        await monitor.stop_agents(monitor.agents_to_stop(inventory))
    old = fleet.inventory
    change = await fleet.apply(inventory)
    if monitor is not None:
        await monitor.follow_inventory(inventory)
    if ray is not None:
        head_moved = (
            old.head.name != inventory.head.name
            or inventory.head.name in change.reconnected
            or old.ray.dashboard_port != inventory.ray.dashboard_port
        )
        ray.inv = inventory
        if head_moved:
            await ray.close()
    return change


def summary(change: FleetChange, path: Path, old: Inventory, new: Inventory) -> str:
    """One line: what the reload did, and whether Ray must restart to see it."""
    parts = []
    if change.added:
        parts.append("connecting " + ", ".join(change.added))
    if change.removed:
        parts.append("closed " + ", ".join(change.removed))
    if change.reconnected:
        parts.append("reconnecting " + ", ".join(change.reconnected))
    kept = f"{plural(len(change.kept), 'connection')} kept"
    what = "; ".join([*parts, kept]) if parts else f"no host's connection changed ({kept})"
    before = {h.name: h.num_gpus for h in old.hosts}
    ray_side = old.ray != new.ray or any(before.get(h.name) != h.num_gpus for h in new.hosts)
    restart = "; Ray counts the new num_gpus: / ray: values once restarted (R)" if ray_side else ""
    return f"{path.name} reloaded: {what}{restart}"
