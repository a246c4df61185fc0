"""Reading a process's output as lines without trusting it: bounded line length, any bytes.

A host may send a 100 MB "line" without a newline, or bytes that are not UTF-8. Readers read
fixed chunks and split them here, so memory per stream stays under about `max_line` whatever
arrives; an overlong line is dropped whole and counted, never half-delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

DEFAULT_MAX_LINE = 4 << 20  # bytes; a caller that expects less passes its own cap
CHUNK = 1 << 16


class LineSplitter:
    """Bytes in, complete lines (without the newline) out; lines over `max_line` are dropped
    and counted in `oversize`."""

    __slots__ = ("_buf", "_skipping", "max_line", "oversize")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE):
        self.max_line = max_line
        self.oversize = 0
        self._buf = bytearray()
        self._skipping = False  # inside an overlong line: drop everything up to its newline

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start, end = 0, len(data)
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return out
            self._skipping = False
            start = nl + 1
        buf, limit = self._buf, self.max_line
        while start < end:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if buf:
                if len(buf) + nl - start > limit:
                    self.oversize += 1
                else:
                    buf += data[start:nl]
                    out.append(bytes(buf))
                buf.clear()
            elif nl - start > limit:
                self.oversize += 1
            else:
                out.append(data[start:nl])
            start = nl + 1
        if start < end:
            if len(buf) + end - start > limit:
                buf.clear()
                self._skipping = True
                self.oversize += 1
            else:
                buf += data[start:] if start else data
        return out

    def flush(self) -> bytes | None:
        """At end of stream: the last line if it had no newline (None if there is none)."""
        if self._skipping or not self._buf:
            self._buf.clear()
            return None
        line = bytes(self._buf)
        self._buf.clear()
        return line


def decode(raw: bytes) -> str:
    """A line as text: invalid UTF-8 becomes U+FFFD (the consumer decides what that means)."""
    return raw.decode("utf-8", "replace").rstrip("\r")


async def read_lines(
    read: Callable[[int], Awaitable[bytes]], splitter: LineSplitter
) -> AsyncIterator[str]:
    """Lines from `read(n)` (an asyncio/asyncssh reader's read) until EOF."""
    while True:
        data = await read(CHUNK)
        if not data:
            break
        for raw in splitter.feed(data):
            yield decode(raw)
    tail = splitter.flush()
    if tail is not None:
        yield decode(tail)


class LineSink:
    """Bytes pushed in by a transport's receive callback become calls of `on_line` (bounded
    like LineSplitter). Whatever on_line raises stops the delivery and is raised by wait(),
    never into the transport (an exception there would take the whole connection down)."""

    def __init__(self, on_line: Callable[[str], None], max_line: int = DEFAULT_MAX_LINE):
        self.on_line = on_line
        self.splitter = LineSplitter(max_line)
        self.ended = asyncio.Event()  # set by the transport at EOF or when the channel dies
        self.error: BaseException | None = None

    def feed(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            for raw in self.splitter.feed(data):
                self.on_line(decode(raw))
        except Exception as exc:  # handed to wait(), see above
            logging.getLogger(__name__).debug("line consumer failed", exc_info=True)
            self.error = exc
            self.ended.set()

    async def wait(self) -> None:
        """Until the output ended; then the last line if it had no newline."""
        await self.ended.wait()
        if self.error is None:
            tail = self.splitter.flush()
            if tail is not None:
                try:
                    self.on_line(decode(tail))
                except Exception as exc:
                    self.error = exc
        if self.error is not None:
            raise self.error
