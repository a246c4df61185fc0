"""The job form's side of the one submission flow (tui/jobs/flow.py), as `verl-tui submit` and the
queue run it: the live cluster asked again, the pipeline, the job preflight, then sent (or queued
with the Queue switch). FormSubmission only renders the flow's steps and its outcome on the form
and decides what the user's next press means.

The job preflight's failures and warnings land on the fields (data/model paths) and in the
problems box; a refusal stays on the submit bar, naming the failing checks, until the user
changes something or re-checks (ctrl+r). Pressing submit again on the same config sends it
anyway (the flow's `asked_again`: the preflight can be wrong, e.g. a path only the job's user
sees), and says so."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from tui.cluster.doctor.findings import Finding
from tui.fmt import plural
from tui.jobs.flow import (
    Checked,
    Checking,
    ClusterRead,
    Outcome,
    PreflightDone,
    PreflightSkipped,
    Queued,
    Refusal,
    Refused,
    Request,
    Step,
    Submitted,
    outcome,
    submission_flow,
)
from tui.jobs.pipeline import live_resources
from tui.jobs.preflight import as_problems
from tui.jobs.rules_base import Problem
from tui.jobs.validate import Report
from tui.sanitize import markup, one_line
from tui.screens.job_form.cluster import RAY_NOT_RUNNING
from tui.screens.job_form.retry import keep_policy, retry_policy

if TYPE_CHECKING:
    from tui.screens.job_form.screen import JobFormScreen

NAMED_CHECKS = 3  # failing checks named on the submit bar (the rest counted)


def _failures(findings: Sequence[Finding]) -> int:
    return sum(1 for f in findings if f.status == "fail")


def preflight_problems(findings: Sequence[Finding], *, refused: bool) -> list[Problem]:
    """The preflight's rows as the form's Problems (a path's on its field), led by a line
    saying it refused the submit."""
    problems = as_problems(findings)
    bad = _failures(findings)
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
    """One form's submissions: runs the flow on what the form shows and renders it there."""

    def __init__(self, form: JobFormScreen) -> None:
        self.form = form
        self.shown: list[Problem] = []  # the last preflight's rows, on the fields
        self.refusal: Refused | None = None  # a preflight refusal that still stands
        self.refused_configs: tuple[str, ...] = ()  # submit again on one: sent anyway

    async def run(self) -> None:
        form = self.form
        form.query_one("#form-summary", Static).update(Text("submitting…", "bold cyan"))
        secrets = form._secret_values()
        if secrets is None:
            return
        try:
            policy = retry_policy(form)
        except ValueError as exc:
            form.notify(f"not submitted: {markup(exc)}", severity="error", timeout=8)
            return
        texts, toggles, unknown = form.texts(), form.toggles, form.empty_unknown()
        spec, local = await asyncio.to_thread(form.spec_of, texts, toggles, unknown, secrets)
        if local:  # a field's own parse problem: fixed here first
            form.show_report(form.report or Report([], None), local)
            form.refused()
            return
        request = Request(
            spec,
            mode="queue" if form.queue_wanted else "send",
            asked_again=self.refused_configs,
            profile_path=str(form.profile_path.resolve()),
            retry_policy=policy.to_json() if policy else None,  # on the record before the POST
            before_queue=lambda sub: keep_policy(form, sub.submission_id, policy, queued=True),
            working_dir_bytes=form.wd_bytes,
        )
        want = toggles.post_mortem
        steps = submission_flow(
            form.cluster.inv,
            form.cluster,
            form.history,
            request,
            resources=lambda: live_resources(form.cluster, want_debugpy=want),
        )
        self.clear()
        await self.finish(await outcome(steps, self.step))

    def step(self, step: Step) -> None:
        form = self.form
        if isinstance(step, ClusterRead) and step.resources is not None:
            form.use_live(step.resources, probed_debugpy=form.toggles.post_mortem)
        elif isinstance(step, Checked) and step.reports[0] is not None:
            form.show_report(step.reports[0], {})
        elif isinstance(step, Checking) and step.stage == "preflight":
            text = f"job preflight: asking {plural(step.hosts, 'host')}…"
            form.query_one("#form-summary", Static).update(Text(text, "bold cyan"))
        elif isinstance(step, PreflightDone) and step.findings:
            self.shown = preflight_problems(step.findings, refused=False)
        elif isinstance(step, PreflightSkipped):
            self.refused_configs = ()
            form.notify("sent without the job preflight (submit pressed again)", severity="warning")

    async def finish(self, done: Outcome) -> None:
        form = self.form
        if isinstance(done, (Submitted, Queued)):
            if form.drafts is not None:
                await asyncio.to_thread(form.drafts.discard)
            if isinstance(done, Queued):
                (run,) = done.placed
                sid, needs = run.sub.submission_id, run.entry.needs.describe()
                what = f"queued {markup(sid)} at position {run.position:d} (needs {markup(needs)})"
            else:
                sid = done.submission_id
                what = f"submitted {markup(sid)}"
            form.notify(what, timeout=6)
            form.dismiss(sid)
            return
        assert isinstance(done, Refused)
        if done.kind is Refusal.INVALID:
            if done.report is not None:
                form.show_report(done.report, {})
            form.refused()
        elif done.kind is Refusal.PREFLIGHT:
            self.refusal, self.refused_configs = done, done.config_hashes
            self.shown = preflight_problems(done.findings, refused=True)
            form.show_again()
            bad = plural(_failures(done.findings), "problem")
            form.notify(
                f"not submitted: the job preflight found {bad} (shown in the form); submit "
                "again to send it anyway",
                severity="error",
                timeout=10,
            )
        elif done.kind is Refusal.RAY_DOWN:
            form.use_planned(RAY_NOT_RUNNING)
            form.notify(f"not submitted: {RAY_NOT_RUNNING}", severity="error", timeout=8)
        elif done.kind is Refusal.OUTCOME_UNKNOWN:  # sent, no answer: the form stays
            form.notify(markup(done.reason), severity="warning", timeout=15)
        else:
            lead = "not queued" if done.kind is Refusal.NOT_QUEUED else "not submitted"
            why = done.text() if done.kind is Refusal.UNREACHABLE else done.detail
            form.notify(f"{lead}: {markup(why)}", severity="error", timeout=8)

    def clear(self) -> None:
        """Something changed (or ctrl+r): the last preflight's rows and refusal go."""
        if self.refusal is None and not self.shown:
            return
        self.refusal, self.shown = None, []
        self.form.show_again()
