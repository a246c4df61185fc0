"""`verl-tui jobs`: the jobs list as a table, one line a job (`--json` is JobRow.to_json)."""

from __future__ import annotations

from tui.fmt import duration
from tui.jobs.service import JobRow
from tui.sanitize import one_line, pad


def jobs_table(rows: list[JobRow]) -> str:
    """Fixed columns (measured in terminal cells); a job the head no longer lists ends with
    why its status is the one last known, or LOST (e.g. "Ray restarted since")."""
    out = [
        f"{pad('SUBMISSION ID', 40)} {pad('STATUS', 20)} {pad('DURATION', 9, right=True)} "
        f"{pad('PROFILE', 24)} DRIVER"
    ]
    for r in rows:
        profile = r.record.profile if r.record and r.record.profile else "-"
        attempt = r.record.attempt if r.record else 1
        chain = f"↻{attempt} " if isinstance(attempt, int) and attempt > 1 else ""  # a retry
        note = "" if r.on_head or not r.message else f"  ({one_line(r.message, 120)})"
        out.append(
            f"{pad(chain + r.submission_id, 40)} {pad(r.status_text, 20)} "
            f"{pad(duration(r.duration_s), 9, right=True)} {pad(profile, 24)} "
            f"{one_line(r.driver_node or '-', 60)}{note}"
        )
    return "\n".join(out)
