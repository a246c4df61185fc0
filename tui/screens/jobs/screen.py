"""Jobs screen: the cluster's jobs with their profiles and configs; stop, delete, details."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.archive.compare import MAX_RUNS, MIN_RUNS, config_diff, load_runs
from tui.archive.gpu_use import gpu_use_text
from tui.archive.store import ArchiveStore
from tui.cluster.dashboard import DashboardError, is_job_id
from tui.cluster.job_logs import ray_message
from tui.errors import VerlTuiError
from tui.fmt import age, duration, plural
from tui.jobs.owner import me, others
from tui.jobs.queue import QueueEntry, QueueError
from tui.jobs.queue_shared import AnyQueue
from tui.jobs.service import TERMINAL, JobRow, delete_job, list_jobs, stop_job
from tui.sanitize import cell, clean, markup, one_line, styled
from tui.screens.confirm import ConfirmScreen
from tui.screens.error import ReportsWorkerFailures, report
from tui.screens.job_form.screen import JobFormScreen
from tui.screens.jobs.heal import chain_prefix, failure_cause, heal_detail, supervisor_note
from tui.screens.jobs.queue import (
    QUEUE_KEY,
    not_yours,
    profile_label,
    queue_cells,
    queue_detail,
    queue_for,
)
from tui.screens.jobs.view import (
    SORT_KEYS,
    JobTable,
    health_cell,
    health_detail,
    health_shown,
    shown_queue,
    shown_rows,
    stall_detail,
    stalls_shown,
    status_text,
)
from tui.screens.profile_picker import ProfilePickerScreen
from tui.screens.services import Services
from tui.shellcmd import shown_command
from tui.transport.types import TransportError
from tui.widgets.footer import KeysFooter

POLL_S = 3.0
SELECT_TRIES = 5  # refreshes a just-created job's row is waited for before the cursor stays
MARK = "● "  # before a job marked for comparison (space)
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


class JobsScreen(ReportsWorkerFailures, Screen):
    # The footer shows the keys used most (it fits 160 columns with the app's 1-5); help (?)
    # and the palette (ctrl+p) list every one. j/k/g/G/Home/End move (JobTable).
    BINDINGS = [
        Binding("l", "logs", "Log"),
        Binding("m", "metrics", "Metrics"),
        Binding("n", "new_job", "New job"),
        Binding("e", "edit_job", "Resubmit"),
        Binding("s", "stop", "Stop"),
        Binding("slash", "filter", "Filter"),
        Binding("o", "sort", "Sort"),
        Binding("O", "reverse_sort", "Reverse sort", show=False),
        Binding("K", "checkpoints", "Job's checkpoints", show=False),
        Binding("p", "stacks", "Stacks of every process (py-spy)", show=False),
        Binding("v", "rollouts", "Rollouts (verl's dumped samples)", show=False),
        Binding("x", "delete", "Delete job", show=False),
        Binding("r", "refresh", "Refresh", show=False),
        Binding("space", "mark", "Mark for compare", show=False),
        Binding("c", "compare", "Compare marked", show=False),
        Binding("delete", "queue_cancel", "Cancel queued", show=False),
        Binding("left_square_bracket", "queue_up", "Queue earlier", show=False),
        Binding("right_square_bracket", "queue_down", "Queue later", show=False),
        Binding("w", "owners", "Whose jobs: mine / everyone's", show=False),
        Binding("escape,b", "back", "Back (esc first clears a filter)", show=False),
    ]

    DEFAULT_CSS = """
    JobsScreen #jobs-title { height: 1; background: $panel; text-style: bold; }
    JobsScreen DataTable { height: 1fr; }
    JobsScreen #job-detail { height: 9; border-top: solid $primary 50%; padding: 0 1; }
    JobsScreen #jobs-filter { dock: bottom; display: none; height: 3; }
    JobsScreen #jobs-filter.visible { display: block; }
    """

    def __init__(self, services: Services):
        super().__init__()
        self.services = services
        self.cluster = services.ray
        self.history = services.history
        self.rows: list[JobRow] = []
        self.stalls: dict[str, dict] = {}  # the supervisor's stalled jobs (STALLED, evidence)
        self.health: dict[str, list[dict]] = {}  # the supervisor's training-health alerts
        self.queued: list[QueueEntry] = []  # the queue's entries, shown on top
        self.queue_error: str | None = None  # the queue unreadable: said in the title
        self.marked: list[str] = []  # jobs marked for comparison (space)
        self.error: str | None = None
        self.loaded = False
        self.filter_text = ""
        # Whose jobs: "mine", "all", or None: mine while the cluster has others' jobs (`w`).
        self.owner_view: str | None = None
        self.sort_key = SORT_KEYS[0]
        self.sort_reverse = False
        # A job just submitted, resubmitted or queued from here: the cursor goes to it once
        # its row is in the table (a few refreshes at most).
        self.select_next: str | None = None
        self._select_tries = 0

    def compose(self) -> ComposeResult:
        yield Static(f" Jobs — {markup(self.cluster.inv.cluster)}", id="jobs-title")
        table = JobTable(id="jobs", cursor_type="row", zebra_stripes=True)
        table.add_columns(
            "submission id",
            "status",
            "health",
            "age",
            "duration",
            "profile",
            "owner",
            "driver",
            "message",
        )
        yield table
        yield Static("", id="job-detail")
        yield Input(
            placeholder="filter jobs: id, status, profile, node, message (enter: keep, esc: clear)",
            id="jobs-filter",
        )
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.watch(self.query_one("#jobs-filter", Input), "value", self.set_filter, init=False)
        self.poll()

    @work(exclusive=True, group="jobs-poll", exit_on_error=False, description="Listing the jobs")
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
        self.stalls = stalls_shown(self.cluster.inv.cluster, rows)
        self.health = health_shown(self.cluster.inv.cluster, rows)
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
        mine, owner = self.mine_only(), me()
        queued = shown_queue(self.queued, self.filter_text)
        self.fill_queue(table, [e for e in queued if e.owner == owner] if mine else queued)
        rows = [r for r in self.rows if r.owner == owner] if mine else self.rows
        shown = shown_rows(rows, self.filter_text, self.sort_key, self.sort_reverse)
        for r in shown:
            # Ids, statuses, node names and messages come from Ray: Text cells, cleaned (a str
            # cell would be Rich markup).
            stall = self.stalls.get(r.submission_id)
            status, status_style = status_text(r, stall, _STATUS_STYLE.get(r.status, ""))
            health, health_style = health_cell(self.health.get(r.submission_id, []))
            profile = profile_label(r)
            table.add_row(
                cell(self.mark_prefix(r.submission_id) + chain_prefix(r) + r.submission_id),
                cell(status, style=status_style),
                cell(health, 24, style=health_style),
                age(r.start_time),
                duration(r.duration_s),
                cell(profile),
                cell(r.owner or "-"),
                cell(r.driver_node or "-"),
                cell(r.message or "", 60),
                key=r.submission_id,
            )
        if current is not None and current.submission_id in table.rows:
            table.move_cursor(row=table.get_row_index(current.submission_id))
        self.restore_queue_cursor(table, queued_key)
        self._select_new(table)
        title = f" Jobs — {markup(self.cluster.inv.cluster)}   {plural(len(self.rows), 'job')}"
        if self.queued:
            title += f", {len(self.queued)} queued"
        if mine:
            title += f"   mine: {len(shown)} shown (w: everyone's)"
        if self.filter_text:
            title += f"   filter “{markup(one_line(self.filter_text, 40))}”: {len(shown)} shown"
        if self.sort_key != SORT_KEYS[0] or self.sort_reverse:
            title += f"   sorted by {markup(self.sort_key)}" + (
                " (reversed)" if self.sort_reverse else ""
            )
        if self.error:
            title += f"   {markup(self.error)}"
        if self.queue_error:
            title += f"   {markup(self.queue_error)}"
        supervised = supervisor_note(self.services.supervisor)
        if supervised:
            title += f"   {markup(supervised)}"
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
        cause = failure_cause(row)
        if cause:  # first: what a failed job's user looks for (the log is one key away)
            t.append("cause: ", "dim")
            t.append(one_line(cause, 300) + "\n", "red")
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
        t.append_text(stall_detail(self.stalls.get(row.submission_id)))
        t.append_text(health_detail(self.health.get(row.submission_id)))
        t.append_text(heal_detail(row, self.rows))  # retry chain, the supervisor's decisions
        gpu = self.gpu_detail(row.submission_id)  # the run archive's GPU use
        if gpu:
            t.append("gpu: ", "dim")
            t.append(one_line(gpu, 200) + "\n")
        message = ray_message(row.message)
        if message and message != cause:
            t.append(clean(message[:300]), "italic")
        pane.update(t)

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_logs()

    def _open_logs(self, metrics: bool) -> None:
        from tui.screens.logs.job_logs import JobLogsScreen, total_steps_from

        row = self.current
        if row is None:
            self.notify("no job selected", timeout=2)
            return
        if not self._addressable(row):
            return
        steps = total_steps_from(row.record.overrides) if row.record else None
        last = row.record.status if row.record else None
        self.app.push_screen(
            JobLogsScreen(
                self.cluster,
                row.submission_id,
                telemetry=self.services.telemetry,
                metrics=metrics,
                total_steps=steps,
                last_known=last,
            )
        )

    def action_logs(self) -> None:
        self._open_logs(metrics=False)

    def action_metrics(self) -> None:
        self._open_logs(metrics=True)

    def action_rollouts(self) -> None:
        """The selected job's rollout samples (tui/screens/rollouts/screen.py)."""
        from tui.screens.rollouts.screen import RolloutsScreen, opener_for

        row = self.current
        if row is None:
            self.notify("no job selected", timeout=2)
        elif self._addressable(row):
            sid = row.submission_id
            self.app.push_screen(RolloutsScreen(opener_for(self.cluster, sid), sid))

    def action_stacks(self) -> None:
        """Every process of the selected job dumped with py-spy (tui/screens/stack.py)."""
        from tui.screens.stack import StackScreen

        row = self.current
        if row is None:
            self.notify("no job selected", timeout=2)
        elif self._addressable(row):
            self.app.push_screen(StackScreen(self.cluster, row.submission_id))

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
        if self.filter_text or self.query_one("#jobs-filter", Input).has_class("visible"):
            self.action_clear_filter()
            return
        self.app.pop_screen()

    # -- filter / sort / the new job's row -------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#jobs-filter", Input)
        box.add_class("visible")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "jobs-filter":
            event.input.remove_class("visible")
            self.query_one(DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#jobs-filter", Input)
        box.value = ""
        box.remove_class("visible")
        self.set_filter("")
        self.query_one(DataTable).focus()

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self._fill()

    def set_sort(self, key: str, reverse: bool | None = None) -> None:
        self.sort_key = key
        if reverse is not None:
            self.sort_reverse = reverse
        self._fill()

    def action_sort(self) -> None:
        self.set_sort(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)])
        self.notify(f"jobs sorted by {markup(self.sort_key)}", timeout=1.5)

    def action_reverse_sort(self) -> None:
        self.set_sort(self.sort_key, not self.sort_reverse)

    def _select_new(self, table: DataTable[Text]) -> None:
        sid = self.select_next
        if sid is None:
            return
        for key in (sid, QUEUE_KEY + sid):
            if key in table.rows:
                table.move_cursor(row=table.get_row_index(key))
                self.select_next = None
                return
        self._select_tries += 1
        if self._select_tries > SELECT_TRIES:  # filtered out, or gone: leave the cursor be
            self.select_next = None

    # -- new job / resubmit with edits -----------------------------------------------------

    def open_form(
        self,
        profile_path: Path,
        initial_sets: list[str] | None = None,
        secret_refs: list[dict[str, str]] | None = None,
    ) -> None:
        def done(sid: str | None) -> None:
            if sid:  # submitted or queued: the cursor goes to it
                self.select_next, self._select_tries = sid, 0
                self.action_refresh()

        self.app.push_screen(
            JobFormScreen(
                self.services,
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
            report(self, f"{row.submission_id}: its profile {path} is gone", title="not edited")
            return
        env = (rec.runtime_env or {}).get("env_vars") if isinstance(rec.runtime_env, dict) else None
        refs = [v for v in (env or {}).values() if isinstance(v, dict) and v.get("from") == "env"]
        self.open_form(path, list(rec.overrides), refs)

    def _addressable(self, row: JobRow) -> bool:
        """A job whose id is not a valid submission id cannot be named in a URL safely."""
        if is_job_id(row.submission_id):
            return True
        report(self, "this job's id is not a Ray submission id: verl-tui will not address it")
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

        detail = "Ray stops its driver and its tasks." + not_mine(row)
        self.app.push_screen(
            ConfirmScreen(f"Stop job {one_line(row.submission_id)}?", detail), answered
        )

    def mine_only(self) -> bool:
        """Whether only this account's jobs show: by `w`, else while others' jobs are there."""
        if self.owner_view is not None:
            return self.owner_view == "mine"
        owners = [r.owner for r in self.rows] + [e.owner for e in self.queued]
        return bool(others(owners))

    def action_owners(self) -> None:
        self.owner_view = "all" if self.mine_only() else "mine"
        self.notify("everyone's jobs" if self.owner_view == "all" else "my jobs", timeout=2)
        self._fill()

    @work(group="jobs-stop", exit_on_error=False, description="Stopping the job")
    async def _stop(self, sid: str) -> None:
        try:
            status = await stop_job(self.cluster, sid, self.history)
        except VerlTuiError as exc:  # the head, the tunnel, a bad job id
            report(self, exc, title="not stopped")
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

        detail = "Its record and logs on the head, and its local history entry."
        self.app.push_screen(
            ConfirmScreen(f"Delete job {one_line(row.submission_id)}?", detail + not_mine(row)),
            answered,
        )

    @work(group="jobs-delete", exit_on_error=False, description="Deleting the job")
    async def _delete(self, sid: str) -> None:
        try:
            await delete_job(self.cluster, sid, self.history)
        except VerlTuiError as exc:
            if "HTTP 404" not in str(exc):  # gone from the head already: forget it here too
                report(self, exc, title="not deleted")
                return
            self.history.forget(sid)
        self.notify(f"{markup(sid)} deleted", timeout=3)
        self.poll()

    # -- the queue: queued jobs as rows on top, the keys that cancel and reorder them ---------

    def _queue(self) -> AnyQueue:
        def said(text: str) -> None:
            self.notify(markup(text), timeout=10)

        return queue_for(self.cluster, said)

    async def refresh_queue(self) -> None:
        try:
            self.queued = await self._queue().entries()
            self.queue_error = None
        except OSError as exc:  # the head's queue unreachable or damaged: in the title
            self.queued = []
            self.queue_error = f"queue: {one_line(str(exc), 200)}"

    def fill_queue(self, table: DataTable[Text], shown: list[QueueEntry] | None = None) -> None:
        """Queued rows go first, in queue order (the head of the queue on top); `shown`: the
        ones the filter keeps (each keeps its place in the whole queue)."""
        for i, e in enumerate(self.queued, 1):
            if shown is not None and e not in shown:
                continue
            sid, status, health, since, took, profile, owner, driver, why = queue_cells(e, i)
            table.add_row(
                styled(sid),
                styled(status),
                styled(health),
                styled(since),
                styled(took),
                styled(profile),
                styled(owner),
                styled(driver),
                styled(why),
                key=QUEUE_KEY + e.submission_id,
            )

    def cursor_key(self, table: DataTable[Text]) -> str | None:
        if table.row_count == 0 or table.cursor_row is None:
            return None
        try:
            value = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except CellDoesNotExist:
            return None
        return value

    def current_queued(self) -> tuple[QueueEntry, int] | None:
        table = self.query_one(DataTable)
        key = self.cursor_key(table)
        if not key or not key.startswith(QUEUE_KEY):
            return None
        sid = key.removeprefix(QUEUE_KEY)
        for i, e in enumerate(self.queued, 1):
            if e.submission_id == sid:
                return e, i
        return None

    def show_queued_detail(self, pane: Static) -> bool:
        found = self.current_queued()
        if found is None:
            return False
        pane.update(styled(queue_detail(*found)))
        return True

    # -- keys ------------------------------------------------------------------------------

    def action_queue_cancel(self) -> None:
        found = self.current_queued()
        if found is None:
            self.notify("no queued job selected", timeout=2)
            return
        entry, _pos = found

        def answered(yes: bool | None) -> None:
            if yes:
                self._queue_change("cancel", entry.submission_id)

        self.app.push_screen(
            ConfirmScreen(
                f"Cancel queued job {one_line(entry.submission_id)}?",
                "It leaves the queue; nothing was sent to Ray." + not_yours(entry),
            ),
            answered,
        )

    def action_queue_up(self) -> None:
        self._queue_move(-1)

    def action_queue_down(self) -> None:
        self._queue_move(+1)

    def _queue_move(self, step: int) -> None:
        found = self.current_queued()
        if found is None:
            self.notify("no queued job selected", timeout=2)
            return
        entry, pos = found
        if entry.owner is not None and entry.owner != me():

            def answered(yes: bool | None) -> None:
                if yes:
                    self._queue_change("move", entry.submission_id, pos + step)

            self.app.push_screen(
                ConfirmScreen(
                    f"Move {one_line(entry.submission_id)}, queued by {one_line(entry.owner, 80)}?",
                    "It changes when another user's job starts." + not_yours(entry),
                ),
                answered,
            )
            return
        self._queue_change("move", entry.submission_id, pos + step)

    @work(group="queue-change", exit_on_error=False, description="Changing the queue")
    async def _queue_change(self, what: str, sid: str, to: int = 0) -> None:
        queue = self._queue()
        try:
            if what == "cancel":
                await queue.cancel(sid)
                self.notify(f"{markup(sid)} cancelled", timeout=3)
            else:
                now = await queue.move(sid, to)
                self.notify(f"{markup(sid)}: position {now:d}", timeout=2)
        except (QueueError, OSError) as exc:
            report(self, exc, title="queue not changed")
            return
        await self.refresh_queue()
        self._fill()
        table = self.query_one(DataTable)
        key = QUEUE_KEY + sid
        if what == "move" and key in table.rows:
            table.move_cursor(row=table.get_row_index(key))

    def restore_queue_cursor(self, table: DataTable[Text], key: str | None) -> None:
        """Keep the cursor on the queued row it was on across a refill."""
        if not key or not key.startswith(QUEUE_KEY):
            return
        from textual.widgets.data_table import RowDoesNotExist

        with contextlib.suppress(RowDoesNotExist):  # it left the queue meanwhile
            table.move_cursor(row=table.get_row_index(key))

    # -- comparing runs: space marks 2-8 jobs, c opens the compare screen ---------------------

    def mark_prefix(self, sid: str) -> str:
        return MARK if sid in self._marks() else ""

    def _marks(self) -> list[str]:
        return self.marked

    def action_mark(self) -> None:
        row = self.current
        if row is None:
            return
        marks = self._marks()
        if row.submission_id in marks:
            marks.remove(row.submission_id)
        elif len(marks) >= MAX_RUNS:
            self.notify(f"at most {MAX_RUNS} runs at once", timeout=3)
            return
        else:
            marks.append(row.submission_id)
        self._fill()

    def action_compare(self) -> None:
        marks = self._marks()
        if len(marks) < MIN_RUNS:
            self.notify(
                f"mark {MIN_RUNS}–{MAX_RUNS} jobs with space first ({len(marks)} marked)",
                timeout=4,
            )
            return
        self.notify(f"comparing {len(marks)} runs…", timeout=2)
        self._open_compare(list(marks))

    @work(
        exclusive=True,
        group="jobs-compare",
        exit_on_error=False,
        description="Opening the comparison",
    )
    async def _open_compare(self, sids: list[str]) -> None:
        from tui.archive.follow import refresh_archive
        from tui.screens.compare import CompareScreen

        store = ArchiveStore(self.cluster.inv.cluster)
        problems = await refresh_archive(self.cluster, sids, store)
        runs, missing = await asyncio.to_thread(load_runs, store, sids, self.history)
        diff = await asyncio.to_thread(config_diff, runs)  # verl's base config: ~0.5 s
        notes = [*problems, *store.take_warnings()]
        if missing:
            notes.append("not archived: " + ", ".join(missing))
        if len(runs) < MIN_RUNS:
            why = "; ".join(notes) or "nothing to compare"
            report(self, why, title="not compared")
            return
        self.app.push_screen(CompareScreen(runs, diff, note=one_line("; ".join(notes), 300)))

    def gpu_detail(self, sid: str) -> str | None:
        """The archived GPU use line for a job's details, or None."""
        store = ArchiveStore(self.cluster.inv.cluster, max_bytes=0)
        meta = store.meta(sid)
        return gpu_use_text(meta.get("gpu_use")) if meta else None


def not_mine(row: JobRow) -> str:
    """A confirmation's line naming another user's job (empty for one's own)."""
    if row.owner is None or row.owner == me():
        return ""
    return f" It was submitted by {one_line(row.owner, 80)}, not you."
