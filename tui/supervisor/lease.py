"""Only one supervisor acts per cluster: a lease on the head (tui/remote/head_lease.py).

A lease, not a held flock, because a supervisor lives for days: it renews its lease every tick
(the heartbeat) and a lease not renewed for `ttl` seconds expires, so a `watch` killed with -9,
or one whose login node vanished, is taken over after at most `ttl`. A holder on this very
machine whose process is gone (killed with -9, then `watch` restarted) is taken over at once.
The owner is the cluster lock's LockOwner (user, host, pid, since; action "supervise") plus a
random token that tells this process's lease from a namesake's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from tui.cluster.head_files import helper_answer
from tui.cluster.lock import HEAD_LOCK_DIR, LockOwner
from tui.config.hosts import Inventory
from tui.errors import VerlTuiError
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

LEASE_NAME = "verl-tui-supervisor.lease"
LEASE_TTL_S = 30.0


class LeaseHeld(VerlTuiError, title="cluster supervised", kind="refused"):
    """Another supervisor holds the cluster; `owner` None when its lease says nothing readable."""

    def __init__(self, owner: LockOwner | None, left: float):
        self.owner = owner
        self.left = left
        super().__init__(f"{supervised_by(owner)} (lease expires in {max(0, round(left))} s)")


def supervised_by(owner: LockOwner | None) -> str:
    if owner is None:
        return "supervised by another verl-tui (owner unknown)"
    return one_line(f"supervised by {owner.user}@{owner.host} (pid {owner.pid})", 200)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


@dataclass
class LeaseState:
    held: bool
    owner: LockOwner | None  # the holder (us when held)
    left: float = 0.0  # seconds until the holder's lease expires


class HeadLease:
    def __init__(
        self, inv: Inventory, fleet: Fleet, *, ttl: float = LEASE_TTL_S, directory: str = ""
    ):
        self.inv = inv
        self.fleet = fleet
        self.ttl = ttl
        self.directory = directory or HEAD_LOCK_DIR
        self.owner = LockOwner.here("supervise")
        self.token = secrets.token_hex(8)
        self.held = False

    def _owner_json(self, **extra: Any) -> str:
        return json.dumps({**self.owner.to_json(), "token": self.token, **extra})

    async def _call(self, op: str, **extra: Any) -> dict[str, Any]:
        head = self.inv.head
        transport = await self.fleet.ready(head.name, 10)
        argv = python_argv(
            head.python,
            "head_lease",
            self.directory,
            LEASE_NAME,
            op,
            self._owner_json(**extra),
            str(self.ttl),
        )
        res = await transport.run(argv, timeout=20, what=f"supervisor lease {op}")
        doc = helper_answer(res.stdout)
        if doc is not None:
            if "error" in doc:
                raise TransportError(f"{head.name}: lease: {one_line(str(doc['error']), 200)}")
            return doc
        tail = one_line(res.stderr or res.stdout or "no output", 200)
        raise TransportError(f"{head.name}: lease helper did not answer: {tail}")

    async def acquire(self) -> LeaseState:
        """Take or renew the lease. LeaseHeld when another live supervisor has it;
        TransportError when the head cannot be asked."""
        doc = await self._call("acquire")
        if "busy" in doc:
            busy = doc["busy"] if isinstance(doc["busy"], dict) else {}
            owner = LockOwner.from_json(busy)
            left = float(doc.get("left") or 0)
            # Ours from a previous life on this machine (killed with -9): no need to wait.
            if (
                owner is not None
                and owner.host == socket.gethostname()
                and owner.pid != os.getpid()
                and _pid_gone(owner.pid)
                and isinstance(busy.get("token"), str)
            ):
                doc = await self._call("takeover", expect=busy["token"])
            if "busy" in doc:
                self.held = False
                raise LeaseHeld(owner, left)
        held = doc["held"] if isinstance(doc.get("held"), dict) else {}
        self.held = True
        since = held.get("since")
        if isinstance(since, (int, float)):
            self.owner = LockOwner(
                self.owner.user, self.owner.host, self.owner.pid, float(since), "supervise"
            )
        return LeaseState(True, self.owner, self.ttl)

    async def read(self) -> LeaseState:
        """Who holds the cluster now (owner None when nobody holds a live lease)."""
        doc = await self._call("read")
        raw = doc["doc"] if isinstance(doc.get("doc"), dict) else {}
        left = float(doc.get("left") or 0)
        owner = LockOwner.from_json(raw) if left > 0 else None
        return LeaseState(bool(raw.get("token") == self.token and left > 0), owner, left)

    async def release(self) -> None:
        if not self.held:
            return
        self.held = False
        with contextlib.suppress(TransportError, OSError):  # else it expires within ttl
            await self._call("release")
