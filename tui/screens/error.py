"""A modal for failures of background work: the message, never a traceback."""

from __future__ import annotations

from typing import Any, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static
from textual.worker import Worker

from tui.sanitize import clean

# What failed, in words, for each background worker group (the modal's title).
_WHAT_FAILED = {
    "ray": "Ray up/down failed",
    "ray-check": "Checking whether Ray is running failed",
    "jobs-poll": "Listing the jobs failed",
    "jobs-stop": "Stopping the job failed",
    "jobs-delete": "Deleting the job failed",
    "form-load": "Opening the job form failed",
    "form-cluster": "Asking Ray for the cluster's shape failed",
    "form-probe": "Looking for debugpy on the hosts failed",
    "validate": "Checking the job failed",
    "draft": "Saving the draft failed",
    "form-submit": "Submitting the job failed",
    "job-log": "Following the job's log failed",
    "node-logs-list": "Listing the node's logs failed",
    "node-log-follow": "Following the node log failed",
    "debug-poll": "Looking for paused workers failed",
    "debug-vscode": "Preparing the VS Code attach failed",
    "dap": "The debugger session failed",
    "pdb": "The pdb session failed",
    "pdb-send": "Sending to pdb failed",
    "doctor": "The doctor's checks failed",
    "ckpt-scan": "Scanning for checkpoints failed",
    "ckpt-op": "The checkpoint operation failed",
    "ckpt-picker": "Listing checkpoints failed",
    "profiles-list": "Listing the profiles failed",
    "stack-dump": "Dumping the job's stacks failed",
}


class ReportsWorkerFailures:
    """Mixed into every screen: a worker's StateChanged goes to the node that started it and
    does not bubble, so a screen hands its workers' failures to the app's one handler (else a
    failure inside a screen's worker would pass in silence)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report = getattr(cast(Any, self).app, "report_worker_failure", None)
        if report is not None:
            report(event)


def failure_title(group: str | None, name: str | None = None) -> str:
    """The modal's title for a failed background worker: what failed, in words."""
    if group and group in _WHAT_FAILED:
        return _WHAT_FAILED[group]
    what = (group if group and group != "default" else name) or "background task"
    return f"{what.replace('-', ' ').replace('_', ' ').strip().capitalize()} failed"


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
