"""An owner's name, `user@host` (the login user and the machine that submitted a job): the
check every boundary uses (Ray's metadata, queue and history files, hosts.yaml's notify
`owner:`, `jobs --owner`). tui/jobs/owner.py says who this process is."""

from __future__ import annotations

import re
from typing import Any

MAX_OWNER = 128
# A login name and a host name: no spaces, no control characters, one '@'.
_OWNER = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._$-]{0,63}@[A-Za-z0-9][A-Za-z0-9.-]{0,62}\Z")


def valid_owner(value: Any) -> str | None:
    """`value` when it is a well-formed `user@host`, else None (input from Ray or a file)."""
    if isinstance(value, str) and len(value) <= MAX_OWNER and _OWNER.match(value):
        return value
    return None


def check_owner(value: str, where: str) -> str:
    """A `user@host` given by the user (a flag, a config key); ValueError naming `where`."""
    owner = valid_owner(value.strip() if isinstance(value, str) else value)
    if owner is None:
        raise ValueError(f"{where}: {value!r} is not an owner (USER@HOST, e.g. alice@login1)")
    return owner
