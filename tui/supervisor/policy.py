"""A job's retry policy: how many retries, on which failures. Given with `submit --retries N
[--retry-on SIG,…]`, a profile's `retries:`/`retry_on:` or the job form's field; inherited by
each retry. Its home is the cluster's head (tui/jobs/queue_shared.py: a queued entry carries
it, a sent job's is in `policies.json`), so any user's supervisor retries any user's job; where
there is no remote head, the job's history record (`retry_policy`). An account's policies from
before are moved to the head once (`migrate_policies`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tui.logs.retriable import RETRIABLE_KEYS, check_retry_on

MAX_RETRIES = 100


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 0
    retry_on: tuple[str, ...] = RETRIABLE_KEYS

    def to_json(self) -> dict[str, Any]:
        return {"retries": self.retries, "retry_on": list(self.retry_on)}

    @classmethod
    def from_json(cls, doc: Any) -> RetryPolicy | None:
        """From a history record (input: None for anything malformed)."""
        if not isinstance(doc, dict):
            return None
        n = doc.get("retries")
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_RETRIES:
            return None
        on = doc.get("retry_on")
        try:
            keys = check_retry_on(on, "retry_on") if isinstance(on, list) else RETRIABLE_KEYS
        except ValueError:
            return None
        return cls(n, keys)


def parse_policy(
    retries: Any, retry_on: Any = None, *, where: str = "--retries"
) -> RetryPolicy | None:
    """A policy from user input (a CLI flag, a profile key, a form field); None for no retries.
    ValueError (one line naming `where`) for a bad value."""
    if retries is None or retries == "":
        if retry_on:
            raise ValueError(f"{where}: retry_on needs retries (a number of retries)")
        return None
    try:
        n = int(str(retries).strip())
    except ValueError:
        raise ValueError(f"{where}: {retries!r} is not a number of retries") from None
    if not 0 <= n <= MAX_RETRIES:
        raise ValueError(f"{where}: retries must be 0..{MAX_RETRIES}, not {n}")
    if isinstance(retry_on, str):
        retry_on = retry_on.split(",")
    keys = check_retry_on(retry_on, f"{where} retry_on") if retry_on else RETRIABLE_KEYS
    return RetryPolicy(n, keys) if n else None


def record_policy(history: Any, submission_id: str, policy: RetryPolicy | None) -> None:
    """Put `policy` on a just-submitted job's history record (JobHistory)."""
    if policy is None:
        return
    rec = history.get(submission_id)
    if rec is not None:
        rec.retry_policy = policy.to_json()
        history.save(rec)


async def migrate_policies(ctx: Any, shared: Any) -> int:
    """This account's retry policies from before the head kept them, moved there once: those on
    recent history records not decided yet, and those stashed for queued jobs (onto their
    queue entries). The stash folder is renamed `policies.moved` (made when there was none),
    so this runs once per account and cluster; `shared.on_notice` says it once. The number
    moved."""
    import os
    import time

    from tui.jobs.queue_shared import POLICY_KEEP_S, cluster_queue
    from tui.state import StateError, read_state_json, state_path

    stash = state_path("supervisor", ctx.inv.cluster, "policies")
    moved_to = stash.with_name("policies.moved")
    if moved_to.exists():
        return 0
    now = time.time()
    recs = [
        r
        for r in ctx.history.all()
        if RetryPolicy.from_json(r.retry_policy) is not None
        and now - (r.submitted_at or 0) <= POLICY_KEEP_S
        and not {d.get("kind") for d in r.decisions or []} & {"retry", "no-retry"}
    ]
    n = await shared.put_missing(recs)
    if stash.is_dir():
        queue = cluster_queue(ctx.inv, ctx.fleet)
        waiting = {e.submission_id: e for e in await queue.entries()}
        for path in sorted(stash.glob("*.json"))[:2000]:
            entry = waiting.get(path.stem)
            if entry is None or entry.retry_policy is not None:
                continue
            try:
                policy = RetryPolicy.from_json(read_state_json(path, max_bytes=1 << 16))
            except StateError:
                continue  # left in the moved folder, for a person to read
            if policy is not None:
                await queue.update(entry.submission_id, retry_policy=policy.to_json())
                n += 1
        os.replace(stash, moved_to)
    else:
        moved_to.mkdir(parents=True, exist_ok=True)
    if n:
        shared.on_notice(
            f"retry policies now live with the cluster: moved {n} of {ctx.inv.cluster} from "
            f"this account to {shared.where} (the old folder is {moved_to})"
        )
    return n
