"""`verl-tui jobs`: the jobs list as a table, one line a job (`--json` is JobRow.to_json)."""

from __future__ import annotations

from typing import IO, Any

from tui.fmt import duration
from tui.jobs.service import JobRow
from tui.sanitize import one_line, pad


def running_stalls(
    cluster: str, rows: list[JobRow], *, warn: IO[str] | None = None
) -> dict[str, dict[str, Any]]:
    """The supervisor's stalls of the jobs still running; a stalls file that cannot be read is
    one warning line on `warn` (and no stalls)."""
    from tui.state import StateError
    from tui.supervisor.stall_store import running_stalls as stalls_of

    try:
        return stalls_of(cluster, rows)
    except StateError as exc:
        if warn is not None:
            print(f"verl-tui jobs: warning: {one_line(str(exc), 300)}", file=warn)
        return {}


def jobs_table(rows: list[JobRow], stalls: dict[str, dict[str, Any]] | None = None) -> str:
    """Fixed columns (measured in terminal cells); a job the head no longer lists ends with
    why its status is the one last known, or LOST (e.g. "Ray restarted since"); a stalled
    job ends with STALLED and the evidence."""
    out = [
        f"{pad('SUBMISSION ID', 40)} {pad('STATUS', 20)} {pad('DURATION', 9, right=True)} "
        f"{pad('PROFILE', 24)} {pad('OWNER', 24)} DRIVER"
    ]
    for r in rows:
        profile = r.record.profile if r.record and r.record.profile else "-"
        attempt = r.record.attempt if r.record else 1
        chain = f"↻{attempt} " if isinstance(attempt, int) and attempt > 1 else ""  # a retry
        note = "" if r.on_head or not r.message else f"  ({one_line(r.message, 120)})"
        stall = (stalls or {}).get(r.submission_id)
        if stall is not None:
            note += f"  STALLED: {one_line(str(stall.get('evidence')), 300)}"
        out.append(
            f"{pad(chain + r.submission_id, 40)} {pad(r.status_text, 20)} "
            f"{pad(duration(r.duration_s), 9, right=True)} {pad(profile, 24)} "
            f"{pad(r.owner or '-', 24)} {one_line(r.driver_node or '-', 60)}{note}"
        )
    return "\n".join(out)
