"""The cluster's job events, shared on its head beside the queue (`events.json` in
tui/cluster/head_files.py's folder), so a job's notifications follow its owner, not the
supervisor that acted: whichever supervisor starts, retries or sees a job end appends the event
(id, time, owner, job, kind, text); every user's supervisor — the lease holder or one standing
by, a cockpit or `watch` — reads the events past its own cursor and delivers those of its own
user through its own `notify:` targets (tui/supervisor/notify.py). Webhook URLs and secrets
never leave the account: only the event is on the head.

Bounds: the log keeps the newest MAX_EVENTS and nothing older than MAX_AGE_S; a supervisor
that was not running catches up on at most CATCHUP_COUNT events no older than CATCHUP_S.

Nothing is sent twice: each event has a sequence number and the log an epoch (a new log, after
`/tmp/ray` was wiped, starts a new epoch); the cursor (epoch, last sequence delivered) is kept
in the account's state folder, written atomically after each event's delivery, under a flock
that one process of the account holds at a time (a cockpit and a `watch` of the same user do
not both deliver). Each payload carries the event's id, for a receiver that dedupes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.cluster.head_files import SHARED_DIR, HeadFiles, remote_head
from tui.config.owner import valid_owner
from tui.state import atomic_write_json, read_state_json
from tui.supervisor.events import KINDS, Decision

if TYPE_CHECKING:
    from tui.config.hosts import Inventory
    from tui.transport.fleet import Fleet

EVENTS_FILE = "events.json"
MAX_EVENTS = 300
MAX_AGE_S = 7 * 86400.0
MAX_EVENTS_BYTES = 2 << 20
MAX_DETAILS_BYTES = 4096  # 300 events stay under 1.5 MiB
CATCHUP_S = 3600.0  # a supervisor started after a while hears the last hour…
CATCHUP_COUNT = 100  # …at most this many of its events


@dataclass(frozen=True)
class JobEvent:
    """One event of the shared log (input when read back: `from_json` checks every field)."""

    id: str
    seq: int
    at: float
    owner: str
    decision: Decision

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "at": self.at,
            "owner": self.owner,
            "decision": self.decision.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Any) -> JobEvent | None:
        if not isinstance(doc, dict):
            return None
        eid, seq, at, owner = doc.get("id"), doc.get("seq"), doc.get("at"), doc.get("owner")
        decision = Decision.from_json(doc.get("decision"))
        if (
            not isinstance(eid, str)
            or not 0 < len(eid) <= 64
            or not isinstance(seq, int)
            or isinstance(seq, bool)
            or not isinstance(at, (int, float))
            or valid_owner(owner) is None
            or decision is None
            or decision.submission_id is None
        ):
            return None
        decision.details = {**decision.details, "owner": owner, "event_id": eid}
        return cls(eid, seq, float(at), str(owner), decision)


@dataclass
class LogPage:
    epoch: str
    events: list[JobEvent]


def _bounded(decision: Decision) -> Decision:
    """The decision as the log keeps it: each detail whole while they fit MAX_DETAILS_BYTES,
    a larger one (a stall's stack dump) marked trimmed; the acting supervisor's own records,
    and its own deliveries, keep them whole."""
    details: dict[str, Any] = {}
    left = MAX_DETAILS_BYTES
    for key, value in decision.details.items():
        size = len(json.dumps(value, default=str)) + len(key) + 4
        if size <= left:
            details[key] = value
            left -= size
        else:
            details[key] = "(trimmed)"
            left -= len(key) + 16
    return Decision(decision.kind, decision.submission_id, decision.message, decision.at, details)


def _parse(doc: Any) -> tuple[str, int, list[dict[str, Any]]]:
    """(epoch, next sequence, raw events) of the file's document; a new log when it is not
    one (nothing there yet, or damaged: a log is news, not state worth refusing over)."""
    if isinstance(doc, dict):
        epoch, nxt, events = doc.get("epoch"), doc.get("next"), doc.get("events")
        if (
            isinstance(epoch, str)
            and isinstance(nxt, int)
            and not isinstance(nxt, bool)
            and isinstance(events, list)
        ):
            return epoch, nxt, [e for e in events if isinstance(e, dict)]
    return secrets.token_hex(8), 1, []


class SharedEvents:
    """The event log on `inv`'s head (async: one or two SSH round trips a call)."""

    def __init__(self, inv: Inventory, fleet: Fleet, *, directory: str = SHARED_DIR):
        self.files = HeadFiles(inv, fleet, directory=directory)
        self.where = self.files.where(EVENTS_FILE)

    async def append(self, decision: Decision, owner: str) -> str:
        """Add `decision` (about a job of `owner`); its event id."""
        eid = secrets.token_hex(8)
        now = time.time()

        def apply(doc: Any) -> tuple[Any, str]:
            epoch, nxt, events = _parse(doc)
            events.append(JobEvent(eid, nxt, now, owner, _bounded(decision)).to_json())
            events = [e for e in events if now - float(e.get("at") or 0) <= MAX_AGE_S]
            return {"epoch": epoch, "next": nxt + 1, "events": events[-MAX_EVENTS:]}, eid

        result: str = await self.files.change_json(EVENTS_FILE, MAX_EVENTS_BYTES, apply)
        return result

    async def read(self) -> LogPage:
        doc = await self.files.read_json(EVENTS_FILE, MAX_EVENTS_BYTES)
        epoch, _nxt, raw = _parse(doc)
        events = [e for e in map(JobEvent.from_json, raw) if e is not None]
        return LogPage(epoch, sorted(events, key=lambda e: e.seq))


def event_log(inv: Inventory, fleet: Any) -> SharedEvents | None:
    """The cluster's shared event log; None where there is no remote head (one account's
    cluster: its supervisor delivers its events itself, as before)."""
    return SharedEvents(inv, fleet) if remote_head(inv, fleet) else None


class Cursor:
    """How far this account has delivered the log (a file in its supervisor's state folder)."""

    def __init__(self, folder: Path):
        self.path = folder / "events-cursor.json"
        self.lock_path = folder / "events-cursor.lock"

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """True while this process is the account's one deliverer (non-blocking)."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def read(self) -> tuple[str, int] | None:
        """(epoch, last sequence delivered); None: never delivered (or a damaged file: the
        catch-up bound then limits what is sent again)."""
        try:
            doc = read_state_json(self.path, max_bytes=1 << 12)
        except OSError:
            return None
        if isinstance(doc, dict):
            epoch, seq = doc.get("epoch"), doc.get("seq")
            if isinstance(epoch, str) and isinstance(seq, int) and not isinstance(seq, bool):
                return epoch, seq
        return None

    def write(self, epoch: str, seq: int) -> None:
        atomic_write_json(self.path, {"epoch": epoch, "seq": seq, "at": time.time()})


def unread(
    page: LogPage, cursor: tuple[str, int] | None, now: float | None = None
) -> list[JobEvent]:
    """The events past `cursor`; with no cursor for this log (a first start, a new log) the
    catch-up: the last CATCHUP_COUNT events no older than CATCHUP_S."""
    if cursor is not None and cursor[0] == page.epoch:
        return [e for e in page.events if e.seq > cursor[1]]
    now = time.time() if now is None else now
    return [e for e in page.events if now - e.at <= CATCHUP_S][-CATCHUP_COUNT:]


def shared_kinds() -> frozenset[str]:
    """The decision kinds that travel through the log: a job's news, never the lease, a wait
    or a duty's error (those are the acting supervisor's own)."""
    return frozenset(KINDS) - {"lock", "waiting", "queue-wait", "error"}
