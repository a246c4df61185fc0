"""Every host's Ray session log files over SSH; the chosen one followed in a log pane."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.cluster.node_logs import LogFile, batched, follow_log, list_logs
from tui.fmt import age, human_size, plural
from tui.sanitize import cell, markup, one_line
from tui.screens.error import ReportsWorkerFailures
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError
from tui.widgets.footer import KeysFooter
from tui.widgets.logview import LogPane

_KIND_STYLE = {
    "raylet": "cyan",
    "gcs": "magenta",
    "worker": "",
    "driver": "green",
    "dashboard": "dim",
    "agent": "dim",
    "autoscaler": "dim",
    "other": "dim",
}


class NodeLogsScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("r", "refresh", "Refresh list"),
        Binding("o", "only_host", "This host only / all"),
        Binding("tab", "switch_focus", "Files / log", show=False),
        Binding("ctrl+f", "grep_all", "Grep all hosts"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    NodeLogsScreen #nodelogs-title { height: 1; background: $panel; text-style: bold; }
    NodeLogsScreen #files { height: 12; }
    NodeLogsScreen LogPane { height: 1fr; border-top: solid $primary 50%; }
    """

    def __init__(self, fleet: Fleet, hosts: list[str], *, host: str | None = None):
        super().__init__()
        self.fleet = fleet
        self.hosts = hosts
        self.only = host
        self.files: dict[str, list[LogFile]] = {}
        self.errors: dict[str, str] = {}
        self.opened: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        yield Static(" Node logs", id="nodelogs-title")
        table: DataTable[Text] = DataTable(id="files", cursor_type="row", zebra_stripes=True)
        table.add_columns("host", "file", "kind", "size", "modified")
        yield table
        yield LogPane(title="", id="node-log")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.refresh_files()

    @work(
        exclusive=True,
        group="node-logs-list",
        exit_on_error=False,
        description="Listing the node's logs",
    )
    async def refresh_files(self) -> None:
        hosts = [self.only] if self.only else self.hosts

        async def one(host: str) -> None:
            try:
                transport = await self.fleet.wait_up(host, 15)
                self.files[host] = await list_logs(transport)
                self.errors.pop(host, None)
            except (TransportError, asyncio.TimeoutError) as exc:
                self.files[host] = []
                self.errors[host] = str(exc) or type(exc).__name__

        await asyncio.gather(*(one(h) for h in hosts))
        self._fill(hosts)

    def _fill(self, hosts: list[str]) -> None:
        table = self.query_one(DataTable)
        current = self._current_key()
        table.clear()
        for host in hosts:
            for f in self.files.get(host, []):
                table.add_row(
                    cell(host),
                    cell(f.name),
                    cell(f.kind, style=_KIND_STYLE.get(f.kind, "")),
                    human_size(f.size),
                    age(f.mtime),
                    key=f"{host}\t{f.name}",
                )
        if current is not None:
            # The file may be gone (rotated, a new session).
            with contextlib.suppress(Exception):
                table.move_cursor(row=table.get_row_index(current))
        title = " Node logs" + (f" — {markup(self.only)}" if self.only else " — all hosts")
        title += f"   {plural(table.row_count, 'file')}"
        if self.errors:
            title += "   " + "; ".join(
                f"{markup(h)}: {markup(e.removeprefix(f'{h}: '))}"
                for h, e in sorted(self.errors.items())
            )
        self.query_one("#nodelogs-title", Static).update(title)

    def _current_key(self) -> str | None:
        table = self.query_one(DataTable)
        if table.row_count == 0 or table.cursor_row is None:
            return None
        try:
            return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except CellDoesNotExist:
            return None

    def action_open(self) -> None:
        key = self._current_key()
        if key is None:
            return
        host, name = key.split("\t", 1)
        self.opened = (host, name)
        pane = self.query_one(LogPane)
        pane.clear()
        # The file name comes from the host: keep the default save path one plain file here.
        pane.save_path = Path.cwd() / re.sub(r"[^\w.-]+", "_", f"{host}-{name}").lstrip(".")
        pane.title = one_line(f"{host}:{name}")
        self.follow(host, name)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    @work(
        exclusive=True,
        group="node-log-follow",
        exit_on_error=False,
        description="Following the node log",
    )
    async def follow(self, host: str, name: str) -> None:
        pane = self.query_one(LogPane)
        try:
            transport = await self.fleet.wait_up(host, 15)
            proc = await follow_log(transport, name)
        except (TransportError, asyncio.TimeoutError, ValueError) as exc:
            pane.finish(f"cannot follow {name} on {host}: {exc}")
            return
        try:
            async for chunk in batched(proc.lines()):
                pane.append(chunk)
            why = (await proc.stderr_tail()).strip().splitlines()
            pane.finish(f"ended: {why[-1]}" if why else "ended")
        finally:
            await proc.close()

    def action_grep_all(self) -> None:
        """A regex searched in the logs of the hosts shown (tui/screens/logs/node_logs_grep.py)."""
        from tui.screens.logs.node_logs_grep import GrepPrompt, grep_into

        hosts = [self.only] if self.only else list(self.hosts)

        def search(pattern: str | None) -> None:
            if pattern:
                self.opened = None  # the pane shows the search, not a followed file
                work = grep_into(self.query_one(LogPane), self.fleet, hosts, pattern)
                # The follow worker's group: a search replaces the followed file.
                self.run_worker(
                    work,
                    group="node-log-follow",
                    exclusive=True,
                    exit_on_error=False,
                    description="Following the node log",
                )

        self.app.push_screen(GrepPrompt(len(hosts)), search)

    def action_refresh(self) -> None:
        self.refresh_files()

    def action_only_host(self) -> None:
        key = self._current_key()
        if self.only:
            self.only = None
        elif key is not None:
            self.only = key.split("\t", 1)[0]
        self.refresh_files()

    def action_switch_focus(self) -> None:
        table = self.query_one(DataTable)
        if table.has_focus:
            self.query_one(LogPane).log_view.focus()
        else:
            table.focus()

    def action_back(self) -> None:
        self.app.pop_screen()
