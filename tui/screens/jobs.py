"""Jobs screen: the cluster's jobs with their profiles and configs; stop, delete, details."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.cluster.dashboard import DashboardError, is_job_id
from tui.cluster.ray_cluster import RayCluster
from tui.fmt import age, duration, plural
from tui.jobs.history import JobHistory
from tui.jobs.service import TERMINAL, JobRow, delete_job, list_jobs, stop_job
from tui.sanitize import cell, clean, markup, one_line
from tui.screens.confirm import ConfirmScreen
from tui.screens.error import ReportsWorkerFailures
from tui.screens.job_form import JobFormScreen
from tui.screens.jobs_compare import CompareMarks
from tui.screens.jobs_heal import chain_prefix, heal_detail, supervisor_note
from tui.screens.jobs_queue import QueueRows, grouped, profile_label
from tui.screens.profile_picker import ProfilePickerScreen
from tui.transport.types import TransportError
from tui.shellcmd import shown_command

POLL_S = 3.0
_STATUS_STYLE = {
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "STOPPED": "yellow",
    "RUNNING": "bold cyan",
    "PENDING": "cyan",
    "LOST": "magenta",
}


def _env_entry(name: str, value: object) -> str:
    """A recorded env var for the details pane: secrets by reference, never a value."""
    from tui.jobs.secrets import MASK, describe, is_ref, is_secret_name

    if not is_ref(value) and is_secret_name(name):  # a record from before references
        return f"{name}={MASK}"
    return describe(name, value)


class JobsScreen(ReportsWorkerFailures, CompareMarks, QueueRows, Screen):
    BINDINGS = [
        Binding("l", "logs", "Log"),
        Binding("m", "metrics", "Metrics"),
        Binding("k", "checkpoints", "Checkpoints"),
        Binding("n", "new_job", "New job"),
        Binding("e", "edit_job", "Resubmit with edits"),
        Binding("s", "stop", "Stop job"),
        Binding("x", "delete", "Delete job"),
        Binding("r", "refresh", "Refresh"),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare marked"),
        Binding("delete", "queue_cancel", "Cancel queued"),
        Binding("left_square_bracket", "queue_up", "Queue earlier"),
        Binding("right_square_bracket", "queue_down", "Queue later"),
        Binding("escape,b", "back", "Back"),
    ]

    DEFAULT_CSS = """
    JobsScreen #jobs-title { height: 1; background: $panel; text-style: bold; }
    JobsScreen DataTable { height: 1fr; }
    JobsScreen #job-detail { height: 9; border-top: solid $primary 50%; padding: 0 1; }
    """

    def __init__(self, cluster: RayCluster, history: JobHistory):
        super().__init__()
        self.cluster = cluster
        self.history = history
        self.rows: list[JobRow] = []
        self.queued = []  # the local queue's entries (jobs_queue.QueueRows)
        self.error: str | None = None
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Static(f" Jobs — {markup(self.cluster.inv.cluster)}", id="jobs-title")
        table: DataTable[Text] = DataTable(id="jobs", cursor_type="row", zebra_stripes=True)
        table.add_columns(
            "submission id", "status", "age", "duration", "profile", "driver", "message"
        )
        yield table
        yield Static("", id="job-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.poll()

    @work(exclusive=True, group="jobs-poll", exit_on_error=False)
    async def poll(self) -> None:
        # One request at a time; the next only after this one finished (never overlapping).
        while True:
            await self.refresh_rows()
            await asyncio.sleep(POLL_S)

    async def refresh_rows(self) -> None:
        try:
            rows = await list_jobs(self.cluster, self.history)
            self.error = None
        except (DashboardError, TransportError) as exc:
            rows = self.rows
            self.error = f"Ray is not reachable: {exc}"
        await self.refresh_queue()
        self.rows = rows
        self.loaded = True
        self._fill()

    def _fill(self) -> None:
        try:
            table = self.query_one(DataTable)
        except NoMatches:  # the screen is going away (app closing): nothing to show
            return
        current = self.current
        queued_key = self.cursor_key(table)
        table.clear()
        self.fill_queue(table)
        for r in grouped(self.rows):
            # Ids, statuses, node names and messages come from Ray: Text cells, cleaned (a str
            # cell would be Rich markup).
            status = cell(r.status_text, style=_STATUS_STYLE.get(r.status, ""))
            profile = profile_label(r)
            table.add_row(
                cell(self.mark_prefix(r.submission_id) + chain_prefix(r) + r.submission_id),
                status,
                age(r.start_time),
                duration(r.duration_s),
                cell(profile),
                cell(r.driver_node or "-"),
                cell(r.message or "", 60),
                key=r.submission_id,
            )
        if current is not None and any(r.submission_id == current.submission_id for r in self.rows):
            table.move_cursor(row=table.get_row_index(current.submission_id))
        self.restore_queue_cursor(table, queued_key)
        title = f" Jobs — {markup(self.cluster.inv.cluster)}   {plural(len(self.rows), 'job')}"
        if self.queued:
            title += f", {len(self.queued)} queued"
        if self.error:
            title += f"   {markup(self.error)}"
        if supervisor_note(self.app):
            title += f"   {markup(supervisor_note(self.app))}"
        self.query_one("#jobs-title", Static).update(title)
        self._show_detail()

    @property
    def current(self) -> JobRow | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row is None or table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except CellDoesNotExist:  # the table is being refilled
            return None
        return next((r for r in self.rows if r.submission_id == key), None)

    def _show_detail(self) -> None:
        row = self.current
        pane = self.query_one("#job-detail", Static)
        if row is None and self.show_queued_detail(pane):
            return
        if row is None:
            pane.update("no jobs yet" if self.loaded else "loading…")
            return
        t = Text()
        t.append(one_line(row.submission_id), "bold")
        t.append(f"  {one_line(row.status_text)}\n")
        t.append("entrypoint: ", "dim")
        t.append(one_line(shown_command(row.entrypoint), 400) + "\n")  # quoted one level
        rec = row.record
        if rec is not None:
            if rec.profile:
                t.append("profile: ", "dim")
                t.append(
                    f"{one_line(rec.profile)}  config {one_line(rec.config_hash)}  "
                    f"({one_line(rec.profile_path)})\n"
                )
            if rec.overrides:
                t.append("overrides: ", "dim")
                t.append(one_line(" ".join(rec.overrides), 500) + "\n")
            env = (
                (rec.runtime_env or {}).get("env_vars")
                if isinstance(rec.runtime_env, dict)
                else None
            )
            if isinstance(env, dict) and env:
                t.append("env: ", "dim")
                t.append(one_line(" ".join(_env_entry(k, v) for k, v in env.items()), 400) + "\n")
        t.append_text(heal_detail(row, self.rows))  # retry chain, the supervisor's decisions
        gpu = self.gpu_detail(row.submission_id)  # the run archive's GPU use
        if gpu:
            t.append("gpu: ", "dim")
            t.append(one_line(gpu, 200) + "\n")
        if row.message:
            t.append(clean(row.message[:300]), "italic")
        pane.update(t)

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_logs()

    def _open_logs(self, metrics: bool) -> None:
        from tui.screens.job_logs import JobLogsScreen, total_steps_from

        row = self.current
        if row is None:
            self.notify("no job selected", timeout=2)
            return
        if not self._addressable(row):
            return
        steps = total_steps_from(row.record.overrides) if row.record else None
        self.app.push_screen(
            JobLogsScreen(self.cluster, row.submission_id, metrics=metrics, total_steps=steps)
        )

    def action_logs(self) -> None:
        self._open_logs(metrics=False)

    def action_metrics(self) -> None:
        self._open_logs(metrics=True)

    def action_checkpoints(self) -> None:
        """The selected job's trainer.default_local_dir across the hosts."""
        from tui.ckpt.resume import default_local_dir_of

        row = self.current
        root = default_local_dir_of(row.record) if row is not None and row.record else None
        if row is not None and root is None:
            self.notify(
                f"{markup(row.submission_id)}: no absolute trainer.default_local_dir "
                "recorded; type the folder",
                timeout=5,
            )
        from tui.screens.checkpoints import CheckpointsScreen

        self.app.push_screen(CheckpointsScreen(self.cluster.fleet, self.cluster.inv, root))

    def action_refresh(self) -> None:
        # The poll's own group, exclusive: a refresh restarts the poll (now, then every
        # POLL_S) instead of a second request overlapping it.
        self.poll()

    def action_back(self) -> None:
        self.app.pop_screen()

    # -- new job / resubmit with edits -----------------------------------------------------

    def open_form(
        self,
        profile_path: Path,
        initial_sets: list[str] | None = None,
        secret_refs: list[dict[str, str]] | None = None,
    ) -> None:
        def done(sid: str | None) -> None:
            if sid:
                self.action_refresh()

        self.app.push_screen(
            JobFormScreen(
                self.cluster,
                self.history,
                profile_path,
                initial_sets=initial_sets,
                secret_refs=secret_refs,
            ),
            done,
        )

    def action_new_job(self) -> None:
        def picked(path: Path | None) -> None:
            if path is not None:
                self.open_form(path)

        self.app.push_screen(ProfilePickerScreen(), picked)

    def action_edit_job(self) -> None:
        row = self.current
        if row is None:
            self.notify("no job selected", timeout=2)
            return
        rec = row.record
        if rec is None or rec.kind != "profile" or not rec.profile_path:
            self.notify(
                f"{markup(row.submission_id)} has no profile (a raw command): nothing "
                "to edit; "
                "n starts a new job from a profile",
                severity="warning",
                timeout=5,
            )
            return
        path = Path(rec.profile_path)
        if not path.is_file():
            self.notify(
                f"{markup(row.submission_id)}: its profile {markup(path)} is gone",
                severity="error",
                timeout=5,
            )
            return
        env = (rec.runtime_env or {}).get("env_vars") if isinstance(rec.runtime_env, dict) else None
        refs = [v for v in (env or {}).values() if isinstance(v, dict) and v.get("from") == "env"]
        self.open_form(path, list(rec.overrides), refs)

    def _addressable(self, row: JobRow) -> bool:
        """A job whose id is not a valid submission id cannot be named in a URL safely."""
        if is_job_id(row.submission_id):
            return True
        self.notify(
            "this job's id is not a Ray submission id: verl-tui will not address it",
            severity="error",
            timeout=5,
        )
        return False

    def action_stop(self) -> None:
        row = self.current
        if row is None or row.status in TERMINAL:
            self.notify("no running job selected", timeout=2)
            return
        if not row.on_head:
            self.notify(
                f"{markup(row.submission_id)} is not on the head (restarted?): "
                "nothing to stop; x forgets it here",
                severity="warning",
                timeout=5,
            )
            return
        if not self._addressable(row):
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(row.submission_id)

        self.app.push_screen(
            ConfirmScreen(
                f"Stop job {one_line(row.submission_id)}?", "Ray stops its driver and its tasks."
            ),
            answered,
        )

    @work(group="jobs-stop", exit_on_error=False)
    async def _stop(self, sid: str) -> None:
        try:
            status = await stop_job(self.cluster, sid, self.history)
        except (DashboardError, TransportError) as exc:  # BadJobId is a DashboardError
            self.notify(f"not stopped: {markup(exc)}", severity="error", timeout=6)
            return
        self.notify(f"{markup(sid)}: {markup(status)}", timeout=4)
        self.poll()

    def action_delete(self) -> None:
        row = self.current
        if row is None:
            return
        if row.on_head and row.status not in TERMINAL:
            self.notify("stop it first: only finished jobs can be deleted", timeout=3)
            return
        if not self._addressable(row):
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._delete(row.submission_id)

        self.app.push_screen(
            ConfirmScreen(
                f"Delete job {one_line(row.submission_id)}?",
                "Its record and logs on the head, and its local history entry.",
            ),
            answered,
        )

    @work(group="jobs-delete", exit_on_error=False)
    async def _delete(self, sid: str) -> None:
        try:
            await delete_job(self.cluster, sid, self.history)
        except (DashboardError, TransportError) as exc:
            if "HTTP 404" not in str(exc):  # gone from the head already: forget it here too
                self.notify(f"not deleted: {markup(exc)}", severity="error", timeout=6)
                return
            self.history.forget(sid)
        self.notify(f"{markup(sid)} deleted", timeout=3)
        self.poll()
