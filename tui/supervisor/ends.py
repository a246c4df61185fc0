"""Job ends as decisions ("job-end", "job-failed"), once per job: the decision is recorded on the
job's history record, and a job whose record already holds one is not announced again (a
restarted supervisor does not repeat itself). Jobs that ended before this machine's first
supervisor started are history, not news.

A FAILED job's decision names its cause: the end of its driver log read once through the
signature table (tui/logs/cause.py), so the Jobs pane and the notification say what failed, not
only Ray's "entrypoint command failed with exit code 1"."""

from __future__ import annotations

from tui.cluster.dashboard import DashboardError
from tui.cluster.job_logs import ray_message
from tui.supervisor.duty import SupervisorContext
from tui.supervisor.events import Decision
from tui.supervisor.failed_log import failed_log_scan
from tui.transport.types import TransportError

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
            details = {
                "status": row.status,
                "end_time": row.end_time,
                "attempt": rec.attempt,
                "retry_of": rec.retry_of,
                "profile": rec.profile,
            }
            why = ray_message(row.message) if row.status != "SUCCEEDED" else ""
            if row.status == "FAILED":
                cause = await self._cause(ctx, row.submission_id)
                if cause is not None:
                    details["signature"], details["cause"] = cause
                    why = cause[1]
            out.append(
                Decision(
                    kind,
                    row.submission_id,
                    f"{row.status}: {why}" if why else row.status,
                    details=details,
                )
            )
        return out

    async def _cause(self, ctx: SupervisorContext, sid: str) -> tuple[str | None, str] | None:
        try:
            scan = await failed_log_scan(ctx, sid)
        except (DashboardError, TransportError):
            return None  # the decision still goes out, with Ray's message
        return scan.cause()
