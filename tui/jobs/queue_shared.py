"""The cluster's one queue, kept on its head beside the supervisor's lease
(tui/cluster/head_files.py: `queue.json` in /tmp/ray/verl-tui-shared), so whichever supervisor
holds the lease serves every user's entries in priority/FIFO order, each entry with its own
owner and retry policy. The changes are the local queue's own (tui/jobs/queue.py `op_*`), applied
by compare-and-swap on the head.

`cluster_queue` is the one place a caller gets its queue: the head's when it is reached over
SSH; where there is no remote head (a `transport: local` head on this machine, no fleet at
all) the account's local file, as before. A head that cannot be reached is a one-line error,
never a silent local fallback (two queues would start a job twice or never).

The per-user queue of earlier versions (`<state>/queue/<cluster>/queue.json`) is moved to the
head the first time the shared queue is used from that account: its entries are added (kept
in their order, ids already there skipped), the file is renamed `queue.json.moved`, and one
line says so.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tui.cluster.dashboard import is_job_id
from tui.cluster.head_files import SHARED_DIR, HeadFiles, remote_head
from tui.jobs.history import JobRecord
from tui.jobs.history import _shaped as record_shaped
from tui.jobs.owner import me, valid_owner
from tui.jobs.queue import (
    MAX_QUEUE_BYTES,
    Change,
    JobQueue,
    Needs,
    QueueEntry,
    Started,
    op_add_all,
    op_begin_start,
    op_cancel,
    op_finish_start,
    op_move,
    op_release,
    op_update,
    parse_queue,
    queue_doc,
    settled,
)
from tui.state import StateError

if TYPE_CHECKING:
    from tui.config.hosts import Inventory
    from tui.transport.fleet import Fleet

QUEUE_FILE = "queue.json"
MOVED_NAME = "queue.json.moved"
Notice = Callable[[str], None]


def _to_stderr(text: str) -> None:
    print(f"verl-tui: {text}", file=sys.stderr)


class SharedQueue:
    """The queue on the head (async: every call is one or two SSH round trips)."""

    def __init__(
        self,
        inv: Inventory,
        fleet: Fleet,
        *,
        on_notice: Notice | None = None,
        directory: str = SHARED_DIR,
    ):
        self.cluster = inv.cluster
        self.files = HeadFiles(inv, fleet, directory=directory)
        self.where = self.files.where(QUEUE_FILE)
        self.on_notice = on_notice or _to_stderr
        self.local = JobQueue(inv.cluster)

    def _damaged(self, why: str) -> StateError:
        return StateError(
            f"{self.where}: damaged ({why}); nothing in it is submitted or changed until it is "
            "fixed by hand or moved away"
        )

    async def _read(self) -> tuple[list[QueueEntry], list[Started]]:
        await self._migrate()
        return parse_queue(await self.files.read_json(QUEUE_FILE, MAX_QUEUE_BYTES), self._damaged)

    async def _change(self, fn: Change) -> Any:
        await self._migrate()

        def apply(doc: Any) -> tuple[Any, Any]:
            entries, started = parse_queue(doc, self._damaged)
            result = fn(entries, started)
            return queue_doc(self.cluster, entries, started), result

        return await self.files.change_json(QUEUE_FILE, MAX_QUEUE_BYTES, apply)

    async def _migrate(self) -> None:
        """The account's earlier local queue, moved here once (see the module text)."""
        if not os.path.exists(self.local.path):
            return
        # Under the local queue's lock (taken in a thread: it may wait), so two processes of
        # this account move it once; the head's compare-and-swap skips ids already there.
        held = self.local._locked()
        await asyncio.to_thread(held.__enter__)
        try:
            if not os.path.exists(self.local.path):
                return
            entries, started = self.local._read()
            for e in entries:
                e.owner = e.owner or me()

            def apply(doc: Any) -> tuple[Any, int]:
                old, old_started = parse_queue(doc, self._damaged)
                ids = {e.submission_id for e in old}
                moved = [e for e in entries if e.submission_id not in ids]
                old.extend(moved)
                known = {s.submission_id for s in old_started}
                old_started.extend(s for s in started if s.submission_id not in known)
                return queue_doc(self.cluster, old, old_started), len(moved)

            moved = await self.files.change_json(QUEUE_FILE, MAX_QUEUE_BYTES, apply)
            os.replace(self.local.path, self.local.path.with_name(MOVED_NAME))
        finally:
            held.__exit__(None, None, None)
        self.on_notice(
            f"the queue now lives with the cluster: moved {moved} queued job(s) of "
            f"{self.cluster} from {self.local.path} to {self.where} (the old file is "
            f"{MOVED_NAME})"
        )

    # -- reading -------------------------------------------------------------------------

    async def entries(self) -> list[QueueEntry]:
        return (await self._read())[0]

    async def started(self, now: float | None = None) -> list[Started]:
        return settled((await self._read())[1], now)

    async def get(self, submission_id: str) -> QueueEntry | None:
        return next((e for e in await self.entries() if e.submission_id == submission_id), None)

    async def position(self, submission_id: str) -> int | None:
        for i, e in enumerate(await self.entries(), 1):
            if e.submission_id == submission_id:
                return i
        return None

    # -- changing ------------------------------------------------------------------------

    async def add(self, entry: QueueEntry, *, taken: Callable[[str], bool] | None = None) -> int:
        return (await self.add_all([entry], taken=taken))[0]

    async def add_all(
        self, new: list[QueueEntry], *, taken: Callable[[str], bool] | None = None
    ) -> list[int]:
        result: list[int] = await self._change(op_add_all(new, taken))
        return result

    async def cancel(self, submission_id: str) -> QueueEntry:
        result: QueueEntry = await self._change(op_cancel(submission_id, self.cluster))
        return result

    async def move(self, submission_id: str, to: int) -> int:
        result: int = await self._change(op_move(submission_id, to, self.cluster))
        return result

    async def update(self, submission_id: str, **changes: Any) -> QueueEntry | None:
        result: QueueEntry | None = await self._change(op_update(submission_id, changes))
        return result

    async def begin_start(self, submission_id: str) -> QueueEntry | None:
        result: QueueEntry | None = await self._change(op_begin_start(submission_id))
        return result

    async def finish_start(self, submission_id: str, needs: Needs) -> None:
        await self._change(op_finish_start(submission_id, needs))

    async def release(self, submission_ids: set[str]) -> None:
        await self._change(op_release(submission_ids))


