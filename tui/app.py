"""The cockpit: a Textual app over the fleet and its live telemetry."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from tui.cluster.telemetry import TelemetryMonitor
from tui.config.hosts import Inventory
from tui.palette import CockpitCommands
from tui.screens.cluster import ClusterScreen
from tui.screens.error import ErrorScreen
from tui.screens.help import HelpScreen, collect_bindings
from tui.transport.fleet import Fleet

FRAME_S = 0.1  # coalesce telemetry into at most ~10 screen updates a second


class VerlTuiApp(App):
    TITLE = "verl-tui"
    COMMANDS = App.COMMANDS | {CockpitCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("ctrl+p", "command_palette", "Commands", show=False),
    ]

    def __init__(self, inventory: Inventory, *, interval: float | None = None):
        super().__init__()
        self.inventory = inventory
        self.fleet: Fleet | None = None
        self.monitor: TelemetryMonitor | None = None
        self._interval = interval
        self._dirty: set[str] = set()
        # Benchmarks watch when samples reach the screen; nothing in normal use sets this.
        self.frame_observer: Callable[[set[str], float], None] | None = None

    def get_default_screen(self) -> ClusterScreen:
        # The Cluster screen is the base of the stack, so nothing pushed early lands under it.
        self.fleet = Fleet(self.inventory)
        self.monitor = TelemetryMonitor(self.fleet, self.inventory, interval=self._interval)
        self.monitor.add_listener(self._mark_dirty)
        self.cluster_screen = ClusterScreen(
            self.inventory.cluster, self.monitor.hosts, self.inventory.insecure_hosts,
            history_s=self.monitor.interval * self.inventory.telemetry.history)
        return self.cluster_screen

    def on_mount(self) -> None:
        self._frame_timer = self.set_interval(FRAME_S, self._flush_telemetry)
        self.start_telemetry()

    def start_telemetry(self) -> None:
        # Fleet and monitor are asyncio tasks that never block the loop; they live as long
        # as the app and are closed (agents told to exit) before the loop goes away.
        assert self.fleet is not None and self.monitor is not None
        self.fleet.start()
        self.monitor.start()

    async def on_unmount(self) -> None:
        self._frame_timer.stop()  # no frame may touch widgets that are being torn down
        if self.monitor is not None:
            await self.monitor.close()
        if self.fleet is not None:
            await self.fleet.close()

    def _flush_telemetry(self) -> None:
        if not self._dirty or not self.cluster_screen.is_mounted:
            return
        changed, self._dirty = self._dirty, set()
        self.cluster_screen.apply_changes(changed)
        if self.frame_observer is not None:
            stamp = time.time()
            self.call_after_refresh(self.frame_observer, changed, stamp)

    def _mark_dirty(self, host: str) -> None:
        self._dirty.add(host)

    def reconnect(self, host: str | None = None) -> None:
        if self.fleet is not None:
            self.fleet.reconnect(host)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(collect_bindings(self.screen)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # One place turns any background failure into a readable modal, never a traceback.
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            err = event.worker.error
            self.push_screen(ErrorScreen(f"{event.worker.group or event.worker.name} failed",
                                         f"{type(err).__name__}: {err}"))
