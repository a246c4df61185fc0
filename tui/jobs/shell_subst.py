"""Command substitutions whose output the importer knows without running anything: the path
and text commands scripts use to find their own folder — `$(dirname "$0")`,
`$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`, `$(realpath …)`, `$(basename …)`, `$(pwd)`,
`$(echo …)`. Each is a pure function of words the importer can expand; anything else (a
pipe, another command, a redirection, a word not known) is not known, and says so upstream.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tui.jobs.shell_lexer import Lexer, Word
from tui.jobs.shell_parse import parse

PURE = {"cd", "pwd", "dirname", "basename", "realpath", "readlink", "echo", "true", ":"}
_PATH_FLAGS = {"-f", "-e", "-m", "-s", "-q", "--canonicalize", "-z"}


def pure_output(
    text: str, line: int, expand: Callable[[Word], str | None], cwd: str | None
) -> str | None:
    """What `$( … )` / `` `…` `` prints, when every command in it is one of PURE joined by
    `&&` / `;` and every word is known (`expand` gives None for a word it cannot expand);
    None otherwise. `cwd`: the folder the script runs from (None: `pwd` is not known)."""
    body = text[2:-1] if text.startswith("$(") else text[1:-1]
    if not any(name in body for name in PURE):
        return None
    lexer = Lexer(body, line)
    cmds = parse(lexer.run(), lexer.notes)
    here, out = cwd, None
    for cmd in cmds:
        if cmd.sep not in ("&&", ";", "\n", "") or not cmd.words or cmd.enclosing:
            return None
        if any(not _to_null(r.op, r.target) for r in cmd.redirs):
            return None
        name = cmd.words[0].literal
        if name not in PURE:
            return None
        args: list[str] = []
        for w in cmd.words[1:]:
            value = expand(w)
            if value is None:
                return None
            args.append(value)
        printed = _run(name, args, here)
        if printed is _FAILED:
            return None
        if name == "cd":
            if not args or (here is None and not os.path.isabs(args[0])):
                return None
            here = os.path.normpath(os.path.join(here or "/", args[0]))
            continue
        if printed is not None:
            if out is not None:
                return None  # two commands print: not one value
            out = printed
    return out


_FAILED = "\0failed"


def _run(name: str | None, args: list[str], here: str | None) -> str | None:
    if name in ("cd", "true", ":"):
        return None
    if name == "pwd":
        return here if here is not None else _FAILED
    if name == "echo":
        return " ".join(args[1:] if args[:1] == ["-n"] else args)
    paths = [a for a in args if a not in _PATH_FLAGS]
    if name == "dirname":
        return os.path.dirname(paths[-1].rstrip("/")) or "." if len(paths) == 1 else _FAILED
    if name == "basename":
        if not 1 <= len(paths) <= 2:
            return _FAILED
        base = os.path.basename(paths[0].rstrip("/"))
        return base.removesuffix(paths[1]) if len(paths) == 2 else base
    # realpath / readlink -f: the path made absolute (links on this machine are not the
    # script's: not followed)
    if len(paths) != 1 or (name == "readlink" and not set(args) & _PATH_FLAGS):
        return _FAILED
    if os.path.isabs(paths[0]):
        return os.path.normpath(paths[0])
    return os.path.normpath(os.path.join(here, paths[0])) if here is not None else _FAILED


def _to_null(op: str, target: Word | None) -> bool:
    """`2>/dev/null` and the like change no output the importer reads."""
    return (
        op.lstrip("0123456789") in (">", ">>")
        and target is not None
        and (target.literal == "/dev/null")
    )
