"""A search across every host's Ray session logs from the node-logs screen (ctrl+f): a prompt
for the regex (checked here, at the boundary, before anything is sent), then the hosts' matches
as `host:file:line: text` in the screen's log pane (tui/cluster/node_logs.py grep_logs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui.cluster.node_logs import BadPattern, check_pattern, grep_logs
from tui.fmt import plural
from tui.sanitize import one_line
from tui.screens.error import ReportsWorkerFailures
from tui.widgets.logview import LogPane

if TYPE_CHECKING:
    from tui.transport.fleet import Fleet


class GrepPrompt(ReportsWorkerFailures, ModalScreen[str | None]):
    """The pattern: enter searches, a bad regex is said on the line below (the text kept)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    GrepPrompt { align: center middle; }
    GrepPrompt > Vertical {
        width: 80; height: auto; border: thick $primary; background: $surface; padding: 1 2;
    }
    GrepPrompt #grep-error { color: $error; height: auto; }
    """

    def __init__(self, hosts: int):
        super().__init__()
        self.hosts = hosts

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Search the Ray logs of {plural(self.hosts, 'host')} (a Python regex)")
            yield Input(placeholder="pattern (enter: search, esc: cancel)", id="grep-pattern")
            yield Static("", id="grep-error", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            check_pattern(event.value)
        except BadPattern as exc:
            self.query_one("#grep-error", Static).update(one_line(exc, 200))
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


async def grep_into(pane: LogPane, fleet: Fleet, hosts: Sequence[str], pattern: str) -> None:
    """The matches of every host in the pane (hosts in order), then one status line: how many,
    and each host that could not be searched or was searched only in part."""
    pane.clear()
    pane.title = one_line(f"search /{pattern}/ in {plural(len(hosts), 'host')}'s Ray logs", 200)
    found = await grep_logs(fleet, hosts, pattern)
    lines = [str(m) for r in found for m in r.matches]
    if lines:
        pane.append("\n".join(lines) + "\n")
    said = [f"{r.host}: {r.error}" for r in found if r.error]
    said += [f"{r.host}: {note}" for r in found for note in r.notes]
    status = f"{plural(len(lines), 'match', 'matches')} in {sum(r.files for r in found)} files"
    if said:
        more = f" (+{len(said) - 3} more)" if len(said) > 3 else ""
        status += "; " + "; ".join(said[:3]) + more
    pane.finish(one_line(status, 400))
