"""The supervisor loop: the one code path behind `verl-tui watch` and the cockpit's background
task. Each tick it renews its lease on the head (only the holder acts), reads the jobs once
(head list joined with history: `ctx.jobs`), calls every duty in order, and for each Decision a
duty returns: records it (the job's history record, bounded, and the supervisor's own log under
the state dir), then hands it to `ctx.notify` and to `on_decision` (the printer / the UI).
A duty that raises becomes an "error" decision; the loop goes on."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tui.cluster.dashboard import DashboardError
from tui.cluster.lock import LockOwner
from tui.sanitize import one_line
from tui.state import (
    StateError,
    atomic_write_json,
    atomic_write_text,
    open_append,
    read_state_json,
    read_state_jsonl,
    read_state_text,
    state_path,
    writing,
)
from tui.supervisor.duty import Duty, SupervisorContext
from tui.supervisor.events import Decision
from tui.supervisor.lease import LEASE_TTL_S, HeadLease, LeaseHeld, supervised_by
from tui.transport.types import TransportError

DEFAULT_INTERVAL_S = 10.0
LOG_MAX_BYTES = 1 << 20  # the supervisor's own log is cut to its newer half past this


def default_duties(ctx: SupervisorContext) -> list[Duty]:
    """Every duty, in tick order: job ends first (their decisions precede a retry's), then
    stalls (a stalled job stopped for a retry is retried next pass)."""
    from tui.supervisor.ends import EndsDuty
    from tui.supervisor.health_duty import HealthDuty
    from tui.supervisor.queue_duty import QueueDuty
    from tui.supervisor.retry import RetryDuty
    from tui.supervisor.stall_duty import StallDuty

    duties: list[Duty] = [EndsDuty(), StallDuty(), HealthDuty(), RetryDuty(), QueueDuty()]
    return duties


def supervisor_dir(ctx: SupervisorContext) -> Path:
    return state_path("supervisor", ctx.inv.cluster, root=ctx.state_dir / "supervisor")


class DecisionLog:
    """The supervisor's decisions as JSON lines (jobs' records hold theirs too); read by the
    cockpit for decisions that name no job, and by `watch` for nothing: it is for people."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, d: Decision) -> None:
        """One line appended (StateError naming the folder when it cannot be written)."""
        fd = open_append(self.path)  # a FIFO or a folder there: StateError, never a wait
        with writing(self.path.parent), os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(d.to_json()) + "\n")
            f.flush()
            size = os.fstat(fd).st_size
        if size > LOG_MAX_BYTES:
            text = read_state_text(self.path, max_bytes=2 * LOG_MAX_BYTES) or ""
            atomic_write_text(self.path, "\n".join(text.splitlines()[-2000:]) + "\n")

    def tail(self, n: int = 50) -> list[Decision]:
        """The newest `n` decisions; StateError naming the file (and line) when it is damaged."""
        docs = read_state_jsonl(self.path, max_bytes=2 * LOG_MAX_BYTES) or []
        return [d for d in map(Decision.from_json, docs[-n:]) if d is not None]


