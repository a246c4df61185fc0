"""A modal for failures of background work: the message, never a traceback."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.sanitize import clean


class ErrorScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close")]

    DEFAULT_CSS = """
    ErrorScreen { align: center middle; }
    ErrorScreen > Vertical {
        width: 80; height: auto; border: thick $error; background: $surface; padding: 1 2;
    }
    ErrorScreen #title { text-style: bold; color: $error; }
    """

    def __init__(self, title: str, message: str):
        super().__init__()
        self.title_text = title
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical():
            # Error text comes from hosts, Ray and SSH: cleaned where it is drawn.
            yield Static(clean(self.title_text), id="title", markup=False)
            yield Static(clean(self.message), markup=False)
            yield Static("[dim]esc closes[/dim]")
