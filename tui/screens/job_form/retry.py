"""The job form's retry field: how many times the supervisor may retry a failed run (empty: the
profile's `retries:`), validated like `submit --retries` (tui/supervisor/policy.py) and kept on
the job's history record, or with a queued job until it is sent."""

from __future__ import annotations

from typing import Any

from textual.widgets import Input

from tui.supervisor.policy import RetryPolicy, parse_policy, record_policy, stash_policy


def retries_input() -> Input:
    box = Input(placeholder="retries", id="form-retries", restrict=r"[0-9]*", max_length=3)
    box.tooltip = (
        "retry a failed run this many times when its log shows a cluster failure (NCCL "
        "timeout, node lost, …), from its latest complete checkpoint; empty: the profile's "
        "retries:"
    )
    return box


def retry_policy(screen: Any) -> RetryPolicy | None:
    """The form's policy (ValueError, one line, for a bad value)."""
    profile = screen.profile
    try:
        text = screen.query_one("#form-retries", Input).value.strip()
    except Exception:  # not built yet
        text = ""
    retries = text or (profile.retries if profile is not None else None)
    retry_on = profile.retry_on if profile is not None else None
    return parse_policy(retries, retry_on if retries else None, where="retries")


def keep_policy(screen: Any, sid: str, policy: RetryPolicy | None, *, queued: bool) -> None:
    """On the submitted job's record, or stashed for the queued job's submission."""
    if queued:
        stash_policy(screen.cluster.inv.cluster, sid, policy)
    else:
        record_policy(screen.history, sid, policy)
