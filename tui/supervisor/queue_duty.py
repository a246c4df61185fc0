"""The queue's duty: each tick, start the queued jobs that Ray's free resources hold, in queue
order (priority, then FIFO; `queue --move` reorders), through the supervisor's one validated
submission path (ctx.submit: the history record is written before the POST).

- The head of the queue waits while the free GPUs/CPUs per node do not hold it (the
  validator's own rule, rules_runtime._cluster_rules, on Ray's *available* resources); the
  entries behind it wait too (no overtaking: a large job is never starved by small ones).
- An entry that cannot start on the cluster as it is (more GPUs than Ray has in total: the
  cluster shrank; a secret not set in this process's environment) is kept with the reason and
  skipped, so it does not block the rest.
- Crash safety: an entry is marked `starting` (with its submission id, chosen when it was
  queued) before anything is sent. A supervisor killed mid-submit finds it so, asks the head
  whether that id is there, and only sends it when it is not; Ray accepts an id at most once.
- A job just started keeps its needs reserved (queue.SETTLE_S, or until it ends): Ray counts
  verl's placement groups only once they are created, and its usage report lags behind.
"""

from __future__ import annotations

import time
from typing import Any

from tui.cluster.dashboard import TERMINAL, DashboardError
from tui.fmt import duration
from tui.jobs.queue import (
    JobQueue,
    QueueEntry,
    QueueError,
    free_after,
    free_resources,
    submission_of,
)
from tui.jobs.queue_shared import AnyQueue, as_async, cluster_queue
from tui.jobs.rules_base import ClusterResources
from tui.jobs.secrets import MissingSecret
from tui.jobs.workdir import WorkdirError
from tui.supervisor.duty import SupervisorContext
from tui.supervisor.events import Decision
from tui.supervisor.submitting import SubmitRejected
from tui.transport.types import TransportError


def waiting_text(entry: QueueEntry, free: ClusterResources) -> str:
    """Why the head of the queue waits: what it needs, what Ray has free per node now."""
    nodes = ", ".join(f"{n.host} {n.gpus:g} GPU/{n.cpus:g} CPU" for n in free.nodes[:8])
    more = f" (+{len(free.nodes) - 8} nodes)" if len(free.nodes) > 8 else ""
    return (
        f"waiting for free resources: needs {entry.needs.describe()}; free now: "
        f"{nodes or 'no node'}{more}"
    )


def queue_of(ctx: SupervisorContext, on_notice: Any = None) -> AnyQueue:
    """The cluster's shared queue on its head: every user's entries (tui/jobs/queue_shared.py)."""
    return cluster_queue(ctx.inv, ctx.cluster.fleet, on_notice=on_notice)


