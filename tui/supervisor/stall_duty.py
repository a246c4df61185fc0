"""The stall duty: each pass, every RUNNING job's new step and watchdog lines (stall_log.py) and,
where the supervisor has GPU samples, its GPUs (the per-job GPU use join, tui/archive/gpu_use),
judged by tui/supervisor/stall.py against hosts.yaml's `stall:` (a profile's `stall:` wins for
its keys). A stall is announced once ("job-stalled", evidence in the message, the stall object
in the details) after one stack dump of the job is saved into its run archive; when the job's
`stall: retry: true` and its retry policy has retries left, the job is stopped and the retry
duty resubmits it from its last complete checkpoint (tui/supervisor/retry.py).

The current stalls are kept in the supervisor's state folder (stalls.json), so `jobs --json`
and the Jobs screen show them whether this process or a `verl-tui watch` found them. Ray's
status of the job stays what Ray says (RUNNING): a stall is a separate `stall` object.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.cluster.dashboard import DashboardError
from tui.config.stall import StallOptions
from tui.config.yamlfile import ConfigError
from tui.sanitize import one_line
from tui.supervisor.duty import SupervisorContext
from tui.supervisor.events import Decision
from tui.supervisor.policy import RetryPolicy
from tui.supervisor.profile_cache import ProfileCache
from tui.supervisor.stall import GpuState, JobProgress, Stall, judge
from tui.supervisor.stall_log import LogCursor
from tui.supervisor.stall_store import write_stalls
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.jobs.history import JobRecord
    from tui.jobs.service import JobRow

HEAD_WAIT_S = 20.0
DUMP_DEADLINE_S = 45.0  # the automatic stack dump, every host (the announcement waits for it)
PIDS_EVERY = 6  # passes between asking Ray for a job's worker pids (GPU evidence)
GPU_SAMPLES = "gpu_samples"  # ctx.extras: the newest telemetry per host


def use_telemetry(ctx: SupervisorContext, monitor: TelemetryMonitor) -> None:
    """The stall check's GPU evidence: the newest sample of each host `monitor` keeps (the
    cockpit's own telemetry; `verl-tui watch` runs one for this)."""
    ctx.extras[GPU_SAMPLES] = lambda: {n: h.latest for n, h in monitor.hosts.items()}


@dataclass
class _Watched:
    progress: JobProgress
    cursor: LogCursor
    first_read: bool = True
    stall: Stall | None = None
    problem: str | None = None  # why the log could not be read (said once)
    pids: dict[str, set[int]] = field(default_factory=dict)
    passes: int = 0
    # The steps whose stall this process announced (a job submitted outside verl-tui has no
    # history record to remember it in).
    announced: set[int | None] = field(default_factory=set)


def stalled_stop(rec: JobRecord | None) -> dict[str, Any] | None:
    """The job-stalled decision that stopped this job for a retry (None: it was not)."""
    for d in reversed((rec.decisions or []) if rec is not None else []):
        if isinstance(d, dict) and d.get("kind") == "job-stalled":
            details = d.get("details")
            return details if isinstance(details, dict) and details.get("stopped") else None
    return None


def _announced(rec: JobRecord | None, stall: Stall) -> bool:
    """A job-stalled decision for this job at this step is recorded (once per stall, across
    supervisor restarts: the record is the memory)."""
    for d in (rec.decisions or []) if rec is not None else []:
        if isinstance(d, dict) and d.get("kind") == "job-stalled":
            details = d.get("details")
            if isinstance(details, dict) and details.get("last_step") == stall.last_step:
                return True
    return False


SHOWN_GROUPS = 4  # stack groups named in the decision (odd ones out first)


async def take_stack_dump(ctx: SupervisorContext, sid: str) -> dict[str, Any]:
    """One stack dump of every process of the job, saved into its run archive (tui/stack):
    {"path": where or None, "note": one line, "groups": the groups' one-line summaries}. Never
    raises for a dump that cannot be taken: the note says why."""
    try:
        from tui.stack import dump_job_stacks
    except ImportError as exc:  # a build without the stack package
        return {"path": None, "note": f"stack dump not available: {exc}", "groups": []}
    from tui.archive.store import ArchiveStore

    try:
        client = await ctx.dashboard()
        report = await asyncio.wait_for(
            dump_job_stacks(ctx.fleet, client, sid, native=True, deadline_s=DUMP_DEADLINE_S),
            DUMP_DEADLINE_S + 10,
        )
        path = report.save(ArchiveStore(ctx.inv.cluster))
    except asyncio.TimeoutError:
        why = f"no answer within {DUMP_DEADLINE_S:g} s"
        return {"path": None, "note": f"stack dump not available: {why}", "groups": []}
    except (DashboardError, TransportError, OSError) as exc:
        why = one_line(str(exc), 200)
        return {"path": None, "note": f"stack dump not available: {why}", "groups": []}
    groups = [one_line(g.summary, 300) for g in report.groups[:SHOWN_GROUPS]]
    problems = [one_line(str(p), 300) for p in report.problems[:SHOWN_GROUPS]]
    return {
        "path": str(path),
        "note": f"stack dump saved: {path}",
        "groups": groups,
        "problems": problems,
    }


