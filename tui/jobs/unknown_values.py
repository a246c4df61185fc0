"""Values known only when a launch script runs: the shell text an imported profile keeps where
the importer could not resolve it (`$(nvidia-smi -L | wc -l)`, `$SLURM_NNODES`,
`${CKPTS_DIR}/ckpt`, `$((N * 2))` of an unknown N). `profile check` turns what it finds
about such a key into a warning naming what it waits for, never an error: the value is not
wrong, it is not known here. Hydra's own `${a.b}` / `${oc.env:X}` interpolations are not
shell text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# $(…) / $((…)) / `…`, $NAME, ${NAME}, ${NAME:-x} ${NAME-x} ${NAME:=x} ${NAME:+x} ${NAME:?x},
# ${NAME#x} ${NAME%x} ${NAME/x} ${NAME^} ${NAME,} ${NAME[i]} ${#NAME}, $1 $@ $* $# $? $$ $!
_SHELL = re.compile(
    r"\$\(\((?P<arith>[^)]{0,200})"
    r"|\$\((?P<subst>[^)]{0,200})"
    r"|`(?P<tick>[^`]{0,200})`"
    r"|\$(?P<plain>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\$\{#?(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?=\}|:[-=+?]|[-=+?#%/^,\[])"
    r"|\$(?P<special>[0-9@*#?$!])"
)
MAX_SCAN = 4096  # characters of one value looked at (a profile value is one line)


def shell_references(value: Any, hydra_keys: Iterable[str] = ()) -> list[str]:
    """What a value waits for, as the user wrote it: variable names (`CKPTS_DIR`), command
    substitutions (`$(nvidia-smi -L | wc -l)`); empty when it is plain. `${NAME}` naming one
    of `hydra_keys` (the config's top-level keys) is a Hydra interpolation, not shell."""
    texts = _strings(value)
    tops = set(hydra_keys)
    out: list[str] = []
    for text in texts:
        for m in _SHELL.finditer(text[:MAX_SCAN]):
            kind = m.lastgroup
            if kind in ("arith", "subst"):
                ref = _closed(text, m.start())
            elif kind == "tick":
                ref = f"`{m.group('tick')}`"
            elif kind == "braced" and m.group("braced") in tops:
                continue
            else:
                ref = m.group(kind or "plain")
                ref = f"${ref}" if kind == "special" else ref
            if ref not in out:
                out.append(ref)
    return out


def unknown_keys(overrides: Mapping[str, Any], hydra_keys: Iterable[str] = ()) -> dict[str, str]:
    """Override key (without +/~/++) → what it waits for, for every value holding shell text."""
    tops = set(hydra_keys)
    out: dict[str, str] = {}
    for key, value in overrides.items():
        refs = shell_references(value, tops)
        if refs:
            out[key.lstrip("+~")] = ", ".join(refs)
    return out


def _strings(value: Any, depth: int = 0) -> list[str]:
    if isinstance(value, str):
        return [value]
    if depth > 8:
        return []
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v, depth + 1)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v, depth + 1)]
    return []


def _closed(text: str, at: int) -> str:
    """`$( … )` from `at` to its closing parenthesis (nested ones counted), cut at 60."""
    depth, j = 0, at + 1
    while j < len(text) and j < at + MAX_SCAN:
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    ref = text[at : j + 1]
    return ref if len(ref) <= 60 else ref[:57] + "…"
