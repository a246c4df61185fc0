"""Cluster screen driven by keys (Pilot), with the real agent on the local transport reading
a fake libnvidia-ml.so.1 — the same path the cockpit takes on a real GPU host."""

from __future__ import annotations

import asyncio
import os

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state

from tui.app import VerlTuiApp
from tui.config.hosts import parse_inventory
from tui.screens.help import HelpScreen
from tui.widgets.gpu_table import GpuTable, Row


@pytest.fixture
def gpu_env(fake_nvml_lib, tmp_path, monkeypatch):
    """Two fake-GPU hosts, both this machine through the local transport."""
    state = tmp_path / "nvml.txt"
    write_state(
        state,
        [
            FakeGpu(
                util=91,
                memory_used=70_000 * MIB,
                temperature=70,
                power_mw=600_000,
                processes=[(os.getpid(), 60_000 * MIB)],
            ),
            FakeGpu(util=1, temperature=41),  # idle while its peers are busy
            FakeGpu(util=88, memory_used=81_000 * MIB, temperature=87, power_mw=690_000),
            FakeGpu(util=95),
        ],
    )
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_lib))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    return state


def make_app() -> VerlTuiApp:
    inv = parse_inventory(
        "cluster: pilot\nhosts:\n  - name: alpha\n    transport: local\n"
        "  - name: beta\n    transport: local\n"
    )
    return VerlTuiApp(inv, interval=0.2)


async def wait_for(pilot, predicate, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


def visible_text(app) -> str:
    """What the summary and the table's visible lines say, as plain text."""
    table = app.screen.query_one(GpuTable)
    summary = str(app.screen.query_one("#summary").render())
    lines = [table.render_line(y).text for y in range(table.size.height)]
    return summary + "\n" + "\n".join(lines)


async def test_rows_keys_fold_and_details(gpu_env):
    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)  # 2 hosts + 8 GPUs
        assert table.rows[0] == Row("alpha") and table.rows[1] == Row("alpha", 0)
        assert table.has_focus
        await pilot.press("j", "j")
        assert table.current_row == Row("alpha", 1)
        await pilot.press("k")
        assert table.current_row == Row("alpha", 0)
        details = str(app.screen.query_one("#details").render())
        assert "alpha gpu0" in details and f"pid {os.getpid()}" in details
        await pilot.press("G")
        assert table.current_row == Row("beta", 3)
        await pilot.press("g", "enter")  # fold alpha
        assert [r for r in table.rows if r.host == "alpha"] == [Row("alpha")]
        assert len(table.rows) == 6
        await pilot.press("z")  # something folded: unfold all
        assert len(table.rows) == 10
        await pilot.press("z")  # fold all
        assert table.rows == [Row("alpha"), Row("beta")]
        await pilot.press("z")


async def test_idle_hot_and_full_are_flagged(gpu_env):
    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        # The summary line trails the table by at most half a second.
        await wait_for(pilot, lambda: "hosts 2/2 up" in visible_text(app), 2.0)
        text = visible_text(app)
        assert "IDLE" in text  # gpu1 idles while its peers run ~90%
        assert "87°C" in text
        assert "79.1/80G" in text
        # The summary counts both hosts and all eight GPUs.
        assert "hosts 2/2 up" in text and "GPUs 8" in text


async def test_filter_sort_reverse(gpu_env, monkeypatch):
    from tui.screens import cluster

    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        await wait_for(pilot, lambda: "hosts 2/2 up" in visible_text(app), 3.0)
        # A sort or filter key changes the summary's words, not its count of the fleet (that
        # follows the samples, once a second): the keys do not walk every host again.
        counted = []
        tally = cluster.fleet_tally
        monkeypatch.setattr(cluster, "fleet_tally", lambda hosts: counted.append(1) or tally(hosts))
        await pilot.press("slash")
        await pilot.press(*"beta")
        assert {r.host for r in table.rows} == {"beta"}
        assert "filter “beta”" in visible_text(app) and "hosts 2/2 up" in visible_text(app)
        keys_counted = len(counted)
        await wait_for(pilot, lambda: len(counted) > keys_counted, 3.0)  # the samples' recount
        assert keys_counted <= 1  # at most the once-a-second recount fell among the 5 keys
        await pilot.press("enter")
        assert table.has_focus and table.filter_text == "beta"
        await pilot.press("escape")
        assert len(table.rows) == 10 and table.filter_text == ""
        await pilot.press("s")  # name -> util: busiest GPU first within each host
        assert table.sort_key == "util"
        alpha = [r.gpu for r in table.rows if r.host == "alpha" and r.gpu is not None]
        assert alpha == [3, 0, 2, 1]
        await pilot.press("S")
        alpha = [r.gpu for r in table.rows if r.host == "alpha" and r.gpu is not None]
        assert alpha == [1, 2, 0, 3]
        for _ in range(5):  # back round to name
            await pilot.press("s")
        assert table.sort_key == "name"


