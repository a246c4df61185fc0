"""Shell expansion for the script importer: `$X`, `${X:-default}`, `${A[@]}`, `$((…))`,
`$(pwd)` resolved from the script's own plain assignments. An unresolvable reference keeps its
literal text and is reported with why; a value taken on the script's terms (a default, the
directory it runs from) is reported as Assumed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from tui.jobs.shell_lexer import (
    MAX_ARRAY_ITEMS,
    MAX_DIGITS,
    MAX_EXPANDED,
    MAX_NESTING,
    MAX_TOTAL_EXPANDED,
    MAX_TOTAL_ITEMS,
    Piece,
    ScriptLimitError,
    Unmapped,
    Word,
    fragment,
)
from tui.jobs.shell_subst import pure_output


@dataclass(frozen=True)
class Assumed:
    """A value the import took on the script's own terms, and says so: a `${X:-default}`
    whose X the script does not set, `$(pwd)` read as a known directory."""

    line: int
    text: str  # as written, e.g. "${MODEL:-Qwen/Qwen2.5-7B}"
    value: str
    why: str


_ARGS = frozenset("123456789")
_ARGS_SLICE = re.compile(r"\$\{[@*]:[0-9 ]+(:[0-9 ]+)?\}")
NO_SCRIPT_ARGS = (
    "the script's own arguments: imported as run without any "
    "(what is given when it runs is not in the profile)"
)


@dataclass
class Var:
    value: str | None  # None: not resolvable
    note: str  # where it was set, and why it is not resolvable
    items: list[Word] | None = None  # an array's elements, expanded where they are used


@dataclass
class Expanded:
    text: str
    unresolved: list[str] = field(default_factory=list)
    split: bool = False  # an unquoted expansion with spaces (bash would split the word)


class Expander:
    """What the script's variables are, and what a word expands to; the reports it makes
    (unmapped lines, unresolved names and why, assumptions)."""

    def __init__(self, text: str, cwd: str | None = None) -> None:
        self.text = text
        self.cwd = cwd
        self.vars: dict[str, Var] = {}
        self.unmapped: list[Unmapped] = []
        self.unresolved: list[str] = []
        self._unresolved_seen: set[str] = set()
        self._assumed_seen: set[tuple[str, int]] = set()
        self._spent = 0  # characters every expansion made, the whole import long
        self._items_spent = 0  # array elements every assignment copied
        self.var_notes: dict[str, str] = {}
        self.assumed: list[Assumed] = []
        self._record = True
        self._no_arguments = False  # the script's $1…$9 read as not given (without_arguments)
        # `set -- …` gave the script arguments: none of the run-without-arguments reading then
        self.arguments_set = False
        self._from_pwd = False  # a value was built on $(pwd) / $PWD
        self._depth = 0  # expansions open inside each other (${X:-${Y:-…}}, arrays)
        self.script_path: str | None = None  # $0 / ${BASH_SOURCE[0]} (None: not known)
        # $1 … $@ inside a function being called (None: the script's own, not known)
        self.positional: list[Word] | None = None

    # -- reporting ----------------------------------------------------------------------------
    def _src(self, start: int, end: int) -> str:
        """A source span on one line: continuations folded, runs of blanks squeezed."""
        s = re.sub(r"\\\n", " ", self.text[start:end])
        s = " ".join(s.split())
        return s if len(s) <= 160 else s[:157] + "…"

    def skip(self, line: int, text: str, reason: str) -> None:
        self.unmapped.append(Unmapped(line, text, reason))

    def unset_note(self) -> str:
        """Why a variable the script does not set is not known."""
        return "not set in the script (comes from the environment when it runs)"

    def _unresolved(self, name: str, note: str) -> None:
        if self._record and name not in self._unresolved_seen:
            self._unresolved_seen.add(name)
            self.unresolved.append(name)
            self.var_notes[name] = note

    @contextlib.contextmanager
    def without_arguments(self) -> Iterator[None]:
        """Inside: the script's own $1 … $9 are "" (it runs without arguments, as the import
        reads it). For judging a loop's test, never for a value that lands in the profile:
        there an argument the script needs stays unknown."""
        saved = self._no_arguments
        self._no_arguments = self.positional is None and not self.arguments_set
        try:
            yield
        finally:
            self._no_arguments = saved

    # -- expansion ----------------------------------------------------------------------------
    def expand(self, word: Word, *, record: bool = True) -> Expanded:
        """The word's value; unresolvable references keep their literal text. With record,
        they are reported (only what lands in the profile is: not every assignment)."""
        saved, self._record = self._record, record
        try:
            return self._expand(word)
        finally:
            self._record = saved

    def _expand(self, word: Word) -> Expanded:
        if self._depth >= MAX_NESTING:
            raise ScriptLimitError(word.line, f"expansions nested deeper than {MAX_NESTING}")
        self._depth += 1
        try:
            out = Expanded("")
            parts: list[str] = []
            size = 0
            for p in word.pieces:
                if p.kind == "lit":
                    text = p.text
                else:
                    value = self._piece(p, word.line, out)
                    text = p.text if value is None else value  # unresolved: kept as written
                    if value is not None and not p.quoted and any(c in value for c in " \t\n"):
                        out.split = True
                size += len(text)
                check_size(size, word.line)
                parts.append(text)
            out.text = "".join(parts)
            self._spent += size
            if self._spent > MAX_TOTAL_EXPANDED:
                raise ScriptLimitError(
                    word.line,
                    f"the script's expansions pass {MAX_TOTAL_EXPANDED:,} characters in total",
                )
            return out
        finally:
            self._depth -= 1

    def _assume(self, line: int, text: str, value: str, why: str) -> None:
        if (text, line) not in self._assumed_seen:
            self._assumed_seen.add((text, line))
            self.assumed.append(Assumed(line, text, value, why))

    def spend_items(self, count: int, line: int) -> None:
        """Array elements copied by an assignment: MAX_ARRAY_ITEMS for one array, and
        MAX_TOTAL_ITEMS the whole import long (40,000 copies of a 9,000-element array took
        3 GB)."""
        check_items(count, line)
        self._items_spent += count
        if self._items_spent > MAX_TOTAL_ITEMS:
            raise ScriptLimitError(
                line, f"the script's arrays copy more than {MAX_TOTAL_ITEMS:,} elements in total"
            )

    def _pwd(self, p: Piece, line: int) -> str | None:
        """`$(pwd)`, `` `pwd` ``, `$PWD`: the directory the import was told the script runs
        from (the CLI: where `profile import` ran)."""
        if self.cwd is None:
            return None
        self._from_pwd = True
        self._assume(
            line,
            p.text,
            self.cwd,
            "the directory the script runs from, taken as the one `profile import` ran in",
        )
        return self.cwd

    def _piece(self, p: Piece, line: int, out: Expanded) -> str | None:
        if p.kind == "arith":
            value = self._arith(p, line, out)
            if value is not None:
                return value
            out.unresolved.append(p.text)
            self._unresolved(
                p.text,
                "arithmetic on values known only when the script runs "
                "(integers, + - * / % and known variables are evaluated)",
            )
            return None
        if p.kind == "subst" and re.fullmatch(r"\$\(\s*pwd\s*\)|`\s*pwd\s*`", p.text):
            value = self._pwd(p, line)
            if value is not None:
                return value
        if p.kind == "subst":
            known = pure_output(p.text, line, self._known_text, self.cwd)
            if known is not None:
                self._assume(line, p.text, known, "a path command on known words: worked out here")
                return known
            out.unresolved.append(p.text)
            self._unresolved(p.text, "command output: known only when the script runs")
            return None
        if p.kind == "special" and p.name == "0" and p.op is None and self.script_path:
            self._assume(line, p.text, self.script_path, "the script's path, as it was given")
            return self.script_path
        if p.kind == "special" and self.positional is not None and p.op is None:
            value = self._positional(p.name or "", self.positional)
            if value is None:
                out.unresolved.append(p.text)
                self._unresolved(p.text, "a function argument known only when the script runs")
            return value
        if p.kind == "special" and p.name and p.name.isdigit() and p.op in (":-", "-"):
            k = int(p.name) - 1
            if self.positional is not None and 0 <= k < len(self.positional):
                # `${1:-d}` in a function called with that argument: the argument
                given = self._known_text(self.positional[k])
                if given is None:
                    out.unresolved.append(p.text)
                    self._unresolved(p.text, "a function argument known only when the script runs")
                    return None
                if given or p.op == "-":
                    return given
            # `${1:-vllm}`: a script argument (or a function's not given): the default.
            sub = self._expand(fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            if sub.unresolved:
                return None
            self._assume(
                line, p.text, sub.text, f"script argument ${p.name} not given: its default is used"
            )
            return sub.text
        no_args = self.positional is None and not self.arguments_set
        if _script_args_slice(p) and no_args:  # `${@:2}`: none, as `$@`
            self._assume(line, p.text, "", NO_SCRIPT_ARGS)
            return ""
        if self._no_arguments and p.kind == "special" and p.op is None and p.name in _ARGS:
            return ""  # a test on $1…$9, the script run without arguments (shell_test.py)
        if p.kind == "special" and p.op is None and p.name in ("@", "*", "#") and no_args:
            # The script's own arguments: imported as run without any (as `${1:-x}` is).
            value = "0" if p.name == "#" else ""
            self._assume(line, p.text, value, NO_SCRIPT_ARGS)
            return value
        if p.kind == "special":
            label = p.text
            out.unresolved.append(label)
            what = "a script argument" if p.name and p.name.isdigit() else "a shell parameter"
            self._unresolved(label, f"{what}: known only when the script runs")
            return None
        name = p.name or p.text
        var = self.vars.get(name)
        if (
            name == "BASH_SOURCE"
            and var is None
            and self.script_path
            and (p.op is None or (p.op == "index" and (p.arg or "").strip() in ("0", "@", "*")))
        ):
            self._assume(line, p.text, self.script_path, "the script's path, as it was given")
            return self.script_path
        if p.op == "length":
            return self._length(p, var, out)
        if p.op == "index":
            return self._indexed(p, var, line, out)
        if var is not None and var.items:  # $ARR is its first element
            sub = self._expand(var.items[0])
            out.unresolved.extend(sub.unresolved)
            return sub.text if not sub.unresolved else None
        if var is None and name == "PWD" and p.op is None and self.cwd is not None:
            return self._pwd(p, line)
        if var is None and p.op is not None and p.op.lstrip(":") in ("-", "="):
            # Not set in the script: bash uses the default (unless the environment sets it).
            sub = self._expand(fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            if sub.unresolved:
                return None
            self._assume(
                line,
                p.text,
                sub.text,
                f"{name} is not set in the script: its default "
                f"is used (when the script runs, {name} from "
                "the environment would win)",
            )
            if p.op.lstrip(":") == "=":
                self.vars[name] = Var(sub.text, f"set by {p.text} at line {line}")
            return sub.text
        if var is None and p.op in (":+", "+"):
            self._assume(
                line,
                p.text,
                "",
                f"{name} is not set in the script: {p.text} is empty (when "
                f"the script runs, {name} from the environment would give its text)",
            )
            return ""
        if p.op == "complex" and var is not None and var.value is not None:
            edited = self._edit(p, var.value, line, out)
            if edited is not None:
                return edited
        if p.op == "complex" or (var is None and p.op is None):
            self._unknown(name, var, out, p)
            return None
        if var is None or var.value is None:
            self._unknown(name, var, out, p)
            return None
        value = var.value
        if p.op is None:
            return value
        op = p.op.lstrip(":")
        empty = value == "" if p.op.startswith(":") else False
        if op in "-=":
            if not empty:
                return value
            sub = self._expand(fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            return sub.text if not sub.unresolved else None
        if op == "+":
            if empty:
                return ""
            sub = self._expand(fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            return sub.text if not sub.unresolved else None
        return value if not empty else None  # ":?": fails at run time when empty

    def _edit(self, p: Piece, value: str, line: int, out: Expanded) -> str | None:
        """`${X#pat}` `${X##pat}` `${X%pat}` `${X%%pat}` (a glob cut off the start or end),
        `${X/pat/to}` `${X//pat/to}`, `${X^^}` `${X,,}` `${X:off:len}` on a known value; None
        when the form is another or a part is not known."""
        m = _EDIT.fullmatch(p.text[2:-1])
        if m is None or len(value) > MAX_EDITED:
            return None
        op, rest = m.group(2), m.group(3)
        if op in ("^^", ",,", "^", ","):
            if rest:
                return None
            if op in ("^^", ",,"):
                return value.upper() if op == "^^" else value.lower()
            return (value[:1].upper() if op == "^" else value[:1].lower()) + value[1:]
        if op == ":":
            sub = re.fullmatch(r"\s*(-?\d{1,9})\s*(?::\s*(-?\d{1,9})\s*)?", rest)
            if sub is None:
                return None
            start = int(sub.group(1))
            if start < -len(value):  # `${X: -5}` of a shorter value: bash gives nothing
                return ""
            start = len(value) + start if start < 0 else start
            if sub.group(2) is None:
                return value[start:]
            n = int(sub.group(2))
            return value[start : len(value) + n if n < 0 else start + n]
        pattern, _, to = rest.partition("/") if op in ("/", "//") else (rest, "", "")
        parts = [self._expand(fragment(x, line)) for x in (pattern, to)]
        if any(x.unresolved for x in parts):
            out.unresolved.extend(u for x in parts for u in x.unresolved)
            return None
        glob = re.compile(fnmatch.translate(parts[0].text))
        cuts = range(len(value) + 1)
        if op in ("#", "##"):
            ends = [i for i in cuts if glob.match(value[:i])]
            return value[(ends[0] if op == "#" else ends[-1]) :] if ends else value
        if op in ("%", "%%"):
            starts = [i for i in cuts if glob.match(value[i:])]
            return value[: (starts[-1] if op == "%" else starts[0])] if starts else value
        return _replace(value, glob, parts[1].text, every=op == "//")

    def _positional(self, name: str, args: list[Word]) -> str | None:
        """$1 … $9, $#, $@, $* of a function called with `args`."""
        if name == "#":
            return str(len(args))
        if name.isdigit() and name != "0":
            k = int(name) - 1
            return self._known_text(args[k]) if k < len(args) else ""
        if name in ("@", "*"):
            texts = [self._known_text(a) for a in args]
            return None if None in texts else " ".join(t or "" for t in texts)
        return None

    def _known_text(self, w: Word) -> str | None:
        exp = self.expand(w, record=False)
        return None if exp.unresolved else exp.text

    def _length(self, p: Piece, var: Var | None, out: Expanded) -> str | None:
        """`${#A[@]}`: the array's element count (its elements split as bash split them when
        it was assigned); `${#X}`, `${#A[N]}`: a value's characters. Unknown when the array or
        value is (never 0 for "not known")."""
        idx = (p.arg or "").strip() if p.arg is not None else None
        if var is not None and var.items is not None:
            if idx in ("@", "*"):
                return str(len(self.fields(var.items)))
            words = self.fields(var.items)
            at = int(idx) if idx is not None and idx.isdigit() else 0 if idx is None else -1
            if 0 <= at < len(words):
                sub = self.expand(words[at], record=False)
                if not sub.unresolved:
                    return str(len(sub.text))
            elif at >= len(words):
                return "0"
        elif var is not None and var.value is not None:
            if idx in ("@", "*"):
                return "1"  # a plain variable is an array of one element
            if idx in (None, "0"):
                return str(len(var.value))
        self._unknown(p.name or p.text, var, out, p)
        return None

    def fields(self, words: list[Word]) -> list[Word]:
        """The argv bash makes of `words`: `"${A[@]}"` one field per element, an unquoted
        expansion split at blanks (`$PY_CMD` holding `python3 -u` is two words), an unquoted
        empty one dropped. Resolved text becomes quoted literal pieces (so `$X` holding `A=1`
        is no assignment, as in bash); an unresolved reference stays a piece of its field,
        reported where the field is used. Each field keeps its word's line and span."""
        out: list[Word] = []
        for w in words:
            if w.literal is not None:
                out.append(w)
            else:
                self._fields_of(w, out)
            check_items(len(out), w.line)
        return out

    def _fields_of(self, w: Word, out: list[Word]) -> None:
        cur: list[Piece] = []
        started = False

        def emit() -> None:
            nonlocal cur, started
            if started:
                out.append(Word(cur, w.raw, w.line, w.start, w.end))
            cur, started = [], False

        for p in w.pieces:
            if p.kind == "lit":
                cur.append(p)
                started = started or p.quoted or bool(p.text)
                continue
            idx = (p.arg or "").strip() if p.kind == "var" and p.op == "index" else ""
            # "${A[*]}" is one field (elements joined by a space): expanded below.
            spread = idx == "@" or (idx == "*" and not p.quoted)
            var = self.vars.get(p.name or "") if spread else None
            if (
                p.kind == "special"
                and p.op is None
                and (p.name == "@" or (p.name == "*" and not p.quoted))
            ) or (
                self.positional is None
                and not self.arguments_set
                and _script_args_slice(p)
                and (p.text.startswith("${@") or not p.quoted)
            ):
                if self.positional is not None:
                    var = Var(None, "the function's arguments", self.positional)
                elif not self.arguments_set:  # "$@" of the script: no fields, not one empty
                    self._assume(w.line, p.text, "", NO_SCRIPT_ARGS)
                    var = Var(None, "the script's arguments", [])
            if var is not None and var.items is not None:
                emit()
                elems = self.fields(var.items)
                if p.quoted:
                    out.extend(elems)
                else:
                    for e in elems:
                        self._split_into(e, out)
                continue
            exp = self.expand(Word([p], p.text, w.line, w.start, w.end), record=False)
            if exp.unresolved:
                cur.append(p)
                started = True
            elif p.quoted:
                cur.append(Piece("lit", exp.text, quoted=True))
                started = True
            else:
                parts = re.split(r"[ \t\n]+", exp.text)
                for k, part in enumerate(parts):
                    if k:
                        emit()
                    if part:
                        cur.append(Piece("lit", part, quoted=True))
                        started = True
        emit()

    def _split_into(self, e: Word, out: list[Word]) -> None:
        """An element of an unquoted `${A[@]}`: split again at blanks when fully known."""
        lit = e.literal
        if lit is None:
            out.append(e)
            return
        for part in lit.split():
            out.append(Word([Piece("lit", part, quoted=True)], e.raw, e.line, e.start, e.end))

    def _words_of(self, var: Var) -> list[Word]:
        return list(var.items or [])

    def _indexed(self, p: Piece, var: Var | None, line: int, out: Expanded) -> str | None:
        """`${A[@]}` / `${A[*]}` joined by spaces (a whole argument list is split by
        `_arg_words`), `${A[N]}` one element; a plain variable is its own element 0."""
        idx = (p.arg or "").strip()
        if (
            var is not None
            and var.items is None
            and var.value is not None
            and idx in ("0", "@", "*")
        ):
            return var.value
        if var is None or var.items is None:
            self._unknown(p.name or p.text, var, out, p)
            return None
        words = self._words_of(var)
        if idx not in ("@", "*"):
            if not idx.isdigit() or int(idx) >= len(words):
                self._unknown(p.name or p.text, var, out, p)
                return None
            words = [words[int(idx)]]
        texts = []
        size = 0
        for w in words:
            sub = self._expand(w)
            out.unresolved.extend(sub.unresolved)
            texts.append(sub.text)
            size += len(sub.text) + 1
            check_size(size, line)
        return " ".join(texts)

    def _arith(self, p: Piece, line: int, out: Expanded) -> str | None:
        """`$(( … ))` on integers and variables holding integers: + - * / % and parentheses,
        evaluated by a small parser (never eval), bash's truncating division."""
        body = p.text[3:-2]
        if "++" in body or "--" in body:  # bash's increments change variables: not evaluated
            return None
        tokens: list[str | int] = []
        for m in _ARITH_TOKEN.finditer(body):
            if m.group(0).strip() == "":
                continue
            num, name, op = m.group(1), m.group(2) or m.group(3), m.group(4)
            if m.group(5):
                return None  # anything else (**, <<, ?:, ++, a command): not evaluated
            if num is not None:
                tokens.append(_integer(num, line))
            elif name is not None:
                var = self.vars.get(name)
                text = var.value.strip() if var is not None and var.value is not None else None
                if text is None or not re.fullmatch(r"[-+]?\d+", text):
                    if var is None:
                        self._unresolved(name, self.unset_note())
                    return None
                tokens.append(_integer(text, line))
            else:
                tokens.append(op)
        return _eval_int(tokens, line)

    def _unknown(self, name: str, var: Var | None, out: Expanded, p: Piece) -> None:
        out.unresolved.append(name)
        if var is not None:
            note = var.note
        else:
            note = self.unset_note()
            if p.op and p.op != "complex" and p.op.lstrip(":") == "-":
                note += f"; the script's default is {p.arg!r}"
        if p.op == "complex":
            note = f"{p.text}: a shell expansion known only when the script runs"
        self._unresolved(name, note)
        return None


