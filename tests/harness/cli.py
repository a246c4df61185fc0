"""`run_cli`: the one way tests run the real `verl-tui` command line.

Each run is a process of its own — its pid and process group, the caller's environment, working
directory and standard streams, its exit status or the signal that ended it — started the way
`subprocess.run([python, "-m", "tui", …])` starts it, with one difference: it is forked from a
warm interpreter (tests/harness/cli_server.py) that imported tui's modules once per test run.
The suite runs the CLI hundreds of times; a fresh interpreter spends ~1 s of CPU of the 2-core
CI machine on start-up and imports before the command does anything.

A fresh interpreter is used where start-up itself is under test or could differ: `fresh=True`
(import-time, lazy-import and memory tests), an environment that changes what start-up reads
(PYTHON*, LD_*, locale), or stream arguments the fork cannot pass (a closed stream, a
`preexec_fn`). If the warm interpreter cannot be had, every run is a fresh one.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from harness.cli_server import STARTUP_PREFIXES

__all__ = ["CliServer", "run_cli"]

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[2]
Stream = int | IO[Any] | None


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


class CliServer:
    """The warm interpreter, started on first use and ended with the test run."""

    _lock = threading.Lock()
    _this: CliServer | None = None
    _broken = False

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="verl-tui-cli-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [PYTHON, str(Path(__file__).with_name("cli_server.py")), self.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"cli_server did not start (exit {self.proc.wait()})")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)

    @classmethod
    def get(cls) -> CliServer | None:
        with cls._lock:
            if cls._this is not None and cls._this.proc.poll() is not None:
                cls._this = None  # it died: start another
            if cls._this is None and not cls._broken:
                try:
                    cls._this = CliServer()
                except (OSError, RuntimeError) as exc:
                    cls._broken = True
                    print(f"run_cli: fresh interpreters only ({exc})", file=sys.stderr)
            return cls._this

    def accepts(self, env: Mapping[str, str]) -> bool:
        return _startup_env(env) == _startup_env(self.env)


def _fd(stream: Stream, default: int) -> tuple[int | None, bool]:
    """(descriptor to pass, whether it was opened here and must be closed)."""
    if stream is None:
        return default, False
    if stream == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), True
    if isinstance(stream, int):
        return (stream, False) if stream >= 0 else (None, False)
    return stream.fileno(), False


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    timeout: float | None = 120,
    stdin: Stream = None,
    stdout: Stream = subprocess.PIPE,
    stderr: Stream = subprocess.PIPE,
    text: bool = True,
    fresh: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """`verl-tui ARGS` to its end, like ``subprocess.run([python, "-m", "tui", *args], …)`` with
    output captured as text by default; raises subprocess.TimeoutExpired past `timeout`, its
    process group killed."""
    cmd = [PYTHON, "-m", "tui", *args]
    env = dict(os.environ if env is None else env)
    server = None if fresh else CliServer.get()
    if server is None or not server.accepts(env):
        return subprocess.run(
            cmd,
            env=env,
            cwd=cwd,
            input=input,
            timeout=timeout,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            text=text,
        )
    return _forked(server, cmd, env, cwd, input, timeout, stdin, stdout, stderr, text)


def _forked(
    server: CliServer,
    cmd: list[str],
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None,
    input: str | bytes | None,
    timeout: float | None,
    stdin: Stream,
    stdout: Stream,
    stderr: Stream,
    text: bool,
) -> subprocess.CompletedProcess[Any]:
    ours: list[int] = []  # descriptors opened here, closed once passed
    readers: dict[int, int] = {}  # our read end -> stream (1 stdout, 2 stderr)
    passed: list[int] = []
    feed: int | None = None
    if input is not None:
        r, feed = os.pipe()
        passed.append(r)
        ours.append(r)
    else:
        fd, opened = _fd(stdin, 0)
        passed.append(fd if fd is not None else 0)
        if opened and fd is not None:
            ours.append(fd)
    for target, stream in ((1, stdout), (2, stderr)):
        if stream == subprocess.PIPE:
            r, w = os.pipe()
            readers[r] = target
            passed.append(w)
            ours.append(w)
        elif stream == subprocess.STDOUT:
            passed.append(passed[1])
        else:
            fd, opened = _fd(stream, target)
            passed.append(fd if fd is not None else target)
            if opened and fd is not None:
                ours.append(fd)
    request = {"argv": cmd[3:], "env": env, "cwd": os.path.abspath(cwd or os.getcwd())}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(server.path)
        socket.send_fds(conn, [json.dumps(request).encode()], passed)
    finally:
        for fd in ours:
            os.close(fd)
    answers = conn.makefile("r")
    pid = int(answers.readline().split()[1])

    chunks: dict[int, list[bytes]] = {fd: [] for fd in readers}

    def drain(fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as f:
            while block := f.read(65536):
                chunks[fd].append(block)

    threads = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in readers]
    if feed is not None:
        data = input.encode() if isinstance(input, str) else input

        def write() -> None:
            with contextlib.suppress(OSError), os.fdopen(feed, "wb") as f:
                f.write(data or b"")

        threads.append(threading.Thread(target=write, daemon=True))
    for t in threads:
        t.start()

    status: list[str] = []
    waiter = threading.Thread(target=lambda: status.append(answers.readline()), daemon=True)
    waiter.start()
    waiter.join(timeout)
    timed_out = waiter.is_alive()
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        waiter.join(10)
    deadline = time.monotonic() + 10
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    conn.close()

    def out(target: int) -> Any:
        for fd, t in readers.items():
            if t == target:
                raw = b"".join(chunks[fd])
                # As subprocess's text mode reads it: strict UTF-8, universal newlines.
                return raw.decode().replace("\r\n", "\n").replace("\r", "\n") if text else raw
        return None

    if timed_out:
        raise subprocess.TimeoutExpired(cmd, timeout or 0, out(1), out(2))
    word, _, value = (status[0] if status else "").partition(" ")
    if word != "status":
        raise RuntimeError(f"cli_server lost the run of {cmd[3:]} (pid {pid})")
    code = os.waitstatus_to_exitcode(int(value))
    return subprocess.CompletedProcess(cmd, code, out(1), out(2))
