"""Debugger screen: workers paused by post-mortem debugging and legacy pdb breakpoints of
running jobs; attach in the cockpit, or hand a paused worker to VS Code."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.debug.targets import Breakpoint, DebugTargets, PausedWorker, debug_targets
from tui.errors import VerlTuiError
from tui.fmt import plural
from tui.sanitize import cell, markup, styled
from tui.screens.error import ReportsWorkerFailures, report
from tui.transport.types import Forward, TransportError
from tui.widgets.footer import KeysFooter

POLL_S = 2.0
# Legacy breakpoints are read by starting Ray's GCS client in a Python on the head: every
# 5th look (10 s), not every 2 s; `r` reads both at once.
BREAKPOINTS_EVERY = 5

Target = PausedWorker | Breakpoint


def _key(t: Target) -> str:
    return f"pm:{t.worker_id}" if isinstance(t, PausedWorker) else f"bp:{t.key}"


class DebuggerScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("a", "attach", "Attach"),
        Binding("v", "vscode", "Open in VS Code"),
        Binding("r", "refresh", "Refresh"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    DebuggerScreen #debug-title { height: 1; background: $panel; text-style: bold; }
    DebuggerScreen DataTable { height: 1fr; }
    DebuggerScreen #debug-detail { height: 10; border-top: solid $primary 50%; padding: 0 1; }
    """

    def __init__(self, cluster: RayCluster, keep_forward: Callable[[Forward], None] | None = None):
        super().__init__()
        self.cluster = cluster
        # The cockpit keeps a VS Code attach's forward open until it exits; None: closed with
        # this screen's app (a test app).
        self.keep_forward = keep_forward
        self.targets: dict[str, Target] = {}
        self.error: str | None = None
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Static(" Debugger", id="debug-title")
        table: DataTable[Text | str] = DataTable(
            id="debug-targets", cursor_type="row", zebra_stripes=True
        )
        table.add_columns("kind", "host", "pid", "port", "job", "task / where", "age")
        yield table
        yield Static("", id="debug-detail")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.poll()

    @work(
        exclusive=True,
        group="debug-poll",
        exit_on_error=False,
        description="Looking for paused workers",
    )
    async def poll(self) -> None:
        # Never overlapping: the next look only after this one finished.
        looks = 0
        while True:
            await self.refresh_targets(breakpoints=looks % BREAKPOINTS_EVERY == 0)
            looks += 1
            await asyncio.sleep(POLL_S)

    async def refresh_targets(self, *, breakpoints: bool = True) -> None:
        try:
            found = await debug_targets(self.cluster, breakpoints=breakpoints)
            if not breakpoints:
                found.breakpoints = list(self.breakpoints)
            self.error = "; ".join(found.problems) or None
        except (DashboardError, TransportError) as exc:
            found = DebugTargets(list(self.paused), list(self.breakpoints), [])
            self.error = f"Ray is not reachable: {exc}"
        both: list[Target] = [*found.paused, *found.breakpoints]
        self.targets = {_key(t): t for t in both}
        self.loaded = True
        self._fill()

    @property
    def paused(self) -> list[PausedWorker]:
        return [t for t in self.targets.values() if isinstance(t, PausedWorker)]

    @property
    def breakpoints(self) -> list[Breakpoint]:
        return [t for t in self.targets.values() if isinstance(t, Breakpoint)]

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        current = self.current
        table.clear()
        for key, t in self.targets.items():
            if isinstance(t, PausedWorker):
                table.add_row(
                    Text("post-mortem", "bold red"),
                    cell(t.host),
                    cell(t.pid),
                    cell(t.port),
                    cell(t.job),
                    cell(t.task),
                    "",
                    key=key,
                )
            else:
                age = f"{int(time.time() - t.timestamp)}s" if t.timestamp else ""
                table.add_row(
                    Text("breakpoint", "bold yellow"),
                    cell(t.host),
                    "",
                    cell(t.port),
                    cell(t.job),
                    cell(f"{Path(t.filename).name}:{t.lineno}  {t.task}"),
                    age,
                    key=key,
                )
        if current is not None and _key(current) in self.targets:
            table.move_cursor(row=table.get_row_index(_key(current)))
        title = (
            f" Debugger — {markup(self.cluster.inv.cluster)}   {len(self.paused)} paused, "
            f"{plural(len(self.breakpoints), 'breakpoint')}"
        )
        if self.error:
            title += f"   {markup(self.error)}"
        self.query_one("#debug-title", Static).update(title)
        self._show_detail()

    @property
    def current(self) -> Target | None:
        table = self.query_one(DataTable)
        if table.row_count == 0 or table.cursor_row is None:
            return None
        try:
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except CellDoesNotExist:
            return None
        return self.targets.get(key) if key is not None else None

    def _show_detail(self) -> None:
        t = self.current
        detail = self.query_one("#debug-detail", Static)
        if t is None:
            detail.update(
                "loading…"
                if not self.loaded
                else "nothing waits for a debugger. Submit with the job form's post-mortem "
                "toggle (RAY_DEBUG_POST_MORTEM=1) or legacy debugging (RAY_DEBUG="
                "legacy) and a failing task or breakpoint() shows up here."
            )
            return
        text = Text()
        if isinstance(t, PausedWorker):
            text.append("post-mortem ", "bold red")
            text.append(f"{t.task} on {t.host} (pid {t.pid}), debugpy on {t.node_ip}:{t.port}\n")
            text.append(f"job {t.job}   worker {t.worker_id[:16]}   task {t.task_id[:16]}\n", "dim")
            text.append(
                "a: attach here (stack, variables, evaluate, continue)   "
                "v: VS Code attach config with a kept SSH forward"
            )
        else:
            text.append("legacy breakpoint ", "bold yellow")
            text.append(f"{t.filename}:{t.lineno} on {t.host}, pdb on {t.pdb_host}:{t.port}\n")
            text.append(f"job {t.job}   {t.task}\n", "dim")
            if t.traceback:
                text.append(t.traceback.strip().splitlines()[-1] + "\n", "red")
            text.append("a: pdb console (type commands; c continues)")
        detail.update(styled(text))  # worker, task, file names and tracebacks: from Ray

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_attach()

    def action_attach(self) -> None:
        t = self.current
        if t is None:
            return
        if isinstance(t, PausedWorker):
            from tui.screens.dap_session import DapSessionScreen

            self.app.push_screen(DapSessionScreen(self.cluster, t))
        else:
            from tui.screens.pdb_console import PdbConsoleScreen

            self.app.push_screen(PdbConsoleScreen(self.cluster, t))

    def action_vscode(self) -> None:
        t = self.current
        if not isinstance(t, PausedWorker):
            self.notify("VS Code attach is for post-mortem workers (debugpy)", severity="warning")
            return
        self.open_in_vscode(t)

    @work(
        exclusive=True,
        group="debug-vscode",
        exit_on_error=False,
        description="Preparing the VS Code attach",
    )
    async def open_in_vscode(self, target: PausedWorker) -> None:
        from tui.debug.attach import attach_in_vscode

        try:
            path, forward = await attach_in_vscode(self.cluster, target, Path.cwd())
        except (VerlTuiError, OSError, ValueError) as exc:  # a launch.json not UTF-8: ValueError
            report(self, exc, title="VS Code attach")
            return
        if self.keep_forward is not None:
            self.keep_forward(forward)
        self.notify(
            f"wrote {markup(path)}: attach configuration for {markup(target.task)} on "
            f"127.0.0.1:{forward.local_port:d}; the forward stays open while verl-tui "
            "runs",
            timeout=12,
        )

    def action_refresh(self) -> None:
        self.poll()

    def action_back(self) -> None:
        self.app.pop_screen()
