"""The health duty: each pass, every RUNNING job's new steps (verl's file logger on the node that
writes it, tui/archive/metrics_file.py; until that file is found, the driver log's console step
lines, by byte offset) judged by the training-health rules (tui/metrics/health.py) with the
job's profile's `health:` bounds. Each rule that fires on a key is announced once per run
("job-unhealthy", the alert in the details); a rule whose `on_alert` is `stop` stops the job.

The alerts of the running jobs are kept in the supervisor's state folder (health.json), so
`jobs --json` and the Jobs screen show them whether this process or a `verl-tui watch` found
them, like the stall duty's stalls.json.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tui.archive import metrics_file
from tui.cluster import driver_log
from tui.cluster.dashboard import DashboardError
from tui.config.health import HealthOptions
from tui.config.yamlfile import ConfigError
from tui.metrics import MetricsTracker
from tui.metrics.health import Alert, HealthWatch
from tui.metrics.phases import TIMING, PhaseClock
from tui.sanitize import one_line
from tui.state import atomic_write_json, read_state_json, state_path
from tui.supervisor.duty import SupervisorContext
from tui.supervisor.events import Decision
from tui.supervisor.profile_cache import ProfileCache
from tui.supervisor.stall_duty import GPU_SAMPLES  # the cockpit's newest telemetry per host
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.jobs.history import JobRecord
    from tui.jobs.service import JobRow

KIND = "job-unhealthy"
LOCATE_EVERY = 5  # passes between looking for the job's metrics file (its trainer starts late)
CONSOLE_MARKS = ("step:", "Total training steps")
HEAD_WAIT_S = 20.0
MAX_BYTES = 4 << 20
SHOWN = 20  # alerts per job kept in health.json (the newest)
PIDS_EVERY = 6  # passes between asking Ray for a job's worker pids


@dataclass
class _Job:
    tracker: MetricsTracker = field(default_factory=MetricsTracker)
    watch: HealthWatch = field(default_factory=HealthWatch)
    follower: metrics_file.FileFollower | None = None
    console: metrics_file.FileCursor | None = None
    passes: int = 0
    announced: set[tuple[str, str]] = field(default_factory=set)
    stopped: bool = False
    problem: str | None = None
    # Step ends and the job's GPU busy share (the supervisor's telemetry, where it has some):
    # how busy the GPUs were in each phase (tui/metrics/phases.py).
    clock: PhaseClock = field(default_factory=PhaseClock)
    pids: dict[str, set[int]] = field(default_factory=dict)


def _announced(rec: JobRecord | None, alert: Alert) -> bool:
    """A job-unhealthy decision for this rule and key is in the job's record (once per run,
    across supervisor restarts)."""
    for d in (rec.decisions or []) if rec is not None else []:
        if isinstance(d, dict) and d.get("kind") == KIND:
            h = (
                (d.get("details") or {}).get("health")
                if isinstance(d.get("details"), dict)
                else None
            )
            if isinstance(h, dict) and h.get("rule") == alert.rule and h.get("key") == alert.key:
                return True
    return False


class HealthDuty:
    name = "health"

    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}
        self._profiles = ProfileCache()
        self._written: tuple[dict[str, Any], dict[str, Any]] | None = None

    def options(self, rec: JobRecord | None) -> tuple[HealthOptions, str]:
        """The job's profile's health: block (the defaults without one); (options, problem)."""
        path = rec.profile_path if rec is not None else None
        if not path:
            return HealthOptions(), ""
        try:
            health = self._profiles.load(path).health
        except (OSError, ConfigError) as exc:
            return HealthOptions(), f"profile's health: not read ({one_line(str(exc), 200)})"
        return health or HealthOptions(), ""

    async def tick(self, ctx: SupervisorContext) -> list[Decision]:
        running = ctx.running(self.jobs)
        out: list[Decision] = []
        for row in running:
            opts, problem = self.options(row.record)
            if not opts.enabled:
                continue
            j = self.jobs.setdefault(row.submission_id, _Job())
            try:
                await self._read(ctx, row.submission_id, j)
                j.problem = None
                j.clock.note_steps(j.tracker.steps(), time.time())
                await self._gpus(ctx, row.submission_id, j)
            except (TransportError, DashboardError, OSError) as exc:
                why = f"health check: the metrics cannot be read: {one_line(str(exc), 200)}"
                if why != j.problem:
                    j.problem = why
                    out.append(Decision("error", row.submission_id, why))
                continue
            for alert in j.watch.check(j.tracker, opts):
                if (alert.rule, alert.key) in j.announced or _announced(row.record, alert):
                    j.announced.add((alert.rule, alert.key))
                    continue
                j.announced.add((alert.rule, alert.key))
                out.append(await self._announce(ctx, row, j, alert, opts, problem))
        self._save(ctx)
        return out

    async def _read(self, ctx: SupervisorContext, sid: str, j: _Job) -> None:
        """The job's rows since the last pass into its tracker."""
        if j.follower is None and j.passes % LOCATE_EVERY == 0:
            client = await ctx.dashboard()
            info = await client.job_info(sid)
            mf = await metrics_file.locate_metrics_file(ctx.cluster, sid, info)
            if mf is not None:
                transport = await ctx.fleet.ready(mf.host, HEAD_WAIT_S)
                j.follower = metrics_file.FileFollower(transport, mf, j.tracker)
                j.watch = HealthWatch()  # exact numbers now: the steps are judged again
                j.console = None
        j.passes += 1
        if j.follower is not None:
            if await j.follower.poll() is None:
                j.follower = None  # gone (a new file): looked for again
            return
        if j.console is None:
            head = await ctx.fleet.ready(ctx.inv.head.name, HEAD_WAIT_S)
            log = await driver_log.locate(head, sid, tail_bytes=1)
            if log is None:
                return
            j.console = metrics_file.FileCursor(head, log.path, marks=CONSOLE_MARKS)
        text, _restarted = await j.console.read_all()
        j.tracker.feed_text(text)

    async def _announce(
        self,
        ctx: SupervisorContext,
        row: JobRow,
        j: _Job,
        alert: Alert,
        opts: HealthOptions,
        problem: str,
    ) -> Decision:
        details: dict[str, Any] = {"health": alert.to_json(), "source": j.tracker.source}
        notes = [problem] if problem else []
        if opts.stop_on(alert.rule) and not j.stopped:
            try:
                client = await ctx.dashboard()
                await client.stop_job(row.submission_id)
                j.stopped = True
                notes.append("stopped (on_alert: stop)")
            except (DashboardError, TransportError, OSError) as exc:
                notes.append(f"stop failed: {one_line(str(exc), 200)}")
            details["stopped"] = j.stopped
        message = alert.message + (f" ({'; '.join(notes)})" if notes else "")
        return Decision(KIND, row.submission_id, message, details=details)

    async def _gpus(self, ctx: SupervisorContext, sid: str, j: _Job) -> None:
        """The job's GPUs' mean busy share now, from the telemetry the supervisor has (the
        cockpit's newest sample per host × the job's worker pids on each host)."""
        samples = ctx.extras.get(GPU_SAMPLES)
        if not callable(samples):
            return
        if j.passes % PIDS_EVERY == 1 or not j.pids:
            from tui.archive.gpu_use import job_worker_pids

            try:
                client = await ctx.dashboard()
                job_id = (await client.job_info(sid)).get("job_id")
                if isinstance(job_id, str) and job_id:
                    j.pids = await job_worker_pids(client, job_id, ctx.inv)
            except DashboardError:
                return  # asked again next pass; the health rules do not need it
        utils = []
        for host, sample in (samples() or {}).items():
            pids = j.pids.get(host)
            if sample is None or not pids:
                continue
            for gpu in sample.gpus:
                mine = any(p.pid in pids for p in gpu.processes or ())
                if mine and gpu.util_percent is not None:
                    utils.append(gpu.util_percent)
        if utils:
            j.clock.note_util(time.time(), sum(utils) / len(utils))

    def phase_util(self) -> dict[str, dict[str, float]]:
        """Per job: its GPUs' mean busy share (%) in each step phase, where known."""
        out = {}
        for sid, j in self.jobs.items():
            keys = [k for k in j.tracker.keys() if k.startswith(TIMING)]  # noqa: SIM118
            util = j.clock.gpu_util({k: j.tracker.series(k) for k in keys})
            if util:
                out[sid] = util
        return out

    # -- what the Jobs screen and `jobs --json` read -----------------------------------------

    def current(self) -> dict[str, list[dict[str, Any]]]:
        return {
            sid: [a.to_json() for a in j.watch.alerts[-SHOWN:]]
            for sid, j in self.jobs.items()
            if j.watch.alerts
        }

    def _save(self, ctx: SupervisorContext) -> None:
        now = self.current()
        util = self.phase_util()
        if (now, util) != self._written:
            try:
                write_health(ctx.state_dir, ctx.inv.cluster, now, util)
            except OSError:
                return  # a full disk: shown in this process (extras), written next pass
            self._written = (now, util)
        ctx.extras["health"] = now