class LocalQueue:
    """The local file's queue behind the same async calls (where there is no head)."""

    def __init__(self, queue: JobQueue):
        self.queue = queue
        self.cluster = queue.cluster
        self.where = str(queue.path)

    async def entries(self) -> list[QueueEntry]:
        return await asyncio.to_thread(self.queue.entries)

    async def started(self, now: float | None = None) -> list[Started]:
        return await asyncio.to_thread(self.queue.started, now)

    async def get(self, submission_id: str) -> QueueEntry | None:
        return await asyncio.to_thread(self.queue.get, submission_id)

    async def position(self, submission_id: str) -> int | None:
        return await asyncio.to_thread(self.queue.position, submission_id)

    async def add(self, entry: QueueEntry, *, taken: Callable[[str], bool] | None = None) -> int:
        return await asyncio.to_thread(self.queue.add, entry, taken=taken)

    async def add_all(
        self, new: list[QueueEntry], *, taken: Callable[[str], bool] | None = None
    ) -> list[int]:
        return await asyncio.to_thread(self.queue.add_all, new, taken=taken)

    async def cancel(self, submission_id: str) -> QueueEntry:
        return await asyncio.to_thread(self.queue.cancel, submission_id)

    async def move(self, submission_id: str, to: int) -> int:
        return await asyncio.to_thread(self.queue.move, submission_id, to)

    async def update(self, submission_id: str, **changes: Any) -> QueueEntry | None:
        return await asyncio.to_thread(lambda: self.queue.update(submission_id, **changes))

    async def begin_start(self, submission_id: str) -> QueueEntry | None:
        return await asyncio.to_thread(self.queue.begin_start, submission_id)

    async def finish_start(self, submission_id: str, needs: Needs) -> None:
        await asyncio.to_thread(self.queue.finish_start, submission_id, needs)

    async def release(self, submission_ids: set[str]) -> None:
        await asyncio.to_thread(self.queue.release, submission_ids)


