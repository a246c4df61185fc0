"""A job's stacks on every host (tui/stack: py-spy over SSH, grouped by stack, odd ones out
first), Ray's view of the job and what kept a process from being dumped, in one screen. The dump
is taken in a worker and saved into the run archive; the screen never waits on a host."""

from __future__ import annotations

import asyncio
import time

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tui.archive.store import ArchiveStore
from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.fmt import plural
from tui.sanitize import cell, markup, one_line
from tui.screens.error import ReportsWorkerFailures
from tui.stack import StackGroup, StackReport, dump_job_stacks
from tui.stack.model import frame_lines
from tui.state import StateError
from tui.transport.types import TransportError
from tui.widgets.footer import KeysFooter

DETAIL_FRAMES = 40


class StackScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("r", "dump", "Dump again"),
        Binding("n", "native", "Native frames on/off"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    StackScreen #stack-title { height: 1; background: $panel; text-style: bold;
        text-wrap: nowrap; text-overflow: ellipsis; }
    StackScreen #stack-groups { height: 1fr; min-height: 5; }
    StackScreen #stack-frames { height: 2fr; border-top: solid $primary 50%; padding: 0 1;
        overflow-y: auto; }
    StackScreen #stack-ray { height: auto; max-height: 12; border-top: solid $primary 50%;
        padding: 0 1; overflow-y: auto; }
    """

    def __init__(self, cluster: RayCluster, submission_id: str, *, native: bool = False):
        super().__init__()
        self.cluster = cluster
        self.sid = submission_id
        self.native = native
        self.report: StackReport | None = None
        self.groups: list[StackGroup] = []
        self.saved = ""

    def compose(self) -> ComposeResult:
        yield Static(f" Stacks of {markup(self.sid)}", id="stack-title")
        table: DataTable[Text] = DataTable(id="stack-groups", cursor_type="row")
        table.add_columns("#", "processes", "where (innermost first)")
        yield table
        yield Static("", id="stack-frames")
        yield Static("", id="stack-ray")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.action_dump()

    def action_dump(self) -> None:
        self._title("taking the dump…")
        self.take_dump(self.native)

    def action_native(self) -> None:
        self.native = not self.native
        self.action_dump()

    def action_back(self) -> None:
        self.app.pop_screen()

    @work(
        exclusive=True,
        group="stack-dump",
        description="py-spy dump of every process of the job",
        exit_on_error=False,
    )
    async def take_dump(self, native: bool) -> None:
        try:
            client = await self.cluster.dashboard()
            report = await dump_job_stacks(self.cluster.fleet, client, self.sid, native=native)
        except (DashboardError, TransportError) as exc:
            self._title(f"no dump: {one_line(str(exc), 300)}", error=True)
            return
        saved = ""
        try:
            store = ArchiveStore(self.cluster.inv.cluster)
            saved = str(await asyncio.to_thread(report.save, store))
        except StateError as exc:
            saved = f"not saved: {exc}"
        self.show(report, saved)

    def show(self, report: StackReport, saved: str = "") -> None:
        """Draw a report (also what tests and snapshots call with a recorded one)."""
        self.report, self.saved = report, saved
        self.groups = report.groups
        table = self.query_one(DataTable)
        table.clear()
        for i, g in enumerate(self.groups):
            table.add_row(cell(str(len(g.dumps))), cell(g.who, 60), cell(g.where, 200), key=str(i))
        taken = time.strftime("%H:%M:%S", time.localtime(report.taken_at))
        self._title(
            f"{len(report.dumps)} of {plural(report.expected, 'process', 'processes')} in "
            f"{plural(len(self.groups), 'group')}, taken {taken} ({report.seconds:.1f} s)"
            + (", native frames" if report.native else "")
        )
        self._ray_panel(report)
        self._detail(0)

    def _title(self, text: str, *, error: bool = False) -> None:
        style = "[b red]" if error else ""
        end = "[/]" if error else ""
        self.query_one("#stack-title", Static).update(
            f" Stacks of {markup(self.sid)}   {style}{markup(text)}{end}"
        )

    def _ray_panel(self, report: StackReport) -> None:
        lines = [f"[b red]✗[/] {markup(str(p), 400)}" for p in report.problems]
        lines += [markup(line, 400) for line in report.ray_lines]
        if self.saved:  # a long path: its own line, not the one-row title's end
            lines.append(f"[dim]dump saved: {markup(self.saved, 400)}[/]")
        self.query_one("#stack-ray", Static).update("\n".join(lines) or "[dim]no problems[/]")

    def _detail(self, index: int) -> None:
        panel = self.query_one("#stack-frames", Static)
        if not 0 <= index < len(self.groups):
            panel.update("[dim]no process was dumped[/]" if self.report else "")
            return
        g = self.groups[index]
        lines = [f"[b]{markup(g.who, 300)}[/]"]
        frames = frame_lines(g.frames)
        lines += [f"  {markup(line, 300)}" for line in frames[:DETAIL_FRAMES]]
        if len(frames) > DETAIL_FRAMES:
            lines.append(f"  [dim]… {len(frames) - DETAIL_FRAMES} more line(s)[/]")
        who = ", ".join(f"{d.target.role} {d.target.host}:{d.target.pid}" for d in g.dumps[:16])
        lines.append(f"[dim]{markup(who, 1000)}[/]")
        panel.update("\n".join(lines))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value
        if key is not None and key.isdigit():
            self._detail(int(key))