def health_path(state_dir: Path, cluster: str) -> Path:
    return state_path("supervisor", cluster, "health.json", root=state_dir / "supervisor")


def write_health(
    state_dir: Path,
    cluster: str,
    health: dict[str, list[dict[str, Any]]],
    phase_util: dict[str, dict[str, float]] | None = None,
) -> None:
    doc = {"checked_at": time.time(), "jobs": health, "phase_util": phase_util or {}}
    atomic_write_json(health_path(state_dir, cluster), doc)


def read_phase_util(state_dir: Path, cluster: str, sid: str) -> dict[str, float]:
    """The supervisor's GPU busy share (%) per step phase of a job ({} when not known). StateError
    naming the file when it cannot be read."""
    doc = read_state_json(health_path(state_dir, cluster), max_bytes=MAX_BYTES)
    per_job = doc.get("phase_util") if isinstance(doc, dict) else None
    util = per_job.get(sid) if isinstance(per_job, dict) else None
    if not isinstance(util, dict):
        return {}
    return {
        p: float(v)
        for p, v in util.items()
        if isinstance(p, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def read_health(state_dir: Path, cluster: str) -> dict[str, list[dict[str, Any]]]:
    """Submission id → its alerts (`rule`, `step`, `key`, `value`, `message`); entries not
    shaped like one are left out (the file is input). StateError naming the file when it
    cannot be read or is not JSON."""
    doc = read_state_json(health_path(state_dir, cluster), max_bytes=MAX_BYTES)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    out: dict[str, list[dict[str, Any]]] = {}
    for sid, alerts in jobs.items() if isinstance(jobs, dict) else ():
        if isinstance(sid, str) and isinstance(alerts, list):
            good = [a for a in map(Alert.from_json, alerts) if a is not None]
            if good:
                out[sid] = [a.to_json() for a in good]
    return out


def running_health(cluster: str, rows: list[JobRow]) -> dict[str, list[dict[str, Any]]]:
    """The alerts of the jobs that still run on the head. StateError naming the file when it
    cannot be read."""
    from tui.state import state_dir

    health = read_health(state_dir(), cluster)
    running = {r.submission_id for r in rows if r.on_head and r.status == "RUNNING"}
    return {sid: a for sid, a in health.items() if sid in running}


def health_shown(
    cluster: str, rows: list[JobRow], *, warn: IO[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """running_health for a list (`jobs --json`, the Jobs screen): a file that cannot be read
    is one warning line on `warn` (and no alerts)."""
    from tui.state import StateError

    try:
        return running_health(cluster, rows)
    except StateError as exc:
        if warn is not None:
            print(f"verl-tui jobs: warning: {one_line(str(exc), 300)}", file=warn)
        return {}
