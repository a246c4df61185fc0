"""The job form's state as data: field text ↔ profile values (Hydra's syntax, verl's command
line habit), and drafts autosaved to the XDG state dir so nothing typed is lost.

A field's text is what the user typed; an empty text means "verl's default" (no override).
`parse_text` reads it like Hydra reads `key=text` and returns the value a profile holds, so
`to_hydra_overrides` quotes it safely on the way out.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.config.yamlfile import unsafe_char
from tui.jobs.hydra_values import NOT_A_VALUE, parse_value, read_value, short_text
from tui.jobs.profiles import Profile
from tui.sanitize import one_line
from tui.state import (
    StateError,
    atomic_write_bytes,
    atomic_write_json,
    read_state_json,
    safe_segment,
    state_path,
)

MAX_DRAFT_BYTES = 1 << 20


def parse_text(key: str, text: str) -> tuple[Any, str | None]:
    """(value, problem) for what was typed at `key`. problem is one line when Hydra would
    refuse the text or the profile model would not hold the value."""
    value, problem = parse_value(text)
    if problem or value is NOT_A_VALUE:
        why = (problem or "Hydra cannot parse this value").removesuffix(
            ": imported as literal text"
        )
        return None, f"{why} (quote text with '…', write a list as [a,b])"
    try:
        Profile._overrides({key: value})
    except ValueError as exc:
        return None, str(exc)
    return value, None


def value_text(value: Any) -> str:
    """The shortest text that `parse_text` reads back as exactly `value`."""
    return short_text(value)


def default_text(value: Any) -> str:
    """verl's default as a placeholder."""
    if value == "???":
        return "required (??? in verl)"
    try:
        return value_text(value)
    except ValueError:
        return str(value)


def texts_from_sets(sets: Iterable[str]) -> dict[str, str]:
    """`key=value` Hydra overrides (a job's recorded ones) → key → field text."""
    out: dict[str, str] = {}
    for line in sets:
        key, sep, raw = line.partition("=")
        key = key.strip()
        if not key or key.startswith("-"):  # main_ppo's --config-name/-path: in the profile
            continue
        if not sep:  # `~key`: a deletion; kept as an extra key holding null
            out[key] = "null"
            continue
        value = read_value(raw)
        out[key] = raw if value is NOT_A_VALUE else value_text(value)
    return out


def texts_from_profile(profile: Profile) -> dict[str, str]:
    return {k: value_text(v) for k, v in profile.overrides.items()}


# -- drafts ---------------------------------------------------------------------------------


@dataclass
class Toggles:
    post_mortem: bool = False
    legacy_debug: bool = False
    print_config: bool = False


@dataclass
class Draft:
    profile_path: str
    profile: str
    texts: dict[str, str]  # every overridden key → its text as typed (order kept)
    values: dict[str, Any] = field(default_factory=dict)  # the parsed ones, for reading
    toggles: Toggles = field(default_factory=Toggles)
    saved_at: float = 0.0

    @property
    def extra_keys(self) -> list[str]:
        from tui.jobs.catalog import CATALOG_KEYS

        return [k for k in self.texts if k not in CATALOG_KEYS]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["extra_keys"] = self.extra_keys
        return doc


def draft_path(cluster: str, profile_name: str) -> Path:
    return state_path("drafts", cluster, f"{safe_segment(profile_name)}.json")


def save_draft(cluster: str, draft: Draft) -> Path:
    draft.saved_at = time.time()
    path = draft_path(cluster, draft.profile)
    doc = draft.to_json()
    try:
        json.dumps(doc, allow_nan=True)
    except (TypeError, ValueError):
        doc["values"] = {}
    atomic_write_json(path, doc)
    return path


