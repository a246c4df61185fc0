"""The one submission flow: everything between "submit this" and a job on Ray or in the queue, for
every caller — the job form (submit, its Queue switch, its sweep builder), `verl-tui submit`
(--dry-run, --queue, --skip-preflight, --resubmit, a raw command), `verl-tui sweep` and the
supervisor (queued jobs, retries). A caller builds a Request, iterates `submission_flow`, and
only renders or decides on what it yields; none orders the stages itself.

The flow yields typed steps and ends with exactly one outcome:

    Checking(stage, hosts)      a stage begins ("cluster", "config", "preflight", "queue", "send")
    ClusterRead(resources, why) Ray's alive nodes; None (with why) in a dry run Ray did not answer
    Checked(subs, reports, …)   verl's config and the runtime rules passed (warnings in reports)
    PreflightDone(findings)     the job preflight ran and passed (its warnings kept)
    PreflightSkipped(why)       not run: --skip-preflight, asked again after a refusal, or the
                                supervisor sending what was checked when it was queued
  then one of
    Refused(kind, reason, …)    nothing sent, nothing queued; `kind` is a Refusal: one
                                vocabulary for every caller (the CLI's exit code, the form's
                                notice, the supervisor's SubmitRejected all come from it)
    Queued(placed)              in the local queue, a position per run
    Submitted(sub, sid)         on the head (recorded first: tui/jobs/service.submit_and_record)
    Ready(subs, reports)        a dry run or a check passed: what would be sent

Stages, in order: the cluster's resources (Ray's alive nodes) → the config (prepare_submission
per run; a prebuilt Submission — a raw command, a recorded job, a queue entry — is taken as
built) → every gate of GATES over all runs → queue or send.

Adding a gate (a quota, a dry-run rule, a stall policy): write one async generator
``async def my_gate(flow: Flow, runs: Sequence[Planned]) -> AsyncIterator[Step]`` that yields
its steps and, to refuse, one ``Refused(Refusal.MY_KIND, "one line", …)`` (add MY_KIND to
Refusal), and append it to GATES. Every caller then runs it; each renders its refusal from
Refused.text() and its `kind`, so nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tui.cluster.dashboard import DashboardError
from tui.config.yamlfile import ConfigError
from tui.errors import VerlTuiError
from tui.fmt import plural
from tui.jobs.owner import stamp
from tui.jobs.pipeline import JobSpec, live_resources, prepare_submission, working_dir_size
from tui.jobs.rules_base import ClusterResources, Problem
from tui.jobs.schema import SchemaError
from tui.jobs.submit import Submission
from tui.jobs.validate import Report

if TYPE_CHECKING:
    from tui.cluster.dashboard import DashboardClient
    from tui.cluster.doctor.findings import Finding, Status
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.jobs.history import JobHistory
    from tui.jobs.queue import JobQueue, QueueEntry
    from tui.jobs.queue_shared import AnyQueue
    from tui.jobs.sweep import Grid, Run, SweepPlan
    from tui.transport.fleet import Fleet

Mode = Literal["send", "queue", "dry_run", "check"]
Stage = Literal["cluster", "config", "preflight", "queue", "send"]


class Refusal(str, Enum):
    """Why nothing was sent or queued: the one vocabulary of every caller."""

    INVALID = "invalid"  # verl's config or the runtime rules (Refused.problems)
    PREFLIGHT = "preflight"  # the job preflight failed on a host (Refused.findings)
    RAY_DOWN = "ray-down"  # the head answers, Ray does not (not started: `u` / `verl-tui up`)
    UNREACHABLE = "unreachable"  # the head itself cannot be reached over SSH
    ID_TAKEN = "id-taken"  # the submission id is in the history or on the head already
    NOT_QUEUED = "not-queued"  # the queue refused (an id queued already, a full disk)
    NOT_SENT = "not-sent"  # the head refused the POST, the working_dir, the record's disk
    OUTCOME_UNKNOWN = "outcome-unknown"  # sent, no answer: the job may run (check `jobs`)


@dataclass(frozen=True)
class Checking:
    stage: Stage
    hosts: int = 0  # the preflight: how many hosts are asked


@dataclass(frozen=True)
class ClusterRead:
    resources: ClusterResources | None
    why: str | None = None  # a dry run whose Ray did not answer: checked without the cluster


@dataclass(frozen=True)
class Checked:
    subs: tuple[Submission, ...]
    reports: tuple[Report | None, ...]  # None for a prebuilt Submission
    skipped_files: tuple[tuple[Path, str], ...] = ()  # left out of the working_dir upload


@dataclass(frozen=True)
class PreflightDone:
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class PreflightSkipped:
    why: str


@dataclass(frozen=True)
class Refused:
    kind: Refusal
    reason: str  # one line, the same whichever caller asked
    detail: str = ""  # the first thing to fix (a key's problem, a host's finding)
    run: str | None = None  # a sweep's combination
    problems: tuple[Problem, ...] = ()
    per_run: tuple[tuple[str, tuple[Problem, ...]], ...] = ()  # a sweep's invalid runs
    findings: tuple[Finding, ...] = ()
    config_hashes: tuple[str, ...] = ()  # what a preflight refused: asked again, it goes
    report: Report | None = field(default=None, compare=False)
    error: BaseException | None = field(default=None, compare=False)

    def text(self) -> str:
        """``combination lr=1: the job preflight failed: node2: no such file``."""
        lead = f"combination {self.run}: " if self.run else ""
        return f"{lead}{self.reason}: {self.detail}" if self.detail else lead + self.reason

    @property
    def failing_checks(self) -> list[str]:
        """The preflight's failing checks, each once: ``data.val_files (node1)``."""
        out: list[str] = []
        for f in self.findings:
            if f.status == "fail":
                kind, _, key = f.check.partition(":")
                name = key if kind in ("path", "hf") and key else f.check
                text = f"{name} ({f.host})" if f.host else name
                if text not in out:
                    out.append(text)
        return out


