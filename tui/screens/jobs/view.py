"""What the Jobs table shows and how it is moved through: its keys (j/k, g/G, Home/End move the
selection, as on the Cluster screen), which rows show (the `/` filter: every word must appear in
the job's id, status, profile, driver or message) and in what order (o cycles age, status,
name; O reverses). Pure functions over the jobs service's rows, and the table widget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from tui.jobs.queue import QueueEntry
from tui.jobs.service import JobRow
from tui.sanitize import one_line
from tui.screens.jobs.queue import grouped, profile_label

SORT_KEYS = ("age", "status", "name")
# Most urgent first: what runs or waits, then what went wrong, then what is done.
_STATUS_ORDER = {
    s: i
    for i, s in enumerate(
        ("RUNNING", "PENDING", "SUBMITTING", "FAILED", "LOST", "NOT_SUBMITTED", "STOPPED")
    )
}


class JobTable(DataTable[Text]):
    """The Jobs screen's table, with the Cluster screen's movement keys."""

    BINDINGS = [
        Binding("down,j", "cursor_down", "Next job", show=False),
        Binding("up,k", "cursor_up", "Previous job", show=False),
        Binding("home,g", "first", "First job", show=False),
        Binding("end,G", "last", "Last job", show=False),
    ]

    def action_first(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_last(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)


def _words(text: str) -> list[str]:
    return text.casefold().split()


def row_matches(row: JobRow, words: Sequence[str]) -> bool:
    hay = " ".join(
        (
            row.submission_id,
            row.status_text,
            profile_label(row),
            row.driver_node or "",
            row.message or "",
        )
    ).casefold()
    return all(w in hay for w in words)


def entry_matches(entry: QueueEntry, words: Sequence[str]) -> bool:
    hay = " ".join(
        (entry.submission_id, "queued", entry.state, entry.profile or "", entry.reason or "")
    ).casefold()
    return all(w in hay for w in words)


def shown_rows(rows: list[JobRow], filter_text: str, sort_key: str, reverse: bool) -> list[JobRow]:
    """The rows the table shows, in its order. By age (the default) newest first with each
    sweep's runs together; by status most urgent first, newest first within one; by name A-Z."""
    words = _words(filter_text)
    kept = [r for r in rows if row_matches(r, words)] if words else list(rows)
    newest = sorted(kept, key=lambda r: r.start_time or 0, reverse=True)
    if sort_key == "status":
        out = sorted(newest, key=lambda r: _STATUS_ORDER.get(r.status, len(_STATUS_ORDER)))
    elif sort_key == "name":
        out = sorted(kept, key=lambda r: r.submission_id)
    else:
        out = grouped(newest)
    return out[::-1] if reverse else out


def shown_queue(entries: list[QueueEntry], filter_text: str) -> list[QueueEntry]:
    words = _words(filter_text)
    return [e for e in entries if entry_matches(e, words)] if words else list(entries)


STALL_MARK = "STALLED"  # after Ray's status of a running job the supervisor found stalled


def status_text(row: JobRow, stall: Mapping[str, Any] | None, style: str) -> tuple[str, str]:
    """(text, style) of the status cell: Ray's status (it stays RUNNING), with the STALLED
    mark when the supervisor found the job stalled (tui/supervisor/stall.py)."""
    if stall is None:
        return row.status_text, style
    return f"{row.status_text} {STALL_MARK}", "bold red"


def health_cell(health: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(text, style) of the HEALTH column: the training-health rules that fired
    (tui/metrics/health.py), or "-"."""
    if not health:
        return "-", "dim"
    return ",".join(sorted({str(a.get("rule")) for a in health})), "bold yellow"


HEALTH_LINES = 3  # the newest alerts in the detail pane


def health_detail(health: Sequence[Mapping[str, Any]] | None) -> Text:
    """The detail pane's lines for a job whose training-health rules fired (newest last; from
    a state file: cleaned)."""
    t = Text()
    for alert in list(health or ())[-HEALTH_LINES:]:
        t.append("health: ", "bold yellow")
        t.append(one_line(str(alert.get("message") or ""), 400) + "\n")
    return t


def health_shown(cluster: str, rows: list[JobRow]) -> dict[str, list[dict[str, Any]]]:
    """The supervisor's training-health alerts of the running jobs (its state file)."""
    from tui.supervisor.health_duty import health_shown as shown

    return shown(cluster, rows)


def stall_detail(stall: Mapping[str, Any] | None) -> Text:
    """The detail pane's line for a stalled job: the evidence (from a state file: cleaned)."""
    t = Text()
    if stall is not None:
        t.append("stall: ", "bold red")
        t.append(one_line(str(stall.get("evidence") or ""), 400) + "\n")
    return t


def stalls_shown(cluster: str, rows: list[JobRow]) -> dict[str, dict[str, Any]]:
    """The supervisor's stalls of the running jobs (its state file: this cockpit's supervisor
    or a `verl-tui watch` on this machine wrote it); none when it cannot be read."""
    from tui.state import StateError
    from tui.supervisor.stall_store import running_stalls

    try:
        return running_stalls(cluster, rows)
    except StateError:
        return {}
