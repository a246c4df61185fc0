"""DapClient against a real debugpy, stopped by Ray's own post-mortem hook.

The debuggee calls ``ray.util.debugpy._post_mortem()`` from an ``except`` block, as a Ray worker
does (``store_task_errors`` in _raylet.pyx) for a failing task under RAY_DEBUG_POST_MORTEM=1.
Only what needs a cluster is replaced: the node IP, where the worker records its debugger port
(the GCS), and the paused-thread counter (also the GCS).

debugpy.listen starts an adapter process in its own session (killpg does not reach it); it
inherits our marker variable, so teardown finds and kills exactly the processes we started.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tui.debug.dap import DapClient, DapError

pytestmark = pytest.mark.timeout(60)

MARKER_VAR = "VERL_TUI_TEST_DEBUGGEE"

DEBUGGEE = """\
import contextlib

import ray
import ray._private.worker as ray_worker
import ray.util.debugpy as ray_debugpy

# What needs a cluster: the node IP and the GCS records of the worker's debugger port and
# paused threads.
_port = {}


def _set_debugger_port(self, port):
    _port["port"] = port
    print(f"DEBUGGER_PORT {port}", flush=True)


ray_worker.Worker.node_ip_address = property(lambda self: "127.0.0.1")
ray_worker.Worker.debugger_port = property(lambda self: _port.get("port"))
ray_worker.Worker.set_debugger_port = _set_debugger_port
ray_worker.Worker.worker_paused_by_debugger = contextlib.contextmanager(lambda self: (yield))


def train_step(batch):
    x = 21
    raise ValueError(f"bad batch {batch}")  # RAISE_LINE


try:
    train_step(7)
except Exception:
    ray_debugpy._post_mortem()  # what store_task_errors does with post-mortem on
    raise