def load_draft(cluster: str, profile_name: str, notes: list[str] | None = None) -> Draft | None:
    """The saved draft, or None when there is none or it is damaged (start from the profile).
    Read by the state reader (regular file, size cap, no control characters in the texts): a
    FIFO or a huge or hostile file in the state dir neither blocks nor breaks the form. A
    damaged draft is never overwritten by the next autosave: it is moved aside first
    (`<name>.damaged-<time>`), and `notes` gets a line naming where it went."""
    path = draft_path(cluster, profile_name)
    try:
        draft = _read_draft(path, profile_name)
    except (StateError, ValueError, TypeError, KeyError) as exc:
        draft, why = None, str(exc) or type(exc).__name__
    else:
        if draft is not None or not (path.exists() or path.is_symlink()):
            return draft
        why = "not a draft the form wrote"
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        path.rename(aside)
    except OSError as exc:
        line = f"draft {path} is damaged ({why}) and could not be moved aside: {exc.strerror}"
    else:
        line = f"draft {path} was damaged ({why}): kept as {aside.name}; starting from the profile"
    if notes is not None:
        notes.append(one_line(line, 400))
    return None


def _read_draft(path: Path, profile_name: str) -> Draft | None:
    """The draft at `path`; None when there is none or its shape is not a draft's."""
    if not (path.exists() or path.is_symlink()):
        return None
    doc = read_state_json(path, max_bytes=MAX_DRAFT_BYTES)
    if not isinstance(doc, dict):
        return None
    texts = doc["texts"]
    if not isinstance(texts, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and not unsafe_char(k + v)
        for k, v in texts.items()
    ):
        return None
    toggles = doc.get("toggles") or {}
    values = doc.get("values") or {}
    if not isinstance(toggles, dict) or not isinstance(values, dict):
        return None
    return Draft(
        profile_path=str(doc.get("profile_path", "")),
        profile=profile_name,
        texts=dict(texts),
        values=values,
        toggles=Toggles(
            **{k: bool(v) for k, v in toggles.items() if k in Toggles.__dataclass_fields__}
        ),
        saved_at=float(doc.get("saved_at") or 0.0),
    )


def clear_draft(cluster: str, profile_name: str) -> None:
    draft_path(cluster, profile_name).unlink(missing_ok=True)


def overrides_from_texts(texts: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(overrides, key → problem) for the non-empty texts."""
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for key, text in texts.items():
        if not text.strip():
            continue
        value, problem = parse_text(key, text)
        if problem:
            problems[key] = problem
        else:
            values[key] = value
    return values, problems


# -- who has a draft open -------------------------------------------------------------------
# A form that writes a draft holds `<draft>.lock`: JSON {user, host, pid, since, token}. The
# token says which form may write; every write checks it first, so a form whose draft was taken
# over stops writing at once instead of overwriting the other's work.

DRAFT_LOCK_MAX_AGE_S = 7 * 86400.0  # an owner on another host (shared home) we cannot ask


@dataclass(frozen=True)
class DraftOwner:
    user: str
    host: str
    pid: int
    since: float
    token: str

    def describe(self) -> str:
        from tui.sanitize import one_line

        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return one_line(f"pid {self.pid} ({self.user}@{self.host}) since {stamp}", 160)


def _pid_alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _owner_alive(owner: DraftOwner) -> bool:
    import socket

    if owner.host == socket.gethostname():
        return _pid_alive(owner.pid)
    return time.time() - owner.since < DRAFT_LOCK_MAX_AGE_S


def _read_owner(path: Path) -> DraftOwner | None:
    try:
        doc = read_state_json(path, max_bytes=1 << 16)
        if not isinstance(doc, dict):
            return None
        return DraftOwner(
            str(doc["user"]),
            str(doc["host"]),
            int(doc["pid"]),
            float(doc["since"]),
            str(doc["token"]),
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None


class DraftLock:
    """This form's claim on a draft. `other` is the live owner found at open (None: ours)."""

    def __init__(self, cluster: str, profile_name: str):
        import getpass
        import os
        import secrets
        import socket

        self.path = draft_path(cluster, profile_name).with_suffix(".lock")
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        self.me = DraftOwner(
            user, socket.gethostname(), os.getpid(), time.time(), secrets.token_hex(8)
        )
        self.other: DraftOwner | None = None
        self.held = False

    def _write(self, *, exclusive: bool) -> bool:
        """Publish our owner record: exclusive = only if no file is there (link is atomic)."""
        import os

        tmp = self.path.with_name(f".{self.path.name}.{self.me.token}")
        atomic_write_bytes(tmp, json.dumps(asdict(self.me)).encode())
        moved = False
        try:
            if exclusive:
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, self.path)
                moved = True
        finally:
            if not moved:
                tmp.unlink(missing_ok=True)
        return self.still_mine()

    def acquire(self) -> bool:
        """True when this form may write the draft; else `other` names who has it open."""
        for _ in range(3):
            if self._write(exclusive=True):
                self.held, self.other = True, None
                return True
            owner = _read_owner(self.path)
            if owner is not None and owner.token != self.me.token and _owner_alive(owner):
                self.other = owner
                return False
            # Stale (its process is gone) or unreadable: take it over, then check we won.
            if self._write(exclusive=False):
                self.held, self.other = True, None
                return True
        self.other = _read_owner(self.path)
        return False

    def take_over(self) -> None:
        """The user chose to write here: the other form stops at its next write."""
        self.held = self._write(exclusive=False)
        self.other = None

    def still_mine(self) -> bool:
        owner = _read_owner(self.path)
        return owner is not None and owner.token == self.me.token

    def owner(self) -> DraftOwner | None:
        return _read_owner(self.path)

    def release(self) -> None:
        if self.held and self.still_mine():
            self.path.unlink(missing_ok=True)
        self.held = False


