"""The supervisor's submissions go through the one validated path: a JobSpec is checked by
tui/jobs/pipeline.prepare_submission against Ray's live resources (verl's rules, the world-size
and per-node rules), then recorded and sent exactly as `verl-tui submit` does
(tui/jobs/service.record_then_post): the history record is written BEFORE the POST, with the
submission id chosen here, and a POST whose id the head already has counts as done. A
supervisor killed between the two sends that same id again, which Ray can accept at most
once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tui.jobs.service import record_for, record_then_post
from tui.jobs.submit import Submission
from tui.supervisor.duty import SubmitRejected

if TYPE_CHECKING:
    from tui.jobs.pipeline import JobSpec
    from tui.supervisor.duty import SupervisorContext


async def build_validated(ctx: SupervisorContext, spec: JobSpec) -> Submission:
    """The Submission of `spec`, checked against the live cluster; SubmitRejected with the
    report's errors otherwise."""
    return (await build_validated_report(ctx, spec))[0]


async def build_validated_report(ctx: SupervisorContext, spec: JobSpec) -> tuple[Submission, Any]:
    """build_validated, with the validation Report (its composed config)."""
    from tui.jobs.pipeline import prepare_submission, working_dir_size

    if "verl_source" not in ctx.extras:
        # Compose with the cluster's own verl (read from the head once), as `submit` does.
        from tui.jobs.verl_source import select_verl

        ctx.extras["verl_source"] = await select_verl(ctx.fleet, ctx.inv)
    resources = await ctx.live_resources()

    def build() -> tuple[Submission | None, Any]:
        wd_bytes, _skipped = working_dir_size(spec)
        return prepare_submission(ctx.inv, spec, resources, working_dir_bytes=wd_bytes)

    sub, report = await asyncio.to_thread(build)  # composing verl's config blocks
    if sub is None:
        raise SubmitRejected([str(p) for p in report.errors] or ["verl's config did not compose"])
    return sub, report


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
    sub = spec if isinstance(spec, Submission) else await build_validated(ctx, spec)
    if retry_policy is None:  # a queued job's `submit --queue --retries N`
        from tui.supervisor.policy import stashed_policy

        retry_policy = stashed_policy(ctx.inv.cluster, sub.submission_id)
    rec = ctx.history.get(sub.submission_id)  # a resend after a crash finds its record
    if rec is None:
        rec = record_for(sub, ctx.inv, profile_path=profile_path)
        rec.attempt, rec.retry_of, rec.retry_policy = attempt, retry_of, retry_policy
    return await record_then_post(ctx.dashboard, sub, ctx.history, rec)