@dataclass(frozen=True)
class QueuedRun:
    sub: Submission
    entry: QueueEntry
    position: int
    run: Run | None = None  # a sweep's combination


@dataclass(frozen=True)
class Queued:
    placed: tuple[QueuedRun, ...]


@dataclass(frozen=True)
class Submitted:
    sub: Submission
    submission_id: str


@dataclass(frozen=True)
class Ready:
    subs: tuple[Submission, ...]
    reports: tuple[Report | None, ...]
    runs: tuple[Run | None, ...] = ()  # a sweep's combinations


Outcome = Refused | Queued | Submitted | Ready
Step = Checking | ClusterRead | Checked | PreflightDone | PreflightSkipped | Outcome
OUTCOMES = (Refused, Queued, Submitted, Ready)


@dataclass(frozen=True)
class Sweep:
    """A grid of runs on top of `spec` (tui/jobs/sweep.py), all validated, then all queued."""

    spec: JobSpec
    grids: tuple[Grid, ...]
    name: str


@dataclass
class Request:
    """What a caller asks for. `job`: a profile's JobSpec (validated here), a Sweep, or a
    prebuilt Submission (a raw command, a recorded job, a queue entry: sent as built)."""

    job: JobSpec | Sweep | Submission
    mode: Mode = "send"
    skip_preflight: bool = False
    skip_why: str = "--skip-preflight"
    # Config hashes whose preflight refusal the user saw and who asks again: sent without it
    # (the form's second ctrl+s, the sweep builder's same grid again).
    asked_again: Collection[str] = ()
    profile_path: str | None = None
    priority: int = 0
    # On the history record before the POST; in queue mode, on the entry itself.
    retry_policy: dict[str, Any] | None = None
    # The supervisor: an id whose record exists is sent again (a crash between record and
    # POST; Ray accepts an id at most once), with the attempt chain on a new record.
    resend: bool = False
    attempt: int = 1
    retry_of: str | None = None
    ray_wait_s: float = 10.0  # a dry run does not wait longer for Ray's answer
    working_dir_bytes: int | None = None  # known already (the form's): not scanned again


@dataclass
class Planned:
    sub: Submission
    report: Report | None
    run: Run | None = None  # a sweep's combination

    @property
    def label(self) -> str | None:
        return self.run.label if self.run is not None else None


@dataclass
class Flow:
    """One run of the flow: the cluster it talks to and what the caller asked."""

    inv: Inventory
    cluster: RayCluster | None  # None only for what needs no host (a raw dry run)
    history: JobHistory
    request: Request
    resources_of: Callable[[], Awaitable[ClusterResources]] | None = None
    queue: AnyQueue | JobQueue | None = None
    dashboard: Callable[[], Awaitable[DashboardClient]] | None = None
    resources: ClusterResources | None = None
    ray_reached: bool = True
    plan: SweepPlan | None = None

    def job_queue(self) -> AnyQueue:
        """The cluster's queue: on its head (tui/jobs/queue_shared.py), or the one handed in."""
        from tui.jobs.queue_shared import as_async, cluster_queue

        if self.queue is None:
            fleet = self.cluster.fleet if self.cluster is not None else None
            self.queue = cluster_queue(self.inv, fleet)
        self.queue = as_async(self.queue)
        return self.queue

    def taken(self, sid: str) -> bool:
        return self.history.get(sid) is not None

    def require_cluster(self) -> RayCluster:
        assert self.cluster is not None, "this request needs the cluster"
        return self.cluster


