"""A job's driver log read as a file on the head over SSH, by byte offset.

Ray writes a job's driver output to <temp>/session_*/logs/job-driver-<id>.log on the node that
runs the job's supervisor (the head, unless the job asked for entrypoint resources). Reading
that file is what keeps a big log cheap: Ray's Jobs API returns the whole log in one JSON body
(150 MB of log: 6.6 s and ~490 MB of RSS here before the first line shows), and its websocket
tail replays the file from the start ten lines at a time.

Here: one short command finds the file, its size and where its last ~`tail_bytes` start (at a
line start); `tail -c +OFFSET` streams from any byte offset (and with `-f` goes on as the file
grows), `head -c N` streams the part before the tail. Every path and number is an argv word;
the shell text is constant.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tui.cluster.dashboard import check_job_id
from tui.transport.types import StreamProcess, Transport

RAY_TEMP = "/tmp/ray"  # Ray's default temp root; its sessions are session_<date>_<time>_<us>_<pid>
TAIL_BYTES = 256 << 10  # the first screen: a few thousand lines from the end
CHUNK_CHARS = 1 << 20  # text handed on at most at a time (and buffered ahead of a slow reader)
FOLLOW_POLL_S = "0.2"  # tail's polling interval where inotify is not available

# $1 temp root, $2 file name, $3 tail bytes. The newest session's file wins (session names sort
# by their start time). Prints "SIZE TAIL_START PATH"; exit 3: no such file.
_LOCATE = r"""
f=$(find "$1" -mindepth 3 -maxdepth 3 -path "$1/session_*/logs/$2" -type f 2>/dev/null \
    | LC_ALL=C sort | tail -n 1)
[ -n "$f" ] || exit 3
s=$(stat -c %s -- "$f") || exit 4
o=0
if [ "$s" -gt "$3" ]; then
  o=$((s - $3))
  p=$(tail -c +$((o + 1)) -- "$f" | head -c "$3" | head -n 1 | wc -c)
  if [ "$p" -lt "$3" ]; then o=$((o + p)); fi
fi
printf '%s %s %s\n' "$s" "$o" "$f"
"""


@dataclass(frozen=True)
class DriverLog:
    """The driver log file found on a host: its size when found, and where its tail starts
    (a line start, or 0 when the whole file is smaller than the tail)."""

    transport: Transport
    path: str
    size: int
    tail_start: int


async def locate(
    transport: Transport, sid: str, *, tail_bytes: int = TAIL_BYTES, temp: str = RAY_TEMP
) -> DriverLog | None:
    """The driver log of `sid` in any Ray session on this host (the newest if several), or None
    when there is none. TransportError when the host cannot be asked."""
    check_job_id(sid, "JOB")
    name = f"job-driver-{sid}.log"
    res = await transport.run(
        ["sh", "-c", _LOCATE, "sh", temp, name, str(max(1, tail_bytes))], timeout=30
    )
    if not res.ok:
        return None
    size, start, path = [*res.stdout.strip().split(" ", 2), "", ""][:3]
    if not (size.isdigit() and start.isdigit()) or posixpath.basename(path) != name:
        return None
    return DriverLog(transport, path, int(size), int(start))


async def _open(log: DriverLog, start: int, *, follow: bool, end: int | None) -> StreamProcess:
    if end is not None:  # bytes [start, end): the part before the tail
        argv = ["head", "-c", str(end), "--", log.path]
        if start:
            argv = ["sh", "-c", 'tail -c +"$1" -- "$3" | head -c "$2"', "sh"]
            argv += [str(start + 1), str(end - start), log.path]
    elif follow:
        argv = ["tail", "-c", f"+{start + 1}", "-s", FOLLOW_POLL_S, "-f", "--", log.path]
    else:
        argv = ["tail", "-c", f"+{start + 1}", "--", log.path]
    return await log.transport.stream(argv)


class _Pump:
    """Lines of a stream gathered into text chunks by a reader task: a chunk is whatever
    arrived since the consumer last asked (so a quiet follow hands on each line at once and a
    fast one hands on big chunks), and the reader waits while CHUNK_CHARS are unread (so a
    slow consumer slows the remote command down instead of filling memory)."""

    def __init__(self, proc: StreamProcess, limit: int = CHUNK_CHARS) -> None:
        self.proc = proc
        self.limit = limit
        self.lines = 0
        self.last_line_at = 0.0
        self._buf: list[str] = []
        self._size = 0
        self._done = False
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for line in self.proc.lines():
                self._buf.append(line)
                self._size += len(line) + 1
                self.lines += 1
                if not self._ready.is_set():
                    self._ready.set()
                if self._size >= self.limit:
                    self._room.clear()
                    self.last_line_at = loop.time()
                    await self._room.wait()
            self.last_line_at = loop.time()
        finally:
            self._done = True
            self._ready.set()

    async def take(self, timeout: float | None = None) -> str | None:
        """The text that arrived since the last call ("" after `timeout` with nothing new);
        None at the end of the stream."""
        if not self._buf and not self._done:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
        self._ready.clear()
        if not self._buf:
            if self._done:
                await asyncio.wait([self._task])
                if not self._task.cancelled() and self._task.exception() is not None:
                    raise self._task.exception()  # type: ignore[misc]
                return None
            return ""
        lines, self._buf, self._size = self._buf, [], 0
        self.last_line_at = asyncio.get_running_loop().time()
        self._room.set()
        return "\n".join(lines) + "\n"

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        await self.proc.close()


async def read_range(log: DriverLog, start: int, end: int) -> AsyncIterator[str]:
    """The text of bytes [start, end) (both at line starts), in chunks, in file order."""
    if end <= start:
        return
    pump = _Pump(await _open(log, start, follow=False, end=end))
    try:
        while (text := await pump.take()) is not None:
            if text:
                yield text
    finally:
        await pump.close()


class JobEnd:
    """Set by whoever watches the job's status when the job is over (read_from stops
    following once nothing new came for a while after it)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def set(self) -> None:
        if self.at is None:
            self.at = asyncio.get_running_loop().time()


async def read_from(
    log: DriverLog,
    start: int,
    *,
    follow: bool = False,
    ended: JobEnd | None = None,
    quiet_s: float = 1.0,
    poll_s: float = 0.25,
) -> AsyncIterator[str]:
    """The file's text from byte `start` (a line start) in chunks; with `follow`, it goes on as
    the file grows until `ended` is set (the job is over) and then nothing new came for
    `quiet_s` (the writer is gone, so tail has handed on everything). One byte stream from
    `start` on: nothing is skipped or repeated, whatever the timing. Every chunk ends with a
    newline (a file's last line without one gets one; while following, such a line waits for
    its newline)."""
    pump = _Pump(await _open(log, start, follow=follow, end=None))
    loop = asyncio.get_running_loop()
    try:
        while True:
            text = await pump.take(poll_s if follow else None)
            if text is None:
                return
            if text:
                yield text
                continue
            over_at = ended.at if ended is not None else None
            if over_at is not None and loop.time() - max(pump.last_line_at, over_at) >= quiet_s:
                return
    finally:
        await pump.close()
