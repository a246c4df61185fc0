"""The Jobs screen's part for runs that heal themselves: a retried job's place in its chain
(↻ attempt n/N, and which submission it retries or was retried as), the supervisor's decisions on
the job (why it was or was not retried), and who supervises the cluster. Plain functions the
Jobs screen calls: its own file stays about jobs on the head."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from tui.fmt import age
from tui.jobs.service import JobRow
from tui.sanitize import one_line

if TYPE_CHECKING:
    from tui.supervisor.core import Supervisor

SHOWN_DECISIONS = 2  # the newest few: the detail pane has room for a few lines only


def _attempts_of(rec: Any) -> int | None:
    policy = getattr(rec, "retry_policy", None)
    n = policy.get("retries") if isinstance(policy, dict) else None
    return n + 1 if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def chain_prefix(row: JobRow) -> str:
    """ "↻2/3 " before a retry's id (attempt 2 of at most 3); "" for a first attempt."""
    rec = row.record
    attempt = getattr(rec, "attempt", 1) if rec is not None else 1
    if not isinstance(attempt, int) or attempt <= 1:
        return ""
    total = _attempts_of(rec)
    return f"↻{attempt}/{total} " if total else f"↻{attempt} "


def retried_as(row: JobRow, rows: list[JobRow]) -> str | None:
    return next(
        (
            r.submission_id
            for r in rows
            if r.record is not None and r.record.retry_of == row.submission_id
        ),
        None,
    )


def failure_cause(row: JobRow) -> str:
    """What the supervisor read as a failed job's cause (its job-failed decision), or ""."""
    decisions = row.record.decisions if row.record is not None else None
    for d in reversed(decisions or []):
        if isinstance(d, dict) and d.get("kind") == "job-failed":
            details = d.get("details")
            cause = details.get("cause") if isinstance(details, dict) else None
            return cause if isinstance(cause, str) else ""
    return ""


def heal_detail(row: JobRow, rows: list[JobRow]) -> Text:
    """Lines for the detail pane: the chain and the supervisor's last decisions on this job."""
    t = Text()
    rec = row.record
    if rec is None:
        return t
    total = _attempts_of(rec)
    parts = []
    if total or (rec.attempt or 1) > 1:
        parts.append(f"attempt {rec.attempt or 1}/{total or '?'}")
    if rec.retry_of:
        parts.append(f"↻ retry of {rec.retry_of}")
    after = retried_as(row, rows)
    if after:
        parts.append(f"↻ retried as {after}")
    if parts:
        t.append("retries: ", "dim")
        t.append(one_line("  ".join(parts), 300) + "\n")
    decisions = [d for d in (rec.decisions or []) if isinstance(d, dict)][-SHOWN_DECISIONS:]
    for d in decisions:
        at = d.get("at")
        # An age, not a clock time: the same on every machine (and in snapshots).
        stamp = f"{age(at)} ago" if isinstance(at, (int, float)) else "?"
        style = {"no-retry": "yellow", "retry": "green", "error": "red"}.get(str(d.get("kind")), "")
        t.append("supervisor: ", "dim")
        t.append(one_line(f"{stamp} {d.get('kind')}: {d.get('message')}", 300) + "\n", style)
    return t


def supervisor_note(sup: Supervisor | None) -> str:
    """For the Jobs title: who supervises the cluster ("" when nobody is known to)."""
    if sup is None:
        return ""
    other = sup.supervised_by()
    if other:
        return other
    return "supervised by this cockpit" if sup.acting else ""