# -- the form's draft writer ------------------------------------------------------------------


class DraftSaver:
    """Writes one form's draft: at most once per change, the newest state only, never over a
    draft another form took over. `take` runs on the UI loop (cheap: the texts as typed);
    `store` parses and writes, in a worker thread (it may import Hydra)."""

    def __init__(self, cluster: str, profile_name: str, profile_path: str) -> None:
        self.cluster = cluster
        self.profile_name = profile_name
        self.profile_path = profile_path
        self.lock: DraftLock | None = None
        self.read_only = False  # a copy of a draft open elsewhere: never written from here
        self.note: str | None = None  # why it is read-only, for the form's header
        self._dirty = False
        self._seq = 0
        self._io = threading.Lock()

    # The claim: acquire() in a thread; on False the form asks, then take_over() or copy().
    def acquire(self) -> bool:
        lock = DraftLock(self.cluster, self.profile_name)
        self.lock = lock
        return lock.acquire()

    @property
    def other(self) -> DraftOwner | None:
        return self.lock.other if self.lock is not None else None

    def take_over(self) -> None:
        assert self.lock is not None
        self.lock.take_over()

    def copy(self) -> None:
        other = self.other
        self.lock = None
        self.read_only = True
        self.note = (
            f"read-only copy: the draft is open in another form "
            f"({other.describe() if other else 'unknown'}); nothing typed here is "
            "saved as a draft"
        )

    def may_write(self) -> bool:
        """Still this form's draft? A form whose draft was taken over turns read-only."""
        if self.read_only:
            return False
        if self.lock is None or self.lock.still_mine():
            return True
        owner = self.lock.owner()
        self.read_only = True
        self.note = (
            f"read-only: the draft was taken over by another form "
            f"({owner.describe() if owner else 'unknown'})"
        )
        return False

    def changed(self) -> None:
        self._dirty = True

    def take(self, texts: dict[str, str], toggles: Toggles) -> tuple[Draft, int] | None:
        """The state to write, once per change (None when nothing is pending)."""
        if not self._dirty:
            return None
        self._dirty = False
        self._seq += 1
        return Draft(
            profile_path=self.profile_path,
            profile=self.profile_name,
            texts=dict(texts),
            toggles=toggles,
        ), self._seq

    def store(self, draft: Draft, seq: int | None = None) -> bool:
        """Write `draft` unless a newer one is queued (seq) or the draft is no longer ours.
        False when this write found the draft taken over (the form says so once)."""
        with self._io:
            if seq is not None and seq != self._seq:
                return True
            was = self.read_only
            if not self.may_write():
                return was
            draft.values, _ = overrides_from_texts(draft.texts)
            save_draft(self.cluster, draft)
            return True

    def forget(self) -> None:
        """Nothing pending any more; a write still queued must not bring the draft back."""
        self._dirty = False
        self._seq += 1

    def discard(self) -> None:
        """The draft is gone (discarded, or its job submitted)."""
        self.forget()
        with self._io:
            if self.may_write():
                clear_draft(self.cluster, self.profile_name)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
