"""The preflight that knows the job: what one verl config needs of every host — its data and
model paths, the HF models it would download, the modules verl's code path imports for it, and
the host limits it meets (/dev/shm, open files, disk for Ray's temp dir and the checkpoints,
node names) — asked of all hosts in parallel over SSH (tui/remote/job_preflight.py), answered
as doctor Findings (ok / warn / fail, one line, a fix).

One home: `verl-tui check --profile` and every submission (the submission flow's preflight
gate, tui/jobs/flow.py) call this package: needs.py (what the config needs, no host asked),
imports.py (the modules verl's code path imports, read from its source), hosts.py (asking every
host) and evaluate.py (the answers as findings).

Why per host: verl's TaskRunner is a Ray actor that may land on any node; it resolves
``${oc.env:…}`` there and opens the data and the model there.
"""

from tui.jobs.preflight.evaluate import evaluate_answers
from tui.jobs.preflight.hosts import ask_hosts, preflight_submission, run_preflight
from tui.jobs.preflight.needs import (
    DEFAULT_TIMEOUT,
    JobNeeds,
    PreflightFailed,
    as_problems,
    classify_value,
    configs_for,
    failed,
    job_needs,
    needs_for,
    needs_for_profile,
    needs_preflight,
    problem_findings,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "JobNeeds",
    "PreflightFailed",
    "as_problems",
    "ask_hosts",
    "classify_value",
    "configs_for",
    "evaluate_answers",
    "failed",
    "job_needs",
    "needs_for",
    "needs_for_profile",
    "needs_preflight",
    "preflight_submission",
    "problem_findings",
    "run_preflight",
]
