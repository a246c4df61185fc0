"""The cockpit's Ray keys over real namespace hosts: u brings Ray up with a live progress view,
the Ray column follows, D asks first and tears it down."""

from __future__ import annotations

import asyncio

import pytest
from harness.raycluster import hosts_yaml, ray_processes

from tui.app import VerlTuiApp
from tui.cluster.ray_monitor import RayState
from tui.config.hosts import load_inventory
from tui.screens.confirm import ConfirmScreen
from tui.screens.ray_progress import RayProgressScreen
from tui.widgets.gpu_table import GpuTable


async def wait_for(pilot, predicate, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await pilot.pause(0.1)


def host_row_text(app, host: str) -> str:
    table = app.screen.query_one(GpuTable)
    y = next(i for i, r in enumerate(table.rows) if r.host == host and r.gpu is None)
    return table.render_line(y - table.scroll_offset.y).text


@pytest.mark.ray  # brings Ray up itself
async def test_u_brings_ray_up_and_D_tears_it_down(ns_cluster_factory, tmp_path):
    cluster = ns_cluster_factory(2)
    inv = load_inventory(hosts_yaml(cluster, tmp_path / "hosts.yaml"))
    app = VerlTuiApp(inv, interval=0.5)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(
            pilot,
            lambda: app.ray_monitor.view.state == RayState.DOWN,
            30,
            "Ray shown as not running",
        )
        assert "ray head not started" in host_row_text(app, "node1")

        await pilot.press("u")
        await wait_for(pilot, lambda: isinstance(app.screen, RayProgressScreen), 5, "progress view")
        progress = app.screen
        await wait_for(pilot, lambda: progress.finished, 120, "bring-up finished")
        steps = "\n".join(str(line.text) for line in progress.query_one("RichLog").lines)
        assert "ray start --head" in steps and "joined in" in steps
        assert "2 nodes alive" in str(progress.query_one("#outcome").render())
        await pilot.press("escape")

        await wait_for(pilot, lambda: app.ray_monitor.view.state == RayState.UP, 15, "Ray up")
        await pilot.pause(0.3)
        assert "ray head alive" in host_row_text(app, "node1")
        assert "ray worker alive" in host_row_text(app, "node2")

        await pilot.press("D")  # asks only after checking that Ray runs somewhere
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 15, "question")
        await pilot.press("n")  # no: nothing happens
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.pause(0.5)
        assert app.ray_monitor.view.state == RayState.UP

        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 15, "question")
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, RayProgressScreen), 5, "progress view")
        progress = app.screen
        await wait_for(pilot, lambda: progress.finished, 120, "teardown finished")
        assert "no Ray process left" in str(progress.query_one("#outcome").render())
        await pilot.press("escape")
        await wait_for(
            pilot, lambda: app.ray_monitor.view.state == RayState.DOWN, 15, "Ray shown as stopped"
        )
    assert ray_processes(cluster) == {}