# ---- the gates: every run passes each, in order (see the module text) -----------------------


async def preflight_findings(
    fleet: Fleet, inv: Inventory, sub: Submission, *, unasked: Status
) -> list[Finding]:
    """One submission's job preflight (tui/jobs/preflight/: data, model, verl's imports,
    host limits, on every host)."""
    from tui.jobs.preflight import preflight_submission

    return await preflight_submission(fleet, inv, sub, unasked=unasked)


async def first_refused_preflight(
    fleet: Fleet, inv: Inventory, runs: Sequence[Planned], *, unasked: Status = "fail"
) -> tuple[Planned | None, list[Finding]]:
    """The job preflight of each run in order: (the first that fails, its findings), or
    (None, the warnings of all) when every run passes."""
    from tui.jobs.preflight import failed

    seen: list[Finding] = []
    for run in runs:
        findings = await preflight_findings(fleet, inv, run.sub, unasked=unasked)
        if failed(findings):
            return run, findings
        seen += [f for f in findings if f.status != "ok"]
    return None, seen


async def first_failing_preflight(
    fleet: Fleet, inv: Inventory, plan: SweepPlan, *, unasked: Status = "fail"
) -> tuple[Run, list[Finding]] | None:
    """The job preflight of every run of a valid sweep plan, in order, as the preflight gate
    runs it: the first run whose preflight fails, with its findings, or None when all pass."""
    from tui.jobs.preflight import needs_preflight

    runs = [
        Planned(sub, None, run)
        for run, sub in zip(plan.runs, plan.subs, strict=True)
        if needs_preflight(sub)
    ]
    failing, findings = await first_refused_preflight(fleet, inv, runs, unasked=unasked)
    if failing is None or failing.run is None:
        return None
    return failing.run, findings


async def preflight_gate(flow: Flow, runs: Sequence[Planned]) -> AsyncIterator[Step]:
    from tui.jobs.preflight import needs_preflight

    req = flow.request
    checked = [r for r in runs if needs_preflight(r.sub)]
    if not checked:
        return
    hashes = tuple(r.sub.config_hash or "" for r in checked)
    if req.skip_preflight:
        yield PreflightSkipped(req.skip_why)
        return
    if req.asked_again and set(hashes) <= set(req.asked_again):
        yield PreflightSkipped("asked again after its refusal")
        return
    cluster = flow.require_cluster()
    yield Checking("preflight", len(flow.inv.hosts))
    # A dry run whose Ray did not answer shows a host it could not ask as a warning: the
    # real submit would stop at Ray first.
    unasked: Status = "fail" if flow.ray_reached else "warn"
    run, findings = await first_refused_preflight(cluster.fleet, flow.inv, checked, unasked=unasked)
    if run is None:
        yield PreflightDone(tuple(findings))  # passed (its warnings are worth showing)
        return
    bad = next(f for f in findings if f.status == "fail")
    where = f"{bad.host}: " if bad.host else ""
    yield Refused(
        Refusal.PREFLIGHT,
        "the job preflight failed",
        where + bad.finding,
        run=run.label,
        findings=tuple(findings),
        config_hashes=hashes,
    )


Gate = Callable[[Flow, Sequence[Planned]], AsyncIterator[Step]]
GATES: tuple[Gate, ...] = (preflight_gate,)


# ---- the stages ------------------------------------------------------------------------------


def _unreachable(exc: BaseException) -> Refused:
    if isinstance(exc, DashboardError):
        return Refused(Refusal.RAY_DOWN, "Ray is not reachable", str(exc), error=exc)
    why = str(exc) or type(exc).__name__
    return Refused(Refusal.UNREACHABLE, "the head is not reachable", why, error=exc)


