"""Command lines shown to the user to copy into a shell (a doctor's fix, a host-key hint).

Every such line is built here from an argv list, each word quoted, so a value that came from a
file or a host (a user name, a known_hosts path, a folder a host reported) can never become
shell code in someone's terminal. A POSIX shell reads `copy_line(argv)` back as `argv`; so does
`shlex.split` for every word that does not hold both a single quote and `$`, a backtick, `"`
or a backslash (those go in double quotes with backslash escapes, which shlex does not undo).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

# Inside double quotes these still act (expansions, escapes); a backslash takes that away.
_DOUBLE_QUOTE_ESCAPED = frozenset('"$`\\')


def quote_word(word: str) -> str:
    """One shell word, quoted one level. A leading `~/` stays unquoted so the shell still
    expands it (the rest is quoted: `~/'my keys/id'`). A word holding single quotes (a Hydra
    override's `key='value'`, an `sh -c` script) goes in double quotes, with a backslash before
    what still acts there (`$`, a backtick, `"`, a backslash), not in shlex's nested
    `'key='"'"'value'"'"''`. A word holding `!` keeps shlex's form: no escape inside double
    quotes hides it from an interactive bash's history expansion."""
    if word.startswith("~/") and len(word) > 2:
        return "~/" + shlex.quote(word[2:])
    quoted = shlex.quote(word)
    if "'" in word and quoted != word and "!" not in word:
        escaped = "".join("\\" + c if c in _DOUBLE_QUOTE_ESCAPED else c for c in word)
        return f'"{escaped}"'
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
