"""The Jobs screen's queue part: queued jobs as rows on top (position, what they wait for), the
keys that cancel and reorder them, and sweep runs kept together. Mixed into JobsScreen so the
screen's own file stays about jobs on the head."""

from __future__ import annotations

import contextlib
import time
from typing import Any, cast

from rich.text import Text
from textual import work
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.fmt import age, duration
from tui.jobs.owner import me
from tui.jobs.queue import QueueEntry, QueueError
from tui.jobs.queue_shared import AnyQueue, cluster_queue
from tui.jobs.service import JobRow
from tui.sanitize import cell, markup, one_line, styled
from tui.screens.confirm import ConfirmScreen
from tui.screens.error import report

QUEUE_KEY = "queued:"  # row keys of queued jobs (a submission id never has a ':')


def queue_for(cluster: Any, notify: Any = None) -> AnyQueue:
    """The cluster's shared queue (on its head; the local file where there is no head)."""
    return cluster_queue(cluster.inv, getattr(cluster, "fleet", None), on_notice=notify)


def sweep_of(row: JobRow) -> str | None:
    rec = row.record
    tags = getattr(rec, "tags", None) if rec is not None else None
    return tags.get("sweep") if isinstance(tags, dict) else None


def grouped(rows: list[JobRow]) -> list[JobRow]:
    """`rows` (newest first) with each sweep's runs together, where its newest run is."""
    out: list[JobRow] = []
    placed: set[str] = set()
    for r in rows:
        name = sweep_of(r)
        if name is None:
            out.append(r)
        elif name not in placed:
            placed.add(name)
            out.extend(x for x in rows if sweep_of(x) == name)
    return out


def profile_label(row: JobRow) -> str:
    profile = row.record.profile if row.record and row.record.profile else "-"
    name = sweep_of(row)
    return f"⊞ {name}: {profile}" if name else profile


def waiting_text(entry: QueueEntry, position: int) -> str:
    """Why an entry without a reason waits: only the head of the queue is judged against Ray's
    free resources, so one further back waits for the entries before it."""
    needs = f"needs {entry.needs.describe()}"
    if position > 1:
        return f"{needs}; starts after the {position - 1} before it"
    return f"{needs}; waits for the supervisor's next pass"


def queue_cells(entry: QueueEntry, position: int) -> list[Text]:
    """One queued job as the Jobs table's nine columns (a queued job has no health yet)."""
    if entry.state == "starting":
        status, style = "STARTING", "bold cyan"
    elif entry.blocked:
        status, style = f"BLOCKED #{position}", "magenta"
    else:
        status, style = f"QUEUED #{position}", "blue"
    profile = entry.profile or "-"
    if entry.group:
        profile = f"⊞ {entry.group}: {profile}"
    return [
        cell(entry.submission_id),
        cell(status, style=style),
        Text("-", style="dim"),
        Text(age(entry.queued_at)),
        Text("-"),
        cell(profile),
        cell(entry.owner or "-"),
        Text("-"),
        cell(entry.reason or waiting_text(entry, position), 60),
    ]


def queue_detail(entry: QueueEntry, position: int) -> Text:
    t = Text()
    t.append(one_line(entry.submission_id), "bold")
    by = f" by {one_line(entry.owner, 80)}" if entry.owner else ""
    t.append(f"  queued #{position:d}{by}, priority {entry.priority:d}, ")
    t.append(f"waiting {duration(time.time() - entry.queued_at)}\n")
    t.append("needs: ", "dim")
    t.append(one_line(entry.needs.describe()) + "\n")
    if entry.tags:
        t.append("sweep: ", "dim")
        t.append(one_line(", ".join(f"{k}={v}" for k, v in entry.tags.items()), 300) + "\n")
    if entry.overrides:
        t.append("overrides: ", "dim")
        t.append(one_line(" ".join(entry.overrides), 400) + "\n")
    if entry.reason:
        t.append(one_line(entry.reason, 300), "italic")
    t.append("\n[ and ] move it, del cancels it", "dim")
    return t


class QueueRows:
    """The queue's part of JobsScreen (which defines rows, cluster, poll and the table)."""

    queued: list[QueueEntry]
    cluster: Any
    queue_error: str | None = None

    def _queue(self) -> AnyQueue:
        def said(text: str) -> None:
            self.notify(markup(text), timeout=10)  # type: ignore[attr-defined]

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
        table = self.query_one(DataTable)  # type: ignore[attr-defined]
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
            self.notify("no queued job selected", timeout=2)  # type: ignore[attr-defined]
            return
        entry, _pos = found

        def answered(yes: bool | None) -> None:
            if yes:
                self._queue_change("cancel", entry.submission_id)

        self.app.push_screen(  # type: ignore[attr-defined]
            ConfirmScreen(
                f"Cancel queued job {one_line(entry.submission_id)}?",
                "It leaves the queue; nothing was sent to Ray." + _not_yours(entry),
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
            self.notify("no queued job selected", timeout=2)  # type: ignore[attr-defined]
            return
        entry, pos = found
        if entry.owner is not None and entry.owner != me():

            def answered(yes: bool | None) -> None:
                if yes:
                    self._queue_change("move", entry.submission_id, pos + step)

            self.app.push_screen(  # type: ignore[attr-defined]
                ConfirmScreen(
                    f"Move {one_line(entry.submission_id)}, queued by {one_line(entry.owner, 80)}?",
                    "It changes when another user's job starts." + _not_yours(entry),
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
                self.notify(f"{markup(sid)} cancelled", timeout=3)  # type: ignore[attr-defined]
            else:
                now = await queue.move(sid, to)
                self.notify(f"{markup(sid)}: position {now:d}", timeout=2)  # type: ignore[attr-defined]
        except (QueueError, OSError) as exc:
            report(cast(Screen, self), exc, title="queue not changed")
            return
        await self.refresh_queue()
        self._fill()  # type: ignore[attr-defined]
        table = self.query_one(DataTable)  # type: ignore[attr-defined]
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


def _not_yours(entry: QueueEntry) -> str:
    """The confirmation's line naming another user's entry (empty for one's own)."""
    if entry.owner is None or entry.owner == me():
        return ""
    return f" It was queued by {one_line(entry.owner, 80)}, not you."
