"""Where a verl entry point starts in a command's argv, as bash would run it (the words
already expanded and split: tui/jobs/shell_expand.py's `fields`): `python3 -u -m MODULE`,
`$PYTHON -m`, `uv run … python -m`, `env A=B python`, `torchrun … -m MODULE`,
`python -m torch.distributed.run … -m MODULE`, `srun`/`nohup`/`timeout`-style prefixes,
`ray job submit … -- …`, or `…/verl/…/main_ppo.py`; MODULE any Hydra entry of the installed
verl (tui/jobs/verl_entries.py). The words before the interpreter are the launcher prefix.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tui.jobs.shell_lexer import Word
from tui.jobs.verl_entries import Entry, entry_for_path

PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")
# Python options that take the next word as their value.
PY_ARG_FLAGS = {"-X", "-W", "-Q", "-c"}
# Launchers that run a module of their own (`torchrun -m MOD`, `python -m torch.distributed.run
# -m MOD`): their options are skipped up to `-m MODULE` or a script path.
MODULE_LAUNCHERS = {"torchrun", "torch.distributed.run", "torch.distributed.launch"}
# Commands whose arguments are data, not a command to run: `echo python3 -m …` runs nothing.
NOT_LAUNCHERS = {
    "echo",
    "printf",
    "cat",
    "grep",
    "sed",
    "awk",
    "test",
    "[",
    "[[",
    "alias",
    "read",
    "which",
    "type",
    "tee",
}
SHELLS = {"bash", "sh", "zsh", "dash"}


@dataclass(frozen=True)
class EntryMatch:
    entry: Entry
    start: int  # index of the interpreter, or of the launcher running the module (torchrun)
    args_at: int  # index of the entry's first argument
    interpreter: bool  # words[start] is a python interpreter (its flags sit before the module)


@functools.lru_cache(maxsize=1024)
def command_name(word: str) -> str:
    """The program a command word names (`/usr/bin/python3` -> `python3`), as Path reads it:
    kept per word, as a script of many commands asks it several times a command and a Path
    costs more than the rest of the step."""
    return Path(word).name


def _name(w: Word) -> str | None:
    lit = w.literal
    return command_name(lit) if lit else None


def find_entry(
    words: list[Word], entries: dict[str, Entry], python_var: Callable[[Word], bool]
) -> EntryMatch | None:
    """The first verl entry point the argv runs; None when it runs none. `python_var` says
    whether an unresolved word names an interpreter (`$PYTHON` from the environment)."""
    if not words or _name(words[0]) in NOT_LAUNCHERS or (words[0].literal or "")[:1] == "-":
        return None  # `-- python3 …` on a line of its own: bash runs a command named `--`
    k = 0
    while k < len(words):
        name = _name(words[k])
        if name in MODULE_LAUNCHERS:
            found = _after_launcher(words, k + 1, entries, start=k, interpreter=False)
            if found is not None:
                return found
        elif (name is not None and PYTHON_NAME.fullmatch(name)) or (
            name is None and (python_var(words[k]) or _followed_by_module(words, k, entries))
        ):
            found = _after_python(words, k, entries)
            if found is not None:
                return found
        k += 1
    return None


def _followed_by_module(words: list[Word], k: int, entries: dict[str, Entry]) -> bool:
    """`$P -m verl.trainer.main_ppo` with P known only when the script runs (`$(which
    python3)`): a word not known here that runs a verl module is its interpreter."""
    return k + 1 < len(words) and _module_arg(words, k + 1)[0] in entries


def _module_arg(words: list[Word], j: int) -> tuple[str | None, int]:
    """(module, index after it) for `-m MOD` / `-mMOD` / `--module MOD` at j."""
    a = words[j].literal or ""
    if a in ("-m", "--module") and j + 1 < len(words):
        return words[j + 1].literal, j + 2
    if a.startswith("-m") and len(a) > 2 and not a.startswith("--"):
        return a[2:], j + 1
    return None, j


def _after_python(words: list[Word], k: int, entries: dict[str, Entry]) -> EntryMatch | None:
    j = k + 1
    while j < len(words):
        a = words[j].literal
        if a is None:
            return None
        module, after = _module_arg(words, j)
        if module is not None:
            if module in entries:
                return EntryMatch(entries[module], k, after, True)
            if module in MODULE_LAUNCHERS:
                return _after_launcher(words, after, entries, start=k, interpreter=True)
            return None  # python -m another module
        if a in PY_ARG_FLAGS:
            j += 2
            continue
        if a.startswith("-"):
            j += 1
            continue
        entry = entry_for_path(a, entries)
        return EntryMatch(entry, k, j + 1, True) if entry is not None else None
    return None


def _after_launcher(
    words: list[Word], j: int, entries: dict[str, Entry], *, start: int, interpreter: bool
) -> EntryMatch | None:
    """`torchrun [options] -m MODULE|SCRIPT.py` from the options at j: options (and their
    values) skipped."""
    while j < len(words):
        a = words[j].literal or ""
        module, after = _module_arg(words, j)
        if module is not None:
            entry = entries.get(module)
            if entry is None:
                return None
            return EntryMatch(entry, start, after, interpreter)
        if a.endswith(".py"):
            entry = entry_for_path(a, entries)
            if entry is None:
                return None
            return EntryMatch(entry, start, j + 1, interpreter)
        j += 1
    return None


def shell_c_index(words: list[Word]) -> int | None:
    """Index of STRING in `… bash|sh -c STRING` (Ray runs an entrypoint through a shell, so
    scripts wrap `cd …; python …`); None when the words hold no `SHELL -c`."""
    if not words or _name(words[0]) in NOT_LAUNCHERS:
        return None
    for k in range(len(words) - 2):
        if _name(words[k]) in SHELLS and words[k + 1].literal == "-c":
            return k + 2
    return None
