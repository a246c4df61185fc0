"""The local transport: this machine, through subprocesses — no SSH server needed.

Every command runs in a session (and process group) of its own, like the SSH transport's remote
commands, so giving up on one (timeout, cancel, close) ends it and everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass

from tui.config.hosts import DEFAULT_COMMAND_TIMEOUT
from tui.transport.deadline import CommandTimeout, FirstLineWatch, describe, within
from tui.transport.lines import CHUNK, DEFAULT_MAX_LINE, LineSplitter, read_lines
from tui.transport.types import (
    NO_SHELL,
    SETUP_MARK,
    HostShell,
    RunResult,
    TransportError,
    command_line,
    setup_failure,
)
from tui.transport.unix_forward import LocalPathForward

EOF_GRACE_S = 1.0  # a stream's command gets this long to exit on EOF before its group is killed
TERM_GRACE_S = 2.0  # then this long after SIGTERM before SIGKILL


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if not env else {**os.environ, **env}


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it is gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _spawn(
    argv: Sequence[str], env: Mapping[str, str] | None, stdin: int
) -> asyncio.subprocess.Process:
    """`argv` in a session (a process group) of its own, stdout and stderr piped. A cancel
    that lands while the process is being set up (forked, its pipes not yet connected: on a
    busy machine long enough for it to start children) still gets the process, and kills its
    group before the cancel goes on: never a process left running with nobody to end it."""
    start = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_env(env),
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(start)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            proc = await within(start, 5.0)
            _killpg(proc.pid, signal.SIGKILL)
            await within(proc.wait(), 5.0)
        raise


async def end_group(proc: asyncio.subprocess.Process, term_grace: float = TERM_GRACE_S) -> None:
    """TERM the process's group, KILL it after `term_grace`, reap the process."""
    pgid = proc.pid  # start_new_session: the process leads its own group
    if _killpg(pgid, signal.SIGTERM):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + term_grace
        while loop.time() < deadline:
            if proc.returncode is not None and not _killpg(pgid, 0):
                break
            await asyncio.sleep(0.05)
        else:
            _killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await within(proc.wait(), 5.0)


async def _feed(proc: asyncio.subprocess.Process, text: str | None) -> None:
    """Write a run's input to its stdin, then EOF (a command that exits first ends this)."""
    if proc.stdin is None:
        return
    with contextlib.suppress(OSError):  # it exited without reading all of it
        if text is not None:
            proc.stdin.write(text.encode())
            await proc.stdin.drain()
        proc.stdin.close()


async def _collect(reader: asyncio.StreamReader | None, buf: bytearray) -> None:
    while reader is not None and (data := await reader.read(CHUNK)):
        buf += data


