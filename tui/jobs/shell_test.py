"""bash's `test` / `[ … ]` / `[[ … ]]` on words the importer knows: what a loop's condition is
when the script runs as the import reads it (without arguments), so that the argument-parsing
loop of a launch script (`while [[ $# -gt 0 ]]; do case $1 in …`) is known never to run and the
defaults set before it hold. A test's result is True, False, or None (not known here: an
operand the import does not know, a file test, `-a`/`-o`, a parenthesised group)."""

from __future__ import annotations

import fnmatch
from typing import Literal

Kind = Literal["op", "quoted", "plain"]  # `&&` / `||` / `(` / `)` inside [[ ]]; or a word
Operand = tuple[str | None, Kind]  # a word's text (None: not known) and its kind

_INT_OPS = {
    "-eq": lambda a, b: a == b,
    "-ne": lambda a, b: a != b,
    "-gt": lambda a, b: a > b,
    "-ge": lambda a, b: a >= b,
    "-lt": lambda a, b: a < b,
    "-le": lambda a, b: a <= b,
}
_BRACKETS = {"[": "]", "[[": "]]"}


def test_operands(words: list[Operand]) -> tuple[list[Operand], bool] | None:
    """The operands of a test command (`[ a = b ]`, `[[ -n x ]]`, `test x`) and whether it is
    `[[`; None when the words are not one test command."""
    if not words:
        return None
    head = words[0][0]
    if head == "test":
        return words[1:], False
    close = _BRACKETS.get(head or "")
    if close is None or len(words) < 2 or words[-1][0] != close:
        return None
    return words[1:-1], head == "[["


def judge(operands: list[Operand], double: bool) -> bool | None:
    """The test's result: in `[[ ]]`, `||` of `&&` of single tests (bash's precedence)."""
    if any(kind == "op" and text in ("(", ")") for text, kind in operands):
        return None
    for sep, any_decides in (("||", True), ("&&", False)):
        at = [k for k, (text, kind) in enumerate(operands) if kind == "op" and text == sep]
        if not at:
            continue
        parts, start = [], 0
        for k in [*at, len(operands)]:
            parts.append(operands[start:k])
            start = k + 1
        results = [judge(part, double) for part in parts]
        if any_decides in results:  # one true `||` part, one false `&&` part
            return any_decides
        return None if None in results else not any_decides
    texts = [text for text, _ in operands]
    pattern = not (double and len(operands) == 3 and operands[2][1] == "quoted")
    return evaluate(texts, double, pattern)


def evaluate(operands: list[str | None], double: bool, pattern: bool = True) -> bool | None:
    """One test on known operands (None: an operand is not known, or a form this does not
    judge). `pattern`: in `[[ ]]`, the right side of == / != is a glob (False where it was
    quoted: compared as text)."""
    if any(o is None for o in operands):
        return None
    ops = [o for o in operands if o is not None]
    if ops[:1] == ["!"]:
        inner = evaluate(list(ops[1:]), double, pattern)
        return None if inner is None else not inner
    if len(ops) == 0:
        return False
    if len(ops) == 1:
        return ops[0] != ""
    if len(ops) == 2:
        op, value = ops
        if op == "-n":
            return value != ""
        if op == "-z":
            return value == ""
        return None
    if len(ops) == 3:
        left, op, right = ops
        if op in _INT_OPS:
            try:
                return _INT_OPS[op](int(left.strip()), int(right.strip()))
            except ValueError:
                return None
        if op in ("=", "==", "!="):
            same = fnmatch.fnmatchcase(left, right) if double and pattern else left == right
            return same if op != "!=" else not same
    return None
