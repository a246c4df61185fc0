"""A legacy (RAY_DEBUG=legacy) breakpoint's pdb, over an SSH forward to the node's loopback:
type a command, read the reply; `c` continues and ends the session."""

from __future__ import annotations

import contextlib

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, RichLog, Static

from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.debug.pdb_console import PdbConsole, PdbConsoleError
from tui.debug.targets import Breakpoint, open_debug_connection
from tui.sanitize import clean, markup, one_line
from tui.screens.error import ReportsWorkerFailures
from tui.transport.types import Forward, TransportError
from tui.widgets.footer import KeysFooter


def _shown(reply: str) -> str:
    """pdb's CRLF text as lines, every control sequence dropped or shown escaped."""
    return clean(reply.replace("\r\n", "\n"))


class PdbConsoleScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [Binding("escape", "back", "Back")]

    DEFAULT_CSS = """
    PdbConsoleScreen #pdb-title { height: 1; background: $panel; text-style: bold; }
    PdbConsoleScreen RichLog { height: 1fr; }
    """

    def __init__(self, cluster: RayCluster, target: Breakpoint):
        super().__init__()
        self.cluster = cluster
        self.target = target
        self.forward: Forward | None = None
        self.console: PdbConsole | None = None
        self.history: list[str] = []
        self._hist_pos = 0

    def compose(self) -> ComposeResult:
        t = self.target
        yield Static(
            f" pdb — {markup(t.filename)}:{markup(t.lineno)} on {markup(t.host)}   connecting…",
            id="pdb-title",
        )
        yield RichLog(id="pdb-log", wrap=True, markup=False, highlight=False)
        yield Input(
            placeholder="pdb command (p x, where, list, n, s, c …; Up/Down: history)",
            id="pdb-input",
            disabled=True,
        )
        yield KeysFooter()

    def on_mount(self) -> None:
        self.connect()

    def _title(self, state: str) -> None:
        t = self.target
        self.query_one("#pdb-title", Static).update(
            f" pdb — {markup(t.filename)}:{markup(t.lineno)} on {markup(t.host)}   {markup(state)}"
        )

    @property
    def transcript(self) -> RichLog:
        return self.query_one("#pdb-log", RichLog)

    @work(exclusive=True, group="pdb", exit_on_error=False, description="The pdb session")
    async def connect(self) -> None:
        try:
            self.console = await PdbConsole.start(
                *await open_debug_connection(self.cluster, self.target)
            )
        except (PdbConsoleError, TransportError, DashboardError, OSError) as exc:
            self._title(f"connect failed: {exc}")
            self._close()
            return
        # Everything the pdb socket sends is the remote program's text: cleaned.
        self.transcript.write(Text(_shown(self.console.banner.rstrip())))
        self._title("connected")
        box = self.query_one("#pdb-input", Input)
        box.disabled = False
        box.focus()

    @on(Input.Submitted, "#pdb-input")
    def _submitted(self, event: Input.Submitted) -> None:
        line = event.value
        event.input.value = ""
        if line.strip():
            self.history.append(line)
        self._hist_pos = len(self.history)
        self.send(line)

    @work(exclusive=True, group="pdb-send", exit_on_error=False, description="Sending to pdb")
    async def send(self, line: str) -> None:
        if self.console is None:
            return
        self.transcript.write(Text(f"(Pdb) {one_line(line)}", "bold"))
        try:
            reply = await self.console.send(line)
        except PdbConsoleError as exc:
            self.transcript.write(Text(clean(exc), "red"))
            return
        if reply.strip():
            self.transcript.write(Text(_shown(reply.rstrip("\n"))))
        if self.console.closed:
            self._title("session ended: the task goes on")
            self.query_one("#pdb-input", Input).disabled = True
            self._close()

    def on_key(self, event) -> None:
        box = self.query_one("#pdb-input", Input)
        if not box.has_focus or not self.history or event.key not in ("up", "down"):
            return
        step = -1 if event.key == "up" else 1
        self._hist_pos = max(0, min(len(self.history), self._hist_pos + step))
        box.value = self.history[self._hist_pos] if self._hist_pos < len(self.history) else ""
        box.cursor_position = len(box.value)
        event.stop()

    def _close(self) -> None:
        console, self.console = self.console, None
        if console is not None:
            with contextlib.suppress(Exception):
                self.app.call_later(console.close)
        if self.forward is not None:
            self.forward.close()
            self.forward = None

    def action_back(self) -> None:
        if self.console is None:
            self.app.pop_screen()
            return
        from tui.screens.confirm import ConfirmScreen

        def answered(yes: bool | None) -> None:
            if yes:
                self._close()
                self.app.pop_screen()

        # pdb reads EOF when we hang up, and quits: the task fails with BdbQuit.
        self.app.push_screen(
            ConfirmScreen(
                "Leave the pdb session?",
                "Hanging up makes pdb quit: the task fails with BdbQuit. "
                "Type c instead to let it run on.",
            ),
            answered,
        )