class QueueDuty:
    name = "queue"

    def __init__(self, queue: AnyQueue | JobQueue | None = None) -> None:
        self._queue = as_async(queue) if queue is not None else None
        self._notices: list[str] = []  # the one-time move of an old local queue, said here
        self._unread: str | None = None  # why the queue could not be read (said once)

    async def tick(self, ctx: SupervisorContext) -> list[Decision]:
        queue = self._queue or queue_of(ctx, self._notices.append)
        out: list[Decision] = []
        try:
            entries = await queue.entries()
            started = await queue.started() if not entries else []
        except OSError as exc:  # the head's queue unreachable or damaged: said when it changes
            why = f"the cluster's queue cannot be read: {exc}"
            if why != self._unread:
                self._unread = why
                out.append(Decision("error", None, why))
            return out
        self._unread = None
        out += [Decision("queue-wait", None, text) for text in self._notices]
        self._notices.clear()
        if not entries and not started:
            return out  # nothing to do: Ray is not even asked
        try:
            await self._pass(ctx, queue, entries, out)
        except (DashboardError, TransportError) as exc:
            # Ray down or the head unreachable: said once on the head of the queue (the
            # reason is kept), not an error every tick.
            left = await queue.entries()
            if left:
                await self._wait(queue, left[0], f"Ray is not reachable: {exc}", out)
        return out

    async def _pass(
        self,
        ctx: SupervisorContext,
        queue: AnyQueue,
        entries: list[QueueEntry],
        out: list[Decision],
    ) -> None:
        client = await ctx.dashboard()
        reserved = await self._reservations(queue, client)
        entries = [e for e in entries if not await self._recovered(ctx, queue, e, out)]
        if not entries:
            return
        total = await ctx.live_resources()
        free = await free_resources(client, ctx.inv)
        if free is None:
            await self._wait(queue, entries[0], "Ray's resource report is not there yet", out)
            return
        free = free_after(free, reserved)
        for entry in entries:
            blocked = self._cannot_start(ctx, entry, total)
            if blocked:
                await self._wait(queue, entry, blocked, out, blocked=True)
                continue
            if entry.needs.problems(free):
                await self._wait(queue, entry, waiting_text(entry, free), out)
                break  # the head of the queue waits; nothing overtakes it
            if not await self._start(ctx, queue, entry, out):
                break
            free = free_after(free, [entry.needs])

    # -- steps -----------------------------------------------------------------------------

    async def _reservations(self, queue: AnyQueue, client: Any) -> list[Any]:
        """Needs of recently started jobs that are still on their way (ended ones released)."""
        started = await queue.started()
        ended = set()
        for s in started:
            try:
                job = await client.job_info(s.submission_id)
            except DashboardError:
                continue  # not known yet (or a hiccup): keep it reserved
            if job["status"] in TERMINAL:
                ended.add(s.submission_id)
        if ended:
            await queue.release(ended)
        return [s.needs for s in started if s.submission_id not in ended]

    async def _recovered(
        self, ctx: SupervisorContext, queue: AnyQueue, entry: QueueEntry, out: list[Decision]
    ) -> bool:
        """An entry left `starting` by a supervisor that died: done when the head has its id
        (True), else back in line as it was (False)."""
        if entry.state != "starting":
            return False
        client = await ctx.dashboard()
        if await client.job_exists(entry.submission_id):
            await queue.finish_start(entry.submission_id, entry.needs)
            self._tag(ctx, entry)
            out.append(
                Decision(
                    "queue-start",
                    entry.submission_id,
                    "found on the head after a restart: it was submitted (not sent again)",
                    details=self._details(entry),
                )
            )
            return True
        await queue.update(entry.submission_id, state="queued", started_at=None)
        entry.state = "queued"
        return False

    def _cannot_start(
        self, ctx: SupervisorContext, entry: QueueEntry, total: ClusterResources
    ) -> str | None:
        problems = entry.needs.problems(total)
        if problems:
            return "cannot start on this cluster now: " + problems[0].message
        try:
            submission_of(entry, ctx.inv)
        except MissingSecret as exc:
            names = ", ".join(f"${n}" for n in exc.names)
            return f"secret {names} is not set in the supervisor's environment"
        return None

    async def _wait(
        self,
        queue: AnyQueue,
        entry: QueueEntry,
        reason: str,
        out: list[Decision],
        *,
        blocked: bool = False,
    ) -> None:
        """Keep the entry with its reason; a decision only when the reason changed (a tick
        every few seconds must not repeat it)."""
        if entry.reason == reason and entry.blocked == blocked:
            return
        await queue.update(entry.submission_id, reason=reason, blocked=blocked)
        out.append(
            Decision("queue-wait", entry.submission_id, reason, details=self._details(entry))
        )

    async def _start(
        self, ctx: SupervisorContext, queue: AnyQueue, entry: QueueEntry, out: list[Decision]
    ) -> bool:
        marked = await queue.begin_start(entry.submission_id)
        if marked is None:
            return True  # cancelled meanwhile: the next one may go
        try:
            sub = submission_of(entry, ctx.inv)
            # The entry's own retry policy, whoever queued it (an older version's, kept in
            # the account's state, was moved onto the entry: policy.migrate_policies).
            sid = await ctx.submit(
                sub, profile_path=entry.profile_path, retry_policy=entry.retry_policy
            )
        except (
            SubmitRejected,
            DashboardError,
            TransportError,
            WorkdirError,
            MissingSecret,
            OSError,
        ) as exc:
            await queue.update(
                entry.submission_id,
                state="queued",
                started_at=None,
                reason=f"submit failed: {exc}",
            )
            out.append(
                Decision(
                    "error",
                    entry.submission_id,
                    f"queued job not submitted: {exc}",
                    details=self._details(entry),
                )
            )
            return False
        # The job is on the head: a queue file or record that cannot be written now (a full
        # disk: StateError is an OSError) is said, and the next tick settles the entry from
        # the head's list (a "starting" entry found there is finished, never sent again).
        try:
            await queue.finish_start(sid, entry.needs)
            self._tag(ctx, entry)
        except (QueueError, OSError) as exc:
            out.append(Decision("error", sid, f"submitted, but the queue not updated: {exc}"))
        waited = duration(time.time() - entry.queued_at)
        size = f" ({entry.needs.describe()})" if entry.needs.nnodes else ""
        out.append(
            Decision(
                "queue-start",
                sid,
                f"submitted from the queue after {waited}{size}",
                details=self._details(entry),
            )
        )
        return True

    def _tag(self, ctx: SupervisorContext, entry: QueueEntry) -> None:
        """The sweep/queue tags onto the job's history record."""
        rec = ctx.history.get(entry.submission_id)
        if rec is not None and entry.tags:
            rec.tags = {**(rec.tags or {}), **entry.tags}
            ctx.history.save(rec)

    @staticmethod
    def _details(entry: QueueEntry) -> dict[str, Any]:
        return {
            "profile": entry.profile,
            "priority": entry.priority,
            "group": entry.group,
            "tags": dict(entry.tags),
            "queued_at": entry.queued_at,
            "owner": entry.owner,
            "needs": {
                "nnodes": entry.needs.nnodes,
                "gpus_per_node": entry.needs.gpus_per_node,
                "gpus": entry.needs.gpus,
            },
        }
