"""The command palette is built from the key bindings: every app and screen binding with a
description is there, on every screen; and D with Ray never started says there is nothing to
stop instead of asking (the local transport, where no Ray runs in this test)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.binding import Binding

from tui.app import VerlTuiApp
from tui.palette import commands_for
from tui.screens.confirm import ConfirmScreen

APPS = Path(__file__).parent / "snapshot_apps"


def described(node) -> set[str]:
    """Every binding with a description that is offered now (check_action, as the footer)."""
    from tui.screens.help import offered

    out = set()
    for b in node.BINDINGS:
        b = b if isinstance(b, Binding) else Binding(*b)
        if b.description and b.action != "command_palette" and offered(node, b):
            out.add(b.description)
    return out


async def wait_for(pilot, predicate, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "not within the timeout"
        await pilot.pause(0.05)


@pytest.mark.parametrize(
    "app_file",
    [
        "jobs_replay.py",
        "doctor_replay.py",
        "checkpoints_replay.py",
        "debugger_replay.py",
        "node_logs_replay.py",
        "job_log_replay.py",
    ],
)
async def test_palette_lists_every_binding_of_app_and_screen(app_file):
    import runpy

    app = runpy.run_path(str(APPS / app_file))["app"]
    async with app.run_test(size=(160, 46)) as pilot:
        await wait_for(pilot, lambda: len(app.screen_stack) > 1)
        screen = app.screen
        names = {c.name for c in commands_for(screen)}
        missing = (described(app) | described(screen)) - names
        assert not missing, f"{type(screen).__name__}: not in the palette: {missing}"
        # Off the Cluster screen its cluster-wide keys are still there (Ray, Doctor, logs).
        assert {
            "Ray up",
            "Ray down",
            "Ray restart",
            "Doctor",
            "Host's Ray logs",
            "Checkpoints",
            "Node logs",
        } <= names
        # The hidden Cluster table's own keys are not (a screen's own Filter/Sort may be).
        cluster_keys = {c.name for c in commands_for(screen) if c.help.startswith("Cluster")}
        assert not cluster_keys & {"Filter", "Sort", "Reconnect host"}, cluster_keys
        assert "Reconnect host" not in names
        # No entry twice: Textual's own palette entries (Theme, Keys, …) lack our Quit's twin.
        system = {c.title for c in app.get_system_commands(screen)}
        assert not system & names and "Quit" in names, system & names


async def test_palette_on_cluster_screen_and_running_an_entry():
    app = runpy_app("cluster_replay.py")
    async with app.run_test(size=(160, 46)) as pilot:
        await pilot.pause(0.2)
        screen = app.screen
        cmds = {c.name: c for c in commands_for(screen)}
        missing = (described(app) | described(screen)) - set(cmds)
        assert not missing
        assert {"Fold host", "Fold all", "Sort by temp", "Reconnect every host now"} <= set(cmds)
        # Through the palette itself: type, enter → the Doctor key's action ran.
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"doctor")
        await pilot.pause(0.4)
        await pilot.press("enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "DoctorScreen")


def runpy_app(name: str):
    import runpy

    return runpy.run_path(str(APPS / name))["app"]


async def test_D_with_ray_never_started_says_nothing_to_stop(ns_cluster_factory, tmp_path):
    # A real namespace host (its own pid namespace): no Ray has ever run there.
    from test_ray_lifecycle import hosts_yaml

    from tui.config.hosts import load_inventory

    cluster = ns_cluster_factory(1)
    app = VerlTuiApp(load_inventory(hosts_yaml(cluster, tmp_path / "hosts.yaml")), interval=1.0)
    notes: list[str] = []
    async with app.run_test(size=(160, 46)) as pilot:
        original = app.notify

        def notify(message, *a, **kw):
            notes.append(str(message))
            return original(message, *a, **kw)

        app.notify = notify  # type: ignore[method-assign]
        await pilot.press("D")
        await wait_for(pilot, lambda: bool(notes), 30)
        assert notes == ["Ray is not running on the host: nothing to stop"]
        assert not isinstance(app.screen, ConfirmScreen)
