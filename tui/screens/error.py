"""A modal for an unexpected failure (the message, never a traceback), and how a screen's
worker failure reaches the app's one presenter (`VerlTuiApp.report`)."""

from __future__ import annotations

from typing import Any, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.message_pump import MessagePump
from textual.screen import ModalScreen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from tui.errors import VerlTuiError
from tui.sanitize import clean


class WorkerFailed(Message):
    """A background worker failed (its exception in `worker.error`): bubbles from the screen
    that ran it to the app, whose one `report` presents it."""

    def __init__(self, worker: Worker[Any]) -> None:
        super().__init__()
        self.worker = worker


class ReportsWorkerFailures:
    """Mixed into every screen: a worker's StateChanged goes to the node that started it and
    does not bubble, so a screen passes its workers' failures on as WorkerFailed, which does
    (else a failure inside a screen's worker would pass in silence)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            cast(MessagePump, self).post_message(WorkerFailed(event.worker))


class Failed(Message):
    """An error for the app's one presenter (VerlTuiApp.report), from a screen or widget: it
    bubbles to the app."""

    def __init__(self, error: BaseException, title: str | None = None) -> None:
        super().__init__()
        self.error = error
        self.heading = title  # what did not happen; the presenter cleans it (it is drawn there)


def report(node: MessagePump, error: BaseException | str, *, title: str | None = None) -> None:
    """Hand an error to the app's one presenter: an exception as it is; a line a screen worded
    itself (a refusal), or a ValueError it caught from parsing what the user typed, as one of
    ours. `title` says what did not happen ("not stopped")."""
    if isinstance(error, str) or (
        isinstance(error, ValueError) and not isinstance(error, VerlTuiError)
    ):
        error = VerlTuiError(str(error))
    node.post_message(Failed(error, title))


def failure_title(worker: Worker[Any]) -> str:
    """What failed, in words: the worker's own description (`@work(description=...)`, which
    every worker of ours has: tests/test_error_report.py checks) and "failed"."""
    return f"{worker.description or 'A background task'} failed"


class ErrorScreen(ReportsWorkerFailures, ModalScreen[None]):
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
