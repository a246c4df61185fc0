"""A job's driver log: read as a file on the head over SSH by byte offset (driver_log.py) when
it is there, else through the head's Jobs API (the whole log at once, then Ray's websocket tail).

The file is the fast way for a big log: its last lines first (the first screen), the part before
them in the background, and new lines by following the file from the byte where the tail began,
so nothing is lost or shown twice. The Jobs API is the fallback (the file is on another node, or
cannot be read): its tail replays the file from its first line in chunks of at most 10 lines, so
we take the log in one GET first and skip that many characters of the tail.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tui.cluster import driver_log
from tui.cluster.dashboard import (
    LOG_CAP,
    TERMINAL,
    DashboardClient,
    DashboardError,
    check_job_id,
    job_path,
)
from tui.cluster.driver_log import TAIL_BYTES, DriverLog, JobEnd
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.types import Transport

RAY_TEMP = driver_log.RAY_TEMP
_SESSION_RE = re.compile(r"session_(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})_(\d{6})_\d+")
# Status of a job in our history that the head no longer knows (Ray restarted since) and that
# had not finished when it was last seen: its outcome is unknown.
LOST = "LOST"
LOST_MESSAGE = "the head restarted since; log from its old session"
FINISHED_BEFORE_RESTART = "Ray restarted since; log from its old session"


def restarted_status(last_known: str | None) -> tuple[str, str]:
    """(status, message) of a job the head's restarted Ray no longer knows: the outcome last
    seen when it had finished (a restart does not change how a job ended), else LOST."""
    if last_known in TERMINAL:
        return last_known, FINISHED_BEFORE_RESTART
    return LOST, LOST_MESSAGE


STATUS_POLL_S = 1.0  # while following the file: how often the job's status is asked


@dataclass
class JobLogEnd:
    """How the log ended: the job's final status (None when the tail was only closed)."""

    status: str | None
    message: str | None = None


async def job_info(client: DashboardClient, sid: str) -> dict[str, Any]:
    """The Jobs API's answer for `sid`, checked (tui/cluster/dashboard_schema.JOB)."""
    return await client.job_info(sid)


async def job_status(client: DashboardClient, sid: str) -> tuple[str, str | None]:
    info = await job_info(client, sid)
    return info["status"], info["message"]


def ray_message(message: str | None) -> str:
    """Ray's end message without its log excerpt (", last available logs (truncated …): …"):
    the log is one key away, and its excerpt would push the rest off a pane."""
    return (message or "").split(", last available logs")[0].strip()


async def job_log_snapshot(client: DashboardClient, sid: str) -> str:
    return await client.job_logs(sid)


async def _tail(client: DashboardClient, sid: str) -> AsyncIterator[str]:
    import websockets  # imported here: only a followed log needs it

    try:
        # No permessage-deflate: Ray 2.60's dashboard accepts it, then its proxy to the job
        # module fails on the first compressed frame and closes the tail with no message.
        async with client.websocket(
            job_path(sid, "logs", "tail"),
            max_size=LOG_CAP,  # one message: bounded like any answer
            open_timeout=client.timeout,
            compression=None,
            ping_interval=20,
            ping_timeout=60,
        ) as ws:
            async for message in ws:
                yield message if isinstance(message, str) else message.decode("utf-8", "replace")
    except websockets.exceptions.ConnectionClosedOK:
        return
    except (OSError, websockets.exceptions.WebSocketException, asyncio.TimeoutError) as exc:
        raise DashboardError(f"log tail of {sid} broke off: {exc}") from None


async def job_log_chunks(
    client: DashboardClient, sid: str, *, follow: bool = True, ends: list[JobLogEnd] | None = None
) -> AsyncIterator[str]:
    """Yield the job's log text in chunks; the first chunk is everything written so far.

    With `follow`, keep yielding while the job runs and stop when Ray closes the tail after
    the job ended. The final status is appended to `ends` when given.
    """
    status, message = await job_status(client, sid)
    snapshot = await job_log_snapshot(client, sid)
    if snapshot:
        yield snapshot
    if follow and status not in TERMINAL:
        skip = len(snapshot)
        async for chunk in _tail(client, sid):
            if skip:
                if len(chunk) <= skip:
                    skip -= len(chunk)
                    continue
                chunk, skip = chunk[skip:], 0
            yield chunk
        status, message = await job_status(client, sid)
    if ends is not None:
        ends.append(JobLogEnd(status, message))


def session_start(name: str) -> float | None:
    """When a Ray session started, from its directory name (the head's local time, as Ray
    names it), as a Unix time; None for a name that is not a session's."""
    m = _SESSION_RE.fullmatch(posixpath.basename(name.rstrip("/")))
    if m is None:
        return None
    try:
        t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d_%H-%M-%S"))
    except ValueError:
        return None
    return t + int(m.group(2)) / 1e6


