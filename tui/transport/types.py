"""What the transport layer hands to the services: states, results, processes, forwards."""

from __future__ import annotations

import asyncio
import enum
import shlex
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tui.errors import VerlTuiError
from tui.sanitize import one_line

if TYPE_CHECKING:
    from tui.config.hosts import Host


class HostState(str, enum.Enum):
    CONNECTING = "connecting"
    UP = "up"
    AUTH_FAILED = "auth failed"
    HOST_KEY_UNKNOWN = "host key unknown"
    HOST_KEY_MISMATCH = "host key changed"
    UNREACHABLE = "unreachable"
    LOST = "lost"
    CLOSED = "closed"

    @property
    def is_problem(self) -> bool:
        return self not in (HostState.CONNECTING, HostState.UP, HostState.CLOSED)


@dataclass(frozen=True)
class LinkStatus:
    host: str
    state: HostState
    error: str | None = None
    since: float = field(default_factory=time.monotonic)
    attempts: int = 0


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    exit_status: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class TransportError(VerlTuiError, title="host command failed", kind="unavailable"):
    """A command could not be run on a host (not up, channel refused, timed out)."""


class HostUnavailable(TransportError, title="host unavailable"):
    def __init__(self, status: LinkStatus):
        self.status = status
        detail = f": {status.error}" if status.error else ""
        super().__init__(f"{status.host} is {status.state.value}{detail}")


class StreamProcess(Protocol):
    """A long-lived command whose stdout is read line by line (any bytes; a line longer than
    the stream's cap is dropped and counted). close() sends EOF on stdin and, if the command
    has not exited after a short grace, kills its whole process group: nothing outlives it."""

    def lines(self) -> AsyncIterator[str]: ...

    async def finished(self) -> None:
        """Until stdout has ended; a stream opened with on_line hands each line to it as it
        arrives (what on_line raised is raised here)."""

    @property
    def oversize_lines(self) -> int: ...

    async def stderr_tail(self) -> str: ...

    def send(self, text: str) -> None:
        """Write `text` to the command's stdin (nothing happens once the command is gone)."""

    async def close(self) -> None: ...

    @property
    def exit_status(self) -> int | None: ...


class Forward(Protocol):
    @property
    def local_port(self) -> int: ...

    def close(self) -> None: ...


