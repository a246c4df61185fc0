"""SSH with asyncssh: strict host keys, classified connect failures, run / stream / forward.

This and fleet.py are the only modules that import asyncssh.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncssh

from tui.config.hosts import Host, SshOptions
from tui.config.hosts import split_jump as config_split_jump
from tui.transport import sshfiles
from tui.transport.lines import (
    CHUNK,
    DEFAULT_MAX_LINE,
    LineSink,
    LineSplitter,
    decode,
    read_lines,
)
from tui.transport.pgroup import MARK, group_command, kill_command, kill_order, parse_mark
from tui.transport.types import (
    NO_SHELL,
    SETUP_MARK,
    HostShell,
    HostState,
    RunResult,
    TransportError,
    command_line,
    setup_failure,
)
from tui.transport.unix_forward import PrivateDir

DEFAULT_CONNECT_TIMEOUT = 10.0
# asyncssh restarts the keepalive timer on every packet received, so while an agent streams
# at 1 Hz no keepalive is sent at 2 s (at 1 s: 0.32 a host a second, a packet out and a reply
# in each, measured at 128 hosts); a dead host is still LOST 4 s after its last packet.
DEFAULT_KEEPALIVE_INTERVAL = 2.0
DEFAULT_KEEPALIVE_COUNT_MAX = 1
PREFERRED_CIPHERS = sorted(
    (alg.decode() for alg in asyncssh.encryption.get_default_encryption_algs()),
    key=lambda alg: "-gcm@" not in alg,
)
EOF_GRACE_S = 1.0  # a stream's command gets this long to exit on EOF before its group is killed
KILL_TIMEOUT_S = 5.0


class ConnectFailure(Exception):
    """A classified connect failure: the host state it maps to and a one-line reason."""

    def __init__(self, state: HostState, reason: str):
        self.state = state
        self.reason = reason
        super().__init__(reason)


class _Client(asyncssh.SSHClient):
    def __init__(self) -> None:
        self.lost_reason: str | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_reason = str(exc) if exc else "connection closed"


def _expand(path: str | None) -> str | None:
    return os.path.expanduser(path) if path else None


def known_hosts_path(ssh: SshOptions) -> Path:
    return sshfiles.known_hosts_path(ssh)


def split_jump(spec: str) -> tuple[str | None, str, int | None]:
    """'user@host:port' → (user, host, port); `[v6]:port`, a bare 'host' and a Host alias
    work too (hosts.yaml validation has already refused anything else)."""
    try:
        return config_split_jump(spec)
    except ValueError as exc:
        raise ConnectFailure(HostState.UNREACHABLE, f"jump host {spec!r}: {exc}") from None


def _known_hosts_name(address: str, port: int | None) -> str:
    """How OpenSSH names the host in known_hosts: `addr`, or `[addr]:port` off port 22."""
    return address if port in (None, 22) else f"[{address}]:{port}"


def _preflight(ssh: SshOptions) -> sshfiles.Checked:
    """The local files checked before connecting (once per distinct file, see sshfiles)."""
    try:
        return sshfiles.check_files(ssh)
    except sshfiles.FileProblem as exc:
        raise ConnectFailure(exc.state, exc.reason) from None


def _options(
    ssh: SshOptions, *, host: str, checked: sshfiles.Checked | None = None
) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "connect_timeout": ssh.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
        "login_timeout": ssh.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
        # asyncssh leaves keepalive off; without it a silently dead host is never noticed.
        "keepalive_interval": ssh.keepalive_interval or DEFAULT_KEEPALIVE_INTERVAL,
        "keepalive_count_max": ssh.keepalive_count_max or DEFAULT_KEEPALIVE_COUNT_MAX,
        # The same algorithms offered, AES-GCM preferred: asyncssh's chacha20-poly1305 costs
        # ~23 us a packet in Python, AES-GCM ~4 (one cryptography call): with hundreds of
        # hosts streaming, that is the cockpit's SSH cost.
        "encryption_algs": PREFERRED_CIPHERS,
    }
    if ssh.user:
        opts["username"] = ssh.user
    if ssh.port:
        opts["port"] = ssh.port
    if ssh.identity_file:
        opts["client_keys"] = [_expand(ssh.identity_file)]
        if checked is not None and checked.ignore_encrypted:
            opts["ignore_encrypted"] = True  # encrypted: the ssh-agent signs with it
    if ssh.config is not None:
        opts["config"] = [_expand(ssh.config)] if ssh.config else []
    if ssh.insecure_skip_host_key_check:
        opts["known_hosts"] = None
    elif checked is not None and checked.known_hosts is not None:
        opts["known_hosts"] = checked.known_hosts  # parsed once per file, not per host
    else:
        # Strict always: a missing file means every key is unknown, never "accept".
        path = known_hosts_path(ssh)
        opts["known_hosts"] = str(path) if path.is_file() else ([], [], [])
    return opts


def _key_problem(ssh: SshOptions, address: str, port: int | None) -> ConnectFailure:
    path = known_hosts_path(ssh)
    listed = False
    with contextlib.suppress(Exception):  # sshfiles.FileProblem, or a file changed meanwhile
        keys = sshfiles.known_hosts(path).match(address, "", port or 22)
        listed = bool(keys[0])
    name = _known_hosts_name(address, port)
    if listed:
        return ConnectFailure(
            HostState.HOST_KEY_MISMATCH,
            f"host key of {name} differs from {path} — possible impersonation; "
            f"if the host was reinstalled: ssh-keygen -f {path} -R '{name}'",
        )
    scan = (
        f"ssh-keyscan -p {port} {address}" if port not in (None, 22) else f"ssh-keyscan {address}"
    )
    return ConnectFailure(
        HostState.HOST_KEY_UNKNOWN,
        f"{name} is not in {path} — verify its key, then add it ({scan})",
    )


def classify(exc: BaseException, ssh: SshOptions, address: str) -> ConnectFailure:
    if isinstance(exc, ConnectFailure):
        return exc
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return _key_problem(ssh, address, ssh.port)
    if isinstance(exc, asyncssh.PermissionDenied):
        user = f"{ssh.user}@" if ssh.user else ""
        return ConnectFailure(
            HostState.AUTH_FAILED, f"key authentication refused for {user}{address}"
        )
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return ConnectFailure(HostState.UNREACHABLE, f"no answer from {address} (timed out)")
    if isinstance(exc, asyncssh.KeyImportError):  # a key named by the ssh config
        return ConnectFailure(HostState.AUTH_FAILED, f"cannot load a private key: {exc}")
    if isinstance(exc, asyncssh.ConfigParseError):
        return ConnectFailure(HostState.UNREACHABLE, f"ssh config: {exc}")
    if isinstance(exc, FileNotFoundError):
        # The files hosts.yaml names were checked before connecting (sshfiles): this one
        # came from elsewhere (an IdentityFile in the ssh config); name it, blame nothing.
        what = "identity file" if exc.filename == _expand(ssh.identity_file) else "file"
        return ConnectFailure(HostState.AUTH_FAILED, f"{what} not found: {exc.filename}")
    if isinstance(exc, ConnectionRefusedError):
        port = ssh.port or 22
        return ConnectFailure(HostState.UNREACHABLE, f"{address}:{port} refused the connection")
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        return ConnectFailure(HostState.UNREACHABLE, f"{address}: {reason}")
    if isinstance(exc, asyncssh.Error):
        return ConnectFailure(HostState.UNREACHABLE, f"{address}: {exc.reason}")
    return ConnectFailure(HostState.UNREACHABLE, f"{address}: {type(exc).__name__}: {exc}")


async def open_connection(
    host: Host, tunnel: asyncssh.SSHClientConnection | None = None
) -> tuple[asyncssh.SSHClientConnection, _Client]:
    """Connect to one host; raise ConnectFailure with a classified state."""
    client = _Client()
    checked = _preflight(host.ssh)
    try:
        conn, _ = await asyncssh.create_connection(
            lambda: client,
            host.address,
            tunnel=tunnel,
            **_options(host.ssh, host=host.name, checked=checked),
        )
    except Exception as exc:
        raise classify(exc, host.ssh, host.address) from None
    return conn, client


async def open_jump(spec: str, ssh: SshOptions) -> asyncssh.SSHClientConnection:
    user, address, port = split_jump(spec)
    try:
        checked = _preflight(ssh)
    except ConnectFailure as failure:
        raise ConnectFailure(failure.state, f"via jump host {spec}: {failure.reason}") from None
    opts = _options(ssh, host=address, checked=checked)
    if user:
        opts["username"] = user
    if port:
        opts["port"] = port
    elif "port" in opts:
        del opts["port"]  # the hosts' port is not the bastion's
    try:
        return await asyncssh.connect(address, **opts)
    except Exception as exc:
        classified = classify(exc, ssh, address)
        raise ConnectFailure(
            classified.state, f"via jump host {spec}: {classified.reason}"
        ) from None


class _SinkProcess(asyncssh.SSHClientProcess):
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

    With `on_line`, stdout lines are handed to it as they arrive (see _SinkProcess) and
    finished() waits for the end; lines() is for the other mode."""

    def __init__(
        self,
        proc: asyncssh.SSHClientProcess,
        conn: asyncssh.SSHClientConnection,
        max_line: int = DEFAULT_MAX_LINE,
        *,
        host: str = "",
        shell: HostShell = NO_SHELL,
        sink: LineSink | None = None,
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
        self._closed = False
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

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
        try:
            async for line in read_lines(self._proc.stdout.read, self._splitter):
                yield line
        except (asyncssh.Error, OSError):
            return

    async def finished(self) -> None:
        """Until stdout has ended (an on_line stream: what on_line raised is raised here)."""
        if self._sink is None:
            async for _ in self.lines():
                pass
            return
        await self._sink.wait()

    @property
    def oversize_lines(self) -> int:
        return self._splitter.oversize

    def send(self, text: str) -> None:
        if self._closed:
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
        grace, kill its process group on the host (TERM, then KILL)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._proc.stdin.write_eof()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EOF_GRACE_S
        gone = self._conn.is_closed  # a dead connection: no exit status will come, no kill either
        while not self._exited() and not gone() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if not self._exited() and not gone():
            # Shielded: a second cancel of the caller must not leave the group running.
            await asyncio.shield(asyncio.ensure_future(self._kill_group()))
        else:  # let stderr's last lines in (the failure message is usually there)
            await asyncio.wait([self._stderr_task], timeout=0.5)
        self._proc.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.wait_closed(), 2.0)
        self._stderr_task.cancel()

    async def _kill_group(self) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._group_known.wait(), 2.0)
        await _kill_remote(self._conn, self._groups, self._shell)