async def head_session_start(cluster: RayCluster) -> float | None:
    """When the head's current Ray session began (the last `ray start --head`), read over SSH
    from the session_latest link; None when it cannot be read."""
    transport = await cluster.fleet.ready(cluster.inv.head.name, 20)
    res = await transport.run(
        ["readlink", "--", posixpath.join(RAY_TEMP, "session_latest")], timeout=10
    )
    return session_start(res.stdout.strip()) if res.ok else None


async def old_session_log(transport: Transport, sid: str) -> str | None:
    """The driver log of `sid` from any session directory on this host (the newest if several),
    or None. The id is checked and every path is an argv word: nothing reaches a shell."""
    log = await driver_log.locate(transport, sid, tail_bytes=1)
    if log is None:
        return None
    return "".join([text async for text in driver_log.read_from(log, 0)])


@dataclass
class OpenedLog:
    """Where a job's log comes from: its driver log file (None: only the Jobs API has it) and
    the job's status, updated when a follow ends."""

    sid: str
    status: str
    message: str | None
    file: DriverLog | None
    client: DashboardClient | None  # None for a LOST job (the head does not know it)

    @property
    def running(self) -> bool:
        return self.client is not None and self.status not in TERMINAL


async def _locate(cluster: RayCluster, sid: str, tail_bytes: int) -> DriverLog | None:
    try:
        transport = await cluster.fleet.ready(cluster.inv.head.name, 20)
        return await driver_log.locate(
            transport, sid, tail_bytes=tail_bytes, temp=driver_log.RAY_TEMP
        )
    except TransportError:
        return None


async def open_job_log(
    cluster: RayCluster,
    sid: str,
    *,
    tail_bytes: int = TAIL_BYTES,
    last_known: str | None = None,
) -> OpenedLog:
    """The job's status and its driver log file on the head. A job the head does not know
    (Ray restarted since) has its log from an old session directory and the status
    restarted_status gives for `last_known` (the history's: a finished job keeps its outcome,
    else LOST); DashboardError (HTTP 404) when neither has it."""
    check_job_id(sid, "JOB")
    client = await cluster.dashboard()
    # Both at once: the first screen waits for the slower of the two, not for their sum.
    asked, file = await asyncio.gather(
        job_status(client, sid), _locate(cluster, sid, tail_bytes), return_exceptions=True
    )
    if isinstance(file, BaseException):
        raise file
    if isinstance(asked, BaseException):
        if not isinstance(asked, DashboardError) or "HTTP 404" not in str(asked) or file is None:
            raise asked
        return OpenedLog(sid, *restarted_status(last_known), file, None)
    status, message = asked
    return OpenedLog(sid, status, message, file, client)


async def _watch_status(opened: OpenedLog, ended: JobEnd) -> None:
    assert opened.client is not None
    while True:
        await asyncio.sleep(STATUS_POLL_S)
        try:
            status, message = await job_status(opened.client, opened.sid)
        except DashboardError:
            continue  # a dropped tunnel connection: ask again
        if status in TERMINAL:
            opened.status, opened.message = status, message
            ended.set()
            return


async def file_text(opened: OpenedLog, start: int, *, follow: bool) -> AsyncIterator[str]:
    """The driver log file's text from byte `start` (0, or `opened.file.tail_start`) in
    chunks; with `follow` and a running job, on until the job ended and its last lines are
    in (`opened.status` is then the final one)."""
    assert opened.file is not None
    follow = follow and opened.running
    ended = JobEnd()
    watcher = asyncio.ensure_future(_watch_status(opened, ended)) if follow else None
    try:
        async for text in driver_log.read_from(opened.file, start, follow=follow, ended=ended):
            yield text
    finally:
        if watcher is not None:
            watcher.cancel()


async def older_text(opened: OpenedLog) -> AsyncIterator[str]:
    """The part of the file before its tail, in file order (the background backfill)."""
    assert opened.file is not None
    async for text in driver_log.read_range(opened.file, 0, opened.file.tail_start):
        yield text


async def any_job_log_chunks(
    cluster: RayCluster,
    sid: str,
    *,
    follow: bool = True,
    ends: list[JobLogEnd] | None = None,
    last_known: str | None = None,
) -> AsyncIterator[str]:
    """The job's whole log in file order, in chunks, streamed: from its driver log file on the
    head when readable, else through the Jobs API (job_log_chunks). With `follow`, on while the
    job runs. A job the head does not know (Ray restarted since) gets its log from an old
    session directory and ends as restarted_status says for `last_known`. DashboardError
    (HTTP 404) when neither has it. The final status is appended to `ends` when given."""
    opened = await open_job_log(cluster, sid, last_known=last_known)
    if opened.file is None:
        assert opened.client is not None
        async for chunk in job_log_chunks(opened.client, sid, follow=follow, ends=ends):
            yield chunk
        return
    async for chunk in file_text(opened, 0, follow=follow):
        yield chunk
    if ends is not None:
        ends.append(JobLogEnd(opened.status, opened.message))
