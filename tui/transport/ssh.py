"""SSH with asyncssh: strict host keys, classified connect failures, run / stream / forward.

This and fleet.py are the only modules that import asyncssh.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncssh

from tui.config.hosts import Host, SshOptions
from tui.transport.types import HostState, RunResult, TransportError, command_line

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE_INTERVAL = 1.0
DEFAULT_KEEPALIVE_COUNT_MAX = 3


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
    return Path(_expand(ssh.known_hosts) or "~/.ssh/known_hosts").expanduser()


def split_jump(spec: str) -> tuple[str | None, str, int | None]:
    """'user@host:port' → (user, host, port); bare 'host' works, as does a Host alias."""
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        port = int(port_text) if port_text.isdigit() else None
    return (user or None), host, port


def _options(ssh: SshOptions, *, host: str) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "connect_timeout": ssh.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
        "login_timeout": ssh.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
        # asyncssh leaves keepalive off; without it a silently dead host is never noticed.
        "keepalive_interval": ssh.keepalive_interval or DEFAULT_KEEPALIVE_INTERVAL,
        "keepalive_count_max": ssh.keepalive_count_max or DEFAULT_KEEPALIVE_COUNT_MAX,
    }
    if ssh.user:
        opts["username"] = ssh.user
    if ssh.port:
        opts["port"] = ssh.port
    if ssh.identity_file:
        opts["client_keys"] = [_expand(ssh.identity_file)]
    if ssh.config is not None:
        opts["config"] = [_expand(ssh.config)] if ssh.config else []
    if ssh.insecure_skip_host_key_check:
        opts["known_hosts"] = None
    else:
        # Strict always: a missing file means every key is unknown, never "accept".
        path = known_hosts_path(ssh)
        opts["known_hosts"] = str(path) if path.exists() else ([], [], [])
    return opts


def _key_problem(ssh: SshOptions, address: str, port: int | None) -> ConnectFailure:
    path = known_hosts_path(ssh)
    listed = False
    if path.exists():
        with contextlib.suppress(Exception):
            keys = asyncssh.read_known_hosts(str(path)).match(address, "", port or 22)
            listed = bool(keys[0])
    if listed:
        return ConnectFailure(
            HostState.HOST_KEY_MISMATCH,
            f"host key of {address} differs from {path} — possible impersonation; "
            f"if the host was reinstalled: ssh-keygen -f {path} -R {address}",
        )
    return ConnectFailure(
        HostState.HOST_KEY_UNKNOWN,
        f"{address} is not in {path} — verify its key, then add it (ssh-keyscan {address})",
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
    if isinstance(exc, FileNotFoundError):
        return ConnectFailure(HostState.AUTH_FAILED, f"identity file not found: {exc.filename}")
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
    try:
        conn, _ = await asyncssh.create_connection(
            lambda: client, host.address, tunnel=tunnel, **_options(host.ssh, host=host.name)
        )
    except Exception as exc:
        raise classify(exc, host.ssh, host.address) from None
    return conn, client


async def open_jump(spec: str, ssh: SshOptions) -> asyncssh.SSHClientConnection:
    user, address, port = split_jump(spec)
    opts = _options(ssh, host=address)
    if user:
        opts["username"] = user
    if port:
        opts["port"] = port
    elif "port" in opts:
        del opts["port"]  # the hosts' port is not the bastion's
    try:
        return await asyncssh.connect(address, **opts)
    except Exception as exc:
        failure = classify(exc, ssh, address)
        raise ConnectFailure(failure.state, f"via jump host {spec}: {failure.reason}") from None


class SshStream:
    def __init__(self, proc: asyncssh.SSHClientProcess):
        self._proc = proc
        self._stderr: deque[str] = deque(maxlen=50)
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        # Read stderr continuously so a chatty command never stalls on a full window.
        with contextlib.suppress(Exception):
            async for line in self._proc.stderr:
                self._stderr.append(line.rstrip("\n"))

    async def lines(self) -> AsyncIterator[str]:
        try:
            async for line in self._proc.stdout:
                yield line.rstrip("\r\n")
        except (asyncssh.Error, OSError):
            return

    async def stderr_tail(self) -> str:
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        return "\n".join(self._stderr)

    @property
    def exit_status(self) -> int | None:
        return self._proc.exit_status

    async def close(self) -> None:
        # asyncssh does not kill a remote process without a PTY: EOF on stdin is the signal.
        with contextlib.suppress(Exception):
            self._proc.stdin.write_eof()
        self._proc.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.wait_closed(), 2.0)
        self._stderr_task.cancel()


class SshForward:
    def __init__(self, listener: asyncssh.SSHListener):
        self._listener = listener

    @property
    def local_port(self) -> int:
        return self._listener.get_port()

    def close(self) -> None:
        self._listener.close()


class SshTransport:
    def __init__(self, host: str, conn: asyncssh.SSHClientConnection):
        self.host = host
        self._conn = conn

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        cmd = command_line(argv, env)
        try:
            res = await self._conn.run(cmd, input=input, check=False, timeout=timeout)
        except asyncssh.TimeoutError:
            raise TransportError(f"{self.host}: {argv[0]} timed out after {timeout} s") from None
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: {exc}") from None
        out = res.stdout if isinstance(res.stdout, str) else (res.stdout or b"").decode()
        err = res.stderr if isinstance(res.stderr, str) else (res.stderr or b"").decode()
        return RunResult(tuple(argv), res.exit_status, out, err)

    async def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> SshStream:
        try:
            proc = await self._conn.create_process(command_line(argv, env))
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.host}: cannot start {argv[0]}: {exc}") from None
        return SshStream(proc)

    async def forward_local_port(self, remote_host: str, remote_port: int,
                                 local_port: int = 0) -> SshForward:
        """Listen on 127.0.0.1:local_port (0: any free port) and tunnel to the remote side."""
        try:
            listener = await self._conn.forward_local_port(
                "127.0.0.1", local_port, remote_host, remote_port)
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(
                f"{self.host}: cannot forward to {remote_host}:{remote_port}: {exc}"
            ) from None
        return SshForward(listener)
