"""The supervisor's plug-in point. A Duty is called once per tick with one SupervisorContext and
returns what it decided; the supervisor records each Decision (the job's history) and hands it to
`ctx.notify`. Duties never talk to SSH or HTTP except through the context's cluster/fleet."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tui.supervisor.events import Decision
from tui.supervisor.submitting import submit_validated

if TYPE_CHECKING:
    from tui.cluster.dashboard import DashboardClient
    from tui.cluster.lock import LockOwner
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.rules import ClusterResources
    from tui.jobs.service import JobRow
    from tui.jobs.submit import Submission
    from tui.transport.fleet import Fleet


def _noop(decision: Decision) -> None:
    return None


@dataclass
class SupervisorContext:
    """What a duty may use. One per supervisor; the same object every tick."""

    inv: Inventory
    cluster: RayCluster  # .fleet (transports), .dashboard(), .status(), .bring_up()
    history: JobHistory
    state_dir: Path  # XDG state dir (tui.state.state_dir()); the queue keeps its files under it
    # Called with every Decision after it was recorded; may return an awaitable (awaited).
    # The notifier of the queue engineer replaces it; failures are the notifier's to report.
    notify: Callable[[Decision], Awaitable[None] | None] = _noop
    # Records a decision (in the job's history record when it names one; the supervisor's log
    # otherwise). Set by the supervisor; duties normally just return their decisions.
    record: Callable[[Decision], None] = _noop
    holder: LockOwner | None = None  # who this supervisor is (user@host pid since)
    # The submission function (tui/supervisor/submitting.py); replaceable in tests only.
    submitter: Callable[..., Awaitable[str]] | None = None
    extras: dict[str, Any] = field(default_factory=dict)  # duty-private state, by duty name
    # The head's jobs joined with history (tui/jobs/service.JobRow), read once at the start of
    # each tick by the supervisor: duties read it rather than asking the head again.
    jobs: list[JobRow] = field(default_factory=list)
    # Set by the supervisor: what `emit` does (record + notify + its printer / the cockpit).
    publish: Callable[[Decision], Awaitable[None]] | None = None

    @property
    def fleet(self) -> Fleet:
        return self.cluster.fleet

    async def dashboard(self) -> DashboardClient:
        """The head's dashboard, through the SSH tunnel."""
        return await self.cluster.dashboard()

    async def live_resources(self) -> ClusterResources:
        """Ray's alive nodes (tui/jobs/pipeline.live_resources): what the validator checks
        against. DashboardError / TransportError when Ray cannot be reached."""
        from tui.jobs.pipeline import live_resources

        return await live_resources(self.cluster)

    async def submit(
        self,
        spec: JobSpec | Submission,
        *,
        profile_path: str | None = None,
        retry_of: str | None = None,
        attempt: int = 1,
        retry_policy: dict[str, Any] | None = None,
    ) -> str:
        """Submit through the one validated path (tui/jobs/pipeline.prepare_submission against
        live resources, then tui/jobs/service's record + submit). A JobSpec is validated; a
        Submission (a raw command, a recorded job) is sent as built. The history record is
        written BEFORE the POST with the caller-chosen submission id (spec.submission_id or the
        Submission's), so a crash in between never sends a job twice. Returns the submission
        id. SubmitRejected when validation fails; DashboardError / TransportError /
        WorkdirError when sending fails."""
        fn = self.submitter or submit_validated
        return await fn(
            self,
            spec,
            profile_path=profile_path,
            retry_of=retry_of,
            attempt=attempt,
            retry_policy=retry_policy,
        )

    def running(self, watched: dict[str, Any]) -> list[JobRow]:
        """This pass's jobs RUNNING at the head; `watched` (a duty's state by submission id)
        loses the entries of every other job."""
        rows = [r for r in self.jobs if r.on_head and r.status == "RUNNING"]
        ids = {r.submission_id for r in rows}
        for sid in [sid for sid in watched if sid not in ids]:
            del watched[sid]
        return rows

    async def emit(self, decision: Decision) -> None:
        """Record and notify now (for a duty that must report before its tick ends)."""
        if self.publish is not None:  # the supervisor's: record, notify, print / show
            await self.publish(decision)
            return
        self.record(decision)
        result = self.notify(decision)
        if inspect.isawaitable(result):
            await result


class Duty(Protocol):
    """One thing the supervisor does each tick (retry, queue, …)."""

    name: str

    async def tick(self, ctx: SupervisorContext) -> list[Decision]: ...