class StallDuty:
    name = "stall"

    def __init__(self) -> None:
        self.jobs: dict[str, _Watched] = {}
        self._profiles = ProfileCache()
        self._written: dict[str, Any] | None = None
        self._said = ""  # the last pass-wide problem said

    # -- thresholds --------------------------------------------------------------------------

    def options(self, ctx: SupervisorContext, rec: JobRecord | None) -> tuple[StallOptions, str]:
        """hosts.yaml's stall: with the job's profile's on top; (options, a problem or "")."""
        base = ctx.inv.stall
        path = rec.profile_path if rec is not None else None
        if not path:
            return base, ""
        try:
            stall = self._profiles.load(path).stall
        except (OSError, ConfigError) as exc:
            return base, f"profile's stall: not read ({one_line(str(exc), 200)}); hosts.yaml's"
        return base.merged(stall), ""

    # -- the pass ----------------------------------------------------------------------------

    async def tick(self, ctx: SupervisorContext) -> list[Decision]:
        running = ctx.running(self.jobs)
        out: list[Decision] = []
        if running:
            try:
                out += await self._check(ctx, running)
                self._said = ""
            except (TransportError, DashboardError, OSError) as exc:
                # The head or its dashboard away: said once per cause, checked next pass.
                why = f"stall check: {one_line(str(exc), 200)}"
                if why != self._said:
                    self._said = why
                    out.append(Decision("error", None, why))
        self._save(ctx)
        return out

    async def _check(self, ctx: SupervisorContext, running: list[JobRow]) -> list[Decision]:
        head = await ctx.fleet.ready(ctx.inv.head.name, HEAD_WAIT_S)
        client = await ctx.dashboard()
        samples = ctx.extras.get(GPU_SAMPLES)
        out: list[Decision] = []
        for row in running:
            sid = row.submission_id
            opts, problem = self.options(ctx, row.record)
            w = self.jobs.get(sid)
            if w is None:
                started = row.start_time or time.time()
                w = self.jobs[sid] = _Watched(JobProgress(started_at=started), LogCursor(sid))
            if not opts.enabled:
                w.stall = None
                continue
            try:
                read = await w.cursor.read(head, client)
            except (TransportError, DashboardError, OSError) as exc:
                why = f"stall check: the log cannot be read: {one_line(str(exc), 200)}"
                if why != w.problem:
                    w.problem = why
                    out.append(Decision("error", sid, why))
                continue
            w.problem = None
            now = time.time()
            # Lines of the first read were written before the file's mtime: no later.
            seen = min(now, read.mtime) if w.first_read and read.mtime else now
            w.first_read = False
            w.progress.feed_lines(read.lines, seen)
            if callable(samples):
                await self._gpus(ctx, client, row, w, samples, now)
            if not read.caught_up:
                continue  # a backlog: its steps' times are not known yet
            stall = judge(w.progress, opts, now)
            w.stall = stall
            if stall is None or stall.last_step in w.announced or _announced(row.record, stall):
                continue
            w.announced.add(stall.last_step)
            out.append(await self._act(ctx, row, stall, opts, problem))
        return out

    async def _gpus(
        self,
        ctx: SupervisorContext,
        client: Any,
        row: JobRow,
        w: _Watched,
        samples: Any,
        now: float,
    ) -> None:
        """The job's GPUs from the telemetry the supervisor has (the job's worker pids on each
        host × each GPU's process list), fed to its progress."""
        from tui.archive.gpu_use import job_worker_pids

        if w.passes % PIDS_EVERY == 0 or not w.pids:
            try:
                info = await client.job_info(row.submission_id)
                job_id = info.get("job_id")
                if isinstance(job_id, str) and job_id:
                    w.pids = await job_worker_pids(client, job_id, ctx.inv)
            except DashboardError:
                pass
        w.passes += 1
        gpus = []
        for host, sample in (samples() or {}).items():
            pids = w.pids.get(host)
            if sample is None or not pids:
                continue
            for gpu in sample.gpus:
                mine = [p for p in gpu.processes or () if p.pid in pids]
                if mine:
                    known = [p.memory_bytes for p in mine if p.memory_bytes is not None]
                    held = sum(known) if known else gpu.memory_used_bytes
                    gpus.append(GpuState(f"{host}:{gpu.index}", gpu.util_percent, held))
        w.progress.feed_gpus(gpus, now)

    # -- acting on a stall -------------------------------------------------------------------

    async def _act(
        self, ctx: SupervisorContext, row: JobRow, stall: Stall, opts: StallOptions, problem: str
    ) -> Decision:
        sid = row.submission_id
        dump = await take_stack_dump(ctx, sid)
        details: dict[str, Any] = {**stall.to_json(), "stack_dump": dump}
        notes = [dump["note"]] + ([problem] if problem else [])
        if opts.retry:
            why = await self._stop_for_retry(ctx, row)
            details["stopped"] = why is None
            notes.append("stopped for a retry" if why is None else f"not retried: {why}")
        message = f"{stall.evidence} ({'; '.join(notes)})"
        return Decision("job-stalled", sid, message, details=details)

    async def _stop_for_retry(self, ctx: SupervisorContext, row: JobRow) -> str | None:
        """Stop the job when its policy has a retry left (None), else why not."""
        rec = row.record
        policy = RetryPolicy.from_json(rec.retry_policy if rec is not None else None)
        if rec is None or policy is None or policy.retries <= 0:
            return "the job has no retries: in its policy"
        if (rec.attempt or 1) > policy.retries:
            return f"retry budget spent ({policy.retries} retries)"
        try:
            client = await ctx.dashboard()
            await client.stop_job(row.submission_id)
        except (DashboardError, TransportError, OSError) as exc:
            return f"stop failed: {one_line(str(exc), 200)}"
        return None

    # -- what the Jobs screen and `jobs --json` read -----------------------------------------

    def current(self) -> dict[str, dict[str, Any]]:
        return {sid: w.stall.to_json() for sid, w in self.jobs.items() if w.stall is not None}

    def _save(self, ctx: SupervisorContext) -> None:
        now = self.current()
        if now != self._written:
            try:
                write_stalls(ctx.state_dir, ctx.inv.cluster, now)
            except OSError:
                return  # a full disk: shown in this process (extras), written next pass
            self._written = now
        ctx.extras["stalls"] = now
