"""A job's log and its training metrics: the driver log followed live through the Jobs API,
and verl's `step:N - key:value` lines turned into charts with a progress bar and ETA."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from tui.cluster.dashboard import DashboardError
from tui.cluster.job_logs import JobLogEnd, any_job_log_chunks
from tui.cluster.ray_cluster import RayCluster
from tui.jobs.profiles import override_text
from tui.sanitize import markup
from tui.screens.error import ReportsWorkerFailures
from tui.transport.types import TransportError
from tui.widgets.logview import LogPane
from tui.widgets.metrics import MetricsPanel

RETRY_S = 3.0
SLICE = 1 << 20


def default_save_path(sid: str) -> Path:
    return Path.cwd() / f"{sid}.log"


def total_steps_from(overrides: list[str]) -> int | None:
    """trainer.total_training_steps when the job was submitted with it (else verl prints it)."""
    value = override_text(overrides, "trainer.total_training_steps")
    return int(value) if value and value.isdigit() else None


class JobLogsScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("t", "toggle_tab", "Log / metrics"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    JobLogsScreen #joblog-title { height: 1; background: $panel; text-style: bold; }
    JobLogsScreen TabbedContent { height: 1fr; }
    JobLogsScreen TabPane { padding: 0; }
    """

    def __init__(
        self,
        cluster: RayCluster,
        submission_id: str,
        *,
        metrics: bool = False,
        total_steps: int | None = None,
    ):
        super().__init__()
        self.cluster = cluster
        self.sid = submission_id
        self.start_on_metrics = metrics
        self.total_steps = total_steps
        self.status: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(f" Job {markup(self.sid)}", id="joblog-title")
        with TabbedContent(initial="tab-metrics" if self.start_on_metrics else "tab-log"):
            with TabPane("Log", id="tab-log"):
                yield LogPane(title=self.sid, save_path=default_save_path(self.sid), id="job-log")
            with TabPane("Metrics", id="tab-metrics"):
                yield MetricsPanel(id="job-metrics")
        yield Footer()

    @property
    def pane(self) -> LogPane:
        return self.query_one("#job-log", LogPane)

    @property
    def metrics(self) -> MetricsPanel:
        return self.query_one("#job-metrics", MetricsPanel)

    def on_mount(self) -> None:
        if self.total_steps:
            self.metrics.set_total_steps(self.total_steps)
        self._focus_tab()
        self.follow()

    def _title(self, note: str = "") -> None:
        text = f" Job {markup(self.sid)}"
        if self.status:
            text += f"   {markup(self.status)}"
        if note:
            text += f"   {markup(note)}"
        self.query_one("#joblog-title", Static).update(text)

    @work(exclusive=True, group="job-log", exit_on_error=False)
    async def follow(self) -> None:
        # One stream at a time; if the tunnel breaks while the job runs, start again from the
        # top into a fresh pane (the snapshot + tail join is exact only from the start).
        while True:
            ends: list[JobLogEnd] = []
            try:
                first = True
                # Also a job from before a Ray restart (its old session's log, over SSH).
                async for chunk in any_job_log_chunks(
                    self.cluster, self.sid, follow=True, ends=ends
                ):
                    if first:
                        self.pane.clear()
                        self.metrics.clear()
                        first = False
                        self._title("following")
                    # A long log's first chunk is big: feed it in slices so keys are
                    # answered meanwhile.
                    for start in range(0, len(chunk), SLICE):
                        part = chunk[start : start + SLICE]
                        self.pane.append(part)
                        self.metrics.feed_text(part)
                        if len(chunk) > SLICE:
                            await asyncio.sleep(0)
            except (DashboardError, TransportError) as exc:
                msg = str(exc)
                if "HTTP 404" in msg:
                    self._title(f"no such job on the head: {self.sid}")
                    return
                self._title(f"log unavailable ({msg}); retrying")
                await asyncio.sleep(RETRY_S)
                continue
            end = ends[-1] if ends else JobLogEnd(None)
            self.status = end.status
            self.pane.finish(end.status or "ended")
            self.metrics.feed_text("\n")  # a last line without newline counts too
            # Ray's message goes on with ", last available logs (truncated …):": the log is here.
            self._title((end.message or "").split(", last available logs")[0][:100])
            return

    def _focus_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == "tab-log":
            self.pane.log_view.focus()
        else:
            self.metrics.focus()

    def action_toggle_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = "tab-metrics" if tabs.active == "tab-log" else "tab-log"
        self._focus_tab()

    def action_back(self) -> None:
        self.app.pop_screen()