async def _kill_remote(
    conn: asyncssh.SSHClientConnection, groups: list[tuple[str, int]], shell: HostShell
) -> None:
    """TERM then KILL the command's process groups (the container's inside it first), through
    a separate exec each (the command's own channel may be gone). Best effort: a dead
    connection cannot kill anything."""
    for group in kill_order(groups):
        cmd = kill_command(*group, container=shell.container)
        with contextlib.suppress(Exception):
            await conn.run(cmd, check=False, timeout=KILL_TIMEOUT_S)


def _take_marks(err: bytes) -> tuple[list[tuple[str, int]], bytes]:
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


async def _collect(reader: asyncssh.SSHReader, buf: bytearray) -> None:
    while True:
        data = await reader.read(CHUNK)
        if not data:
            return
        buf += data


def _forget_command(proc: asyncssh.SSHClientProcess) -> None:
    """The channel keeps the command it sent for get_command(), which nothing here asks for:
    a shipped program's whole source (the GPU agent: 64 KB), per stream, for the stream's
    life: 64 MiB at 1,024 hosts. Dropped once the request has gone out."""
    with contextlib.suppress(AttributeError):
        proc.channel._command = None


class SshForward:
    def __init__(self, listener: asyncssh.SSHListener):
        self._listener = listener

    @property
    def local_port(self) -> int:
        return self._listener.get_port()

    def close(self) -> None:
        self._listener.close()