class PathForward(Protocol):
    """A forward listening on a Unix socket in a fresh 0700 folder of ours: only this user can
    connect (tui/transport/unix_forward.py). close() stops it and removes the folder."""

    @property
    def path(self) -> str: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """How services reach one host; built only by the Fleet."""

    host: str

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        what: str | None = None,
    ) -> RunResult:
        """Run to completion within `timeout` seconds (None: the host's ssh.command_timeout).
        Past it the command is ended and CommandTimeout (tui/transport/deadline.py) names the
        host and `what` (default: a label made from argv)."""

    async def stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        max_line: int = ...,
        on_line: Callable[[str], None] | None = None,
        first_line: float | None = None,
        what: str | None = None,
    ) -> StreamProcess:
        """A long-lived command. With `first_line`, its first complete stdout line must come
        within that many seconds, else the command is ended and the reader (lines() or
        finished()) raises CommandTimeout naming the host and `what`."""

    async def open_connection(
        self, remote_host: str, remote_port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to remote_host:remote_port as seen from the host, with no listener here:
        what an in-process client uses (TransportError when it cannot be opened)."""

    async def forward_local_port(
        self, remote_host: str, remote_port: int, local_port: int = 0
    ) -> Forward:
        """A loopback TCP port here, only for a program that cannot take a stream from us
        (VS Code's attach): it lets through only connections of our own uid
        (tui/transport/peer_forward.py); TransportError where that cannot be checked."""

    async def forward_local_path(self, remote_host: str, remote_port: int) -> PathForward:
        """A private Unix socket here whose connections reach remote_host:remote_port as seen
        from the host (TransportError when it cannot be opened)."""

    def set_keepalive(self, interval: float | None) -> None:
        """How long the link may be silent before it is checked (None: the host's setting).
        Telemetry lengthens it for a host whose lines come through a relay and shortens it
        for one that went quiet; a link that is not SSH has none."""


@dataclass(frozen=True)
class HostShell:
    """How every command on one host is wrapped: hosts.yaml `env_setup` steps run first (in
    the host's shell, inside the container if any), `container` is the argv prefix that runs
    a command inside the host's container. The empty one changes nothing."""

    env_setup: tuple[str, ...] = ()
    container: tuple[str, ...] = ()
    container_label: str = ""

    @classmethod
    def for_host(cls, host: Host) -> HostShell:
        ctr = host.container
        return cls(tuple(host.env_setup), ctr.prefix() if ctr else (), ctr.label if ctr else "")

    def __bool__(self) -> bool:
        return bool(self.env_setup or self.container)


NO_SHELL = HostShell()

# The setup failure marker on stderr: "\x1everl-tui-setup-failed STEP STATUS".
SETUP_MARK = b"\x1everl-tui-setup-failed "
SETUP_FAILED_EXIT = 97
# bash where the host has one (users write `source`, `module load`, `conda activate` as in their
# shell); POSIX sh otherwise. $1 is the setup script, the rest the command.
_SETUP_RUNNER = (
    's=$1; shift; if command -v bash >/dev/null 2>&1; then exec bash -c "$s" verl-tui "$@"; fi; '
    'exec sh -c "$s" verl-tui "$@"'
)


def setup_script(steps: Sequence[str]) -> str:
    """The shell text that runs `steps` in order, then `exec "$@"`. The steps' stdout goes to
    stderr (a command's stdout may be a line protocol, like the agent's) and their stdin is
    /dev/null (it may be the command's input); the first failing step stops everything with
    the marker line and exit status SETUP_FAILED_EXIT."""
    out = ["exec 3>&1 1>&2"]
    for i, step in enumerate(steps, 1):
        # The newline before `}`: a step may end in a comment.
        out.append(
            f"{{ {step}\n}} </dev/null || {{ printf '\\036verl-tui-setup-failed {i} %s\\n' "
            f'"$?" >&2; exit {SETUP_FAILED_EXIT}; }}'
        )
    out.append('exec 1>&3 3>&-; exec "$@"')
    return "\n".join(out)


def command_line(
    argv: Sequence[str], env: Mapping[str, str] | None = None, shell: HostShell = NO_SHELL
) -> str:
    """One shell-safe command line from an argv list (and env as `env K=V` words), after the
    host's env_setup when it has one (the env words come after it: they win). The container
    prefix is not part of it (pgroup.group_command puts it outside the group prologue)."""
    if not argv:
        raise ValueError("empty argv")
    words = list(argv)
    if env:
        for key in env:
            if not key.replace("_", "a").isalnum() or key[0].isdigit():
                raise ValueError(f"invalid environment variable name {key!r}")
        words = ["env", *(f"{k}={v}" for k, v in env.items()), *words]
    if shell.env_setup:
        words = ["sh", "-c", _SETUP_RUNNER, "verl-tui", setup_script(shell.env_setup), *words]
    return shlex.join(words)


class EnvSetupFailed(TransportError, title="env_setup failed"):
    """A host's env_setup step failed: nothing of the command ran."""


def setup_failure(host: str, shell: HostShell, stderr: bytes) -> EnvSetupFailed | None:
    """The one-line error for a command whose env_setup failed (from its stderr), or None.
    It names the host, the step, its exit status and the last lines the setup printed."""
    at = stderr.rfind(SETUP_MARK)
    if at < 0 or (at > 0 and stderr[at - 1 : at] != b"\n"):
        return None
    fields = stderr[at + len(SETUP_MARK) :].split(b"\n", 1)[0].decode("ascii", "replace").split()
    if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    step, status = int(fields[0]), fields[1]
    text = shell.env_setup[step - 1] if 0 < step <= len(shell.env_setup) else f"step {step}"
    before = stderr[:at].decode("utf-8", "replace").splitlines()
    tail = " | ".join(ln.strip() for ln in before if ln.strip() and "\x1e" not in ln)[-300:]
    where = f" in {shell.container_label}" if shell.container else ""
    return EnvSetupFailed(
        one_line(
            f"{host}: env_setup failed{where} (exit {status}) at `{text}`"
            + (f": {tail}" if tail else " (no output)"),
            600,
        ),
        hint=f"{host}'s env_setup: in hosts.yaml",
    )
