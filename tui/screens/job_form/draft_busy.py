"""The profile's draft is open in another form: take over, a read-only copy, or cancel."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.jobs.formstate import DraftOwner
from tui.sanitize import one_line
from tui.screens.error import ReportsWorkerFailures


class DraftBusyScreen(ReportsWorkerFailures, ModalScreen[str]):
    """The profile's draft is open in another form: take over, read-only copy, or cancel."""

    BINDINGS = [
        Binding("t", "choose('take')", "Take over"),
        Binding("r", "choose('copy')", "Read-only copy"),
        Binding("c,escape", "choose('cancel')", "Cancel"),
    ]

    DEFAULT_CSS = """
    DraftBusyScreen { align: center middle; }
    DraftBusyScreen > Vertical {
        width: 76; height: auto; border: thick $warning; background: $surface; padding: 1 2;
    }
    DraftBusyScreen #draft-busy-question { text-style: bold; }
    DraftBusyScreen Horizontal { height: auto; margin-top: 1; }
    DraftBusyScreen Button { margin-right: 1; }
    """

    def __init__(self, other: DraftOwner | None) -> None:
        super().__init__()
        self.other = other

    def compose(self) -> ComposeResult:
        who = self.other.describe() if self.other else "another form (owner unknown)"
        with Vertical():
            yield Static(
                Text(f"this draft is open in another form: {one_line(who)}"),
                id="draft-busy-question",
            )
            yield Static(
                Text(
                    "Take over: this form saves the draft, the other stops saving. "
                    "Read-only copy: edit and submit here, nothing is saved."
                )
            )
            with Horizontal():
                yield Button("Take over (t)", id="take", variant="warning")
                yield Button("Read-only copy (r)", id="copy")
                yield Button("Cancel (c)", id="cancel")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "cancel")

    def action_choose(self, what: str) -> None:
        self.dismiss(what)
