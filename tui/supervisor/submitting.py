"""The supervisor's submissions go through the one submission flow (tui/jobs/flow.py), as the
form's and `verl-tui submit`'s do: a JobSpec is checked against Ray's live resources (verl's
rules, the world-size and per-node rules), then recorded and sent (the history record BEFORE
the POST, with the submission id chosen here). It asks for `resend`: a POST whose id the head
already has counts as done, and a supervisor killed between record and POST sends that same
id again, which Ray accepts at most once. It runs no job preflight: a queued job passed it when
it was queued, a retry runs what ran before.

The flow's refusals become SubmitRejected (verl's rules, the cluster) or the error that failed
the send (DashboardError, TransportError, WorkdirError, StateError), which the duties handle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tui.errors import VerlTuiError
from tui.jobs.flow import Ready, Refusal, Refused, Request, Submitted, outcome, submission_flow
from tui.jobs.submit import Submission

if TYPE_CHECKING:
    from tui.cluster.dashboard import DashboardClient
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.rules import ClusterResources
    from tui.transport.fleet import Fleet


class SupervisorContext(Protocol):
    """What a submission needs of the supervisor's context (tui/supervisor/duty.py's, which
    imports this module: typed here by what is used, not by importing it back)."""

    inv: Inventory
    cluster: RayCluster
    history: JobHistory
    extras: dict[str, Any]

    @property
    def fleet(self) -> Fleet: ...

    async def dashboard(self) -> DashboardClient: ...

    async def live_resources(self) -> ClusterResources: ...


class SubmitRejected(VerlTuiError, title="submission refused", kind="bad_input"):
    """The validated submission path refused the job (verl's rules or the live cluster);
    `problems` are the report's one-line messages, `key: message`."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems) or "rejected")


NO_PREFLIGHT = "the supervisor sends what was checked when it was queued or first ran"


def rejected(refused: Refused) -> BaseException:
    """The flow's refusal as the duties know it."""
    if refused.kind in (Refusal.INVALID, Refusal.PREFLIGHT, Refusal.ID_TAKEN):
        problems = [str(p) for p in refused.problems] or [refused.text()]
        return SubmitRejected(problems)
    return refused.error or SubmitRejected([refused.text()])


async def _run(ctx: SupervisorContext, request: Request) -> Any:
    if not isinstance(request.job, Submission) and "verl_source" not in ctx.extras:
        # Compose with the cluster's own verl (read from the head once), as `submit` does.
        from tui.jobs.verl_source import select_verl

        ctx.extras["verl_source"] = await select_verl(ctx.fleet, ctx.inv)
    steps = submission_flow(
        ctx.inv,
        ctx.cluster,
        ctx.history,
        request,
        resources=ctx.live_resources,
        dashboard=ctx.dashboard,  # the context's: what the duties (and their tests) reach
    )
    done = await outcome(steps)
    if isinstance(done, Refused):
        raise rejected(done)
    return done


async def build_validated(ctx: SupervisorContext, spec: JobSpec) -> Submission:
    """The Submission of `spec`, checked against the live cluster; SubmitRejected with the
    report's errors otherwise."""
    return (await build_validated_report(ctx, spec))[0]


async def build_validated_report(ctx: SupervisorContext, spec: JobSpec) -> tuple[Submission, Any]:
    """build_validated, with the validation Report (its composed config)."""
    ready = await _run(ctx, Request(spec, mode="check"))
    assert isinstance(ready, Ready)
    return ready.subs[0], ready.reports[0]


async def on_head(ctx: SupervisorContext, sid: str) -> bool:
    """Whether the head knows submission `sid` (a 404 is no)."""
    client = await ctx.dashboard()
    return await client.job_exists(sid)


async def submit_validated(
    ctx: SupervisorContext,
    spec: JobSpec | Submission,
    *,
    profile_path: str | None = None,
    retry_of: str | None = None,
    attempt: int = 1,
    retry_policy: dict[str, Any] | None = None,
) -> str:
    request = Request(
        spec,
        skip_preflight=True,
        skip_why=NO_PREFLIGHT,
        profile_path=profile_path,
        retry_policy=retry_policy,
        resend=True,
        attempt=attempt,
        retry_of=retry_of,
    )
    done = await _run(ctx, request)
    assert isinstance(done, Submitted)
    return done.submission_id
