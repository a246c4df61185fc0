"""The job form's side of the job preflight (tui/jobs/preflight.py): run on submit, its
failures and warnings shown on the fields (data/model paths) and in the problems box.

A failed preflight stops the submit; pressing submit again on the same config sends it anyway
(the form's --skip-preflight: the preflight can be wrong, e.g. a path only the job's user sees),
and says so."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from tui.fmt import plural
from tui.jobs.preflight import as_problems, needs_preflight, preflight_submission
from tui.jobs.rules_base import Problem
from tui.jobs.submit import Submission
from tui.jobs.validate import Report

_REFUSED = "_preflight_refused"  # on the form: the config hash a failed preflight refused


async def preflight_gate(form: Any, sub: Submission) -> bool:
    """True when `sub` may go: its preflight passed (warnings shown), it needs none, or the
    user pressed submit again after it failed for this same config."""
    if not needs_preflight(sub):
        return True
    if getattr(form, _REFUSED, None) == sub.config_hash:
        setattr(form, _REFUSED, None)
        form.notify("sent without the job preflight (submit pressed again)", severity="warning")
        return True
    hosts = len(form.cluster.inv.hosts)
    summary = form.query_one("#form-summary", Static)
    summary.update(Text(f"job preflight: asking {plural(hosts, 'host')}…", "bold cyan"))
    findings = await preflight_submission(form.cluster.fleet, form.cluster.inv, sub)
    problems = as_problems(findings)
    bad = [f for f in findings if f.status == "fail"]
    if bad:
        note = f"job preflight: {plural(len(bad), 'problem')}, not submitted (submit again: anyway)"
        problems.insert(0, Problem(None, note))
    if problems and form.report is not None and form.is_mounted:
        shown = Report([*form.report.problems, *problems], form.report.config)
        form._apply(shown, {})  # shown only: the form's own report (and submit) stays as is
    if not bad:
        return True
    setattr(form, _REFUSED, sub.config_hash)
    form.notify(
        f"not submitted: the job preflight found {plural(len(bad), 'problem')} (shown in the "
        "form); submit again to send it anyway",
        severity="error",
        timeout=10,
    )
    return False
