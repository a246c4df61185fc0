"""One cluster-changing action (up, down, restart) at a time: a lock here and one on the head.

Both are `flock`s held by a living process, not files whose existence is the lock: the kernel
drops a flock the moment its holder dies, so a holder killed with -9 (or a login node that
rebooted) leaves nothing that must be judged stale and broken — the next taker simply gets it.
The lock file is never deleted (deleting it would let two processes lock two different inodes);
its content is the holder's JSON {user, host, pid, since, action}, rewritten by each holder
and shown to whoever is refused.

- Here: `<state dir>/locks/<cluster>.lock`, held by this process's open descriptor.
- On the head: `/tmp/ray/verl-tui-cluster.lock`, held by a small Python process started over SSH
  with the head's interpreter (tui/remote/head_lock.py). It prints one JSON line (held, or who
  holds it) — within the head's ssh.command_timeout, else it is ended as a stalled host's
  command and the action goes on with this machine's lock only — then waits for its stdin to
  close: the caller closes it when done; a caller that dies takes its SSH channel with it,
  stdin ends, the process exits and the flock is gone. A holder whose caller hangs with the
  connection open gives up after MAX_HOLD_S (the "older than a bound" rule).
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tui.config.hosts import DEFAULT_COMMAND_TIMEOUT
from tui.errors import VerlTuiError
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.state import StateError, open_lock_file, state_path, writing
from tui.transport.deadline import CommandTimeout
from tui.transport.types import StreamProcess, Transport, TransportError

LOCK_NAME = "verl-tui-cluster.lock"
HEAD_LOCK_DIR = "/tmp/ray"  # Ray's own temp root: there on every host that runs Ray
MAX_HOLD_S = 1800.0  # no up/down/restart takes this long; a hung holder is ended then
EXIT_BUSY = 3  # CLI exit status of up/down when another action holds the cluster
MAX_ANSWER = 1 << 16  # the helper's one JSON line (the owner record) is far shorter


@dataclass(frozen=True)
class LockOwner:
    user: str
    host: str
    pid: int
    since: float
    action: str

    @classmethod
    def here(cls, action: str) -> LockOwner:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry for this uid (containers)
            user = str(os.getuid())
        return cls(user, socket.gethostname(), os.getpid(), time.time(), action)

    @classmethod
    def from_json(cls, doc: Any) -> LockOwner | None:
        if not isinstance(doc, dict):
            return None
        try:
            return cls(
                str(doc["user"]),
                str(doc["host"]),
                int(doc["pid"]),
                float(doc["since"]),
                str(doc["action"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.since))
        if time.time() - self.since > 86400:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        # Read from a file on a host: one sanitized line.
        return one_line(
            f"{self.action} by {self.user}@{self.host} pid {self.pid} since {stamp}", 200
        )


class LockHeld(VerlTuiError, title="cluster busy", kind="refused"):
    """Someone else holds the lock; `owner` is None when its file says nothing readable."""

    def __init__(self, owner: LockOwner | None, where: str):
        self.owner = owner
        self.where = where
        who = owner.describe() if owner else "another verl-tui (owner unknown)"
        super().__init__(f"cluster busy: {who}")


def _read_owner(fd: int) -> LockOwner | None:
    # The holder writes its JSON right after it got the flock: retry a moment on empty.
    for _ in range(10):
        raw = os.pread(fd, 65536, 0)
        if raw:
            try:
                return LockOwner.from_json(json.loads(raw))
            except ValueError:
                pass
        time.sleep(0.02)
    return None


def local_lock_path(cluster: str) -> Path:
    path = state_path("locks", cluster)  # the cluster's folder name, checked …
    return path.with_name(f"{path.name}.lock")  # … as a file's stem: locks/<cluster>.lock


class LocalLock:
    """The flock on this machine; `acquire` raises LockHeld at once when someone has it."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self, owner: LockOwner) -> None:
        fd = open_lock_file(self.path)  # a regular file only (StateError naming it)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_owner(fd)
            os.close(fd)
            raise LockHeld(holder, str(self.path)) from None
        except OSError:
            os.close(fd)
            raise
        try:
            with writing(self.path.parent):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(owner.to_json()).encode(), 0)
        except StateError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


class HeadLock:
    """The head's flock, held by a process on the head for as long as this object lives."""

    def __init__(self, proc: StreamProcess):
        self._proc = proc

    async def release(self) -> None:
        with contextlib.suppress(TransportError, OSError):
            await self._proc.close()


async def acquire_head_lock(
    transport: Transport,
    python: str,
    owner: LockOwner,
    *,
    directory: str = HEAD_LOCK_DIR,
    max_hold: float = MAX_HOLD_S,
    first_line: float = DEFAULT_COMMAND_TIMEOUT,
) -> HeadLock:
    """Take the head's lock or raise LockHeld at once (TransportError when it cannot run; its
    CommandTimeout when the helper's one line does not come within `first_line` seconds, as
    on a host whose commands stall: the helper is then ended, and the lock with it)."""
    argv = python_argv(
        python, "head_lock", directory, LOCK_NAME, json.dumps(owner.to_json()), str(max_hold)
    )
    proc = await transport.stream(
        argv, first_line=first_line, what="cluster lock", max_line=MAX_ANSWER
    )
    first = None
    try:
        async for line in proc.lines():
            first = line
            break
    except CommandTimeout:
        await HeadLock(proc).release()
        raise
    except (TransportError, OSError) as exc:
        await HeadLock(proc).release()
        raise TransportError(f"{transport.host}: lock: {exc}") from None
    try:
        doc = json.loads(first or "")
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "held" in doc:
        return HeadLock(proc)
    await HeadLock(proc).release()
    if isinstance(doc, dict) and "busy" in doc:
        raise LockHeld(LockOwner.from_json(doc["busy"]), f"{transport.host}:{directory}")
    if isinstance(doc, dict) and "error" in doc:
        raise TransportError(f"{transport.host}: lock: {one_line(doc['error'], 200)}")
    tail = await proc.stderr_tail() if first is None else first
    raise TransportError(
        f"{transport.host}: lock helper did not answer: {one_line(tail or 'no output', 200)}"
    )
