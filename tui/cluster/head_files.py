"""Files every user of one cluster shares, kept on its head next to the supervisor's lease
(`SHARED_DIR`): read and changed over SSH by tui/remote/head_state.py, the one home for them.

A change is compare-and-swap: read the text and its version, compute the new text here, write
it only when the file still has that version (the helper checks under a flock on the head),
else read again and recompute. So two users' cockpits, CLIs and supervisors never lose or
duplicate an entry, and nothing is held open on the head while this side computes. Every
call is one argv list (`python_argv`), with a deadline; what comes back is input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tui.cluster.lock import HEAD_LOCK_DIR
from tui.config.hosts import Inventory
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.state import StateError
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

SHARED_DIR = f"{HEAD_LOCK_DIR}/verl-tui-shared"  # beside verl-tui-supervisor.lease
CALL_TIMEOUT_S = 20.0
MAX_TRIES = 30  # compare-and-swap rounds before giving up (each a few ms on the head)


def helper_answer(stdout: str) -> dict[str, Any] | None:
    """The first JSON object line a head helper printed (lines before it are noise from the
    host's start-up), or None."""
    for line in stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def remote_head(inv: Inventory, fleet: object) -> bool:
    """Whether `inv`'s cluster has a head reached over SSH through `fleet`, where the shared
    files live. Not so for a head on this very machine (`transport: local`: one account's
    cockpit on its own box) or no Fleet at all (a replayed app, a flow with no cluster): the
    account's own state folder holds what would be shared."""
    return isinstance(fleet, Fleet) and inv.head.transport != "local"


class HeadFileError(StateError, title="head file"):
    """A shared file that cannot be read or written on the head (one line naming it)."""


class HeadFiles:
    """The shared files of `inv`'s cluster on its head, reached through `fleet`."""

    def __init__(self, inv: Inventory, fleet: Fleet, *, directory: str = SHARED_DIR):
        self.inv = inv
        self.fleet = fleet
        self.directory = directory

    def where(self, name: str) -> str:
        return f"{self.inv.head.name}:{self.directory}/{name}"

    async def _call(
        self, name: str, op: str, version: str, limit: int, text: str | None = None
    ) -> dict[str, Any]:
        head = self.inv.head
        try:
            transport = await self.fleet.ready(head.name, 10)
            argv = python_argv(  # stdlib only: -S, no site-packages scan at start-up
                head.python, "head_state", self.directory, name, op, version, str(limit), site=False
            )
            res = await transport.run(
                argv, input=text, timeout=CALL_TIMEOUT_S, what=f"shared {name} {op}"
            )
        except TransportError as exc:
            raise HeadFileError(f"{self.where(name)}: the head cannot be reached: {exc}") from exc
        doc = helper_answer(res.stdout)
        if doc is not None:
            if "error" in doc:
                raise HeadFileError(f"{head.name}: {one_line(str(doc['error']), 300)}")
            return doc
        tail = one_line(res.stderr or res.stdout or "no output", 200)
        raise HeadFileError(f"{self.where(name)}: the head's helper did not answer: {tail}")

    async def read_text(self, name: str, limit: int) -> tuple[str, str]:
        """The file's text and version ("" and "" when there is none)."""
        doc = await self._call(name, "read", "", limit)
        text, version = doc.get("text"), doc.get("version")
        if not isinstance(text, str) or not isinstance(version, str):
            raise HeadFileError(f"{self.where(name)}: the head's helper answered nonsense")
        return text, version

    async def read_json(self, name: str, limit: int) -> Any:
        """The file as JSON (None when there is none); HeadFileError when it does not parse."""
        text, _version = await self.read_text(name, limit)
        return self._parse(name, text)

    def _parse(self, name: str, text: str) -> Any:
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            line = getattr(exc, "lineno", 1)
            raise HeadFileError(
                f"{self.where(name)}:{line}: damaged (not JSON); nothing in it is changed "
                "until it is fixed by hand or moved away"
            ) from None

    async def change_json(self, name: str, limit: int, fn: Callable[[Any], tuple[Any, Any]]) -> Any:
        """Apply `fn` (doc or None -> (new doc, result)) atomically; returns the result. An
        exception from `fn` writes nothing. Another writer in between: read and apply again."""
        for _ in range(MAX_TRIES):
            text, version = await self.read_text(name, limit)
            new, result = fn(self._parse(name, text))
            data = json.dumps(new, indent=1) + "\n"
            doc = await self._call(name, "write", version, limit, data)
            if "written" in doc:
                return result
        raise HeadFileError(f"{self.where(name)}: changed by others {MAX_TRIES} times in a row")
