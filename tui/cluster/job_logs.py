"""A job's driver log from the head's Jobs API, through the tunnel: the whole log at once for a
finished job, then (while it runs) Ray's websocket tail.

The tail replays the file from its first line in chunks of at most 10 lines, so a long log would
take minutes to arrive through it. We take the log in one GET first and skip that many
characters of the tail: nothing is lost between the two (the tail starts at the file's start)
and nothing is shown twice.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tui.cluster.dashboard import TERMINAL, DashboardClient, DashboardError, check_job_id, job_path

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.types import Transport

RAY_TEMP = "/tmp/ray"  # Ray's default temp root; its sessions are session_<date>_<time>_<us>_<pid>
_SESSION_RE = re.compile(r"session_(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})_(\d{6})_\d+")
# Status of a job in our history that the head no longer knows (Ray restarted since).
LOST = "LOST"


@dataclass
class JobLogEnd:
    """How the log ended: the job's final status (None when the tail was only closed)."""

    status: str | None
    message: str | None = None


async def job_info(client: DashboardClient, sid: str) -> dict:
    info = await client.get(job_path(sid))
    if not isinstance(info, dict):
        raise DashboardError(f"job {sid}: unexpected answer from the Jobs API")
    return info


async def job_status(client: DashboardClient, sid: str) -> tuple[str, str | None]:
    info = await job_info(client, sid)
    return str(info.get("status", "?")), info.get("message")


async def job_log_snapshot(client: DashboardClient, sid: str) -> str:
    data = await client.get(job_path(sid, "logs"))
    if isinstance(data, dict):
        return str(data.get("logs", ""))
    return "" if data is None else str(data)


async def _tail(client: DashboardClient, sid: str) -> AsyncIterator[str]:
    import websockets  # imported here: only a followed log needs it

    url = client.base_url.replace("http://", "ws://", 1) + job_path(sid, "logs", "tail")
    try:
        # No permessage-deflate: Ray 2.60's dashboard accepts it, then its proxy to the job
        # module fails on the first compressed frame and closes the tail with no message.
        async with websockets.connect(
            url,
            max_size=None,
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
    check_job_id(sid, "JOB")
    name = f"job-driver-{sid}.log"
    # session_latest is a link: find does not follow it, so each file is listed once.
    res = await transport.run(
        [
            "find",
            RAY_TEMP,
            "-mindepth",
            "3",
            "-maxdepth",
            "3",
            "-path",
            posixpath.join(RAY_TEMP, "session_*", "logs", name),
            "-type",
            "f",
        ],
        timeout=30,
    )
    paths = sorted(p for p in res.stdout.splitlines() if p.endswith("/" + name))
    if not paths:
        return None
    out = await transport.run(["cat", "--", paths[-1]], timeout=120)
    return out.stdout if out.ok else None


async def any_job_log_chunks(
    cluster: RayCluster, sid: str, *, follow: bool = True, ends: list[JobLogEnd] | None = None
) -> AsyncIterator[str]:
    """job_log_chunks through the head's Jobs API; for a job the head does not know (Ray
    restarted since), its driver log from an old session directory on the head over SSH,
    ending as LOST. DashboardError (HTTP 404) when neither has it."""
    client = await cluster.dashboard()
    try:
        async for chunk in job_log_chunks(client, sid, follow=follow, ends=ends):
            yield chunk
        return
    except DashboardError as exc:
        if "HTTP 404" not in str(exc):
            raise
        missing = exc
    transport = await cluster.fleet.ready(cluster.inv.head.name, 20)
    text = await old_session_log(transport, sid)
    if text is None:
        raise missing
    yield text
    if ends is not None:
        ends.append(JobLogEnd(LOST, "the head restarted since; log from its old session"))
