"""A job's driver log from the head's Jobs API, through the tunnel: the whole log at once for a
finished job, then (while it runs) Ray's websocket tail.

The tail replays the file from its first line in chunks of at most 10 lines, so a long log would
take minutes to arrive through it. We take the log in one GET first and skip that many
characters of the tail: nothing is lost between the two (the tail starts at the file's start)
and nothing is shown twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tui.cluster.dashboard import TERMINAL, DashboardClient, DashboardError, job_path


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
        async with websockets.connect(url, max_size=None, open_timeout=client.timeout,
                                      compression=None, ping_interval=20,
                                      ping_timeout=60) as ws:
            async for message in ws:
                yield message if isinstance(message, str) else message.decode("utf-8",
                                                                               "replace")
    except websockets.exceptions.ConnectionClosedOK:
        return
    except (OSError, websockets.exceptions.WebSocketException, asyncio.TimeoutError) as exc:
        raise DashboardError(f"log tail of {sid} broke off: {exc}") from None


async def job_log_chunks(client: DashboardClient, sid: str, *, follow: bool = True,
                         ends: list[JobLogEnd] | None = None) -> AsyncIterator[str]:
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
