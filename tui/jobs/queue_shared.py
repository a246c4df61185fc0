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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tui.cluster.head_files import SHARED_DIR, HeadFiles
from tui.jobs.owner import me
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
    from tui.transport.fleet import Fleet

    if not isinstance(fleet, Fleet) or inv.head.transport == "local":
        return LocalQueue(JobQueue(inv.cluster))
    return SharedQueue(inv, fleet, on_notice=on_notice)


def as_async(queue: Any) -> AnyQueue:
    """A queue handed in by a caller: a local JobQueue gets the async calls."""
    return LocalQueue(queue) if isinstance(queue, JobQueue) else queue
