"""Cluster screen: every host and GPU, live, with totals, filter, sort and details."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Static

from tui.cluster.models import HostTelemetry
from tui.cluster.ray_monitor import RayState, RayView
from tui.sanitize import markup, styled
from tui.screens.error import ReportsWorkerFailures
from tui.widgets.details import DetailsPane, gpu_details, host_details
from tui.widgets.footer import KeysFooter
from tui.widgets.gpu_table import GpuTable, column_header
from tui.widgets.summary import ClusterSummary, FleetTally, fleet_tally, summary_text

if TYPE_CHECKING:
    from tui.transport.fleet import Fleet

# The summary line adds up every host (its state and totals): at 4,096 hosts twice a second
# was ~3 % of a core on the device; the samples it sums come once a second.
SUMMARY_EVERY_S = 1.0


class ColumnHeader(Static):
    DEFAULT_CSS = """
    ColumnHeader { height: 1; background: $primary 30%; color: $text; text-style: bold; }
    """

    def __init__(self, history_s: float, table: GpuTable, **kw) -> None:
        super().__init__(**kw)
        self.history_s = history_s
        self.table = table

    def render(self) -> str:
        return column_header(self.size.width, self.history_s, self.table.columns)


class ClusterScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse_sort", "Reverse sort", show=False),
        # Kept out of the footer so 1-5 fit at 160 columns; help (?) and ctrl+p list them.
        Binding("r", "reconnect", "Reconnect host", show=False),
        Binding("u", "app.ray_up", "Ray up"),
        Binding("D", "app.ray_down", "Ray down", show=False),
        Binding("R", "app.ray_restart", "Ray restart", show=False),
        Binding("d", "app.doctor", "Doctor"),
        Binding("l", "node_logs", "Host's Ray logs", show=False),
        Binding("c", "columns", "More GPU columns", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    # The filter box opens over the screen's bottom rows (a layer of its own, above the keys'
    # footer), so opening and closing it moves nothing: docked among the others it resized
    # the table each time, a layout and a whole table drawn again (at 4,096 hosts the slowest
    # filter keys on the device were its enter, three frames, ~115-135 ms).
    DEFAULT_CSS = """
    ClusterScreen { layers: default overlay; }
    ClusterScreen #filter {
        layer: overlay; dock: bottom; margin-bottom: 1; display: none; height: 3;
    }
    ClusterScreen #filter.visible { display: block; }
    ClusterScreen GpuTable { height: 1fr; }
    """

    def __init__(
        self,
        cluster: str,
        hosts: Mapping[str, HostTelemetry],
        insecure: list[str],
        history_s: float = 300.0,
        roles: list[str] | None = None,
        fleet: Fleet | None = None,
    ):
        super().__init__()
        self.fleet = fleet  # the hosts' connections, for r (reconnect)
        # Host names, head first: for the Ray column's role labels.
        self.roles = roles or list(hosts)
        self.ray_view: RayView | None = None
        self.history_s = history_s
        self.cluster = cluster
        self.hosts = hosts
        self.insecure = insecure
        self._summary_at = 0.0
        self._summary_pending = False
        self._tally: FleetTally | None = None  # the summary's last count of the fleet
        self._ray_shown: tuple | None = None

    def compose(self) -> ComposeResult:
        yield ClusterSummary(id="summary")
        self._table = GpuTable(id="gpus")
        yield ColumnHeader(self.history_s, self._table, id="columns")
        yield self._table
        yield DetailsPane(id="details")
        yield Input(placeholder="filter hosts and GPUs (enter: keep, esc: clear)", id="filter")
        yield KeysFooter()

    @property
    def table(self) -> GpuTable:
        # Held, not queried: frames and timers may run while the DOM is being torn down.
        return self._table

    def on_mount(self) -> None:
        # The details pane follows the cursor, and the table the filter box, in the same frame
        # as the key that moved them (not a message hop and a frame later).
        self.table.on_cursor = lambda _row: self._refresh_details()
        self.watch(self.query_one("#filter", Input), "value", self.set_filter, init=False)
        self.table.set_hosts(self.hosts)
        self.table.focus()
        if self.ray_view is not None:
            self._show_ray(self.ray_view)
        self._refresh_summary()
        self._refresh_details()

    def apply_changes(self, changed: set[str]) -> None:
        """Called by the app at most ~10 times a second with the hosts that changed."""
        self.table.update_hosts(changed)
        # Totals walk every host of the fleet: once a second, as the samples come.
        wait = self._summary_at + SUMMARY_EVERY_S - time.monotonic()
        if wait <= 0:
            self._refresh_summary()
        elif not self._summary_pending:  # trailing update: the last change is never dropped
            self._summary_pending = True
            self.set_timer(wait, self._refresh_summary)
        row = self.table.current_row
        if row is not None and row.host in changed:
            self._refresh_details()

    def apply_ray(self, view: RayView) -> None:
        """The head's view of Ray changed: the Ray column and the summary follow."""
        self.ray_view = view
        # Polled every few seconds: repaint only when what the table and summary show moved.
        if self.is_mounted and _ray_shown(view) != self._ray_shown:  # else on_mount applies it
            self._show_ray(view)

    def _show_ray(self, view: RayView) -> None:
        self._ray_shown = _ray_shown(view)
        roles = {h: ("head" if i == 0 else "worker") for i, h in enumerate(self.roles)}
        self.table.ray_label = lambda host: view.host_label(host, roles.get(host, "?"))
        self.table.refresh()
        self._refresh_summary(fleet=False)

    def _ray_summary(self) -> tuple[str, str] | None:
        view = self.ray_view
        if view is None:
            return None
        if view.state == RayState.UP and view.status is not None:
            total = len(view.node_state)
            alive = sum(1 for v in view.node_state.values() if v == "alive")
            return f"up {alive}/{total}", "bold green" if alive == total else "bold yellow"
        if view.state == RayState.BUSY:
            return "working…", "bold cyan"
        if view.state == RayState.DOWN:
            return "not running (u starts it)", "dim"
        return "?", "dim"

    def _refresh_summary(self, fleet: bool = True) -> None:
        """The summary line; `fleet`: the hosts changed (count them again), else only the
        sort, filter or Ray words did (the last count stands: at most a second old)."""
        if not self.is_mounted:  # a trailing timer firing while the app shuts down
            return
        t = self.table
        if fleet or self._tally is None:
            self._tally = fleet_tally(self.hosts)
            self._summary_at = time.monotonic()
            self._summary_pending = False
        # Fixed heights: new text never changes the layout, so skip the layout pass.
        # (Insecure host keys: the app's banner on every screen says it, not the summary.)
        # (query, not query_one: while the app shuts down the summary may be gone already)
        for summary in self.query(ClusterSummary):
            summary.update(
                styled(
                    summary_text(
                        self.cluster,
                        self._tally,
                        t.sort_key,
                        t.sort_reverse,
                        t.filter_text,
                        self._ray_summary(),
                    )
                ),
                layout=False,
            )

    def _refresh_details(self) -> None:
        row = self.table.current_row
        panes = self.query(DetailsPane)  # empty while the app shuts down (a late telemetry flush)
        if not panes:
            return
        pane = panes.first()
        if row is None:
            shown = Text("no host matches the filter" if self.table.filter_text else "")
        elif row.gpu is None:
            shown = host_details(self.hosts[row.host])
        else:
            shown = gpu_details(self.hosts[row.host], row.gpu)
        # Host names, GPU names, process names and errors come from the agent.
        pane.update(styled(shown), layout=False)

    # -- actions -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.remove_class("visible")
            self.table.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        self.set_filter("")
        self.table.focus()

    def set_filter(self, text: str) -> None:
        self.table.filter_text = text.strip()
        self.table.rebuild()
        self._refresh_summary(fleet=False)
        self._refresh_details()

    def set_sort(self, key: str, reverse: bool | None = None) -> None:
        self.table.sort_key = key
        if reverse is not None:
            self.table.sort_reverse = reverse
        self.table.rebuild()
        self._refresh_summary(fleet=False)

    def action_columns(self) -> None:
        self.table.toggle_columns()
        self.query_one(ColumnHeader).refresh()
        self._refresh_summary(fleet=False)

    def action_sort(self) -> None:
        keys = self.table.sort_keys
        self.set_sort(keys[(keys.index(self.table.sort_key) + 1) % len(keys)])
        self.notify(f"sorted by {markup(self.table.sort_key)}", timeout=1.5)

    def action_reverse_sort(self) -> None:
        self.set_sort(self.table.sort_key, not self.table.sort_reverse)

    async def action_node_logs(self) -> None:
        row = self.table.current_row
        host = row.host if row is not None else None
        # The cockpit's own action (one Node logs screen over the Cluster screen): by name, so
        # this screen does not import the app that shows it.
        await self.app.run_action(f"app.node_logs({host!r})", self)

    def action_reconnect(self) -> None:
        row = self.table.current_row
        if row is not None and self.fleet is not None:
            self.fleet.reconnect(row.host)
            self.notify(f"reconnecting {markup(row.host)}", timeout=1.5)


def _ray_shown(view: RayView) -> tuple:
    """What of Ray's view the table's labels and the summary show."""
    return (view.state, view.status is None, view.node_state)
