"""The retry duty: a job that ended FAILED with a retry policy, whose log shows a failure of the
cluster (tui/logs/retriable.py), or that the stall duty stopped for a retry (stall_duty.py), is
submitted again once the cluster is whole, from the latest
complete checkpoint under its trainer.default_local_dir, as a new submission linked to it
(`retry_of`, `attempt`).

Crash safety, in order: the retry's id is fixed by the chain (`<first>-retry<n>`) and written
into the failed job's record (`pending_retry`) before anything is sent; the retry's own record
is written before the POST; a POST for an id the head already has counts as done. So a
supervisor killed anywhere in between and started again re-sends that same id at most, and
Ray accepts an id once. A job is settled — never looked at again — once its record holds a
"retry" or "no-retry" decision with no pending retry, or a record with retry_of == it exists.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tui.ckpt.hostcmd import CkptError
from tui.ckpt.resume import default_local_dir_of, resume_overrides, world_size_warning
from tui.cluster.dashboard import DashboardError
from tui.jobs.history import JobRecord
from tui.jobs.owner import OWNER_KEY, valid_owner
from tui.jobs.queue_shared import HeadPolicy, SharedPolicies, cluster_policies
from tui.jobs.service import JobRow
from tui.jobs.workdir import WorkdirError
from tui.logs.retriable import Verdict, judge_scan
from tui.sanitize import one_line
from tui.supervisor.duty import SupervisorContext
from tui.supervisor.events import Decision
from tui.supervisor.failed_log import failed_log_scan
from tui.supervisor.policy import RetryPolicy, migrate_policies
from tui.supervisor.rebuild import NotRebuildable, profile_spec, raw_submission_of, retry_id
from tui.supervisor.stall_duty import stalled_stop
from tui.supervisor.submitting import SubmitRejected
from tui.transport.types import HostState, TransportError

BACKOFF_FIRST_S, BACKOFF_MAX_S = 5.0, 60.0
RETRY_WINDOW_S = 7 * 86400.0  # failures older than this are history, not work


@dataclass
class _Pending:
    """In-memory state of one failed job being handled (rebuilt after a restart)."""

    verdict: Verdict | None = None
    next_at: float = 0.0
    delay: float = BACKOFF_FIRST_S
    said: str = ""  # the last "waiting" message (said once, not every tick)
    host_lost: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def settled(ctx: SupervisorContext, rec: JobRecord) -> bool:
    if rec.pending_retry:
        return False
    kinds = {d.get("kind") for d in rec.decisions or [] if isinstance(d, dict)}
    return bool(kinds & {"retry", "no-retry"}) or bool(ctx.history.retries_of(rec.submission_id))


PROBE_TIMEOUT_S = 5.0  # a host that does not run `true` within this is not back


async def _silent(ctx: SupervisorContext) -> dict[str, str]:
    """Hosts whose connection looks up but that do not answer a command now: a link that died
    quietly is noticed by SSH keepalive only after interval × count (default tens of seconds),
    and a retry sent meanwhile would land on a half cluster."""

    async def one(name: str) -> str | None:
        transport = ctx.fleet.transport(name)
        if transport is None:
            return "no connection"
        try:
            res = await transport.run(["true"], timeout=PROBE_TIMEOUT_S)
        except (TransportError, OSError, asyncio.TimeoutError) as exc:
            return one_line(str(exc) or "no answer", 120)
        return None if res.exit_status == 0 else "no answer"

    up = [st.host for st in ctx.fleet.statuses() if st.state == HostState.UP]
    answers = await asyncio.gather(*(one(h) for h in up))
    return {h: why for h, why in zip(up, answers, strict=True) if why}


async def cluster_gaps(ctx: SupervisorContext, alive_hosts: set[str] | None) -> list[str]:
    """What keeps the cluster from being whole: hosts unreachable (by the fleet's state or a
    command that gets no answer now), hosts without an alive Ray node (`alive_hosts` None: Ray
    could not be asked)."""
    gaps = []
    down = set()
    for st in ctx.fleet.statuses():
        if st.state != HostState.UP:
            down.add(st.host)
            gaps.append(f"{st.host} unreachable ({st.state.value})")
    for host, why in (await _silent(ctx)).items():
        down.add(host)
        gaps.append(f"{host} unreachable ({why})")
    if alive_hosts is None:
        gaps.append("Ray does not answer")
    else:
        missing = [h.name for h in ctx.inv.hosts if h.name not in alive_hosts | down]
        if missing:
            gaps.append(f"Ray node not alive on {', '.join(missing)}")
    return gaps


async def alive_hosts(ctx: SupervisorContext) -> set[str] | None:
    try:
        status = await ctx.cluster.status()
    except (DashboardError, TransportError, OSError):
        return None
    return {n.host for n in status.nodes if n.alive and n.host}


def keep_owner(sub: Any, rec: JobRecord) -> None:
    """The retry is the failed job's owner's, whichever supervisor sends it (the flow stamps
    only a submission that names nobody: tui/jobs/owner.py)."""
    owner = valid_owner(rec.owner)
    if owner is not None:
        sub.metadata[OWNER_KEY] = owner


class RetryDuty:
    name = "retry"

    def __init__(self, *, bring_up: bool = False):
        self.bring_up = bring_up  # start Ray on hosts that are back but whose node is gone
        self.pending: dict[str, _Pending] = {}
        self._notices: list[str] = []  # the one-time move of older policies, said here
        self._unread: str | None = None  # why the head's policies could not be read (once)
        self._migrated = False

    async def tick(self, ctx: SupervisorContext) -> list[Decision]:
        out: list[Decision] = []
        now = time.time()
        ended = [
            row
            for row in ctx.jobs
            if row.on_head
            # FAILED, or STOPPED by the stall duty for a retry (tui/supervisor/stall_duty.py).
            and (row.status == "FAILED" or (row.status == "STOPPED" and stalled_stop(row.record)))
        ]
        shared = cluster_policies(ctx.inv, ctx.fleet, on_notice=self._notices.append)
        if not ended and (shared is None or self._migrated):
            return out
        table: dict[str, HeadPolicy] = {}
        if shared is not None:
            try:
                await self._migrate(ctx, shared)  # once, on the first pass
                table = await shared.table() if ended else {}
            except OSError as exc:  # the head's policies unreadable: said when it changes
                why = f"the cluster's retry policies cannot be read: {exc}"
                if why != self._unread:
                    self._unread = why
                    out.append(Decision("error", None, why))
                return out
            self._unread = None
            out += [Decision("waiting", None, text) for text in self._notices]
            self._notices.clear()
        for row in ended:
            found = self._policy_of(row, table if shared is not None else None)
            if found is None:
                continue
            rec, policy, entry = found
            if policy.retries <= 0 or settled(ctx, rec):
                continue
            if row.end_time and now - row.end_time > RETRY_WINDOW_S and not rec.pending_retry:
                continue
            st = self.pending.setdefault(row.submission_id, _Pending())
            if now < st.next_at:
                continue
            try:
                done = await self._handle(ctx, row, rec, policy, st)
            except (DashboardError, TransportError, OSError, CkptError, WorkdirError) as exc:
                done = self._wait(st, row, f"cannot act yet: {one_line(str(exc), 200)}")
            except Exception as exc:  # e.g. SchemaError: said once per cause, tried with backoff
                why = f"cannot act yet: {type(exc).__name__}: {one_line(str(exc), 200)}"
                done = self._wait(st, row, why)
            out += done
            if entry is not None and shared is not None:
                await self._settle(shared, entry, done, out)
        return out

    def _policy_of(
        self, row: JobRow, table: dict[str, HeadPolicy] | None
    ) -> tuple[JobRecord, RetryPolicy, HeadPolicy | None] | None:
        """The job's record and policy: from the head's policies (every user's jobs: the one
        home where there is a remote head, `table`), else its history record's."""
        if table is None:
            rec = row.record
            policy = RetryPolicy.from_json(rec.retry_policy if rec is not None else None)
            return None if rec is None or policy is None else (rec, policy, None)
        entry = table.get(row.submission_id)
        if entry is None or entry.settled:
            return None  # no policy, or decided by a supervisor before (maybe another's)
        rec = row.record or entry.record()
        policy = RetryPolicy.from_json(entry.policy)
        return None if rec is None or policy is None else (rec, policy, entry)

    async def _settle(
        self, shared: SharedPolicies, entry: HeadPolicy, done: list[Decision], out: list[Decision]
    ) -> None:
        """A retry or no-retry decided here is said on the head, so no supervisor (this one
        restarted, another user's taking over) decides that failure again."""
        for d in done:
            if d.kind not in ("retry", "no-retry"):
                continue
            how = (
                "no-retry"
                if d.kind == "no-retry"
                else f"retry {d.details.get('new_submission_id')}"
            )
            try:
                await shared.settle(entry.submission_id, how)
            except OSError as exc:  # the retry's id is fixed: deciding again sends nothing twice
                out.append(
                    Decision("error", entry.submission_id, f"not settled on the head: {exc}")
                )

    async def _migrate(self, ctx: SupervisorContext, shared: SharedPolicies) -> None:
        if not self._migrated:
            await migrate_policies(ctx, shared)
            self._migrated = True

    # -- one failed job ----------------------------------------------------------------------

    def _wait(self, st: _Pending, row: JobRow, why: str) -> list[Decision]:
        st.next_at = time.time() + st.delay
        st.delay = min(st.delay * 2, BACKOFF_MAX_S)
        if why == st.said:
            return []
        st.said = why
        return [
            Decision(
                "waiting",
                row.submission_id,
                f"retry waits: {why}",
                details={"next_check_s": round(st.next_at - time.time(), 1)},
            )
        ]

    def _no(self, ctx: SupervisorContext, rec: JobRecord, why: str, **details: Any) -> Decision:
        self.pending.pop(rec.submission_id, None)
        fresh = ctx.history.get(rec.submission_id) if rec.pending_retry else None
        if fresh is not None:
            fresh.pending_retry = None
            ctx.history.save(fresh)
        return Decision("no-retry", rec.submission_id, why, details=details)

    async def _handle(
        self,
        ctx: SupervisorContext,
        row: JobRow,
        rec: JobRecord,
        policy: RetryPolicy,
        st: _Pending,
    ) -> list[Decision]:
        sid = rec.submission_id
        attempt = (rec.attempt or 1) + 1
        pending = rec.pending_retry if isinstance(rec.pending_retry, dict) else None
        new_id = str(pending.get("submission_id")) if pending else retry_id(rec, attempt)
        from tui.supervisor.submitting import on_head

        if await on_head(ctx, new_id):
            # Sent before a crash: finish the bookkeeping, send nothing.
            return [
                self._done(
                    ctx,
                    row,
                    rec,
                    policy,
                    new_id,
                    attempt,
                    pending.get("resume_from") if pending else None,
                    recovered=True,
                )
            ]
        # Where the seconds from failure to resubmission go (README numbers, the decision).
        phases = st.extra.setdefault("phases", {})
        mark = time.monotonic()
        st.extra.setdefault("seen_at", time.time())

        def lap(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            phases[name] = round(phases.get(name, 0.0) + now - mark, 2)
            mark = now

        if st.verdict is None and stalled_stop(rec):
            st.verdict = Verdict(True, "stall", "retriable: the job stalled, stopped (stall)")
        if st.verdict is None:
            alive = await alive_hosts(ctx)
            st.host_lost = bool(await cluster_gaps(ctx, alive))
            st.verdict = judge_scan(
                await failed_log_scan(ctx, sid), retry_on=policy.retry_on, host_lost=st.host_lost
            )
            lap("log_verdict")
        v = st.verdict
        if not v.retriable:
            return [self._no(ctx, rec, v.reason, signature=v.signature)]
        if attempt > policy.retries + 1:
            return [
                self._no(
                    ctx,
                    rec,
                    f"retry budget spent ({policy.retries} retries); failure was {v.signature}",
                    signature=v.signature,
                )
            ]
        # The cluster must be whole before a job that needs all of it is sent again.
        alive = await alive_hosts(ctx)
        gaps = await cluster_gaps(ctx, alive)
        if (
            gaps
            and self.bring_up
            and alive is not None
            and all(s.state == HostState.UP for s in ctx.fleet.statuses())
        ):
            await ctx.emit(
                Decision(
                    "waiting",
                    row.submission_id,
                    f"retry waits: {'; '.join(gaps)}; starting Ray there again (bring-up)",
                )
            )
            try:
                await ctx.cluster.bring_up()
            except Exception as exc:  # BringUpError, ClusterBusy: said, then waited out
                return self._wait(st, row, f"bring-up failed: {one_line(str(exc), 200)}")
            gaps = await cluster_gaps(ctx, await alive_hosts(ctx))
        if gaps:
            lap("cluster_wait")
            return self._wait(st, row, "; ".join(gaps))
        lap("cluster_check")
        resume, step_ws, notes = await self._checkpoint(ctx, rec, st, row)
        lap("checkpoint")
        if resume == "wait":
            return self._wait(st, row, notes[0])
        # Intent first: the id this retry will have, before anything is sent (in this
        # account's record of it; another user's job has its fixed id, asked of the head).
        fresh = ctx.history.get(sid)
        if fresh is not None:
            fresh.pending_retry = {
                "submission_id": new_id,
                "attempt": attempt,
                "resume_from": resume,
                "at": time.time(),
            }
            ctx.history.save(fresh)
        try:
            if rec.kind == "profile":
                spec, profile_path = profile_spec(
                    ctx.inv, rec, new_id, resume_overrides(resume) if resume else []
                )
                sub = await self._validated(ctx, spec, step_ws)
                lap("validate")
                keep_owner(sub, rec)
                await ctx.submit(
                    sub,
                    profile_path=profile_path,
                    retry_of=sid,
                    attempt=attempt,
                    retry_policy=policy.to_json(),
                )
            else:
                sub = raw_submission_of(ctx.inv, rec, new_id)
                keep_owner(sub, rec)
                await ctx.submit(sub, retry_of=sid, attempt=attempt, retry_policy=policy.to_json())
        except (NotRebuildable, SubmitRejected) as exc:
            return [self._no(ctx, rec, f"cannot resubmit: {exc}", signature=v.signature)]
        lap("submit")
        return [self._done(ctx, row, rec, policy, new_id, attempt, resume, notes=notes)]

    async def _validated(self, ctx: SupervisorContext, spec: Any, step_ws: int | None) -> Any:
        """The validated Submission, refusing a world size the checkpoint cannot load."""
        from tui.supervisor.submitting import build_validated_report

        sub, report = await build_validated_report(ctx, spec)
        if step_ws is not None and report.config is not None:
            trainer = report.config.get("trainer") or {}
            nnodes, gpn = int(trainer.get("nnodes") or 1), int(trainer.get("n_gpus_per_node") or 1)
            warning = world_size_warning(step_ws, nnodes, gpn)
            if warning:
                raise SubmitRejected([f"world size: {warning}"])
        return sub

    async def _checkpoint(
        self, ctx: SupervisorContext, rec: JobRecord, st: _Pending, row: JobRow
    ) -> tuple[str | None, int | None, list[str]]:
        """(resume path or None or "wait", the step's world size, notes). Collects the step's
        missing shards onto every host lacking them when no host holds it all (ranks land on
        any node: each must find its own files)."""
        if rec.kind != "profile":
            return None, None, ["raw command: retried as is"]
        root = default_local_dir_of(rec)
        if not root:
            return None, None, ["no absolute trainer.default_local_dir: retried without resume"]
        from tui.ckpt.collect import collect
        from tui.ckpt.scan import scan_fleet

        index = await scan_fleet(ctx.fleet, ctx.inv, root)
        if index.down:
            return "wait", None, [f"checkpoint scan: {', '.join(sorted(index.down))} down"]
        complete = [s for s in index.steps if s.complete]
        if not complete:
            return None, None, [f"no complete checkpoint under {root}: starts from the beginning"]
        step = max(complete, key=lambda s: s.step)
        notes = []
        lacking = [h.name for h in ctx.inv.hosts if h.name not in step.complete_on]
        if lacking and len(ctx.inv.hosts) > 1:
            await ctx.emit(
                Decision(
                    "waiting",
                    row.submission_id,
                    f"collecting global_step_{step.step} onto {', '.join(lacking)}",
                )
            )
            for host in lacking:
                report = await collect(ctx.fleet, index, step.step, None, host)
                if not report.ok:
                    return "wait", None, [f"collecting global_step_{step.step} onto {host} failed"]
            notes.append(f"collected global_step_{step.step} onto {', '.join(lacking)}")
        return f"{index.root.rstrip('/')}/global_step_{step.step}", step.world_size, notes

    def _done(
        self,
        ctx: SupervisorContext,
        row: JobRow,
        rec: JobRecord,
        policy: RetryPolicy,
        new_id: str,
        attempt: int,
        resume: Any,
        *,
        recovered: bool = False,
        notes: list[str] | None = None,
    ) -> Decision:
        st = self.pending.pop(rec.submission_id, None)
        signature = st.verdict.signature if st and st.verdict else None
        phases = dict(st.extra.get("phases") or {}) if st else {}
        seen = st.extra.get("seen_at") if st else None
        if seen and row.end_time:  # the poll's share: failure → the supervisor first saw it
            phases["noticed"] = round(max(0.0, seen - row.end_time), 2)
        fresh = ctx.history.get(rec.submission_id)
        if fresh is not None:
            fresh.pending_retry = None
            ctx.history.save(fresh)
        now = time.time()
        latency = round(now - row.end_time, 2) if row.end_time else None
        where = f" from {resume}" if resume else ""
        tail = " (found already submitted after a restart)" if recovered else ""
        return Decision(
            "retry",
            rec.submission_id,
            f"resubmitted as {new_id}, attempt {attempt}/{policy.retries + 1}{where}{tail}",
            details={
                "new_submission_id": new_id,
                "attempt": attempt,
                "of": policy.retries + 1,
                "resume_from": resume,
                "signature": signature,
                "failed_at": row.end_time,
                "submitted_at": now,
                "seconds_to_resubmit": latency,
                "notes": notes or [],
                "phases_s": phases,
            },
        )