class SshPathForward:
    """A private Unix socket here (tui/transport/unix_forward.py), tunnelled by asyncssh."""

    def __init__(self, listener: asyncssh.SSHListener, folder: PrivateDir):
        self._listener = listener
        self._folder = folder
        self.path = folder.path

    def close(self) -> None:
        self._listener.close()
        self._folder.remove()


class SshTransport:
    def __init__(
        self,
        host: str,
        conn: asyncssh.SSHClientConnection,
        shell: HostShell = NO_SHELL,
        keepalive: float = DEFAULT_KEEPALIVE_INTERVAL,
    ):
        self.host = host
        self.shell = shell  # env_setup and container: every command goes through them
        self._conn = conn
        self._keepalive = keepalive  # the host's setting, what set_keepalive(None) restores

    def set_keepalive(self, interval: float | None) -> None:
        with contextlib.suppress(Exception):  # a closed connection: nothing to check
            self._conn.set_keepalive(self._keepalive if interval is None else interval)

    def _command(self, argv: Sequence[str], env: Mapping[str, str] | None) -> str:
        return group_command(command_line(argv, env, self.shell), self.shell.container)

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run to completion. stdin gets `input` then EOF. On timeout or cancellation the
        command's whole process group on the host is killed: nothing is left behind."""
        cmd = self._command(argv, env)
        try:
            proc = await self._start(cmd)
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: {exc}") from None
        out, err = bytearray(), bytearray()
        try:
            with contextlib.suppress(Exception):
                if input is not None:
                    proc.stdin.write(input.encode())
                proc.stdin.write_eof()
            gathered = asyncio.gather(
                _collect(proc.stdout, out), _collect(proc.stderr, err), proc.wait_closed()
            )
            # Cancelled (the caller gave up): its CancelledError is retrieved here, else asyncio
            # prints "exception was never retrieved" with a traceback on the user's terminal.
            gathered.add_done_callback(lambda f: f.cancelled() or f.exception())
            await asyncio.wait_for(gathered, timeout)
        except BaseException as exc:
            # Timed out, cancelled, or the channel failed: end the command's group, then report.
            groups, _ = _take_marks(bytes(err))
            if groups:
                await asyncio.shield(
                    asyncio.ensure_future(_kill_remote(self._conn, groups, self.shell))
                )
            proc.close()
            if isinstance(exc, asyncio.TimeoutError):
                raise TransportError(
                    f"{self.host}: {argv[0]} timed out after {timeout} s"
                ) from None
            if isinstance(exc, (asyncssh.Error, OSError)):
                raise TransportError(f"{self.host}: {exc}") from None
            raise
        _, err_bytes = _take_marks(bytes(err))
        if self.shell.env_setup:
            failed = setup_failure(self.host, self.shell, err_bytes)
            if failed is not None:
                raise failed
        return RunResult(
            tuple(argv),
            proc.exit_status,
            out.decode("utf-8", "replace"),
            err_bytes.decode("utf-8", "replace"),
        )

    async def _start(self, cmd: str, sink: LineSink | None = None) -> asyncssh.SSHClientProcess:
        """create_process, bytes in and out; if the caller is cancelled while the channel
        opens, the command may already run on the host: end it before giving up."""
        opened: Awaitable[asyncssh.SSHClientProcess] = (
            self._conn.create_process(cmd, encoding=None)
            if sink is None
            else self._open_sink_process(cmd, sink)
        )
        task = asyncio.ensure_future(opened)
        try:
            proc = await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                proc = await asyncio.wait_for(task, KILL_TIMEOUT_S)
                await SshStream(proc, self._conn, shell=self.shell).close()
            raise
        _forget_command(proc)
        return proc

    async def _open_sink_process(self, cmd: str, sink: LineSink) -> asyncssh.SSHClientProcess:
        # What create_process does, with our session class (the sink is in place before the
        # first byte can arrive, so nothing is buffered where the sink would not see it).
        _, proc = await self._conn.create_session(
            lambda: _SinkProcess(sink.feed, sink.ended), cmd, encoding=None
        )
        assert isinstance(proc, _SinkProcess)
        return proc

    async def stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        on_line: Callable[[str], None] | None = None,
    ) -> SshStream:
        sink = None if on_line is None else LineSink(on_line, max_line)
        try:
            proc = await self._start(self._command(argv, env), sink)
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: cannot start {argv[0]}: {exc}") from None
        stream = SshStream(proc, self._conn, max_line, host=self.host, shell=self.shell, sink=sink)
        return stream

    async def forward_local_port(
        self, remote_host: str, remote_port: int, local_port: int = 0
    ) -> SshForward:
        """Listen on 127.0.0.1:local_port (0: any free port) and tunnel to the remote side."""
        try:
            listener = await self._conn.forward_local_port(
                "127.0.0.1", local_port, remote_host, remote_port
            )
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(
                f"{self.host}: cannot forward to {remote_host}:{remote_port}: {exc}"
            ) from None
        return SshForward(listener)

    async def forward_local_path(self, remote_host: str, remote_port: int) -> SshPathForward:
        """Listen on a Unix socket in a fresh 0700 folder of ours and tunnel to the remote side:
        unlike a loopback port, no other user of this machine can connect to it."""
        folder = PrivateDir()
        try:
            listener = await self._conn.forward_local_path_to_port(
                folder.path, remote_host, remote_port
            )
        except (asyncssh.Error, OSError) as exc:
            folder.remove()
            raise TransportError(
                f"{self.host}: cannot forward to {remote_host}:{remote_port}: {exc}"
            ) from None
        return SshPathForward(listener, folder)