"""
RAISE_LINE = next(i for i, line in enumerate(DEBUGGEE.splitlines(), 1) if "# RAISE_LINE" in line)


@dataclass
class Debuggee:
    proc: subprocess.Popen[bytes]
    port: int
    script: Path
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def wait(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"debuggee still running after {timeout} s")
            await asyncio.sleep(0.05)
        return self.proc.returncode


def _kill_marked(marker: str) -> None:
    """Kill every process whose environment carries our marker (the debuggee and the debugpy
    adapter it spawned): ours by construction, nothing found by name."""
    needle = f"{MARKER_VAR}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.05)


@asynccontextmanager
async def debuggee(tmp_path: Path) -> AsyncIterator[Debuggee]:
    script = tmp_path / "train.py"
    script.write_text(DEBUGGEE)
    stdout_path, stderr_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    marker = uuid.uuid4().hex
    env = {**os.environ, MARKER_VAR: marker, "RAY_DEBUG_POST_MORTEM": "1"}
    # Files, not pipes: the adapter inherits the descriptors and may outlive the debuggee.
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script)], stdout=out, stderr=err, env=env, cwd=tmp_path
        )
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            for line in stdout_path.read_text().splitlines():
                if line.startswith("DEBUGGER_PORT "):
                    port = int(line.split()[1])
            if port is None:
                assert proc.poll() is None, f"debuggee exited: {stderr_path.read_text()}"
                assert time.monotonic() < deadline, "debuggee printed no port in 30 s"
                await asyncio.sleep(0.05)
        yield Debuggee(proc, port, script, stderr_path)
    finally:
        _kill_marked(marker)
        proc.wait(timeout=10)


async def test_post_mortem_session(tmp_path: Path) -> None:
    events: list[str] = []
    async with debuggee(tmp_path) as dbg:
        client = await DapClient.connect(
            "127.0.0.1", dbg.port, on_event=lambda name, body: events.append(name)
        )
        try:
            stopped = await client.attach_post_mortem()
            assert stopped.reason == "exception"
            assert stopped.text == "ValueError"
            assert stopped.description == "bad batch 7"
            assert stopped.thread_id is not None
            assert client.stopped == stopped
            assert "stopped" in events

            info = await client.exception_info(stopped.thread_id)
            assert info.exception_id == "ValueError"
            assert info.description == "bad batch 7"
            assert info.break_mode == "unhandled"
            assert info.stack_trace is not None and "train_step" in info.stack_trace

            threads = await client.threads()
            assert stopped.thread_id in [thread.id for thread in threads]

            frames = await client.stack_trace(stopped.thread_id)
            failing = frames[0]
            assert failing.name == "train_step"
            assert failing.path is not None
            assert os.path.realpath(failing.path) == os.path.realpath(dbg.script)
            assert failing.line == RAISE_LINE

            scopes = await client.scopes(failing.id)
            local_scope = next(scope for scope in scopes if scope.name == "Locals")
            local_vars = {v.name: v for v in await client.variables(local_scope.reference)}
            assert local_vars["x"].value == "21"
            assert local_vars["x"].type == "int"
            assert local_vars["batch"].value == "7"

            doubled = await client.evaluate("x * 2", failing.id)
            assert doubled.result == "42"
            assert doubled.type == "int"
            with pytest.raises(DapError, match="NameError"):
                await client.evaluate("no_such_name", failing.id)

            await client.continue_(stopped.thread_id)
            assert await dbg.wait() != 0
            stderr = dbg.stderr()
            assert "Traceback" in stderr
            assert "ValueError: bad batch 7" in stderr
            # The adapter tells us the debuggee ended; the session is then over.
            await asyncio.wait_for(_until(lambda: client.terminated), 5)
            assert client.closed
            with pytest.raises(DapError, match="has ended"):
                await client.threads()
        finally:
            await client.close()


async def test_connect_to_closed_port_fails_fast() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(DapError, match=f"cannot connect to 127.0.0.1:{port}"):
        await DapClient.connect("127.0.0.1", port, timeout=5)
    assert time.monotonic() - started < 2


async def test_killed_debuggee_fails_pending_request(tmp_path: Path) -> None:
    async with debuggee(tmp_path) as dbg:
        client = await DapClient.connect("127.0.0.1", dbg.port)
        try:
            stopped = await client.attach_post_mortem()
            assert stopped.thread_id is not None
            frames = await client.stack_trace(stopped.thread_id)
            slow = asyncio.ensure_future(
                client.evaluate("__import__('time').sleep(30)", frames[0].id, timeout=30)
            )
            await asyncio.sleep(0.5)
            dbg.proc.kill()
            started = time.monotonic()
            with pytest.raises(DapError, match=r"closed by the debuggee|has ended"):
                await slow
            assert time.monotonic() - started < 5
            with pytest.raises(DapError):
                await client.threads(timeout=5)
        finally:
            await client.close()


async def test_second_client_is_refused_first_keeps_its_session(tmp_path: Path) -> None:
    async with debuggee(tmp_path) as dbg:
        first = await DapClient.connect("127.0.0.1", dbg.port)
        second = await DapClient.connect("127.0.0.1", dbg.port)
        try:
            stopped = await first.attach_post_mortem()
            with pytest.raises(DapError, match="already being debugged"):
                await second.attach_post_mortem(timeout=10)
            assert stopped.thread_id is not None
            assert await first.threads()
        finally:
            await second.close()
            await first.close()


async def test_disconnect_without_continue_lets_the_task_fail(tmp_path: Path) -> None:
    async with debuggee(tmp_path) as dbg:
        client = await DapClient.connect("127.0.0.1", dbg.port)
        await client.attach_post_mortem()
        await client.disconnect()
        assert client.closed
        assert await dbg.wait() != 0
        assert "ValueError: bad batch 7" in dbg.stderr()


# --- the wire, over a plain socket server (no debugpy) ----------------------------------------


async def _serve_once(handler) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_request(reader: asyncio.StreamReader) -> dict:
    header = await reader.readuntil(b"\r\n\r\n")
    length = int(header.split(b":")[1].split(b"\r\n")[0])
    return json.loads(await reader.readexactly(length))


def _frame(message: dict) -> bytes:
    payload = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(payload) + payload


async def test_failed_response_and_connection_loss() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await _read_request(reader)
        writer.write(
            _frame(
                {
                    "type": "response",
                    "request_seq": first["seq"],
                    "command": first["command"],
                    "success": False,
                    "message": "oops",
                    "body": {"error": {"format": "Unable to find thread 99"}},
                }
            )
        )
        await writer.drain()
        await _read_request(reader)
        writer.close()  # drop the connection under the second request

    server, port = await _serve_once(handler)
    try:
        client = await DapClient.connect("127.0.0.1", port)
        with pytest.raises(DapError, match="stackTrace: Unable to find thread 99"):
            await client.stack_trace(99)
        with pytest.raises(DapError, match="connection closed by the debuggee"):
            await client.threads(timeout=5)
        assert client.closed
        with pytest.raises(DapError, match="connection closed by the debuggee"):
            await client.threads()
        await client.close()
    finally:
        server.close()


async def test_no_stopped_event_times_out() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Plays an adapter that answers everything but never stops.
        while True:
            try:
                request = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            if request["command"] == "attach":
                writer.write(_frame({"type": "event", "event": "initialized", "seq": 0}))
                continue
            writer.write(
                _frame(
                    {
                        "type": "response",
                        "request_seq": request["seq"],
                        "command": request["command"],
                        "success": True,
                    }
                )
            )
            if request["command"] == "configurationDone":
                writer.write(
                    _frame({"type": "response", "request_seq": 2, "success": True})
                )  # the delayed attach response
            await writer.drain()

    server, port = await _serve_once(handler)
    try:
        client = await DapClient.connect("127.0.0.1", port)
        started = time.monotonic()
        with pytest.raises(DapError, match="no stopped event within 1 s"):
            await client.attach_post_mortem(timeout=1)
        assert time.monotonic() - started < 2
        await client.close()
    finally:
        server.close()