_EDIT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(##|#|%%|%|//|/|\^\^|\^|,,|,|:(?![-=+?]))(.*)", re.S)
MAX_EDITED = 4096  # characters of a value `${X#…}`-style edits work on (each cut is a match)


MAX_REPLACE_TRIES = 50_000  # pattern matches one `${X/pat/to}` may try (each start, each end)


def _replace(value: str, glob: re.Pattern[str], to: str, *, every: bool) -> str | None:
    """`${X/pat/to}`: the longest match at the first place one starts (every place: //).
    None past MAX_REPLACE_TRIES: every start and end of a 4,096-character value is 8 million
    matches (a hostile `${X//*a*a*a/b}` took 51 s); the value is then not known here."""
    out, i = [], 0
    tries = 0
    while i <= len(value):
        tries += len(value) - i
        if tries > MAX_REPLACE_TRIES:
            return None
        end = next((j for j in range(len(value), i, -1) if glob.match(value, i, j)), None)
        if end is None:
            if i < len(value):
                out.append(value[i])
            i += 1
            continue
        out.append(to)
        i = end
        if not every:
            out.append(value[i:])
            return "".join(out)
    return "".join(out)


_ARITH_TOKEN = re.compile(
    r"\s+|(\d+)|\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?|\$([A-Za-z_][A-Za-z0-9_]*)"
    r"|(\*\*|[-+*/%()])|(.)",
    re.S,
)


def check_size(size: int, line: int) -> None:
    """A word, variable or array past MAX_EXPANDED characters ends the import (doubling a
    variable 40 times would ask for a terabyte)."""
    if size > MAX_EXPANDED:
        raise ScriptLimitError(line, f"expands to more than {MAX_EXPANDED:,} characters")


def check_items(count: int, line: int) -> None:
    if count > MAX_ARRAY_ITEMS:
        raise ScriptLimitError(line, f"an array of more than {MAX_ARRAY_ITEMS:,} elements")


_INT64 = 1 << 64


def _wrap(value: int) -> int:
    """bash's integers are signed 64-bit and wrap around: so do these (a product of large
    numbers stays 64 bits instead of growing for minutes)."""
    return (value + (1 << 63)) % _INT64 - (1 << 63)


def _integer(digits: str, line: int) -> int:
    """A number in $(( … )), as bash reads it (64-bit, wrapped); past MAX_DIGITS digits the
    import ends (int() of thousands of digits is slow, and past 4,300 raises)."""
    count = len(digits.lstrip("+-"))
    if count > MAX_DIGITS:
        raise ScriptLimitError(
            line, f"a {count}-digit number in $(( … )) (bash's integers are 64-bit)"
        )
    return _wrap(int(digits))


def _eval_int(tokens: list[str | int], line: int = 0) -> str | None:
    """Integer expression: + - * / % ( ) and unary +/-, in bash's wrapping 64-bit integers;
    None for anything else or / by 0. Parentheses nest at most MAX_NESTING deep."""
    pos = 0
    depth = 0

    def peek() -> str | int | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str | int | None:
        nonlocal pos
        pos += 1
        return tokens[pos - 1] if pos <= len(tokens) else None

    def expr() -> int:
        value = term()
        while peek() in ("+", "-"):
            value = _wrap(value + term() if take() == "+" else value - term())
        return value

    def term() -> int:
        value = unary()
        while peek() in ("*", "/", "%"):
            op, rhs = take(), unary()
            if op == "*":
                value = _wrap(value * rhs)
            else:
                if rhs == 0:
                    raise ValueError("division by zero")
                q = abs(value) // abs(rhs) * (1 if (value >= 0) == (rhs >= 0) else -1)
                value = _wrap(q if op == "/" else value - rhs * q)  # truncates toward zero
        return value

    def unary() -> int:
        nonlocal depth
        negate = False
        while peek() in ("+", "-"):  # a run of signs: a loop, not a call per sign
            negate ^= take() == "-"
        tok = take()
        if tok == "(":
            if depth >= MAX_NESTING:
                raise ScriptLimitError(line, f"$(( … )) nested deeper than {MAX_NESTING}")
            depth += 1
            value = expr()
            depth -= 1
            if take() != ")":
                raise ValueError("unbalanced")
        elif isinstance(tok, int):
            value = tok
        else:
            raise ValueError(f"unexpected {tok!r}")
        return _wrap(-value) if negate else value

    try:
        if not tokens or "**" in tokens:
            return None
        value = expr()
        return str(value) if pos == len(tokens) else None
    except ValueError:
        return None


def _script_args_slice(p: Piece) -> bool:
    """`${@:2}` / `${*:1:3}`: a slice of the script's (or a function's) arguments."""
    return p.kind == "var" and p.op == "complex" and bool(_ARGS_SLICE.fullmatch(p.text))