AnyQueue = SharedQueue | LocalQueue


def cluster_queue(inv: Inventory, fleet: Any, *, on_notice: Notice | None = None) -> AnyQueue:
    """The queue of `inv`'s cluster: on its head, reached over SSH through `fleet`. Where there
    is no remote head — a head on this very machine (`transport: local`: one account's
    cockpit on its own box), or no Fleet at all (a replayed or scripted app, a flow with no
    cluster) — the account's local file is the queue, as before."""
    if not remote_head(inv, fleet):
        return LocalQueue(JobQueue(inv.cluster))
    return SharedQueue(inv, fleet, on_notice=on_notice)


def as_async(queue: Any) -> AnyQueue:
    """A queue handed in by a caller: a local JobQueue gets the async calls."""
    return LocalQueue(queue) if isinstance(queue, JobQueue) else queue


# -- retry policies ------------------------------------------------------------------------
#
# A job's retry policy lives on the head too (`policies.json` beside the queue), with its owner
# and the job as its history record has it (secrets as references), so whichever supervisor
# holds the lease retries any user's job, queued or sent directly, and records there whether it
# retried it (a supervisor taking over later does not decide again). One home: the retry duty
# reads a job's policy only here where there is a remote head (the submitter's history record
# keeps a copy for its Jobs screen); an account's older local policies are moved here once.

POLICIES_FILE = "policies.json"
MAX_POLICIES_BYTES = 4 << 20
MAX_POLICIES = 2000
POLICY_KEEP_S = 8 * 86400.0  # a failure older than the retry window is history (retry.py)


@dataclass
class HeadPolicy:
    """One job's entry in `policies.json` (input when read back: `from_json` checks it)."""

    submission_id: str
    owner: str | None
    policy: dict[str, Any]
    job: dict[str, Any]  # the job's history record as JSON (JobRecord fields)
    at: float
    settled: str | None = None  # "retry <id>" or "no-retry": decided, by whichever supervisor

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "policy": self.policy,
            "job": self.job,
            "at": self.at,
            "settled": self.settled,
        }

    @classmethod
    def from_json(cls, sid: str, doc: Any) -> HeadPolicy | None:
        if not isinstance(doc, dict) or not is_job_id(sid):
            return None
        policy, job, at, settled_ = (
            doc.get("policy"),
            doc.get("job"),
            doc.get("at"),
            doc.get("settled"),
        )
        if (
            not isinstance(policy, dict)
            or not isinstance(job, dict)
            or not isinstance(at, (int, float))
            or not (settled_ is None or isinstance(settled_, str))
        ):
            return None
        return cls(sid, valid_owner(doc.get("owner")), policy, job, float(at), settled_)

    def record(self) -> JobRecord | None:
        """The job's record as its submitter's history has it (None when it is malformed)."""
        try:
            rec = JobRecord(**self.job)
        except TypeError:
            return None
        if rec.submission_id != self.submission_id or not record_shaped(rec):
            return None
        rec.retry_policy, rec.owner = self.policy, rec.owner or self.owner
        rec.decisions, rec.pending_retry = [], None
        return rec


def _policies_of(doc: Any) -> dict[str, Any]:
    raw = doc.get("policies") if isinstance(doc, dict) else None
    return dict(raw) if isinstance(raw, dict) else {}


def _pruned(raw: dict[str, Any], now: float) -> dict[str, Any]:
    keep = [
        (sid, d)
        for sid, d in raw.items()
        if isinstance(d, dict) and now - float(d.get("at") or 0) <= POLICY_KEEP_S
    ]
    keep.sort(key=lambda kv: float(kv[1].get("at") or 0))
    return dict(keep[-MAX_POLICIES:])


