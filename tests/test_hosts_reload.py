"""hosts.yaml reloaded in a running cockpit (ctrl+r, and the palette), on real namespace sshd
hosts under Pilot: the fleet and the Cluster table follow the file (a removed host closed, an
added one connected), a host whose connection did not change keeps the very same connection, a
changed connection spec reconnects, the screen stack stays, and a file that does not load says
file:line in one line and keeps the inventory the cockpit has."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tui.app import VerlTuiApp
from tui.config.hosts import load_inventory
from tui.transport.types import HostState
from tui.widgets.gpu_table import GpuTable


async def until(pilot, predicate, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def notes(app: VerlTuiApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def up(app: VerlTuiApp, *names: str) -> bool:
    assert app.fleet is not None
    return all(app.fleet.status(n).state == HostState.UP for n in names)


def table_hosts(app: VerlTuiApp) -> list[str]:
    table = app.cluster_screen.query_one(GpuTable)
    return [r.host for r in table.rows if r.gpu is None]


async def test_reload_follows_the_file_and_keeps_unchanged_connections(
    ns_cluster3, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "hosts.yaml"
    cluster = ns_cluster3
    cluster.write_hosts_yaml(path, python=sys.executable, names=["node1", "node2"])
    app = VerlTuiApp(load_inventory(path), interval=0.5)
    async with app.run_test(size=(150, 40)) as pilot:
        fleet = app.fleet
        assert fleet is not None
        await until(pilot, lambda: up(app, "node1", "node2"), "both hosts up")
        await until(pilot, lambda: table_hosts(app) == ["node1", "node2"], "the table")
        node1 = fleet.transport("node1")
        await pilot.press("3")  # the node-logs screen: it must still be there afterwards
        stack = list(app.screen_stack)

        # node2 dropped, node3 added, node1's num_gpus changed (not its connection)
        cluster.write_hosts_yaml(
            path,
            python=sys.executable,
            names=["node1", "node3"],
            extra_host_fields={"node1": {"num_gpus": 2}},
        )
        await pilot.press("ctrl+r")
        await until(
            pilot,
            lambda: [s.host for s in fleet.statuses()] == ["node1", "node3"] and up(app, "node3"),
            "the fleet following the file",
        )
        assert fleet.transport("node1") is node1  # the same connection, untouched
        assert app.inventory.host("node1").num_gpus == 2 and fleet.inventory is app.inventory
        assert app.ray.inv is app.inventory
        assert list(app.screen_stack) == stack
        assert set(app.monitor.hosts) == {"node1", "node3"}
        await until(pilot, lambda: table_hosts(app) == ["node1", "node3"], "the table following")
        said = next(n for n in notes(app) if "reloaded" in n)
        assert "connecting node3" in said and "closed node2" in said, said
        assert "1 connection kept" in said and "once restarted (R)" in said, said

        # a file that does not load: one line naming file:line, nothing changes
        good = path.read_text()
        path.write_text(good.replace("  - name: node3", "  - name: node3\n    num_gpus: -1"))
        await pilot.press("ctrl+r")
        await until(pilot, lambda: any(f"{path}:" in n for n in notes(app)), "the error")
        error = next(n for n in notes(app) if f"{path}:" in n)
        assert "\n" not in error and "num_gpus" in error, error
        assert [s.host for s in fleet.statuses()] == ["node1", "node3"]
        assert fleet.transport("node1") is node1 and app.inventory.host("node1").num_gpus == 2

        # node3's connection spec changes (its port is named): it reconnects, node1 stays
        cluster.write_hosts_yaml(
            path,
            python=sys.executable,
            names=["node1", "node3"],
            extra_host_fields={"node1": {"num_gpus": 2}, "node3": {"ssh": {"connect_timeout": 7}}},
        )
        node3 = fleet.transport("node3")
        await app.run_action("reload_hosts")  # as the palette runs it
        await until(
            pilot,
            lambda: fleet.transport("node3") not in (None, node3) and up(app, "node3"),
            "node3 reconnected",
        )
        assert fleet.transport("node1") is node1
        assert app.inventory.host("node3").ssh.connect_timeout == 7


async def test_the_reload_is_in_the_palette(tmp_path: Path) -> None:
    from tui.config.hosts import parse_inventory
    from tui.palette import commands_for

    inv = parse_inventory("cluster: pilot\nhosts:\n  - name: alpha\n    transport: local\n")
    app = VerlTuiApp(inv, interval=0.5)
    async with app.run_test(size=(120, 30)):
        names = [c.name for c in commands_for(app.screen)]
        assert "Reload hosts.yaml" in names