class Supervisor:
    def __init__(
        self,
        ctx: SupervisorContext,
        duties: list[Duty] | None = None,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        lease: HeadLease | None = None,
        on_decision: Callable[[Decision], Any] | None = None,
    ):
        self.ctx = ctx
        self.interval = interval
        # The lease outlives a few missed heartbeats (a slow tick), never many.
        self.lease = lease or HeadLease(ctx.inv, ctx.fleet, ttl=max(LEASE_TTL_S, 3 * interval))
        self.duties: list[Duty] = list(duties) if duties is not None else default_duties(ctx)
        self.on_decision = on_decision
        self.log = DecisionLog(supervisor_dir(ctx) / "decisions.jsonl")
        self.recent: deque[Decision] = deque(maxlen=200)
        self.holder: LockOwner | None = None  # another supervisor holding the cluster
        self.acting = False
        self.waiting_for: str | None = None  # why the duties did not run last tick
        self._log_unread: str | None = None  # why the shared event log was not read (once)
        self.ticks = 0
        self._wake = asyncio.Event()
        ctx.record = self.record
        ctx.publish = self._publish
        ctx.holder = self.lease.owner
        self._state = self._load_state()
        ctx.extras["first_started"] = self.first_started

    # -- state kept across restarts ----------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        path = supervisor_dir(self.ctx) / "state.json"
        doc = read_state_json(path, max_bytes=1 << 16)
        if doc is None:
            doc = {"first_started": time.time()}
            atomic_write_json(path, doc)
        elif not isinstance(doc, dict) or not isinstance(doc.get("first_started"), (int, float)):
            raise StateError(f"{path}: damaged (no first_started time); fix or move it away")
        return doc

    @property
    def first_started(self) -> float:
        """When a supervisor first watched this cluster from this machine: jobs that ended
        before are history, not news."""
        return float(self._state["first_started"])

    # -- decisions ---------------------------------------------------------------------------

    def add_duty(self, duty: Duty) -> None:
        self.duties.append(duty)

    def record(self, d: Decision) -> None:
        # A full disk (or a damaged record: StateError is an OSError) must not stop the
        # supervisor: the decision is still shown and sent.
        if d.submission_id:
            with contextlib.suppress(OSError):
                self.ctx.history.add_decision(d.submission_id, d.to_json())
        with contextlib.suppress(OSError):
            self.log.append(d)
        self.recent.append(d)

    async def _publish(self, d: Decision) -> None:
        self.record(d)
        for fn in (self.ctx.notify, self.on_decision):
            if fn is None:
                continue
            try:
                result = fn(d)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # a notifier's failure is shown, never fatal
                err = Decision("error", d.submission_id, f"notify failed: {exc}")
                self.recent.append(err)
                if self.on_decision is not None and fn is not self.on_decision:
                    self.on_decision(err)

    # -- the lease ---------------------------------------------------------------------------

    async def acquire(self) -> None:
        """Take the cluster (LeaseHeld naming the holder; TransportError: head unreachable)."""
        await self.lease.acquire()  # the first tick says "supervising as …"

    async def _renew(self) -> list[Decision]:
        was = self.acting
        try:
            await self.lease.acquire()
        except LeaseHeld as exc:
            self.acting, self.holder = False, exc.owner
            if was:
                return [Decision("lock", None, f"lost the cluster: {exc}")]
            return []
        except (TransportError, OSError) as exc:
            # Nobody can act on a head we cannot reach; keep our claim (it expires by itself).
            self.acting = False
            return [Decision("error", None, f"head unreachable, not acting: {exc}")] if was else []
        self.acting, self.holder = True, None
        if not was:
            owner = self.lease.owner
            return [
                Decision(
                    "lock",
                    None,
                    f"supervising as {owner.user}@{owner.host} (pid {owner.pid})",
                    details={"holder": owner.to_json()},
                )
            ]
        return []

    def supervised_by(self) -> str | None:
        """ "supervised by user@host (pid)" while another supervisor acts; None otherwise."""
        return None if self.acting else (supervised_by(self.holder) if self.holder else None)

    # -- the loop ----------------------------------------------------------------------------

    async def tick(self) -> list[Decision]:
        self.ticks += 1
        out = await self._renew()
        for d in out:  # at once: "supervising as …" must not wait for a slow pass
            await self._publish(d)
        if self.acting:
            done = await self._run_duties()
            for d in done:
                await self._publish(d)
            out += done
        out += await self._catch_up()
        return out

    async def _catch_up(self) -> list[Decision]:
        """This account's jobs' events from the cluster's shared log, whoever acted
        (tui/supervisor/event_log.py), to this account's notify targets: every tick, while
        acting or standing by."""
        catch_up = getattr(self.ctx.notify, "catch_up", None)
        if catch_up is None:
            return []
        try:
            await catch_up()
        except (TransportError, OSError) as exc:
            why = f"the cluster's event log cannot be read: {one_line(str(exc), 300)}"
            if why == self._log_unread:
                return []
            self._log_unread = why
            d = Decision("error", None, why)
            await self._publish(d)
            return [d]
        self._log_unread = None
        return []

    async def _run_duties(self) -> list[Decision]:
        from tui.jobs.service import list_jobs

        ctx = self.ctx
        try:
            ctx.jobs = await list_jobs(ctx.cluster, ctx.history)
        except (DashboardError, TransportError, OSError) as exc:
            # Ray down is a normal state (before `up`, after `down`): nothing to act on, and
            # nothing to announce; the reason is kept for whoever shows the supervisor.
            ctx.jobs = []
            said = self.waiting_for is not None
            self.waiting_for = f"Ray is not reachable: {one_line(str(exc), 200)}"
            # Said once per outage (`watch` prints it; the cockpit shows no "waiting" line).
            return [] if said else [Decision("waiting", None, f"not acting: {self.waiting_for}")]
        self.waiting_for = None
        out: list[Decision] = []
        for duty in self.duties:
            try:
                out += await duty.tick(ctx)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one duty's bug must not stop the others
                out.append(Decision("error", None, f"{duty.name}: {type(exc).__name__}: {exc}"))
        return out

    def wake(self) -> None:
        """Tick now (a job was just submitted, a key was pressed)."""
        self._wake.set()

    async def run(self, *, once: bool = False, stop: asyncio.Event | None = None) -> None:
        """Tick every `interval` until `stop` is set (or once). The caller takes the lease
        first where refusing matters (`watch`); the cockpit just starts this and stands by
        while another supervisor acts."""
        while True:
            await self.tick()
            if once or (stop is not None and stop.is_set()):
                return
            self._wake.clear()
            waits = [asyncio.ensure_future(self._wake.wait())]
            if stop is not None:
                waits.append(asyncio.ensure_future(stop.wait()))
            _done, pending = await asyncio.wait(
                waits, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED
            )
            for t in (*_done, *pending):
                t.cancel()
            if stop is not None and stop.is_set():
                return

    async def close(self) -> None:
        """Give the cluster back (another supervisor may take it at once)."""
        self.acting = False
        await self.lease.release()
