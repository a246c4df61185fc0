"""The local transport: this machine, through subprocesses — no SSH server needed."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from tui.transport.types import RunResult, TransportError


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if not env else {**os.environ, **env}


class LocalStream:
    def __init__(self, proc: asyncio.subprocess.Process):
        self._proc = proc

    async def lines(self) -> AsyncIterator[str]:
        assert self._proc.stdout is not None
        while True:
            raw = await self._proc.stdout.readline()
            if not raw:
                return
            yield raw.decode("utf-8", "replace").rstrip("\r\n")

    async def stderr_tail(self) -> str:
        assert self._proc.stderr is not None
        with contextlib.suppress(asyncio.TimeoutError):
            data = await asyncio.wait_for(self._proc.stderr.read(65536), 1.0)
            return data.decode("utf-8", "replace")[-2000:]
        return ""

    @property
    def exit_status(self) -> int | None:
        return self._proc.returncode

    async def close(self) -> None:
        proc = self._proc
        if proc.returncode is not None:
            return
        # Closing stdin is the agent's signal to exit; kill only if it does not.
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2.0)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


@dataclass
class LocalForward:
    """On the local transport the remote port is already local: nothing to tunnel."""

    local_port: int

    def close(self) -> None:
        pass


class LocalTransport:
    def __init__(self, host: str = "localhost"):
        self.host = host

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=_env(env),
            )
        except OSError as exc:
            return RunResult(tuple(argv), 127, "", f"{argv[0]}: {exc.strerror or exc}")
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(input.encode() if input is not None else None), timeout
            )
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise TransportError(f"{self.host}: {argv[0]} timed out after {timeout} s") from None
        return RunResult(
            tuple(argv), proc.returncode, out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )

    async def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> LocalStream:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=_env(env),
                limit=1 << 22,
            )
        except OSError as exc:
            raise TransportError(f"{self.host}: cannot start {argv[0]}: {exc}") from None
        return LocalStream(proc)

    async def forward_local_port(self, remote_host: str, remote_port: int,
                                 local_port: int = 0) -> LocalForward:
        return LocalForward(remote_port)
