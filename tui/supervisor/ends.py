"""Job ends as decisions ("job-end", "job-failed"), once per job: the decision is recorded on the
job's history record, and a job whose record already holds one is not announced again (a
restarted supervisor does not repeat itself). Jobs that ended before this machine's first
supervisor started are history, not news."""

from __future__ import annotations

from tui.supervisor.duty import SupervisorContext
from tui.supervisor.events import Decision

ENDED = ("SUCCEEDED", "STOPPED", "FAILED")
SLACK_S = 60.0  # a job that ended just before the first supervisor came up still counts


def announced(decisions: list | None, kinds: tuple[str, ...] = ("job-end", "job-failed")) -> bool:
    return any(isinstance(d, dict) and d.get("kind") in kinds for d in decisions or [])


class EndsDuty:
    name = "ends"

    async def tick(self, ctx: SupervisorContext) -> list[Decision]:
        since = float(ctx.extras.get("first_started", 0.0)) - SLACK_S
        out = []
        for row in ctx.jobs:
            rec = row.record
            if rec is None or not row.on_head or row.status not in ENDED:
                continue
            if announced(rec.decisions) or (row.end_time or 0.0) < since:
                continue
            kind = "job-failed" if row.status == "FAILED" else "job-end"
            why = f": {row.message}" if row.message and row.status != "SUCCEEDED" else ""
            out.append(
                Decision(
                    kind,
                    row.submission_id,
                    f"{row.status}{why}",
                    details={
                        "status": row.status,
                        "end_time": row.end_time,
                        "attempt": rec.attempt,
                        "retry_of": rec.retry_of,
                        "profile": rec.profile,
                    },
                )
            )
        return out