class SharedPolicies:
    """The retry policies on the head (async: one or two SSH round trips a call)."""

    def __init__(
        self,
        inv: Inventory,
        fleet: Fleet,
        *,
        on_notice: Notice | None = None,
        directory: str = SHARED_DIR,
    ):
        self.inv = inv
        self.files = HeadFiles(inv, fleet, directory=directory)
        self.where = self.files.where(POLICIES_FILE)
        self.on_notice = on_notice or _to_stderr

    async def _change(self, fn: Callable[[dict[str, Any]], Any]) -> Any:
        def apply(doc: Any) -> tuple[Any, Any]:
            raw = _policies_of(doc)
            result = fn(raw)
            return {"cluster": self.inv.cluster, "policies": _pruned(raw, time.time())}, result

        return await self.files.change_json(POLICIES_FILE, MAX_POLICIES_BYTES, apply)

    async def put(self, rec: JobRecord, policy: dict[str, Any]) -> None:
        """`rec`'s job (just recorded, before its POST) with `policy`, by its submission id."""
        entry = HeadPolicy(rec.submission_id, rec.owner, policy, _job_json(rec), time.time())
        await self._change(lambda raw: raw.__setitem__(rec.submission_id, entry.to_json()))

    async def table(self) -> dict[str, HeadPolicy]:
        """Every job's entry (malformed ones left out: the file is input)."""
        raw = _policies_of(await self.files.read_json(POLICIES_FILE, MAX_POLICIES_BYTES))
        entries = (HeadPolicy.from_json(sid, d) for sid, d in raw.items())
        return {e.submission_id: e for e in entries if e is not None}

    async def settle(self, submission_id: str, how: str) -> None:
        """Say on the head that `submission_id`'s failure was decided (`retry <id>`/`no-retry`)."""

        def fn(raw: dict[str, Any]) -> None:
            if isinstance(raw.get(submission_id), dict):
                raw[submission_id] = {**raw[submission_id], "settled": how}

        await self._change(fn)

    async def put_missing(self, recs: list[JobRecord]) -> int:
        """Each of `recs` (with its policy) unless its job has an entry already: an account's
        older policies moved here (tui/supervisor/policy.py). The number added."""
        now = time.time()

        def fn(raw: dict[str, Any]) -> int:
            new = [r for r in recs if r.submission_id not in raw and r.retry_policy]
            for r in new:
                raw[r.submission_id] = HeadPolicy(
                    r.submission_id, r.owner or me(), dict(r.retry_policy or {}), _job_json(r), now
                ).to_json()
            return len(new)

        result: int = await self._change(fn)
        return result


def _job_json(rec: JobRecord) -> dict[str, Any]:
    doc = rec.to_json()
    doc["decisions"], doc["pending_retry"], doc["retry_policy"] = [], None, None
    return doc


def cluster_policies(
    inv: Inventory, fleet: Any, *, on_notice: Notice | None = None
) -> SharedPolicies | None:
    """The cluster's retry policies on its head; None where there is no remote head (the
    account's own history records hold them: one account's cluster)."""
    return SharedPolicies(inv, fleet, on_notice=on_notice) if remote_head(inv, fleet) else None


async def share_policy(flow_inv: Inventory, fleet: Any, sub: Any, **record: Any) -> None:
    """Put a job's retry policy on its cluster's head before the job is sent (the submission
    flow's send stage, tui/jobs/flow.py): `record` holds profile_path, retry_policy, attempt,
    retry_of as the history record gets them. Nothing where there is no remote head (the
    history record is the home there). HeadFileError when the head cannot be written: the job
    is not sent either."""
    policy = record.get("retry_policy")
    shared = cluster_policies(flow_inv, fleet)
    if not policy or shared is None:
        return
    from tui.jobs.service import record_for

    rec = record_for(sub, flow_inv, profile_path=record.get("profile_path"))
    rec.attempt, rec.retry_of = int(record.get("attempt") or 1), record.get("retry_of")
    await shared.put(rec, dict(policy))
