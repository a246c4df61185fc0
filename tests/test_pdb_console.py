"""PdbConsole against Ray's own legacy debugger (ray.util.rpdb, RAY_DEBUG=legacy).

The debuggee calls ``ray.util.rpdb.set_trace()`` itself: only the GCS key-value store (where
Ray announces the breakpoint for ``ray debug``) and the runtime context (job/task ids for that
announcement) are replaced, since they need a cluster. The socket, _RemotePdb and pdb are
Ray's. The port comes from Ray's own "RemotePdb session open at localhost:PORT" line.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tui.debug.pdb_console import PdbConsole, PdbConsoleError

pytestmark = pytest.mark.timeout(60)

DEBUGGEE = """\
import ray
import ray.util.rpdb as rpdb

# What needs a cluster: the breakpoint's announcement in the GCS and the ids in it.
rpdb._internal_kv_put = lambda *args, **kwargs: None
rpdb._internal_kv_del = lambda *args, **kwargs: None


class _NoRuntimeContext:
    def __getattr__(self, name):
        return lambda: None


ray.get_runtime_context = lambda: _NoRuntimeContext()


def train_step():
    x = 42
    rpdb.set_trace()
    return x  # STOP_LINE


print("result", train_step(), flush=True)
"""
STOP_LINE = next(i for i, line in enumerate(DEBUGGEE.splitlines(), 1) if "# STOP_LINE" in line)


@dataclass
class Debuggee:
    proc: subprocess.Popen[bytes]
    port: int
    script: Path
    stdout_path: Path

    async def wait(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"debuggee still running after {timeout} s")
            await asyncio.sleep(0.05)
        return self.proc.returncode


@asynccontextmanager
async def debuggee(tmp_path: Path) -> AsyncIterator[Debuggee]:
    script = tmp_path / "train.py"
    script.write_text(DEBUGGEE)
    stdout_path, stderr_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {**os.environ, "RAY_DEBUG": "legacy"}
    env.pop("REMOTE_PDB_QUIET", None)  # we need Ray's "session open" line
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script)], stdout=out, stderr=err, env=env, cwd=tmp_path
        )
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"session open at \S+:(\d+)", stderr_path.read_text())):
            assert proc.poll() is None, f"debuggee exited: {stderr_path.read_text()}"
            assert time.monotonic() < deadline, "no RemotePdb session in 30 s"
            await asyncio.sleep(0.05)
        yield Debuggee(proc, int(found.group(1)), script, stdout_path)
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_breakpoint_session(tmp_path: Path) -> None:
    async with debuggee(tmp_path) as dbg:
        console = await PdbConsole.connect("127.0.0.1", dbg.port)
        try:
            assert f"{dbg.script}({STOP_LINE})train_step()" in console.banner
            assert "\r" not in console.banner

            assert await console.send("p x") == "42\n"
            where = await console.send("where")
            assert f"{dbg.script}({STOP_LINE})train_step()" in where
            assert "<module>()" in where
            assert "(Pdb)" not in where

            # A reply that itself contains the prompt text is not cut short.
            assert await console.send("p '(Pdb) ' + str(x)") == "'(Pdb) 42'\n"
            assert "NameError" in await console.send("p no_such_name")

            assert await console.send("c") == ""
            assert console.closed
            assert await dbg.wait() == 0
            assert "result 42" in dbg.stdout_path.read_text()
            with pytest.raises(PdbConsoleError, match="closed"):
                await console.send("p x")
        finally:
            await console.close()


async def test_connect_to_closed_port_fails_fast() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(PdbConsoleError, match=f"cannot connect to 127.0.0.1:{port}"):
        await PdbConsole.connect("127.0.0.1", port, timeout=5)
    assert time.monotonic() - started < 2


async def test_no_prompt_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # say nothing until the client leaves

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(PdbConsoleError, match=r"no \(Pdb\) prompt within 0.5 s"):
            await PdbConsole.connect("127.0.0.1", port, timeout=0.5)
    finally:
        server.close()