async def _read_cluster(flow: Flow, spec: JobSpec) -> AsyncIterator[Step]:
    req = flow.request
    yield Checking("cluster")
    if flow.resources_of is not None:
        asking = flow.resources_of()
    else:
        asking = live_resources(flow.require_cluster(), want_debugpy=spec.wants_post_mortem)
    try:
        if req.mode == "dry_run":
            flow.resources = await asyncio.wait_for(asking, req.ray_wait_s)
        else:
            flow.resources = await asking
    except (VerlTuiError, OSError, TimeoutError) as exc:  # Ray cannot be asked
        if req.mode != "dry_run":
            yield _unreachable(exc)
            return
        flow.ray_reached = False
        yield ClusterRead(None, str(exc) or f"no answer within {req.ray_wait_s:.0f} s")
        return
    yield ClusterRead(flow.resources)


def _invalid(report: Report, label: str | None = None) -> Refused:
    errors = report.errors or [Problem(None, "verl's config did not compose")]
    first = errors[0]
    return Refused(
        Refusal.INVALID,
        f"{plural(len(errors), 'error')} in the config",
        f"{first.key or 'profile'}: {first.message}",
        run=label,
        problems=tuple(errors),
        report=report,
    )


def _plan_one(
    flow: Flow, spec: JobSpec
) -> tuple[Submission | None, Report, list[tuple[Path, str]]]:
    wd_bytes, skipped = flow.request.working_dir_bytes, list[tuple[Path, str]]()
    if wd_bytes is None:
        wd_bytes, skipped = working_dir_size(spec)
    sub, report = prepare_submission(flow.inv, spec, flow.resources, working_dir_bytes=wd_bytes)
    return sub, report, skipped


def _plan_sweep(flow: Flow, sweep: Sweep, queued: set[str]) -> SweepPlan:
    from tui.jobs.sweep import plan_sweep

    wd_bytes = flow.request.working_dir_bytes
    if wd_bytes is None:
        wd_bytes = working_dir_size(sweep.spec)[0]
    return plan_sweep(
        flow.inv,
        sweep.spec,
        sweep.grids,
        name=sweep.name,
        resources=flow.resources,
        taken=lambda sid: sid in queued or flow.taken(sid),
        working_dir_bytes=wd_bytes,
    )


async def _plan(flow: Flow) -> AsyncIterator[Step | list[Planned]]:
    """The runs to send, checked (yields them as its last item), or a Refused."""
    job = flow.request.job
    if isinstance(job, Submission):
        yield Checked((job,), (None,))
        yield [Planned(job, None)]
        return
    yield Checking("config")
    queued: set[str] = set()
    if isinstance(job, Sweep):  # the ids a sweep's runs must not take
        try:
            queued = {e.submission_id for e in await flow.job_queue().entries()}
        except OSError as exc:  # the head's queue cannot be read (StateError): one line
            yield Refused(Refusal.NOT_QUEUED, "not queued", str(exc), error=exc)
            return
    try:
        if isinstance(job, Sweep):
            plan = flow.plan = await asyncio.to_thread(_plan_sweep, flow, job, queued)
        else:
            sub, report, skipped = await asyncio.to_thread(_plan_one, flow, job)
    except (ConfigError, SchemaError, ValueError) as exc:
        # a malformed --set, a grid past its limits, verl's config unreadable, a bad entry
        # point: the caller's input, said in one line (the CLI exits 2 on it)
        problem = Problem(None, str(exc))
        yield Refused(
            Refusal.INVALID,
            str(exc),
            problems=(problem,),
            report=Report([problem], None),
            error=exc,
        )
        return
    if isinstance(job, Sweep):
        if not plan.ok:
            label, problems = next(iter(plan.invalid.items()))
            yield replace(
                _invalid(Report(problems, None), label),
                reason=f"{len(plan.invalid)} of {len(plan.runs)} combinations invalid",
                per_run=tuple((k, tuple(v)) for k, v in plan.invalid.items()),
            )
            return
        runs = [
            Planned(s, Report([], c), r)
            for s, c, r in zip(plan.subs, plan.configs, plan.runs, strict=True)
        ]
        yield Checked(tuple(r.sub for r in runs), tuple(r.report for r in runs))
        yield runs
        return
    if sub is None:
        yield _invalid(report)
        return
    yield Checked((sub,), (report,), tuple(skipped))
    yield [Planned(sub, report)]


