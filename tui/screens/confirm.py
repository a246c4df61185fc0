"""A yes/no question before anything destructive (stopping Ray on every host)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.sanitize import clean
from tui.screens.error import ReportsWorkerFailures


class ConfirmScreen(ReportsWorkerFailures, ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 70; height: auto; border: thick $warning; background: $surface; padding: 1 2;
    }
    ConfirmScreen #question { text-style: bold; }
    """

    def __init__(self, question: str, detail: str = ""):
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical():
            # Questions name jobs and hosts: outside text, cleaned where it is drawn.
            yield Static(clean(self.question), id="question", markup=False)
            if self.detail:
                yield Static(clean(self.detail), markup=False)
            yield Static("[b]y[/b] yes   [b]n[/b] / esc no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
