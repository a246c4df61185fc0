"""A host's Ray session logs over SSH: list the files of its session log folder and follow one.

Ray writes every node's logs under <temp dir>/session_latest/logs on that node (raylet.out,
gcs_server.out on the head, worker-*.out/.err, job-driver-*.log, ...). Nothing here needs Ray
on this machine: `find` lists, `tail -F` follows (it survives the file being rotated).
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tui.transport.types import StreamProcess, Transport, TransportError

SESSION_LOGS = "/tmp/ray/session_latest/logs"
FIRST_LINES = 5000  # how much of a file to show before following it


@dataclass(frozen=True)
class LogFile:
    name: str
    size: int
    mtime: float

    @property
    def kind(self) -> str:
        """A coarse kind for grouping: raylet, gcs, worker, driver, agent, other."""
        n = self.name
        for prefix, kind in (
            ("raylet", "raylet"),
            ("gcs_server", "gcs"),
            ("worker-", "worker"),
            ("python-core-worker", "worker"),
            ("job-driver", "driver"),
            ("dashboard", "dashboard"),
            ("runtime_env", "agent"),
            ("log_monitor", "agent"),
            ("monitor", "autoscaler"),
        ):
            if n.startswith(prefix):
                return kind
        return "other"


async def list_logs(transport: Transport, log_dir: str = SESSION_LOGS) -> list[LogFile]:
    """Files of the folder, newest first. A host without a Ray session gives a clear error."""
    res = await transport.run(
        ["find", log_dir + "/", "-maxdepth", "1", "-type", "f", "-printf", r"%s\t%T@\t%f\n"],
        timeout=20,
    )
    if not res.ok:
        why = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
        if "No such file" in why:
            why = f"no Ray session logs in {log_dir} (Ray never started on this host?)"
        raise TransportError(f"{transport.host}: {why}")
    files = []
    for line in res.stdout.splitlines():
        size, _, rest = line.partition("\t")
        mtime, _, name = rest.partition("\t")
        try:
            files.append(LogFile(name, int(size), float(mtime)))
        except ValueError:
            continue
    return sorted(files, key=lambda f: -f.mtime)


def log_path(name: str, log_dir: str = SESSION_LOGS) -> str:
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a log file name: {name!r}")
    return posixpath.join(log_dir, name)


async def follow_log(
    transport: Transport, name: str, *, log_dir: str = SESSION_LOGS, first_lines: int = FIRST_LINES
) -> StreamProcess:
    """A stream of the file's last `first_lines` lines, then every line appended."""
    return await transport.stream(
        ["tail", "-n", str(first_lines), "-F", "--", log_path(name, log_dir)]
    )


async def batched(lines: AsyncIterator[str], *, max_lines: int = 2000) -> AsyncIterator[str]:
    """Join lines that are already waiting into one text chunk, so a fast stream reaches the
    widget in few appends (the widget coalesces redraws on its own)."""
    import asyncio

    it = lines.__aiter__()
    pending: asyncio.Task | None = None
    while True:
        buf: list[str] = []
        try:
            if pending is None:
                pending = asyncio.ensure_future(it.__anext__())
            buf.append(await pending)
            pending = None
            while len(buf) < max_lines:
                pending = asyncio.ensure_future(it.__anext__())
                await asyncio.sleep(0)
                if not pending.done():
                    break
                buf.append(pending.result())
                pending = None
        except StopAsyncIteration:
            if buf:
                yield "\n".join(buf) + "\n"
            return
        yield "\n".join(buf) + "\n"