async def _queue(flow: Flow, runs: list[Planned]) -> Outcome:
    from tui.jobs.queue import Needs, QueueError, entry_for

    req, queue = flow.request, flow.job_queue()
    try:
        if flow.plan is not None:
            from tui.jobs.sweep import sweep_entries

            entries = sweep_entries(
                flow.inv, flow.plan, priority=req.priority, profile_path=req.profile_path
            )
        else:
            (run,) = runs
            config = run.report.config if run.report is not None else None
            entries = [
                entry_for(
                    run.sub,
                    flow.inv,
                    needs=Needs.from_config(config),
                    priority=req.priority,
                    profile_path=req.profile_path,
                )
            ]
        for entry in entries:  # the entry carries its retry policy to whichever supervisor
            entry.retry_policy = req.retry_policy
        positions = await queue.add_all(entries, taken=flow.taken)
        placed = list(zip(entries, positions, strict=True))
    except (QueueError, OSError) as exc:
        return Refused(Refusal.NOT_QUEUED, "not queued", str(exc), error=exc)
    return Queued(
        tuple(QueuedRun(r.sub, e, p, r.run) for r, (e, p) in zip(runs, placed, strict=True))
    )


async def _send(flow: Flow, run: Planned) -> Outcome:
    from tui.jobs import service

    req = flow.request
    try:
        if req.retry_policy and flow.cluster is not None:  # with the queue's, on the head
            from tui.jobs.queue_shared import share_policy

            await share_policy(
                flow.inv,
                flow.cluster.fleet,
                run.sub,
                profile_path=req.profile_path,
                retry_policy=req.retry_policy,
                attempt=req.attempt,
                retry_of=req.retry_of,
            )
        sid = await service.submit_and_record(
            flow.require_cluster(),
            run.sub,
            flow.history,
            profile_path=req.profile_path,
            retry_policy=req.retry_policy,
            resend=req.resend,
            attempt=req.attempt,
            retry_of=req.retry_of,
            dashboard=flow.dashboard,
        )
    except service.SubmissionIdTaken as exc:
        return Refused(Refusal.ID_TAKEN, "submission id taken", str(exc), error=exc)
    except service.SubmitOutcomeUnknown as exc:
        return Refused(Refusal.OUTCOME_UNKNOWN, str(exc), error=exc)
    except (VerlTuiError, OSError) as exc:  # the dashboard, a host, working_dir, the disk
        return Refused(Refusal.NOT_SENT, "not sent", str(exc), error=exc)
    return Submitted(run.sub, sid)


async def submission_flow(
    inv: Inventory,
    cluster: RayCluster | None,
    history: JobHistory,
    request: Request,
    *,
    resources: Callable[[], Awaitable[ClusterResources]] | None = None,
    queue: AnyQueue | JobQueue | None = None,
    dashboard: Callable[[], Awaitable[DashboardClient]] | None = None,
) -> AsyncIterator[Step]:
    """The flow's steps, then its one outcome (see the module text). `resources`: where
    Ray's alive nodes come from (default tui/jobs/pipeline.live_resources on `cluster`);
    `dashboard`: the head's client (default the cluster's)."""
    flow = Flow(inv, cluster, history, request, resources, queue, dashboard)
    job = request.job
    if request.mode == "send" and isinstance(job, Sweep):
        raise ValueError("a sweep is queued, never sent at once")
    if not isinstance(job, Submission):
        async for step in _read_cluster(flow, job.spec if isinstance(job, Sweep) else job):
            yield step
            if isinstance(step, Refused):
                return
    runs: list[Planned] = []
    async for item in _plan(flow):
        if isinstance(item, list):
            runs = item
        else:
            yield item
            if isinstance(item, Refused):
                return
    for r in runs:  # who asked: on Ray's job metadata and the queue entry (tui/jobs/owner.py)
        stamp(r.sub.metadata)
    if request.mode == "check":
        yield Ready(tuple(r.sub for r in runs), tuple(r.report for r in runs))
        return
    for gate in GATES:
        async for step in gate(flow, runs):
            yield step
            if isinstance(step, Refused):
                return
    if request.mode == "dry_run":
        sweep_runs = tuple(r.run for r in runs)
        yield Ready(tuple(r.sub for r in runs), tuple(r.report for r in runs), sweep_runs)
    elif request.mode == "queue":
        yield Checking("queue")
        yield await _queue(flow, runs)
    else:
        yield Checking("send")
        yield await _send(flow, runs[0])


async def outcome(
    steps: AsyncIterator[Step], on_step: Callable[[Step], None] | None = None
) -> Outcome:
    """Run a flow to its end: its outcome (each step before it to `on_step`)."""
    last: Outcome | None = None
    try:
        async for step in steps:
            if isinstance(step, OUTCOMES):
                last = step
            elif on_step is not None:
                on_step(step)
    finally:
        with contextlib.suppress(RuntimeError):
            await steps.aclose()  # type: ignore[attr-defined]
    assert last is not None, "a flow ends with an outcome"
    return last
