"""SSH with asyncssh: strict host keys, classified connect failures, run / stream / forward.

Only tui/transport imports asyncssh; one command's channel (its stream, its end) is in
ssh_process.py, the deadlines every command has in deadline.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncssh

from tui.config.hosts import DEFAULT_COMMAND_TIMEOUT, Host, SshOptions
from tui.config.hosts import split_jump as config_split_jump
from tui.shellcmd import copy_line, known_hosts_name
from tui.transport import sshfiles
from tui.transport.deadline import CommandTimeout, describe, within
from tui.transport.lines import DEFAULT_MAX_LINE, LineSink
from tui.transport.peer_forward import PeerCheckedForward
from tui.transport.pgroup import group_command
from tui.transport.ssh_process import (
    KILL_TIMEOUT_S,
    SinkProcess,
    SshStream,
    close_channel,
    collect,
    forget_command,
    kill_remote,
    take_marks,
)
from tui.transport.ssh_relay import open_channel_streams
from tui.transport.types import (
    NO_SHELL,
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
    name = known_hosts_name(address, port)
    if listed:
        forget = copy_line(["ssh-keygen", "-f", str(path), "-R", name])
        return ConnectFailure(
            HostState.HOST_KEY_MISMATCH,
            f"host key of {name} differs from {path} — possible impersonation; "
            f"if the host was reinstalled: {forget}",
        )
    port_args = ["-p", str(port)] if port not in (None, 22) else []
    scan = copy_line(["ssh-keyscan", *port_args, address])
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
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    ):
        self.host = host
        self.shell = shell  # env_setup and container: every command goes through them
        self.command_timeout = command_timeout  # a run given no timeout (ssh.command_timeout)
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
        what: str | None = None,
    ) -> RunResult:
        """Run to completion within `timeout` (None: the host's command_timeout), opening the
        channel included. stdin gets `input` then EOF. Past the deadline or cancelled, the
        command's whole process group on the host is killed (nothing is left behind) and the
        channel closed; the deadline raises CommandTimeout."""
        seconds = self.command_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        try:
            proc = await within(self._start(self._command(argv, env)), seconds)
        except asyncio.TimeoutError:
            raise CommandTimeout(
                self.host, what or describe(argv), seconds, answered=False
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: {exc}") from None
        out, err = bytearray(), bytearray()
        try:
            with contextlib.suppress(Exception):
                if input is not None:
                    proc.stdin.write(input.encode())
                proc.stdin.write_eof()
            await within(
                asyncio.gather(collect(proc.stdout, out), collect(proc.stderr, err)),
                end - loop.time(),
            )
            await within(proc.wait_closed(), end - loop.time())
        except BaseException as exc:
            # Timed out, cancelled, or the channel failed: end the command's group, then report.
            groups, rest = take_marks(bytes(err))
            await asyncio.shield(asyncio.ensure_future(self._give_up(proc, groups)))
            if isinstance(exc, asyncio.TimeoutError):
                answered = bool(out.strip() or rest.strip())
                raise CommandTimeout(
                    self.host, what or describe(argv), seconds, answered=answered
                ) from None
            if isinstance(exc, (asyncssh.Error, OSError)):
                raise TransportError(f"{self.host}: {exc}") from None
            raise
        _, err_bytes = take_marks(bytes(err))
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

    async def _give_up(
        self, proc: asyncssh.SSHClientProcess, groups: list[tuple[str, int]]
    ) -> None:
        await kill_remote(self._conn, groups, self.shell)
        await close_channel(proc)

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
                proc = await within(task, KILL_TIMEOUT_S)
                await SshStream(proc, self._conn, shell=self.shell).close()
            raise
        forget_command(proc)
        return proc

    async def _open_sink_process(self, cmd: str, sink: LineSink) -> asyncssh.SSHClientProcess:
        # What create_process does, with our session class (the sink is in place before the
        # first byte can arrive, so nothing is buffered where the sink would not see it).
        _, proc = await self._conn.create_session(
            lambda: SinkProcess(sink.feed, sink.ended), cmd, encoding=None
        )
        assert isinstance(proc, SinkProcess)
        return proc

    async def stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        on_line: Callable[[str], None] | None = None,
        first_line: float | None = None,
        what: str | None = None,
    ) -> SshStream:
        """Start a long-lived command (opening its channel has the host's command_timeout);
        with `first_line`, its first line has that deadline (see SshStream)."""
        sink = None if on_line is None else LineSink(on_line, max_line)
        label = what or describe(argv)
        try:
            proc = await within(self._start(self._command(argv, env), sink), self.command_timeout)
        except asyncio.TimeoutError:
            raise CommandTimeout(
                self.host, f"start {label}", self.command_timeout, answered=False
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: cannot start {argv[0]}: {exc}") from None
        return SshStream(
            proc,
            self._conn,
            max_line,
            host=self.host,
            shell=self.shell,
            sink=sink,
            first_line=first_line,
            what=label,
        )

    async def open_connection(
        self, remote_host: str, remote_port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to remote_host:remote_port as seen from the host: a direct-tcpip channel of
        this connection, handed over as asyncio streams through a socket pair (no listener, so
        nobody else on this machine can reach it; tui/transport/ssh_relay.py)."""
        where = f"{remote_host}:{remote_port}"
        try:
            return await within(
                open_channel_streams(self._conn, remote_host, remote_port), self.command_timeout
            )
        except asyncio.TimeoutError:
            raise TransportError(
                f"{self.host}: no channel to {where} within {self.command_timeout:g} s"
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: cannot connect to {where}: {exc}") from None

    async def forward_local_port(
        self, remote_host: str, remote_port: int, local_port: int = 0
    ) -> PeerCheckedForward:
        """127.0.0.1:local_port (0: any free port) tunnelled to the remote side, for a program
        that can only connect over TCP: only our uid's connections are let through."""
        return await PeerCheckedForward.open(
            lambda: self.open_connection(remote_host, remote_port),
            local_port,
            what=f"the forward to {remote_host}:{remote_port} via {self.host}",
        )

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
