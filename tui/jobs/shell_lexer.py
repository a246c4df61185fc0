"""The shell lexer of the script importer (tui/jobs/importer.py): words made of pieces (literal
text, variable references, substitutions), operators and redirections; every token knows its
line and its source span. Not `shlex`: it loses line numbers and treats `$` as text. What it
cannot read is reported as an Unmapped note with its line, never guessed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tui.errors import VerlTuiError

# Bounds on what a script may make the importer do (bash has none of these, but an import must
# end in a blink with one line, never a RecursionError or minutes of CPU).
MAX_NESTING = 64  # ${X:-${Y:-…}} inside each other, `bash -c` strings inside each other
MAX_EXPANDED = 1 << 20  # characters one word or variable may expand to
MAX_ARRAY_ITEMS = 10_000  # elements an array may hold
MAX_DIGITS = 40  # digits of a number in $(( … )) (bash's integers are 64-bit: 19 digits)
MAX_TOTAL_EXPANDED = 64 << 20  # characters all expansions of one import make together
MAX_TOTAL_ITEMS = 1_000_000  # array elements all assignments of one import copy together


class ScriptLimitError(VerlTuiError, title="script not imported", kind="bad_input"):
    """The script goes past one of the import's bounds: one line naming its file:line."""

    def __init__(self, line: int, reason: str, source: str = "<script>") -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason
        self.source = source

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}: not imported"


@dataclass(frozen=True)
class Unmapped:
    """A script line whose meaning did not make it into the profile, and why."""

    line: int
    text: str
    reason: str


@dataclass
class Piece:
    kind: str  # "lit" | "var" | "special" | "subst" | "arith"
    text: str  # lit: the text after quote removal; others: the raw source, e.g. "${X:-a}"
    quoted: bool = False
    name: str | None = None  # var/special: the name ("HOME", "@", "1")
    # var: ":-", "-", ":=", "=", ":+", "+", ":?", "?", "index" (${A[i]}), "length" (${#X},
    # ${#A[@]}: arg is what is in the brackets), or "complex"
    op: str | None = None
    arg: str | None = None  # var: the raw word after op; index: what is in the brackets


@dataclass
class Word:
    pieces: list[Piece]
    raw: str
    line: int
    start: int
    end: int

    @functools.cached_property
    def literal(self) -> str | None:
        """The word's text when it has no expansions at all (asked many times a word: kept)."""
        if all(p.kind == "lit" for p in self.pieces):
            return "".join(p.text for p in self.pieces)
        return None

    @property
    def unquoted_prefix(self) -> str:
        """Leading unquoted literal text (assignment detection: `NAME=` must be unquoted)."""
        p = self.pieces[0] if self.pieces else None
        return p.text if p is not None and p.kind == "lit" and not p.quoted else ""


@dataclass
class Op:
    text: str
    line: int
    start: int
    end: int


@dataclass
class Redir:
    op: str
    target: Word | None
    line: int
    start: int
    end: int
    heredoc: str | None = None


Token = Word | Op | Redir

_OPS = (
    "&&",
    "||",
    ";;&",
    ";;",
    ";&",
    "|&",
    "&>>",
    "&>",
    ">>",
    ">&",
    ">|",
    "<<<",
    "<<-",
    "<<",
    "<&",
    "<>",
    "|",
    "&",
    ";",
    "(",
    ")",
    "<",
    ">",
)
_OP_START = frozenset(o[0] for o in _OPS)
_FD = re.compile(r"[0-9]+(?=[<>])")
_REDIR_OPS = {"&>>", "&>", ">>", ">&", ">|", "<<<", "<<-", "<<", "<&", "<>", "<", ">"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:(:?[-=+?])(.*))?", re.S)
_LENGTH = re.compile(r"#([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]*)\])?")
_INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[([^\]]*)\]")
_ANSI_C = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