class LocalStream:
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        max_line: int = DEFAULT_MAX_LINE,
        *,
        host: str = "localhost",
        shell: HostShell = NO_SHELL,
        on_line: Callable[[str], None] | None = None,
        first_line: float | None = None,
        what: str = "",
    ):
        self._proc = proc
        self._on_line = on_line
        self._host = host
        self._shell = shell
        self._setup_failed: str | None = None
        self._splitter = LineSplitter(max_line)
        self._stderr: deque[str] = deque(maxlen=50)
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._closing: asyncio.Future[None] | None = None
        self._watch = (
            None
            if first_line is None
            else FirstLineWatch(host, what, first_line, self._first_line_missed)
        )

    def _first_line_missed(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(grace=0.0))

    async def _drain_stderr(self) -> None:
        # Read continuously (bounded lines, last 50 kept) so a chatty command never blocks.
        assert self._proc.stderr is not None
        with contextlib.suppress(Exception):
            async for line in read_lines(self._proc.stderr.read, LineSplitter(64 << 10)):
                if self._shell.env_setup and line.startswith(SETUP_MARK.decode()):
                    before = "\n".join([*self._stderr, line]).encode()
                    failed = setup_failure(self._host, self._shell, before)
                    if failed is not None:
                        self._setup_failed = str(failed)
                        continue
                self._stderr.append(line)

    async def lines(self) -> AsyncIterator[str]:
        assert self._proc.stdout is not None
        watch = self._watch
        async for line in read_lines(self._proc.stdout.read, self._splitter):
            if watch is not None:
                if watch.fired:
                    break  # the end of a command given up on: no half line
                watch.seen()
            yield line
        if watch is not None and watch.error is not None:
            raise watch.error

    async def finished(self) -> None:
        """Until stdout has ended, handing each line to on_line (one local host: the SSH
        transport's per-packet callback is not worth it here)."""
        on_line = self._on_line
        async for line in self.lines():
            if on_line is not None:
                on_line(line)

    @property
    def oversize_lines(self) -> int:
        return self._splitter.oversize

    def send(self, text: str) -> None:
        stdin = self._proc.stdin
        if stdin is not None and self._closing is None:
            with contextlib.suppress(Exception):  # the command is gone
                stdin.write(text.encode())

    async def stderr_tail(self) -> str:
        # asyncio.wait: never raises, even if close() already cancelled the reader.
        await asyncio.wait([self._stderr_task], timeout=1.0)
        return self._setup_failed or "\n".join(self._stderr)[-2000:]

    @property
    def exit_status(self) -> int | None:
        return self._proc.returncode

    async def close(self) -> None:
        """EOF on stdin (the polite stop); if the command has not exited after a short grace,
        TERM then KILL its whole process group. A second call waits for the first one's end."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(grace=EOF_GRACE_S))
        # Shielded: a cancel of the caller must not leave the group running.
        await asyncio.shield(self._closing)

    async def _close(self, grace: float) -> None:
        if self._watch is not None:
            self._watch.seen()
        proc = self._proc
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        if proc.returncode is None:
            try:
                await within(asyncio.shield(proc.wait()), grace)
            except asyncio.TimeoutError:
                await end_group(proc)
        await asyncio.wait([self._stderr_task], timeout=0.5)  # stderr's last lines
        self._stderr_task.cancel()


@dataclass
class LocalForward:
    """On the local transport the remote port is already local: nothing to tunnel."""

    local_port: int

    def close(self) -> None:
        pass


class LocalTransport:
    """With a HostShell (env_setup, container), each command runs as `sh -c LINE`: the
    container prefix, then the setup, then `env K=V argv` (the container sees no environment
    of ours). Giving up on a command kills its group here, which ends a container runtime's
    client but not always what it started inside (SSH hosts kill inside too: see pgroup)."""

    def __init__(
        self,
        host: str = "localhost",
        shell: HostShell = NO_SHELL,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    ):
        self.host = host
        self.shell = shell
        self.command_timeout = command_timeout  # a run given no timeout (ssh.command_timeout)

    def _argv(
        self, argv: Sequence[str], env: Mapping[str, str] | None
    ) -> tuple[Sequence[str], Mapping[str, str] | None]:
        if not self.shell:
            return argv, env
        line = command_line(argv, env, self.shell)
        if self.shell.container:
            line = f"{shlex.join(self.shell.container)} {line}"
        return ["sh", "-c", line], None

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        what: str | None = None,
    ) -> RunResult:
        """Run to completion within `timeout` (None: the host's command_timeout); past it or
        cancelled, the command's whole group is killed; the deadline raises CommandTimeout."""
        seconds = self.command_timeout if timeout is None else timeout
        given = tuple(argv)
        argv, env = self._argv(argv, env)
        try:
            proc = await _spawn(
                argv,
                env,
                asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            return RunResult(given, 127, "", f"{argv[0]}: {exc.strerror or exc}")
        out, err = bytearray(), bytearray()
        try:
            await within(
                asyncio.gather(
                    _feed(proc, input),
                    _collect(proc.stdout, out),
                    _collect(proc.stderr, err),
                    proc.wait(),
                ),
                seconds,
            )
        except BaseException as exc:
            # Timed out or cancelled: nothing it started may outlive the call.
            _killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(within(proc.wait(), 5.0))
            if isinstance(exc, asyncio.TimeoutError):
                raise CommandTimeout(
                    self.host,
                    what or describe(given),
                    seconds,
                    answered=bool(out.strip() or err.strip()),
                ) from None
            raise
        if self.shell.env_setup:
            failed = setup_failure(self.host, self.shell, bytes(err))
            if failed is not None:
                raise failed
        return RunResult(
            given,
            proc.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )

    async def stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        on_line: Callable[[str], None] | None = None,
        first_line: float | None = None,
        what: str | None = None,
    ) -> LocalStream:
        given = argv
        argv, env = self._argv(argv, env)
        try:
            proc = await _spawn(argv, env, asyncio.subprocess.PIPE)
        except OSError as exc:
            raise TransportError(f"{self.host}: cannot start {given[0]}: {exc}") from None
        return LocalStream(
            proc,
            max_line,
            host=self.host,
            shell=self.shell,
            on_line=on_line,
            first_line=first_line,
            what=what or describe(given),
        )

    async def forward_local_port(
        self, remote_host: str, remote_port: int, local_port: int = 0
    ) -> LocalForward:
        return LocalForward(remote_port)

    async def open_connection(
        self, remote_host: str, remote_port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        where = f"{remote_host}:{remote_port}"
        try:
            return await within(
                asyncio.open_connection(remote_host, remote_port), self.command_timeout
            )
        except asyncio.TimeoutError:
            raise TransportError(f"{self.host}: no connection to {where}") from None
        except OSError as exc:
            raise TransportError(
                f"{self.host}: cannot connect to {where}: {exc.strerror or exc}"
            ) from None

    async def forward_local_path(self, remote_host: str, remote_port: int) -> LocalPathForward:
        return await LocalPathForward.open(remote_host, remote_port)

    def set_keepalive(self, interval: float | None) -> None:
        """A local command has no link to check."""
