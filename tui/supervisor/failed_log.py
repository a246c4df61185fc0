"""The end of a FAILED job's driver log through the signature table, read once per job and
supervisor: a job that ended writes no more, and the job-failed cause (ends.py) and the retry
verdict (retry.py) read the same scan in the same pass."""

from __future__ import annotations

from tui.cluster.job_logs import job_log_snapshot
from tui.logs.cause import LogScan, scan_log
from tui.supervisor.duty import SupervisorContext

LOG_TAIL_CHARS = 1 << 20  # the end of the driver log is where the failure is
KEPT = 256  # scans kept (the oldest go first): a long-lived supervisor sees many failures
_SCANS = "failed_log_scans"  # ctx.extras: submission id → LogScan


async def failed_log_scan(ctx: SupervisorContext, sid: str) -> LogScan:
    """DashboardError / TransportError as job_log_snapshot, when the log cannot be read."""
    scans: dict[str, LogScan] = ctx.extras.setdefault(_SCANS, {})
    scan = scans.get(sid)
    if scan is None:
        text = await job_log_snapshot(await ctx.dashboard(), sid)
        scan = scans[sid] = scan_log(text[-LOG_TAIL_CHARS:])
        while len(scans) > KEPT:
            del scans[next(iter(scans))]
    return scan
