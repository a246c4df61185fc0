"""Remote commands in a process group of their own, so giving up on one ends all of it.

A remote process without a PTY gets no signal when its SSH channel closes; one that ignores
EOF on stdin (hung in a driver call, or just badly written) would stay on the host forever. So
every command the SSH transport starts runs through `group_command`: a POSIX sh prologue that
makes the command lead its own process group (OpenSSH's session child already leads one; if not,
`setsid` makes it) and reports that group's id as the first line on stderr. Closing the stream
then kills the group with `kill_command`, run as a separate exec on the same connection.

A host with a `container:` runs the prologue twice: on the host (its group holds the runtime's
client, e.g. `docker exec`) and again inside the container (prefix + `sh -c PROLOGUE`), which
reports the inner group as "cpgid". Killing a `docker exec` client does not end what it started
inside, so the inner group is killed by a command run inside the container too, then the outer.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

# First stderr line of a wrapped command: "\x1everl-tui-pgid 1234" (group) or
# "\x1everl-tui-pid 1234" (no setsid on the host: only that process can be killed); inside a
# container "cpgid"/"cpid" follow.
MARK = b"\x1everl-tui-"
_KINDS = ("pgid", "pid", "cpgid", "cpid")
_PROLOGUE = (
    # kill -s 0 -- -$$ succeeds only if a process group with our pid exists: we lead it.
    "if kill -s 0 -- -$$ 2>/dev/null; then printf '\\036verl-tui-pgid %s\\n' $$ >&2; "
    'exec "$@"; fi; '
    "if command -v setsid >/dev/null 2>&1; then printf '\\036verl-tui-pgid %s\\n' $$ >&2; "
    # setsid(1) forks only when the caller leads a group; we do not, so it keeps our pid.
    'exec setsid "$@"; fi; '
    "printf '\\036verl-tui-pid %s\\n' $$ >&2; "
    'exec "$@"'
)


_INNER_PROLOGUE = _PROLOGUE.replace("verl-tui-pgid", "verl-tui-cpgid").replace(
    "verl-tui-pid", "verl-tui-cpid"
)


def group_command(command_line: str, container: Sequence[str] = ()) -> str:
    """The shell line that runs `command_line` (shell-quoted words, as `command_line()` in
    types.py builds them) as the leader of its own process group; with a `container` prefix,
    as the leader of a group inside the container as well."""
    if container:
        inner = shlex.join([*container, "sh", "-c", _INNER_PROLOGUE, "verl-tui"])
        command_line = f"{inner} {command_line}"
    return f"exec sh -c {shlex.quote(_PROLOGUE)} verl-tui {command_line}"


def parse_mark(line: bytes) -> tuple[str, int] | None:
    """("pgid" | "pid", number) from a marker line, or None if `line` is not one."""
    if not line.startswith(MARK):
        return None
    kind, _, number = line[len(MARK) :].decode("ascii", "replace").strip().partition(" ")
    if kind not in _KINDS or not number.isdigit() or int(number) <= 1:
        return None
    return kind, int(number)


def kill_command(kind: str, number: int, grace: float = 2.0, container: Sequence[str] = ()) -> str:
    """TERM the group (or process), wait up to `grace` seconds for it to go, then KILL. A
    container's group ("cpgid"/"cpid") is killed by the same shell run inside `container`."""
    target = f"-- -{int(number)}" if kind in ("pgid", "cpgid") else f"-- {int(number)}"
    steps = max(1, int(grace / 0.1))
    script = (
        f"kill -s TERM {target} 2>/dev/null || exit 0; i=0; "
        f"while [ $i -lt {steps} ]; do kill -s 0 {target} 2>/dev/null || exit 0; "
        f"sleep 0.1; i=$((i+1)); done; kill -s KILL {target} 2>/dev/null; exit 0"
    )
    if kind.startswith("c") and container:
        return shlex.join([*container, "sh", "-c", script])
    return script


def kill_order(marks: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The groups to kill, inside the container first (the work), then the host's (the
    runtime's client)."""
    return sorted(marks, key=lambda m: not m[0].startswith("c"))
