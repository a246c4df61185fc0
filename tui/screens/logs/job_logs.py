"""A job's log and its training metrics: the driver log (its end first, read from the head's
file over SSH, else through the Jobs API) followed live, and verl's `step:N - key:value` lines
turned into charts with a progress bar and ETA. A job opened here is archived while it is
shown (log, metric series, status, GPU use from the cockpit's telemetry); one the head no longer
knows is shown from the archive, before the head's old session file when it holds the whole
run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static, TabbedContent, TabPane

from tui.archive.follow import FROM_ARCHIVE, follow_and_archive
from tui.archive.store import ArchiveStore
from tui.cluster.dashboard import DashboardError
from tui.cluster.job_logs import (
    LOST,
    JobLogEnd,
    OpenedLog,
    file_text,
    job_info,
    job_log_chunks,
    older_text,
    open_job_log,
    ray_message,
)
from tui.cluster.models import HostSample
from tui.cluster.ray_cluster import RayCluster
from tui.cluster.telemetry import TelemetryMonitor
from tui.config.yamlfile import ConfigError
from tui.jobs.profiles import override_text
from tui.sanitize import markup
from tui.screens.error import ReportsWorkerFailures
from tui.transport.types import TransportError
from tui.widgets.footer import KeysFooter
from tui.widgets.logview import LogPane
from tui.widgets.metrics import MetricsPanel

RETRY_S = 3.0
SLICE = 256 << 10  # characters appended between two looks at the keys


def default_save_path(sid: str) -> Path:
    return Path.cwd() / f"{sid}.log"


def total_steps_from(overrides: list[str]) -> int | None:
    """trainer.total_training_steps when the job was submitted with it (else verl prints it)."""
    value = override_text(overrides, "trainer.total_training_steps")
    return int(value) if value and value.isdigit() else None


class JobLogsScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("t", "toggle_tab", "Log / metrics"),
        Binding("p", "stacks", "Stacks of every process (py-spy)", show=False),
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
        last_known: str | None = None,
        telemetry: TelemetryMonitor | None = None,
    ):
        super().__init__()
        self.cluster = cluster
        # The cockpit's GPU samples: the archived run's GPU use (None: archived without it).
        self.telemetry = telemetry
        # The history's last status: a job the head forgot (Ray restarted) keeps its outcome.
        self.last_known = last_known
        self.sid = submission_id
        self.start_on_metrics = metrics
        self.total_steps = total_steps
        self.status: str | None = None
        self._metrics_wait: list[str] | None = None

    def compose(self) -> ComposeResult:
        yield Static(f" Job {markup(self.sid)}", id="joblog-title")
        with TabbedContent(initial="tab-metrics" if self.start_on_metrics else "tab-log"):
            with TabPane("Log", id="tab-log"):
                yield LogPane(title=self.sid, save_path=default_save_path(self.sid), id="job-log")
            with TabPane("Metrics", id="tab-metrics"):
                yield MetricsPanel(id="job-metrics")
        yield KeysFooter()

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
        self.follow_metrics_file()
        self.archive_job()  # into the run archive, while it is shown

    def _title(self, note: str = "") -> None:
        text = f" Job {markup(self.sid)}"
        if self.status:
            text += f"   {markup(self.status)}"
        if note:
            text += f"   {markup(note)}"
        self.query_one("#joblog-title", Static).update(text)

    @work(
        exclusive=True, group="job-log", exit_on_error=False, description="Following the job's log"
    )
    async def follow(self) -> None:
        if await self.show_archived(only_final=True):  # the head forgot it; archived whole
            return
        # One reader at a time; if the link breaks while the job runs, start again from the
        # top into a fresh pane.
        while True:
            try:
                opened = await open_job_log(self.cluster, self.sid, last_known=self.last_known)
                if opened.file is not None:
                    await self._from_file(opened)
                    end = JobLogEnd(opened.status, opened.message)
                else:  # the file is not on the head (or not readable): Ray's Jobs API
                    end = await self._from_jobs_api(opened)
            except (DashboardError, TransportError) as exc:
                msg = str(exc)
                if "HTTP 404" in msg:
                    if not await self.show_archived(only_final=False):
                        self._title(f"no such job on the head: {self.sid}")
                    return
                self._title(f"log unavailable ({msg}); retrying")
                await asyncio.sleep(RETRY_S)
                continue
            self.status = end.status
            self.pane.finish(end.status or "ended")
            self.metrics.feed_text("\n")  # a last line without newline counts too
            self.metrics.finish(end.status or "ended")
            self._title(ray_message(end.message)[:100])
            return

    @work(
        exclusive=True,
        group="metrics-file",
        exit_on_error=False,
        description="Reading the job's metrics file",
    )
    async def follow_metrics_file(self) -> None:
        """verl's file logger, when the job has one, takes over the charts from console lines
        (tui/archive/metrics_file.py: exact numbers, every key)."""
        from tui.archive.metrics_file import follow_job_file

        with contextlib.suppress(DashboardError, TransportError):
            await follow_job_file(
                self.cluster, self.sid, self.metrics.tracker, on_rows=self.metrics.rows_arrived
            )

    async def _from_file(self, opened: OpenedLog) -> None:
        """The file's last lines first, then the lines before them in the background while
        the end is followed from the byte where the tail began."""
        assert opened.file is not None
        start = opened.file.tail_start
        self.pane.clear()
        self.metrics.clear()
        self._title("following" if opened.running else "")
        # The charts need the lines in order: the tail's text waits until the older part is in.
        self._metrics_wait = [] if start else None
        older = None
        if start:
            self.pane.start_backfill(start)
            older = asyncio.ensure_future(self._backfill(opened))
        try:
            async for text in file_text(opened, start, follow=True):
                await self._feed(text, self.pane.append, self._metrics_wait is None)
                if self._metrics_wait is not None:
                    self._metrics_wait.append(text)
            if older is not None:
                await older
        finally:
            if older is not None:
                older.cancel()

    async def _backfill(self, opened: OpenedLog) -> None:
        async for text in older_text(opened):
            await self._feed(text, self.pane.backfill, True)
        self.pane.end_backfill()
        for text in self._metrics_wait or ():
            self.metrics.feed_text(text)
        self._metrics_wait = None

    async def _feed(self, text: str, into: Callable[[str], None], metrics: bool) -> None:
        # A big chunk goes in slices so keys are answered meanwhile.
        for start in range(0, len(text), SLICE):
            part = text[start : start + SLICE]
            into(part)
            if metrics:
                self.metrics.feed_text(part)
            if len(text) > SLICE:
                await asyncio.sleep(0)

    async def _from_jobs_api(self, opened: OpenedLog) -> JobLogEnd:
        assert opened.client is not None
        ends: list[JobLogEnd] = []
        first = True
        async for chunk in job_log_chunks(opened.client, self.sid, follow=True, ends=ends):
            if first:
                self.pane.clear()
                self.metrics.clear()
                first = False
                self._title("following")
            await self._feed(chunk, self.pane.append, True)
        return ends[-1] if ends else JobLogEnd(None)

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

    def action_stacks(self) -> None:
        """Every process of this job dumped with py-spy (tui/screens/stack.py)."""
        from tui.screens.stack import StackScreen

        self.app.push_screen(StackScreen(self.cluster, self.sid))

    def action_back(self) -> None:
        self.app.pop_screen()

    # -- the run archive: this job archived while shown; a job the head forgot shown from it --

    def _samples(self) -> Mapping[str, HostSample | None]:
        hosts = self.telemetry.hosts if self.telemetry is not None else {}
        return {name: ht.latest for name, ht in hosts.items()}

    @work(exclusive=True, group="job-archive", exit_on_error=False, description="Archiving the job")
    async def archive_job(self) -> None:
        """Follow the job to its end into the run archive (the cockpit's telemetry gives its
        GPU use); a head that does not answer leaves the archive as it is."""
        try:
            with contextlib.suppress(DashboardError, TransportError):
                await follow_and_archive(self.cluster, self.sid, samples=self._samples)
        except (OSError, ConfigError) as exc:  # a full disk, a bad VERL_TUI_ARCHIVE_MAX
            self.notify(markup(f"not archived: {exc}"), severity="warning", timeout=8)

    async def show_archived(self, *, only_final: bool) -> bool:
        """Show the archived run when there is one (with only_final: a whole run, and only
        when the head does not know the job). True when it was shown."""
        store = ArchiveStore(self.cluster.inv.cluster, max_bytes=0)
        meta = store.meta(self.sid)
        if meta is None or (only_final and not meta.get("final")):
            return False
        if only_final:
            try:
                await job_info(await self.cluster.dashboard(), self.sid)
                return False  # the head has it: its log is the live one
            except (DashboardError, TransportError) as exc:
                why = str(exc)
                # Another answer than "no such job" or "no head": the head may have it.
                if isinstance(exc, DashboardError) and not (
                    "HTTP 404" in why or "unreachable" in why
                ):
                    return False
        text = await asyncio.to_thread(store.read_log, self.sid)
        for warning in store.take_warnings():
            self.notify(markup(warning), severity="warning", timeout=6)
        if text is None:
            return False
        pane, metrics = self.pane, self.metrics
        pane.clear()
        metrics.clear()
        for start in range(0, len(text), SLICE):
            part = text[start : start + SLICE]
            pane.append(part)
            metrics.feed_text(part)
            await asyncio.sleep(0)
        status = meta.get("status") if meta.get("final") else LOST
        self.status = status if isinstance(status, str) else LOST
        pane.finish(self.status)
        metrics.feed_text("\n")
        metrics.finish(self.status)
        self._title(FROM_ARCHIVE)
        return True
