"""bash's `test` / `[ … ]` / `[[ … ]]` on words the importer knows: what a loop's condition is
when the script runs as the import reads it (without arguments), so that the argument-parsing
loop of a launch script (`while [[ $# -gt 0 ]]; do case $1 in …`) is known never to run and the
defaults set before it hold. A test's result is True, False, or None (not known here: an
operand the import does not know, a file test, `-a`/`-o`, a parenthesised group)."""

from __future__ import annotations

import re
from typing import Literal

# `&&` / `||` / `(` / `)` inside [[ ]]; or a word: all quoted, none quoted, or partly
Kind = Literal["op", "quoted", "plain", "mixed"]
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
_DECIMAL = re.compile(r"[-+]?[0-9]+", re.ASCII)
_LEADING_ZERO = re.compile(r"[-+]?0[0-9]")


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
    if not double:  # `[ ]` / test split their unquoted words: an empty one is gone
        if any(kind == "plain" and t and any(c.isspace() for c in t) for t, kind in operands):
            return None
        operands = [(t, kind) for t, kind in operands if not (kind == "plain" and t == "")]
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
    negate = False
    while operands and operands[0] == ("!", "plain"):
        negate, operands = not negate, operands[1:]
    result = _one_test(operands, double)
    return None if result is None else result != negate


def _one_test(operands: list[Operand], double: bool) -> bool | None:
    """One test (no `!`, `&&`, `||`) on known operands; None when an operand is not known or
    the form is one this does not judge."""
    if any(text is None for text, _ in operands):
        return None
    ops = [text or "" for text, _ in operands]
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
    if len(ops) != 3:
        return None
    left, op, right = ops
    if op in _INT_OPS:
        # Decimal digits only; in [[ ]] an operand is arithmetic (010 is octal, 0x1f hex).
        a, b = left.strip(), right.strip()
        if not (_DECIMAL.fullmatch(a) and _DECIMAL.fullmatch(b)):
            return None
        if double and (_LEADING_ZERO.match(a) or _LEADING_ZERO.match(b)):
            return None
        return _INT_OPS[op](int(a), int(b))
    if op not in ("=", "==", "!="):
        return None
    kind = operands[2][1]
    if double and kind == "mixed":
        return None  # part pattern, part text: not judged here
    if double and kind == "plain":  # in [[ ]] an unquoted right side is a pattern
        rx = glob_regex([(right, False)])
        if rx is None:
            return None
        same = rx.match(left) is not None
    else:
        same = left == right
    return same if op != "!=" else not same


_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "digit": "0-9",
    "lower": "a-z",
    "upper": "A-Z",
    "space": " \\t\\n\\r\\f\\v",
    "xdigit": "0-9A-Fa-f",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
}


def glob_regex(parts: list[tuple[str, bool]]) -> re.Pattern[str] | None:
    """bash's pattern (a case clause's, the right side of [[ == ]]) as a regex: `parts` are
    the word's pieces as (text, quoted); quoted text matches itself, unquoted text is the
    pattern: * ? [...] ([!…] [^…], [:class:]) and \\x. None for what this does not judge
    (an extglob `!(…)`, a class it does not know)."""
    out: list[str] = []
    for text, quoted in parts:
        if quoted:
            out.append(re.escape(text))
            continue
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n:
                out.append(re.escape(text[i + 1]))
                i += 2
            elif c in "?*+@!" and text[i + 1 : i + 2] == "(":
                return None  # extglob
            elif c == "*":
                out.append(".*")
                i += 1
            elif c == "?":
                out.append(".")
                i += 1
            elif c == "[":
                bracket = _bracket(text, i)
                if bracket is None:
                    out.append(re.escape(c))
                    i += 1
                    continue
                regex, i = bracket
                if not regex:
                    return None
                out.append(regex)
            else:
                out.append(re.escape(c))
                i += 1
    return re.compile("".join(out) + r"\Z", re.S)


def _bracket(text: str, start: int) -> tuple[str, int] | None:
    """`[…]` from `start`: (its regex, the index after it); None when it does not close (a
    literal `[`); ("", i) for a class this does not know."""
    i = start + 1
    negate = text[i : i + 1] in ("!", "^")
    i += negate
    items: list[str] = []
    first = True
    while i < len(text):
        c = text[i]
        if c == "]" and not first:
            body = "".join(items)
            return (f"[{'^' if negate else ''}{body}]", i + 1)
        first = False
        if text.startswith("[:", i):
            end = text.find(":]", i + 2)
            if end < 0:
                return None
            cls = _CLASSES.get(text[i + 2 : end])
            if cls is None:
                return ("", end + 2)
            items.append(cls)
            i = end + 2
        elif c == "\\" and i + 1 < len(text):
            items.append(re.escape(text[i + 1]))
            i += 2
        elif c == "-" and items and i + 1 < len(text) and text[i + 1] != "]":
            items.append("-")
            i += 1
        else:
            items.append(re.escape(c) if c not in "-" else "\\-")
            i += 1
    return None
