"""A remote command on an SSH connection: its output as lines, its end (EOF, then its process
group killed), its first-line deadline, and the pieces `SshTransport.run` collects with.

Split from ssh.py (connections, host keys, the transport) by responsibility: this module is
what one command's channel needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncssh

from tui.transport.deadline import FirstLineWatch, within
from tui.transport.lines import CHUNK, DEFAULT_MAX_LINE, LineSink, LineSplitter, decode, read_lines
from tui.transport.pgroup import MARK, kill_command, kill_order, parse_mark
from tui.transport.types import NO_SHELL, SETUP_MARK, HostShell, setup_failure

EOF_GRACE_S = 1.0  # a stream's command gets this long to exit on EOF before its group is killed
KILL_TIMEOUT_S = 5.0  # killing a command's groups, all of it (a stalled host may not answer)
_CLOSED_WAIT_S = 2.0  # for the channel's close to be confirmed


class SinkProcess(asyncssh.SSHClientProcess):
    """A process whose stdout goes to a callback as each packet arrives, from asyncssh's own
    receive path: no reader, no task switch and no async generators per line. For streams of
    small lines from many hosts (telemetry: 1,024 hosts × 1 line a second), that path was a
    third of the cockpit's SSH cost (bench: 114 → 81 µs a line)."""

    def __init__(self, sink: Callable[[bytes], None], ended: asyncio.Event) -> None:
        super().__init__()
        self._sink = sink
        self._ended = ended

    def data_received(self, data: Any, datatype: Any) -> None:
        if datatype is None:
            self._sink(data)
        else:
            super().data_received(data, datatype)

    def eof_received(self) -> bool:
        self._ended.set()
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended.set()
        super().connection_lost(exc)


class SshStream:
    """A remote command's output as lines. The command leads its own process group on the host
    (pgroup.group_command), so close() can end all of it even if it ignores EOF on stdin.

    With `on_line`, stdout lines are handed to it as they arrive (see SinkProcess) and
    finished() waits for the end; lines() is for the other mode. With `first_line` (seconds),
    a command whose first line does not come in time is ended at once and the reader raises
    CommandTimeout (deadline.FirstLineWatch)."""

    def __init__(
        self,
        proc: asyncssh.SSHClientProcess,
        conn: asyncssh.SSHClientConnection,
        max_line: int = DEFAULT_MAX_LINE,
        *,
        host: str = "",
        shell: HostShell = NO_SHELL,
        sink: LineSink | None = None,
        first_line: float | None = None,
        what: str = "",
    ):
        self._proc = proc
        self._sink = sink
        self._conn = conn
        self._host = host
        self._shell = shell
        # (an on_line stream splits in its sink: oversize_lines counts the sink's drops)
        self._splitter = sink.splitter if sink is not None else LineSplitter(max_line)
        self._stderr: deque[str] = deque(maxlen=50)
        self._setup_failed: str | None = None
        # The host's group, then (in a container) the container's: see pgroup.
        self._groups: list[tuple[str, int]] = []
        self._marks_wanted = 2 if shell.container else 1
        self._group_known = asyncio.Event()
        self._closing: asyncio.Future[None] | None = None
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._watch: FirstLineWatch | None = None
        if first_line is not None:
            self._watch = FirstLineWatch(host, what, first_line, self._first_line_missed)
            if sink is not None:
                on_line = sink.on_line

                def first(line: str) -> None:
                    if self._watch is None or self._watch.fired:
                        return  # too late: the command is being ended
                    self._watch.seen()
                    sink.on_line = on_line  # from now on straight to the consumer
                    on_line(line)

                sink.on_line = first

    def _first_line_missed(self) -> None:
        if self._sink is not None:
            self._sink.on_line = lambda _line: None  # nothing after the deadline, no half line
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(grace=0.0))

    async def _drain_stderr(self) -> None:
        # Read stderr continuously so a chatty command never stalls on a full window. The
        # wrapper's group markers come first (after whatever a login shell's rc files print).
        splitter = LineSplitter(64 << 10)
        seen = 0
        try:
            while True:
                data = await self._proc.stderr.read(CHUNK)
                if not data:
                    break
                for raw in splitter.feed(data):
                    if not self._group_known.is_set():
                        mark = parse_mark(raw)
                        seen += 1
                        if mark is not None:
                            self._groups.append(mark)
                        if len(self._groups) >= self._marks_wanted or seen > 20:
                            self._group_known.set()
                        if mark is not None:
                            continue
                    if self._shell.env_setup and raw.startswith(SETUP_MARK):
                        before = "\n".join(self._stderr).encode()
                        failed = setup_failure(self._host, self._shell, before + b"\n" + raw)
                        if failed is not None:
                            self._setup_failed = str(failed)
                            continue
                    self._stderr.append(decode(raw))
        except Exception:  # the channel died: what we have is all there is
            pass
        finally:
            self._group_known.set()

    async def lines(self) -> AsyncIterator[str]:
        if self._sink is not None:
            raise RuntimeError("an on_line stream: await finished() instead")
        watch = self._watch
        try:
            async for line in read_lines(self._proc.stdout.read, self._splitter):
                if watch is not None:
                    if watch.fired:
                        break  # the end of a command given up on: no half line
                    watch.seen()
                yield line
        except (asyncssh.Error, OSError):
            pass
        if watch is not None and watch.error is not None:
            raise watch.error

    async def finished(self) -> None:
        """Until stdout has ended (an on_line stream: what on_line raised is raised here)."""
        if self._sink is None:
            async for _ in self.lines():
                pass
            return
        await self._sink.wait()
        if self._watch is not None and self._watch.error is not None:
            raise self._watch.error

    @property
    def oversize_lines(self) -> int:
        return self._splitter.oversize

    def send(self, text: str) -> None:
        if self._closing is not None:
            return
        with contextlib.suppress(Exception):  # the channel is gone: so is the command
            self._proc.stdin.write(text.encode())

    async def stderr_tail(self) -> str:
        """The command's last stderr lines; where the host's env_setup failed, only the one
        line that says so (host, step, output tail)."""
        # asyncio.wait: never raises, even if close() already cancelled the reader.
        await asyncio.wait([self._stderr_task], timeout=1.0)
        return self._setup_failed or "\n".join(self._stderr)

    @property
    def exit_status(self) -> int | None:
        return self._proc.exit_status

    def _exited(self) -> bool:
        proc = self._proc
        return proc.exit_status is not None or proc.exit_signal is not None

    async def close(self) -> None:
        """EOF on stdin (the polite stop); if the command is still running after a short
        grace, kill its process group on the host (TERM, then KILL). A second call waits for
        the first one's end."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(grace=EOF_GRACE_S))
        # Shielded: a cancel of the caller must not leave the group running.
        await asyncio.shield(self._closing)

    async def _close(self, grace: float) -> None:
        if self._watch is not None:
            self._watch.seen()
        with contextlib.suppress(Exception):
            self._proc.stdin.write_eof()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        gone = self._conn.is_closed  # a dead connection: no exit status will come, no kill either
        while not self._exited() and not gone() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if not self._exited() and not gone():
            await self._kill_group()
        else:  # let stderr's last lines in (the failure message is usually there)
            await asyncio.wait([self._stderr_task], timeout=0.5)
        await close_channel(self._proc)
        self._stderr_task.cancel()

    async def _kill_group(self) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await within(self._group_known.wait(), 2.0)
        await kill_remote(self._conn, self._groups, self._shell)


async def close_channel(proc: asyncssh.SSHClientProcess) -> None:
    """Close the command's channel and wait (bounded) for the close to be confirmed."""
    proc.close()
    with contextlib.suppress(Exception):
        await within(proc.wait_closed(), _CLOSED_WAIT_S)


