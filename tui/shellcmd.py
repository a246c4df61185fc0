"""Command lines shown to the user to copy into a shell (a doctor's fix, a host-key hint).

Every such line is built here from an argv list, each word quoted, so a value that came from a
file or a host (a user name, a known_hosts path, a folder a host reported) can never become
shell code in someone's terminal. `shlex.split(copy_line(argv))` gives `argv` back.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

# Inside double quotes these still act (expansions, escapes, bash's history `!`).
_DOUBLE_QUOTE_ACTIVE = frozenset('"$`\\!')


def quote_word(word: str) -> str:
    """One shell word, quoted one level. A leading `~/` stays unquoted so the shell still
    expands it (the rest is quoted: `~/'my keys/id'`). A word holding single quotes (a Hydra
    override's `key='value'`) goes in double quotes when nothing in it acts there, not in
    shlex's nested `'key='"'"'value'"'"''`."""
    if word.startswith("~/") and len(word) > 2:
        return "~/" + shlex.quote(word[2:])
    quoted = shlex.quote(word)
    if "'" in word and quoted != word and not _DOUBLE_QUOTE_ACTIVE.intersection(word):
        return f'"{word}"'
    return quoted


def copy_line(argv: Sequence[str], *, append_to: str | None = None) -> str:
    """`argv` as one shell command line; with `append_to`, its output appended to that file
    (`>> PATH`, the path quoted like a word)."""
    if not argv:
        raise ValueError("empty argv")
    line = " ".join(quote_word(str(word)) for word in argv)
    return line if append_to is None else f"{line} >> {quote_word(append_to)}"


def ssh_target(user: str | None, address: str) -> str:
    """`user@address` (or the address alone), as ssh and ssh-keyscan take it."""
    return f"{user}@{address}" if user else address


def known_hosts_name(address: str, port: int | None) -> str:
    """How OpenSSH names a host in known_hosts: `addr`, or `[addr]:port` off port 22."""
    return address if port in (None, 22) else f"[{address}]:{port}"


def shown_command(line: str) -> str:
    """A recorded command line (shlex.join of its argv) shown quoted one level (copy_line);
    a line that does not split as shell words is shown as it is."""
    try:
        argv = shlex.split(line)
    except ValueError:
        return line
    return copy_line(argv) if argv else line