async def test_the_filter_box_opens_over_the_screen_moving_nothing(gpu_env):
    """The filter box opens above the keys' footer on a layer of its own: the table keeps its
    size and place while it opens and closes (no layout, no whole table drawn again), and
    the box covers neither the table's rows nor the footer while it is open."""
    from textual.widgets import Input

    from tui.widgets.footer import KeysFooter

    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        before = table.region
        await pilot.press("slash")
        box = app.screen.query_one("#filter", Input)
        await wait_for(pilot, lambda: box.has_focus and box.region.height == 3)
        footer = app.screen.query_one(KeysFooter).region
        assert table.region == before
        assert box.region.bottom == footer.y and not box.region.overlaps(table.region)
        await pilot.press(*"alpha", "enter")
        await wait_for(pilot, lambda: table.has_focus and not box.display)
        assert table.region == before and {r.host for r in table.rows} == {"alpha"}


async def test_state_change_reaches_screen(gpu_env):
    """A GPU going busy on the host shows up in the table within a few samples."""
    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        write_state(gpu_env, [FakeGpu(util=100, memory_used=81_559 * MIB)] * 4)
        hosts = app.monitor.hosts
        await wait_for(
            pilot, lambda: all(g.util_percent == 100 for g in hosts["alpha"].latest.gpus)
        )
        await pilot.pause(0.3)
        assert "100%" in visible_text(app)


async def test_help_palette_and_quit(gpu_env):
    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = {desc for _, _, desc in app.screen.rows}
        assert {"Filter", "Sort", "Quit", "Fold host", "Reconnect host"} <= keys
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"sort by temp")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: table.sort_key == "temp")
        await pilot.press("q")
    assert app.return_code == 0 or app.return_code is None


async def test_metric_sort_follows_new_samples(gpu_env):
    """Sorted by a metric, rows are re-sorted as samples change (at most every RESORT_S)."""
    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        await pilot.press("s")  # util
        alpha = lambda: [r.gpu for r in table.rows if r.host == "alpha" and r.gpu is not None]  # noqa: E731
        assert alpha() == [3, 0, 2, 1]
        write_state(
            gpu_env, [FakeGpu(util=10), FakeGpu(util=99), FakeGpu(util=50), FakeGpu(util=20)]
        )
        await wait_for(pilot, lambda: alpha() == [1, 2, 3, 0], 5.0)


def test_summary_adds_each_hosts_cached_totals():
    """The summary's totals: error-free GPUs of hosts that are up, util averaged over the GPUs
    that reported one; a host's totals are computed once per sample."""
    from tui.cluster.models import GpuSample, HostSample, HostTelemetry, TelemetryState
    from tui.transport.types import HostState, LinkStatus
    from tui.widgets.summary import fleet_tally, summary_text

    def host(name: str, gpus: list[GpuSample], link: HostState = HostState.UP) -> HostTelemetry:
        ht = HostTelemetry(name, LinkStatus(name, link), state=TelemetryState.OK)
        ht.record(HostSample(1, 0.0, 0.0, "nvml", None, None, None, None, None, None, tuple(gpus)))
        return ht

    gib = 1 << 30
    hosts = {
        "a": host(
            "a",
            [
                GpuSample(
                    0,
                    util_percent=80,
                    memory_used_bytes=10 * gib,
                    memory_total_bytes=80 * gib,
                    power_w=500,
                ),
                GpuSample(
                    1,
                    util_percent=None,
                    memory_used_bytes=gib,
                    memory_total_bytes=80 * gib,
                    power_w=100,
                ),
                GpuSample(2, util_percent=0, error="GPU is lost"),  # not counted
            ],
        ),
        "b": host("b", [GpuSample(0, util_percent=40, memory_total_bytes=80 * gib, power_w=400)]),
        "c": host("c", [GpuSample(0, util_percent=99)], HostState.UNREACHABLE),  # not up
    }
    text = summary_text("x", fleet_tally(hosts), "name", False, "").plain
    assert "hosts 2/3 up" in text and "1 with problems" in text
    assert "GPUs 3" in text and "util 60%" in text  # (80 + 40) / 2: the None util is skipped
    assert "memory 11/240 GiB" in text and "power 1.0 kW" in text
    totals = hosts["a"].latest.totals()
    assert totals is hosts["a"].latest.totals()  # cached on the sample
    assert (totals.gpus, totals.util_count, totals.power_w) == (2, 1, 600)


async def test_gc_tuned_once_hosts_answered_and_restored_on_exit(gpu_env):
    """Once every host has answered the cockpit freezes what exists and spaces young GC passes
    (key frames under load); leaving, it gives the process back as it found it."""
    import gc

    from tui.app import GC_YOUNG_THRESHOLD

    before = gc.get_threshold()
    app = make_app()
    async with app.run_test(size=(150, 40)) as pilot:
        await wait_for(pilot, lambda: gc.get_threshold()[0] == GC_YOUNG_THRESHOLD)
        assert gc.get_freeze_count() > 0
        assert all(h.latest is not None for h in app.monitor.hosts.values())
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