async def kill_remote(
    conn: asyncssh.SSHClientConnection, groups: list[tuple[str, int]], shell: HostShell
) -> None:
    """TERM then KILL the command's process groups (the container's inside it first), through
    a separate exec each (the command's own channel may be gone). Best effort and bounded: a
    dead connection cannot kill anything, and a stalled host gets KILL_TIMEOUT_S in all."""

    async def kill_all() -> None:
        for group in kill_order(groups):
            cmd = kill_command(*group, container=shell.container)
            with contextlib.suppress(Exception):
                await conn.run(cmd, check=False, timeout=KILL_TIMEOUT_S)

    if groups:
        with contextlib.suppress(asyncio.TimeoutError):
            await within(kill_all(), KILL_TIMEOUT_S)


def take_marks(err: bytes) -> tuple[list[tuple[str, int]], bytes]:
    """Split the wrappers' group marker lines (host, then container) out of a command's
    collected stderr."""
    marks: list[tuple[str, int]] = []
    for _ in range(2):
        at = err.find(MARK)
        if at < 0 or (at > 0 and err[at - 1 : at] != b"\n"):
            break
        nl = err.find(b"\n", at)
        end = len(err) if nl < 0 else nl + 1
        mark = parse_mark(err[at:end])
        if mark is None:
            break
        marks.append(mark)
        err = err[:at] + err[end:]
    return marks, err


async def collect(reader: asyncssh.SSHReader, buf: bytearray) -> None:
    while True:
        data = await reader.read(CHUNK)
        if not data:
            return
        buf += data


def forget_command(proc: asyncssh.SSHClientProcess) -> None:
    """The channel keeps the command it sent for get_command(), which nothing here asks for:
    a shipped program's whole source (the GPU agent: 64 KB), per stream, for the stream's
    life: 64 MiB at 1,024 hosts. Dropped once the request has gone out."""
    with contextlib.suppress(AttributeError):
        proc.channel._command = None
