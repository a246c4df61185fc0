"""Who submitted a job: `user@host`, the login user and the machine of the cockpit (or CLI) that
submitted or queued it. It travels with the job: in the Ray job's metadata (`OWNER_KEY`, set once
in tui/jobs/flow.py, so another user's cockpit reads it from Ray), on the queue entry, the
history record and the archive's meta. A value read back from Ray or a file is input: only a
well-formed `user@host` counts, anything else reads as unknown (None)."""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from tui.config.owner import check_owner, valid_owner

__all__ = ["OWNER_KEY", "check_owner", "me", "valid_owner"]

OWNER_KEY = "verl_tui_owner"  # the Ray job metadata key


def login_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid (containers)
        return str(os.getuid())


def me() -> str:
    """This process's owner name: login user @ this machine's host name."""
    return f"{login_user()}@{socket.gethostname()}"


def owner_of_metadata(metadata: Any) -> str | None:
    """The owner a Ray job's metadata names (None: not submitted by verl-tui, or malformed)."""
    return valid_owner(metadata.get(OWNER_KEY)) if isinstance(metadata, Mapping) else None


def stamp(metadata: dict[str, str]) -> str:
    """Put this process's owner on a submission's metadata unless it names one already (a
    queued entry or a retry keeps the owner who asked for it); the owner it carries."""
    owner = owner_of_metadata(metadata)
    if owner is None:
        owner = metadata[OWNER_KEY] = me()
    return owner


def others(owners: Iterable[str | None], mine: str | None = None) -> list[str]:
    """The distinct owners in `owners` that are not `mine` (default: this process's), sorted;
    unknown owners (None) are left out: a job without one was not submitted by verl-tui."""
    mine = mine or me()
    return sorted({o for o in owners if o is not None and o != mine})


def owner_filter(choice: str | None) -> str | None:
    """What a filter value means: None for all owners, else the one owner (`mine` is me())."""
    if choice is None or choice == "all":
        return None
    return me() if choice == "mine" else choice


async def others_running(cluster: Any) -> list[str]:
    """The other owners of jobs running (or pending) on `cluster`'s head now; [] when Ray
    cannot be asked (nothing is known to be running: `down` and `restart` go on as before)."""
    from tui.cluster.dashboard import TERMINAL
    from tui.errors import VerlTuiError

    try:
        client = await cluster.dashboard()
        jobs = await client.list_jobs()
    except (VerlTuiError, OSError):
        return []
    return others(
        owner_of_metadata(j.get("metadata")) for j in jobs if j.get("status") not in TERMINAL
    )


def their_jobs_line(owners: list[str]) -> str:
    """`down`/`restart`'s warning naming the other users whose jobs run."""
    verb = "has" if len(owners) == 1 else "have"
    return f"{', '.join(owners)} {verb} jobs running on this cluster; they would be killed"
