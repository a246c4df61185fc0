"""The job form's side of the one submission flow (tui/jobs/flow.py), as `verl-tui submit` and the
queue run it: the live cluster asked again, the pipeline, the job preflight, then sent (or queued
with the Queue switch). FormSubmission runs it and keeps what the user's next press means; the
form renders its steps and outcome.

The job preflight's failures and warnings land on the fields (data/model paths) and in the
problems box; a refusal stays on the submit bar, naming the failing checks, until the user
changes something or re-checks (ctrl+r). Pressing submit again on the same config sends it
anyway (the flow's `asked_again`: the preflight can be wrong, e.g. a path only the job's user
sees), and says so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.text import Text

from tui.cluster.doctor.findings import Finding
from tui.fmt import plural
from tui.jobs.flow import (
    Outcome,
    PreflightDone,
    PreflightSkipped,
    Refusal,
    Refused,
    Request,
    Step,
    outcome,
    submission_flow,
)
from tui.jobs.pipeline import live_resources
from tui.jobs.preflight import as_problems
from tui.jobs.rules_base import Problem
from tui.sanitize import one_line

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec
    from tui.supervisor.policy import RetryPolicy

NAMED_CHECKS = 3  # failing checks named on the submit bar (the rest counted)


def preflight_problems(findings: Sequence[Finding], *, refused: bool) -> list[Problem]:
    """The preflight's rows as the form's Problems (a path's on its field), led by a line
    saying it refused the submit."""
    problems = as_problems(findings)
    bad = failures(findings)
    if refused and bad:
        note = f"job preflight: {plural(bad, 'problem')}, not submitted (submit again: anyway)"
        problems.insert(0, Problem(None, note))
    return problems


def refusal_bar(refused: Refused) -> Text:
    """The submit bar while a preflight refusal stands: which checks failed, what next."""
    checks = refused.failing_checks
    named = ", ".join(checks[:NAMED_CHECKS])
    if len(checks) > NAMED_CHECKS:
        named += f" (+{len(checks) - NAMED_CHECKS} more)"
    text = one_line(f"not submitted: the job preflight failed: {named or refused.detail}", 400)
    bar = Text(text, "bold red")
    bar.append(" — ctrl+s again sends it anyway; edit a field or ctrl+r re-checks", "dim")
    return bar


class FormSubmission:
    """One form's submissions: the flow run on what the form gathered, and what stands after
    it: the last preflight's rows (shown on the fields), a preflight refusal (on the submit
    bar), the configs a second press sends anyway. The form renders each step and outcome."""

    def __init__(self, cluster: RayCluster, history: JobHistory) -> None:
        self.cluster = cluster
        self.history = history
        self.shown: list[Problem] = []  # the last preflight's rows, on the fields
        self.refusal: Refused | None = None  # a preflight refusal that still stands
        self.refused_configs: tuple[str, ...] = ()  # submit again on one: sent anyway

    async def run(
        self,
        spec: JobSpec,
        *,
        queue: bool,
        profile_path: str,
        policy: RetryPolicy | None,
        working_dir_bytes: int | None,
        on_step: Callable[[Step], None],
    ) -> Outcome:
        """The one submission flow against the live cluster (asked again), sent or queued."""
        request = Request(
            spec,
            mode="queue" if queue else "send",
            asked_again=self.refused_configs,
            profile_path=profile_path,
            retry_policy=policy.to_json() if policy else None,  # on the record before the POST
            working_dir_bytes=working_dir_bytes,
        )
        want = bool(spec.post_mortem)
        steps = submission_flow(
            self.cluster.inv,
            self.cluster,
            self.history,
            request,
            resources=lambda: live_resources(self.cluster, want_debugpy=want),
        )

        def step(step: Step) -> None:
            if isinstance(step, PreflightDone) and step.findings:
                self.shown = preflight_problems(step.findings, refused=False)
            elif isinstance(step, PreflightSkipped):
                self.refused_configs = ()
            on_step(step)

        done = await outcome(steps, step)
        if isinstance(done, Refused) and done.kind is Refusal.PREFLIGHT:
            self.refusal, self.refused_configs = done, done.config_hashes
            self.shown = preflight_problems(done.findings, refused=True)
        return done

    def clear(self) -> bool:
        """Something changed (or ctrl+r): the last preflight's rows and refusal go. True when
        there was something shown to take away."""
        if self.refusal is None and not self.shown:
            return False
        self.refusal, self.shown = None, []
        return True


def failures(findings: Sequence[Finding]) -> int:
    return sum(1 for f in findings if f.status == "fail")
