"""The job form's retry field: how many times the supervisor may retry a failed run (empty: the
profile's `retries:`), validated like `submit --retries` (tui/supervisor/policy.py) and kept on
the job's history record, or with a queued job until it is sent (tui/screens/job_form/submit.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Input

from tui.supervisor.policy import RetryPolicy, parse_policy

if TYPE_CHECKING:
    from tui.jobs.profiles import Profile


def retries_input() -> Input:
    box = Input(placeholder="retries", id="form-retries", restrict=r"[0-9]*", max_length=3)
    box.tooltip = (
        "retry a failed run this many times when its log shows a cluster failure (NCCL "
        "timeout, node lost, …), from its latest complete checkpoint; empty: the profile's "
        "retries:"
    )
    return box


def retry_policy(profile: Profile | None, text: str) -> RetryPolicy | None:
    """The form's policy from the retry field's text (empty: the profile's); ValueError, one
    line, for a bad value."""
    retries = text.strip() or (profile.retries if profile is not None else None)
    retry_on = profile.retry_on if profile is not None else None
    return parse_policy(retries, retry_on if retries else None, where="retries")
