"""What the transport layer hands to the services: states, results, processes, forwards."""

from __future__ import annotations

import enum
import shlex
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


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


class TransportError(Exception):
    """A command could not be run on a host (not up, channel refused, timed out)."""


class HostUnavailable(TransportError):
    def __init__(self, status: LinkStatus):
        self.status = status
        detail = f": {status.error}" if status.error else ""
        super().__init__(f"{status.host} is {status.state.value}{detail}")


class StreamProcess(Protocol):
    """A long-lived command whose stdout is read line by line (any bytes; a line longer than
    the stream's cap is dropped and counted). close() sends EOF on stdin and, if the command
    has not exited after a short grace, kills its whole process group: nothing outlives it."""

    def lines(self) -> AsyncIterator[str]: ...

    @property
    def oversize_lines(self) -> int: ...

    async def stderr_tail(self) -> str: ...

    async def close(self) -> None: ...

    @property
    def exit_status(self) -> int | None: ...


class Forward(Protocol):
    @property
    def local_port(self) -> int: ...

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
    ) -> RunResult: ...

    async def stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        max_line: int = ...,
    ) -> StreamProcess: ...

    async def forward_local_port(
        self, remote_host: str, remote_port: int, local_port: int = 0
    ) -> Forward: ...


def command_line(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One shell-safe command line from an argv list (and env as `env K=V` words)."""
    if not argv:
        raise ValueError("empty argv")
    words = list(argv)
    if env:
        for key in env:
            if not key.replace("_", "a").isalnum() or key[0].isdigit():
                raise ValueError(f"invalid environment variable name {key!r}")
        words = ["env", *(f"{k}={v}" for k, v in env.items()), *words]
    return shlex.join(words)