class Lexer:
    def __init__(self, text: str, first_line: int = 1, *, fragment: bool = False) -> None:
        self.text = text
        self.n = len(text)
        self.i = 0
        self.line = first_line
        self.fragment = fragment  # a `${X:-…}` default: whitespace is text, not a separator
        self.tokens: list[Token] = []
        self.notes: list[Unmapped] = []
        self._heredocs: list[tuple[Redir, str, bool]] = []

    # -- helpers ------------------------------------------------------------------------------
    def _line_text(self, line_no_offset: int) -> str:
        start = self.text.rfind("\n", 0, line_no_offset) + 1
        end = self.text.find("\n", line_no_offset)
        return self.text[start : end if end >= 0 else self.n].strip()

    def _in_command(self) -> bool:
        # True while a simple command is being built (its words have not been ended).
        return bool(self.tokens) and not (
            isinstance(self.tokens[-1], Op)
            and self.tokens[-1].text in ("\n", ";", "&", "&&", "||", "|", "|&", ";;")
        )

    def _skip_to_eol(self) -> int:
        j = self.text.find("\n", self.i)
        return self.n if j < 0 else j

    def _matching(self, i: int, open_: str, close: str) -> int:
        """Index of the `close` matching the `open_` at i (quotes and escapes skipped)."""
        depth, j = 0, i
        while j < self.n:
            c = self.text[j]
            if c == "\\":
                j += 2
                continue
            if c == "'" and open_ != "{":
                k = self.text.find("'", j + 1)
                j = self.n if k < 0 else k + 1
                continue
            if c == '"':
                k = j + 1
                while k < self.n and self.text[k] != '"':
                    k += 2 if self.text[k] == "\\" else 1
                j = k + 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        return -1

    # -- main loop ----------------------------------------------------------------------------
    def run(self) -> list[Token]:
        while self.i < self.n:
            c = self.text[self.i]
            if c in " \t\r":
                self.i += 1
                continue
            if c == "\\" and self.text.startswith("\\\n", self.i):
                self._continuation()
                continue
            if c == "\\" and self.i + 1 == self.n:  # the script's last character: bash
                self.i += 1  # drops it (a continuation into nothing), no word
                continue
            if c == "#":
                self._comment()
                continue
            if c == "\n":
                self._newline()
                continue
            if self.text.startswith("((", self.i) and self._arith_allowed():
                self._arith_command()
                continue
            m = _FD.match(self.text, self.i, self.i + 12) if c.isdigit() else None
            fd = m.group(0) if m else ""
            at = self.i + len(fd)
            op = (
                next((o for o in _OPS if self.text.startswith(o, at)), None)
                if self.text[at : at + 1] in _OP_START
                else None
            )
            if op is not None and (fd == "" or op in _REDIR_OPS):
                self._operator(fd, op)
                continue
            self.tokens.append(self._word())
        for redir, _delim, _dash in self._heredocs:
            redir.heredoc = ""
        return self.tokens

    def _arith_allowed(self) -> bool:
        # `(( … ))` as a command or after `for`: one word, not two subshells.
        if not self._in_command():
            return True
        last = self.tokens[-1]
        return isinstance(last, Word) and last.literal == "for"

    def _arith_command(self) -> None:
        j = self.text.find("))", self.i + 2)
        end = self.n if j < 0 else j + 2
        raw = self.text[self.i : end]
        self.tokens.append(Word([Piece("lit", raw)], raw, self.line, self.i, end))
        self.line += raw.count("\n")
        self.i = end

    def _continuation(self, *, in_word: bool = False) -> None:
        """`\\` then a newline joins the lines; a blank line right after it ends the command
        (bash reads the joined empty line as the command's end): say so where it happens."""
        self.i += 2
        self.line += 1
        if in_word or self._in_command():
            eol = self._skip_to_eol()
            if not self.text[self.i : eol].strip(" \t\r") and eol < self.n:
                self.notes.append(
                    Unmapped(
                        self.line,
                        "(blank line)",
                        "blank line after a line-continuation backslash: bash ends the command "
                        "here, the lines after it are not part of it",
                    )
                )

    def _escaped_blank(self) -> None:
        """`\\ ` (a backslash before a space or tab) is an argument holding that blank; when
        only blanks or a comment follow on the line, the author meant a continuation but bash
        passes the blank and ends the command at the line's end: say so."""
        eol = self._skip_to_eol()
        rest = self.text[self.i + 2 : eol].strip(" \t\r")
        if (not rest or rest.startswith("#")) and eol < self.n:
            self.notes.append(
                Unmapped(
                    self.line,
                    self._line_text(self.i),
                    "a blank after the line-continuation backslash: bash passes "
                    f"{self.text[self.i + 1]!r} as an argument and ends the command at this "
                    "line, the lines after it are not part of it",
                )
            )

    def _comment(self) -> None:
        eol = self._skip_to_eol()
        body = self.text[self.i : eol].rstrip()
        if body.endswith("\\") and self._in_command():
            # A commented-out line inside a continued command (`# key=v \`): the comment runs
            # to the newline, backslash included, and the newline ends the command.
            self.notes.append(
                Unmapped(
                    self.line,
                    self._line_text(self.i),
                    "a comment inside the command: bash ends the command at this line, the "
                    "lines after it are not part of it",
                )
            )
        self.i = eol

    def _newline(self) -> None:
        self.tokens.append(Op("\n", self.line, self.i, self.i + 1))
        self.i += 1
        self.line += 1
        pending, self._heredocs = self._heredocs, []
        for redir, delim, dash in pending:
            body: list[str] = []
            while self.i < self.n:
                eol = self._skip_to_eol()
                row = self.text[self.i : eol]
                self.i = min(eol + 1, self.n)
                self.line += 1
                if (row.lstrip("\t") if dash else row) == delim:
                    break
                body.append(row)
            redir.heredoc = "\n".join(body)  # its span stays the `<<EOF` (reports show that)

    def _operator(self, fd: str, op: str) -> None:
        start = self.i
        self.i += len(fd) + len(op)
        if op not in _REDIR_OPS:
            self.tokens.append(Op(op, self.line, start, self.i))
            return
        line = self.line
        while self.i < self.n and self.text[self.i] in " \t":
            self.i += 1
        target = None
        if self.i < self.n and self.text[self.i] not in "\n|&;()<>":
            target = self._word()
        redir = Redir(fd + op, target, line, start, self.i)
        if op in ("<<", "<<-") and target is not None:
            delim = "".join(p.text for p in target.pieces)
            self._heredocs.append((redir, delim, op == "<<-"))
        self.tokens.append(redir)

    # -- words --------------------------------------------------------------------------------
    def _word(self) -> Word:
        start, line = self.i, self.line
        pieces: list[Piece] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                pieces.append(Piece("lit", "".join(buf)))
                buf.clear()

        while self.i < self.n:
            c = self.text[self.i]
            if not self.fragment and (c in " \t\r\n" or c in "|&;<>()"):
                break
            if c == "\\":
                if self.text.startswith("\\\n", self.i):
                    self._continuation(in_word=True)
                    continue
                if not self.fragment and self.text[self.i + 1 : self.i + 2] in (" ", "\t"):
                    self._escaped_blank()
                if not self.fragment:
                    # `\*` quotes one character (a pattern's literal `*`); the script's very
                    # last character, bash drops it (a continuation into nothing).
                    if self.i + 1 < self.n:
                        flush()
                        pieces.append(Piece("lit", self.text[self.i + 1], quoted=True))
                    self.i = min(self.i + 2, self.n)
                    continue
                buf.append(self.text[self.i + 1] if self.i + 1 < self.n else "\\")
                self.i += 2
                continue
            if c == "'":
                flush()
                j = self.text.find("'", self.i + 1)
                if j < 0:
                    j = self.n
                    self.notes.append(
                        Unmapped(line, self._line_text(start), "unterminated single quote")
                    )
                body = self.text[self.i + 1 : j]
                pieces.append(Piece("lit", body, quoted=True))
                self.line += body.count("\n")
                self.i = j + 1
                continue
            if c == '"':
                flush()
                self._double_quoted(pieces, start, line)
                continue
            if c == "$":
                piece = self._dollar(quoted=False)
                if piece is None:
                    continue  # $"…": handled as a double-quoted string next
                flush()
                pieces.append(piece)
                continue
            if c == "`":
                flush()
                pieces.append(self._backtick(quoted=False))
                continue
            buf.append(c)
            self.i += 1
        flush()
        return Word(pieces, self.text[start : self.i], line, start, self.i)

    def _double_quoted(self, pieces: list[Piece], start: int, line: int) -> None:
        self.i += 1
        buf: list[str] = []

        def flush() -> None:
            if buf:
                pieces.append(Piece("lit", "".join(buf), quoted=True))
                buf.clear()

        while self.i < self.n:
            c = self.text[self.i]
            if c == '"':
                self.i += 1
                flush()
                return
            if c == "\\" and self.i + 1 < self.n:
                nxt = self.text[self.i + 1]
                if nxt == "\n":
                    self.line += 1
                elif nxt in '$`"\\':
                    buf.append(nxt)
                else:
                    buf.append("\\" + nxt)
                self.i += 2
                continue
            if c == "$":
                piece = self._dollar(quoted=True)
                if piece is None or (piece.kind == "lit"):
                    buf.append(piece.text if piece else "$")
                    continue
                flush()
                pieces.append(piece)
                continue
            if c == "`":
                flush()
                pieces.append(self._backtick(quoted=True))
                continue
            if c == "\n":
                self.line += 1
            buf.append(c)
            self.i += 1
        self.notes.append(Unmapped(line, self._line_text(start), "unterminated double quote"))
        flush()

    def _backtick(self, quoted: bool) -> Piece:
        j = self.i + 1
        while j < self.n and self.text[j] != "`":
            j += 2 if self.text[j] == "\\" else 1
        raw = self.text[self.i : j + 1]
        self.line += raw.count("\n")
        self.i = min(j + 1, self.n)
        return Piece("subst", raw, quoted=quoted)

    def _dollar(self, quoted: bool) -> Piece | None:
        i, t = self.i, self.text
        nxt = t[i + 1] if i + 1 < self.n else ""
        if nxt == "{":
            j = self._matching(i + 1, "{", "}")
            j = self.n - 1 if j < 0 else j
            raw = t[i : j + 1]
            self.i = j + 1
            self.line += raw.count("\n")
            m = _PARAM.fullmatch(raw[2:-1])
            idx = _INDEXED.fullmatch(raw[2:-1])
            length = _LENGTH.fullmatch(raw[2:-1])
            if length:  # ${#X}, ${#A[@]}: a string's or an array's length
                return Piece("var", raw, quoted, length.group(1), "length", length.group(2))
            if idx:  # ${ARR[@]}, ${ARR[*]}, ${ARR[0]}
                return Piece("var", raw, quoted, idx.group(1), "index", idx.group(2))
            if m:
                kind = "var" if _NAME.fullmatch(m.group(1)) else "special"
                return Piece(kind, raw, quoted, m.group(1), m.group(2), m.group(3))
            lead = _NAME.match(raw[2:-1].lstrip("#!"))
            return Piece("var", raw, quoted, lead.group(0) if lead else raw, "complex")
        if nxt == "(":
            if t.startswith("((", i + 1):  # $(( … )): integer arithmetic
                j = self._matching(i + 1, "(", ")")
                end = self.n if j < 0 else j + 1
                raw = t[i:end]
                self.i = end
                self.line += raw.count("\n")
                return Piece("arith", raw, quoted)
            else:
                j = self._matching(i + 1, "(", ")")
                end = self.n if j < 0 else j + 1
            raw = t[i:end]
            self.i = end
            self.line += raw.count("\n")
            return Piece("subst", raw, quoted)
        m = _NAME.match(t, i + 1)
        if m:
            self.i = m.end()
            return Piece("var", t[i : m.end()], quoted, m.group(0))
        if nxt and nxt in "@*#?$!-0123456789":
            self.i = i + 2
            return Piece("special", t[i : i + 2], quoted, nxt)
        if nxt == "'" and not quoted:
            return self._ansi_c()
        if nxt == '"' and not quoted:
            self.i = i + 1
            return None
        self.i = i + 1
        return Piece("lit", "$", quoted)

    def _ansi_c(self) -> Piece:
        j, out = self.i + 2, []
        while j < self.n and self.text[j] != "'":
            c = self.text[j]
            if c == "\\" and j + 1 < self.n:
                out.append(_ANSI_C.get(self.text[j + 1], "\\" + self.text[j + 1]))
                j += 2
                continue
            out.append(c)
            j += 1
        self.line += self.text[self.i : j].count("\n")
        self.i = j + 1
        return Piece("lit", "".join(out), quoted=True)


def fragment(text: str, line: int) -> Word:
    """Lex the word inside `${X:-…}` (spaces are text there)."""
    lx = Lexer(text, line, fragment=True)
    return lx._word() if text else Word([], "", line, 0, 0)
