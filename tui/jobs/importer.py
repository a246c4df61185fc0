"""Turn a real-world verl launch script into a profile, without running any of it.

Scripts in the wild run `python3 -m verl.trainer.main_ppo key=value …` directly or behind
`ray job submit … --`, with continuations, comments, exports, env prefixes, `$VAR`s, `$@` and
`| tee`. A small shell lexer (not `shlex`: it loses line numbers and treats `$` as text) reads
the script into commands with their lines; variables are resolved only from plain literal
assignments earlier in the script. Everything else is reported, never guessed: an unresolved
reference keeps its literal text in the value, and every line that does not map is listed
with its line number and a reason.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

# Hydra values are read in one place; read_hydra_value stays importable from here.
from tui.jobs.hydra_values import NOT_A_VALUE as _REFUSED
from tui.jobs.hydra_values import parse_value as _hydra_value
from tui.jobs.hydra_values import read_value as read_hydra_value  # noqa: F401
from tui.jobs.profiles import Profile, RuntimeEnv

VERL_MODULE = "verl.trainer.main_ppo"

# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Unmapped:
    """A script line whose meaning did not make it into the profile, and why."""

    line: int
    text: str
    reason: str


@dataclass(frozen=True)
class Mapped:
    """A script line that did: where it went (``overrides``, ``env_vars``, …)."""

    line: int
    text: str
    target: str


@dataclass(frozen=True)
class Assumed:
    """A value the import took on the script's own terms, and says so: a `${X:-default}`
    whose X the script does not set, `$(pwd)` read as a known directory."""

    line: int
    text: str  # as written, e.g. "${MODEL:-Qwen/Qwen2.5-7B}"
    value: str
    why: str


@dataclass
class ImportResult:
    profile: Profile
    unmapped: list[Unmapped] = field(default_factory=list)
    unresolved_vars: list[str] = field(default_factory=list)
    mapped: list[Mapped] = field(default_factory=list)
    # Why each unresolved name could not be resolved (where it was set, from what).
    var_notes: dict[str, str] = field(default_factory=dict)
    # Line of the verl command; None when the script has none (nothing to import).
    command_line: int | None = None
    assumed: list[Assumed] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Lexer: words made of pieces (literal text, variable references, substitutions), operators,
# redirections; every token knows its line and its source span.


@dataclass
class Piece:
    kind: str  # "lit" | "var" | "special" | "subst" | "arith"
    text: str  # lit: the text after quote removal; others: the raw source, e.g. "${X:-a}"
    quoted: bool = False
    name: str | None = None  # var/special: the name ("HOME", "@", "1")
    # var: ":-", "-", ":=", "=", ":+", "+", ":?", "?", "index" (${A[i]}), or "complex"
    op: str | None = None
    arg: str | None = None  # var: the raw word after op; index: what is in the brackets


@dataclass
class Word:
    pieces: list[Piece]
    raw: str
    line: int
    start: int
    end: int

    @property
    def literal(self) -> str | None:
        """The word's text when it has no expansions at all."""
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

_OPS = ("&&", "||", ";;", "|&", "&>>", "&>", ">>", ">&", ">|", "<<<", "<<-", "<<", "<&", "<>",
        "|", "&", ";", "(", ")", "<", ">")
_REDIR_OPS = {"&>>", "&>", ">>", ">&", ">|", "<<<", "<<-", "<<", "<&", "<>", "<", ">"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:(:?[-=+?])(.*))?", re.S)
_INDEXED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[([^\]]*)\]")
_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
           "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


class _Lexer:
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
        return self.text[start:end if end >= 0 else self.n].strip()

    def _in_command(self) -> bool:
        # True while a simple command is being built (its words have not been ended).
        return bool(self.tokens) and not (
            isinstance(self.tokens[-1], Op) and self.tokens[-1].text in ("\n", ";", "&", "&&",
                                                                        "||", "|", "|&", ";;"))

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
                self.i += 2
                self.line += 1
                continue
            if c == "\\" and self._loose_continuation():
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
            m = re.match(r"[0-9]+(?=[<>])", self.text[self.i:self.i + 12])
            fd = m.group(0) if m else ""
            op = next((o for o in _OPS if self.text.startswith(o, self.i + len(fd))), None)
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
        raw = self.text[self.i:end]
        self.tokens.append(Word([Piece("lit", raw)], raw, self.line, self.i, end))
        self.line += raw.count("\n")
        self.i = end

    def _loose_continuation(self) -> bool:
        """`\\` then only spaces or a comment before the newline: bash passes a space argument
        and ends the command; scripts mean a continuation. Take the meaning and say so."""
        eol = self._skip_to_eol()
        rest = self.text[self.i + 1:eol]
        # `\#x` is an escaped hash (text); only blanks, or blanks then a comment, qualify.
        if rest.strip() and not (rest[:1] in " \t" and rest.strip().startswith("#")):
            return False
        if not rest.strip():
            reason = ("spaces after the line-continuation backslash: read as a continuation "
                      "(bash would end the command here)")
        else:
            reason = ("comment after the line-continuation backslash: read as a continuation "
                      "(bash would end the command here)")
        self.notes.append(Unmapped(self.line, self._line_text(self.i), reason))
        self.i = min(eol + 1, self.n)
        self.line += 1
        return True

    def _comment(self) -> None:
        eol = self._skip_to_eol()
        body = self.text[self.i:eol].rstrip()
        if body.endswith("\\") and self._in_command():
            # A commented-out override inside a continued command (`# key=v \`): bash ends the
            # command here; the script's author meant to skip one line. Take the meaning.
            self.notes.append(Unmapped(
                self.line, self._line_text(self.i),
                "commented out inside the command: skipped (bash would end the command at "
                "this line)"))
            self.i = min(eol + 1, self.n)
            self.line += 1
            return
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
                row = self.text[self.i:eol]
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
                    self.i += 2
                    self.line += 1
                    continue
                buf.append(self.text[self.i + 1] if self.i + 1 < self.n else "\\")
                self.i += 2
                continue
            if c == "'":
                flush()
                j = self.text.find("'", self.i + 1)
                if j < 0:
                    j = self.n
                    self.notes.append(Unmapped(line, self._line_text(start),
                                               "unterminated single quote"))
                body = self.text[self.i + 1:j]
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
        return Word(pieces, self.text[start:self.i], line, start, self.i)

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
        raw = self.text[self.i:j + 1]
        self.line += raw.count("\n")
        self.i = min(j + 1, self.n)
        return Piece("subst", raw, quoted=quoted)

    def _dollar(self, quoted: bool) -> Piece | None:
        i, t = self.i, self.text
        nxt = t[i + 1] if i + 1 < self.n else ""
        if nxt == "{":
            j = self._matching(i + 1, "{", "}")
            j = self.n - 1 if j < 0 else j
            raw = t[i:j + 1]
            self.i = j + 1
            self.line += raw.count("\n")
            m = _PARAM.fullmatch(raw[2:-1])
            idx = _INDEXED.fullmatch(raw[2:-1])
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
            return Piece("var", t[i:m.end()], quoted, m.group(0))
        if nxt and nxt in "@*#?$!-0123456789":
            self.i = i + 2
            return Piece("special", t[i:i + 2], quoted, nxt)
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
        self.line += self.text[self.i:j].count("\n")
        self.i = j + 1
        return Piece("lit", "".join(out), quoted=True)


def _fragment(text: str, line: int) -> Word:
    """Lex the word inside `${X:-…}` (spaces are text there)."""
    lx = _Lexer(text, line, fragment=True)
    return lx._word() if text else Word([], "", line, 0, 0)


# --------------------------------------------------------------------------------------------
# Parser: tokens into simple commands, each with the operator that ended it.


@dataclass
class Cmd:
    words: list[Word]
    redirs: list[Redir]
    line: int
    end_line: int
    start: int
    end: int
    sep: str = ""  # "\n", ";", "&", "&&", "||", "|", "|&", "" at end of file
    enclosing: tuple[tuple[str, int], ...] = ()  # (keyword, line) of loops/conditionals
    notes: list[Unmapped] = field(default_factory=list)
    array_assign: bool = False  # NAME=( … )
    arrays: list[tuple[Word, list[Word]]] = field(default_factory=list)  # (NAME=, elements)


_OPENERS = {"if": "fi", "for": "done", "while": "done", "until": "done", "select": "done",
            "case": "esac", "{": "}"}
_CLOSERS = {"fi", "done", "esac", "}"}
_PREFIX_KEYWORDS = {"then", "do", "else", "!", "time"}
_COMPOUND_NAMES = {"if": "conditional", "for": "loop", "while": "loop", "until": "loop",
                   "select": "loop", "case": "case statement", "{": "group", "(": "subshell",
                   "function": "function"}


def _parse(tokens: list[Token], notes: list[Unmapped]) -> list[Cmd]:
    cmds: list[Cmd] = []
    stack: list[tuple[str, int]] = []
    cur: list[Token] = []

    def close(sep: str) -> None:
        if not cur:
            return
        words = [t for t in cur if isinstance(t, Word)]
        redirs = [t for t in cur if isinstance(t, Redir)]
        first, last = cur[0], cur[-1]
        # Enclosing loops/conditionals as they were before this command's own keywords;
        # a `{ …; }` group changes nothing and is left out.
        cmd = Cmd(words, redirs, first.line, _end_line(last), first.start, last.end, sep,
                  tuple(s for s in stack if s[0] != "{"))
        cmd.array_assign = any(isinstance(t, Op) and t.text == "(" for t in cur)
        for k, t in enumerate(cur[:-1]):
            nxt = cur[k + 1]
            if isinstance(t, Word) and isinstance(nxt, Op) and nxt.text == "(":
                items: list[Word] = []
                for e in cur[k + 2:]:
                    if isinstance(e, Op) and e.text == ")":
                        break
                    if isinstance(e, Word):
                        items.append(e)
                cmd.arrays.append((t, items))
        while cmd.words and cmd.words[0].literal in _PREFIX_KEYWORDS | {"{"}:
            if cmd.words[0].literal == "{":
                stack.append(("{", cmd.words[0].line))
            cmd.words = cmd.words[1:]
        head = cmd.words[0].literal if cmd.words else None
        if head in _OPENERS:
            stack.append((head, cmd.line))
        elif head in _CLOSERS and stack:
            stack.pop()
            if head == "}" and stack and stack[-1][0] == "function":
                stack.pop()
        cmd.notes = [n for n in notes if cmd.line <= n.line <= cmd.end_line]
        cmds.append(cmd)
        cur.clear()

    for k, tok in enumerate(tokens):
        if isinstance(tok, Op):
            if tok.text == "(":
                prev_word = bool(cur) and isinstance(cur[-1], Word)
                nxt = tokens[k + 1] if k + 1 < len(tokens) else None
                if prev_word and isinstance(nxt, Op) and nxt.text == ")":
                    if not (stack and stack[-1] == ("function", tok.line)):  # `function f()`
                        stack.append(("function", tok.line))  # name() { … }
                    cur.clear()
                    continue
                if prev_word and cur[-1].raw.endswith("="):
                    cur.append(tok)  # NAME=( … ) array assignment
                    continue
                if not cur:
                    stack.append(("(", tok.line))
                    continue
            if tok.text == ")":
                if any(isinstance(t, Op) and t.text == "(" for t in cur):
                    cur.append(tok)  # end of an array assignment
                    continue
                close(")")
                if stack and stack[-1][0] == "(":
                    stack.pop()
                continue
            if tok.text == "\n" and _open_array(cur):
                continue  # NAME=( one element a line )
            close(tok.text)
            continue
        if isinstance(tok, Word) and tok.literal == "function" and not cur:
            stack.append(("function", tok.line))
            continue
        cur.append(tok)
    close("")
    return cmds


def _open_array(cur: list[Token]) -> bool:
    opens = [k for k, t in enumerate(cur) if isinstance(t, Op) and t.text == "("]
    return bool(opens) and not any(isinstance(t, Op) and t.text == ")"
                                   for t in cur[opens[-1]:])


def _pipelines(cmds: list[Cmd]) -> list[list[Cmd]]:
    out: list[list[Cmd]] = []
    cur: list[Cmd] = []
    for c in cmds:
        cur.append(c)
        if c.sep not in ("|", "|&"):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _end_line(tok: Token) -> int:
    if isinstance(tok, Word):
        return tok.line + tok.raw.count("\n")
    if isinstance(tok, Redir):
        extra = tok.target.raw.count("\n") if tok.target else 0
        return tok.line + extra
    return tok.line


# --------------------------------------------------------------------------------------------
# Interpretation


@dataclass
class _Var:
    value: str | None  # None: not resolvable
    note: str  # where it was set, and why it is not resolvable
    items: list[Word] | None = None  # an array's elements, expanded where they are used


@dataclass
class _Expanded:
    text: str
    unresolved: list[str] = field(default_factory=list)
    split: bool = False  # an unquoted expansion with spaces (bash would split the word)


_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OVERRIDE = re.compile(r"(~|\+\+|\+)?([A-Za-z_][\w.\-@/]*)(?:=(.*))?", re.S)
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
_PY_ARG_FLAGS = {"-X", "-W", "-Q"}
_CONFIG_FLAGS = {"--config-path", "-cp", "--config-name", "-cn"}
MEGATRON_ALIAS = "ppo_megatron_trainer"
_HYDRA_VALUE_FLAGS = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                      "--package", "-p", "--cfg", "-c", "--info", "-i", "--experimental-rerun"}
_HYDRA_BARE_FLAGS = {"--multirun", "-m", "--resolve", "--run", "-r", "--help", "-h",
                     "--hydra-help", "--version", "--shell-completion", "-sc"}
_RAY_SUBMIT_VALUE_OPTS = {"--address", "--runtime-env-json", "--runtime-env", "--working-dir",
                          "--submission-id", "--job-id", "--metadata-json",
                          "--entrypoint-num-cpus", "--entrypoint-num-gpus",
                          "--entrypoint-memory", "--entrypoint-resources", "--headers",
                          "--log-style", "--log-color", "--verify", "--entrypoint-label-selector"}
_RAY_SUBMIT_FLAGS = {"--no-wait", "-v", "--verbose"}
_WRAPPERS = {"nohup": "nohup", "exec": "exec", "time": "time", "command": "command"}
_OTHER_REASONS = {
    "set": "shell option; not needed by the job",
    "shopt": "shell option; not needed by the job",
    "ulimit": "shell limit; not part of a profile",
    "source": "reads another file: its variables and exports are not imported",
    ".": "reads another file: its variables and exports are not imported",
    "cd": "changes directory: if the job needs files from it, set runtime_env.working_dir",
    "pushd": "changes directory: if the job needs files from it, set runtime_env.working_dir",
    "echo": "prints only", "printf": "prints only",
    "sleep": "shell control; not part of a profile", "wait": "shell control; not part of a profile",
    "trap": "shell control; not part of a profile", "exit": "shell control; not part of a profile",
    "pip": "installs packages: not part of a profile (prepare the hosts' environment)",
    "pip3": "installs packages: not part of a profile (prepare the hosts' environment)",
    "mkdir": "file operation on this machine; not part of a profile",
    "nvidia-smi": "not part of a profile", "wandb": "not part of a profile",
}


class _Importer:
    def __init__(self, text: str, source: str, cwd: str | None = None) -> None:
        self.text = text
        self.source = source
        self.vars: dict[str, _Var] = {}
        self.exported: set[str] = set()
        self.env: dict[str, str] = {}
        self.env_lines: dict[str, int] = {}
        self.overrides: dict[str, Any] = {}
        self.override_lines: dict[str, int] = {}
        self.python: str | None = None
        self.working_dir: str | None = None
        self.excludes: list[str] = []
        self.unmapped: list[Unmapped] = []
        self.mapped: list[Mapped] = []
        self.unresolved: list[str] = []
        self.var_notes: dict[str, str] = {}
        self.command_line: int | None = None
        self._record = True
        self.cwd = cwd
        self.assumed: list[Assumed] = []
        self.config_name: str | None = None
        self.config_path: str | None = None
        self.config_lines: dict[str, int] = {}
        self._from_pwd = False  # config_path built on $(pwd) / $PWD

    # -- reporting ----------------------------------------------------------------------------
    def _src(self, start: int, end: int) -> str:
        """A source span on one line: continuations folded, runs of blanks squeezed."""
        s = re.sub(r"\\\n", " ", self.text[start:end])
        s = " ".join(s.split())
        return s if len(s) <= 160 else s[:157] + "…"

    def skip(self, line: int, text: str, reason: str) -> None:
        self.unmapped.append(Unmapped(line, text, reason))

    def _unresolved(self, name: str, note: str) -> None:
        if self._record and name not in self.unresolved:
            self.unresolved.append(name)
            self.var_notes[name] = note

    # -- expansion ----------------------------------------------------------------------------
    def expand(self, word: Word, *, record: bool = True) -> _Expanded:
        """The word's value; unresolvable references keep their literal text. With record,
        they are reported (only what lands in the profile is: not every assignment)."""
        saved, self._record = self._record, record
        try:
            return self._expand(word)
        finally:
            self._record = saved

    def _expand(self, word: Word) -> _Expanded:
        out = _Expanded("")
        parts: list[str] = []
        for p in word.pieces:
            if p.kind == "lit":
                parts.append(p.text)
                continue
            value = self._piece(p, word.line, out)
            if value is None:
                parts.append(p.text)  # keep the literal reference: never guess
            else:
                if not p.quoted and any(c in value for c in " \t\n"):
                    out.split = True
                parts.append(value)
        out.text = "".join(parts)
        return out

    def _assume(self, line: int, text: str, value: str, why: str) -> None:
        if not any(a.text == text and a.line == line for a in self.assumed):
            self.assumed.append(Assumed(line, text, value, why))

    def _pwd(self, p: Piece, line: int) -> str | None:
        """`$(pwd)`, `` `pwd` ``, `$PWD`: the directory the import was told the script runs
        from (the CLI: where `profile import` ran)."""
        if self.cwd is None:
            return None
        self._from_pwd = True
        self._assume(line, p.text, self.cwd, "the directory the script runs from, taken as "
                                             "the one `profile import` ran in")
        return self.cwd

    def _piece(self, p: Piece, line: int, out: _Expanded) -> str | None:
        if p.kind == "arith":
            value = self._arith(p, line, out)
            if value is not None:
                return value
            out.unresolved.append(p.text)
            self._unresolved(p.text, "arithmetic on values known only when the script runs "
                                     "(integers, + - * / % and known variables are evaluated)")
            return None
        if p.kind == "subst" and re.fullmatch(r"\$\(\s*pwd\s*\)|`\s*pwd\s*`", p.text):
            value = self._pwd(p, line)
            if value is not None:
                return value
        if p.kind == "subst":
            out.unresolved.append(p.text)
            self._unresolved(p.text, "command output: known only when the script runs")
            return None
        if p.kind == "special" and p.name and p.name.isdigit() and p.op in (":-", "-"):
            # `${1:-vllm}`: a script argument; imported as run without arguments.
            sub = self._expand(_fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            if sub.unresolved:
                return None
            self._assume(line, p.text, sub.text, f"script argument ${p.name} not given: its "
                                                 "default is used")
            return sub.text
        if p.kind == "special":
            label = p.text
            out.unresolved.append(label)
            what = "a script argument" if p.name and p.name.isdigit() else "a shell parameter"
            self._unresolved(label, f"{what}: known only when the script runs")
            return None
        name = p.name or p.text
        var = self.vars.get(name)
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
            sub = self._expand(_fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            if sub.unresolved:
                return None
            self._assume(line, p.text, sub.text, f"{name} is not set in the script: its default "
                                                 f"is used (when the script runs, {name} from "
                                                 "the environment would win)")
            if p.op.lstrip(":") == "=":
                self.vars[name] = _Var(sub.text, f"set by {p.text} at line {line}")
            return sub.text
        if p.op == "complex" or (var is None and p.op is None):
            return self._unknown(name, var, out, p)
        if var is None or var.value is None:
            return self._unknown(name, var, out, p)
        value = var.value
        if p.op is None:
            return value
        op = p.op.lstrip(":")
        empty = value == "" if p.op.startswith(":") else False
        if op in "-=":
            if not empty:
                return value
            sub = self._expand(_fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            return sub.text if not sub.unresolved else None
        if op == "+":
            if empty:
                return ""
            sub = self._expand(_fragment(p.arg or "", line))
            out.unresolved.extend(sub.unresolved)
            return sub.text if not sub.unresolved else None
        return value if not empty else None  # ":?": fails at run time when empty

    def _words_of(self, var: _Var) -> list[Word]:
        return list(var.items or [])

    def _indexed(self, p: Piece, var: _Var | None, line: int, out: _Expanded) -> str | None:
        """`${A[@]}` / `${A[*]}` joined by spaces (a whole argument list is split by
        `_arg_words`), `${A[N]}` one element; a plain variable is its own element 0."""
        idx = (p.arg or "").strip()
        if var is not None and var.items is None and var.value is not None and idx in (
                "0", "@", "*"):
            return var.value
        if var is None or var.items is None:
            return self._unknown(p.name or p.text, var, out, p)
        words = self._words_of(var)
        if idx not in ("@", "*"):
            if not idx.isdigit() or int(idx) >= len(words):
                return self._unknown(p.name or p.text, var, out, p)
            words = [words[int(idx)]]
        texts = []
        for w in words:
            sub = self._expand(w)
            out.unresolved.extend(sub.unresolved)
            texts.append(sub.text)
        return " ".join(texts)

    def _arith(self, p: Piece, line: int, out: _Expanded) -> str | None:
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
                tokens.append(int(num))
            elif name is not None:
                var = self.vars.get(name)
                text = var.value.strip() if var is not None and var.value is not None else None
                if text is None or not re.fullmatch(r"[-+]?\d+", text):
                    if var is None:
                        self._unresolved(name, "not set in the script (comes from the "
                                               "environment when it runs)")
                    return None
                tokens.append(int(text))
            else:
                tokens.append(op)
        return _eval_int(tokens)

    def _unknown(self, name: str, var: _Var | None, out: _Expanded, p: Piece) -> None:
        out.unresolved.append(name)
        if var is not None:
            note = var.note
        else:
            note = "not set in the script (comes from the environment when it runs)"
            if p.op and p.op != "complex" and p.op.lstrip(":") == "-":
                note += f"; the script's default is {p.arg!r}"
        if p.op == "complex":
            note = f"{p.text}: a shell expansion known only when the script runs"
        self._unresolved(name, note)
        return None

    # -- the script ---------------------------------------------------------------------------
    def run(self) -> None:
        lexer = _Lexer(self.text)
        for pipe in _pipelines(_parse(lexer.run(), lexer.notes)):
            self._pipeline(pipe)
        self.unmapped.sort(key=lambda u: u.line)

    def _pipeline(self, pipe: list[Cmd]) -> None:
        first = pipe[0]
        before = self.command_line
        self._command(first)
        if before is None and self.command_line is not None and len(pipe) > 1:
            rest = pipe[1:]
            arrow = "|&" if first.sep == "|&" else "|"
            self.skip(rest[0].line, f"{arrow} {self._src(rest[0].start, rest[-1].end)}",
                      "output piped to another command: dropped (Ray keeps the job's log; "
                      "`verl-tui logs` shows it)")
            return
        for c in pipe[1:]:
            self._command(c)

    def _is_verl(self, cmd: Cmd) -> bool:
        return any(w.literal == VERL_MODULE or (w.literal or "").endswith("-m" + VERL_MODULE)
                   or (w.literal or "").endswith("verl/trainer/main_ppo.py") for w in cmd.words)

    def _command(self, cmd: Cmd) -> None:
        words = list(cmd.words)
        if not words:
            if cmd.redirs:
                self.skip(cmd.line, self._src(cmd.start, cmd.end), "redirection only")
            return
        assigns: list[Word] = []
        while words and _ASSIGN.match(words[0].unquoted_prefix):
            assigns.append(words.pop(0))
        if not words or (cmd.array_assign and assigns):
            self._assignments(cmd, assigns)
            return
        head = words[0].literal
        if head in _OPENERS or head in ("elif", "function"):
            self._compound_header(cmd, head)
            return
        if head in _CLOSERS:
            return
        if head in ("export", "declare", "typeset", "readonly", "local"):
            self._export(cmd, head, words[1:])
            return
        if head == "unset":
            for w in words[1:]:
                name = w.literal or ""
                self.vars[name] = _Var("", f"unset at line {cmd.line}")
                self.env.pop(name, None)
            return
        inner = self._shell_c(words)
        if inner is not None:
            self._verl_in_shell_c(cmd, assigns, words, inner)
            return
        if self._is_verl(cmd) or self._looks_like_ray_submit(words):
            if self.command_line is not None:
                self.skip(cmd.line, self._src(cmd.start, cmd.end),
                          f"a second verl command: only the first (line {self.command_line}) "
                          "is imported")
                return
            if self._verl(cmd, assigns, words):
                return
        self._other(cmd, words)

    def _shell_c(self, words: list[Word]) -> int | None:
        """Index of STRING in `[ray job submit … --] bash|sh -c STRING` when STRING runs
        main_ppo (Ray runs an entrypoint through a shell, so scripts wrap `cd …; python …`)."""
        k = 0
        if [w.literal for w in words[:3]] == ["ray", "job", "submit"]:
            k = next((i + 1 for i, w in enumerate(words) if w.literal == "--"), len(words))
        if k + 2 >= len(words):
            return None
        shell = Path(words[k].literal or "").name
        if shell not in ("bash", "sh") or words[k + 1].literal != "-c":
            return None
        if VERL_MODULE not in self.expand(words[k + 2], record=False).text:
            return None
        return k + 2

    def _verl_in_shell_c(self, cmd: Cmd, assigns: list[Word], words: list[Word],
                         inner: int) -> None:
        if self.command_line is not None:
            self.skip(cmd.line, self._src(cmd.start, cmd.end),
                      f"a second verl command: only the first (line {self.command_line}) is "
                      "imported")
            return
        for w in assigns:
            self._prefix_env(cmd, w)
        if words[0].literal == "ray":
            self._ray_submit(cmd, words[3:inner - 2])
        self.skip(words[inner - 2].line, f"{words[inner - 2].literal} -c",
                  "the shell around the command: dropped (the commands inside it are read "
                  "one by one)")
        # The string is a script of its own: read it with the same variables, report its lines.
        text = self.expand(words[inner], record=False).text
        saved = self.text
        self.text = text
        try:
            lexer = _Lexer(text, words[inner].line)
            for pipe in _pipelines(_parse(lexer.run(), lexer.notes)):
                self._pipeline(pipe)
        finally:
            self.text = saved
        for r in cmd.redirs:
            self.skip(r.line, self._src(r.start, r.end),
                      "redirection: dropped (Ray keeps the job's log; `verl-tui logs` shows it)")

    def _compound_header(self, cmd: Cmd, head: str | None) -> None:
        kind = _COMPOUND_NAMES.get(head or "", "conditional")
        if head in ("for", "select") and len(cmd.words) > 1 and cmd.words[1].literal:
            name = cmd.words[1].literal
            self.vars[name] = _Var(None, f"the variable of the {head} loop at line {cmd.line}: "
                                         "it takes several values")
        self.skip(cmd.line, self._src(cmd.start, cmd.end),
                  f"{kind}: not part of a profile (a verl command inside it is imported once)")

    def _other(self, cmd: Cmd, words: list[Word]) -> None:
        head = words[0].literal or words[0].raw
        text = self._src(cmd.start, cmd.end)
        lits = [w.literal for w in words]
        if any(a == "ray" and b in ("start", "stop") for a, b in itertools.pairwise(lits)):
            reason = "cluster lifecycle: verl-tui brings Ray up and down itself (`verl-tui up`)"
        elif head in _OTHER_REASONS:
            reason = _OTHER_REASONS[head]
        elif _OVERRIDE.fullmatch(head) and "=" in head and "." in head.split("=")[0]:
            reason = ("a Hydra override outside the verl command (a comment line or a missing "
                      "backslash ended the command before it): not imported")
        elif _PYTHON.fullmatch(Path(head).name):
            reason = "another python command: not part of a profile"
        else:
            reason = "other command: not part of a profile"
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            reason += f" (inside the {_COMPOUND_NAMES.get(kw, kw)} at line {line})"
        self.skip(cmd.line, text, reason)

    # -- assignments and exports --------------------------------------------------------------
    def _assign_one(self, cmd: Cmd, w: Word) -> tuple[str, _Var]:
        m = _ASSIGN.match(w.unquoted_prefix)
        assert m is not None
        name, append = m.group(1), m.group(2) == "+"
        value_word = _strip_prefix(w, m.end())
        rhs = w.raw[w.raw.index("=") + 1:]
        if cmd.array_assign:
            return name, _Var(None, f"an array assigned at line {cmd.line}")
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            return name, _Var(None, f"assigned at line {cmd.line} inside the "
                                    f"{_COMPOUND_NAMES.get(kw, kw)} at line {line}: which "
                                    "value applies is known only when the script runs")
        exp = self.expand(value_word, record=False)
        if exp.unresolved:
            return name, _Var(None, self._why(cmd.line, name, rhs, value_word, exp))
        value = exp.text
        if append:
            prev = self.vars.get(name)
            if prev is None or prev.value is None:
                return name, _Var(None, f"appended to at line {cmd.line}")
            value = prev.value + value
        return name, _Var(value, f"set at line {cmd.line}")

    @staticmethod
    def _why(line: int, name: str, rhs: str, value: Word, exp: _Expanded) -> str:
        """Why an assignment is not a plain literal, in the user's terms."""
        ps = [p for p in value.pieces if p.kind != "lit" or p.text]
        if len(ps) == 1 and ps[0].kind == "var" and ps[0].name == name and ps[0].op in (
                ":-", "-", ":=", "="):
            return (f"set at line {line} to {rhs}: the environment's {name} when the script "
                    f"runs, else {ps[0].arg!r}")
        deps = list(dict.fromkeys(exp.unresolved))
        if all(d.startswith(("$(", "`")) for d in deps):
            return (f"set at line {line} to {rhs}: command output, known only when the "
                    "script runs")
        return f"set at line {line} to {rhs}, which depends on {', '.join(deps)}"

    def _assignments(self, cmd: Cmd, assigns: list[Word]) -> None:
        if cmd.array_assign:
            for w, items in cmd.arrays:
                m = _ASSIGN.match(w.unquoted_prefix)
                if m is None:
                    continue
                name = m.group(1)
                if cmd.enclosing:
                    kw, line = cmd.enclosing[-1]
                    self.vars[name] = _Var(None, f"an array assigned at line {cmd.line} inside "
                                                 f"the {_COMPOUND_NAMES.get(kw, kw)} at line "
                                                 f"{line}: known only when the script runs")
                    continue
                prev = self.vars.get(name)
                if m.group(2) == "+" and prev is not None and prev.items is not None:
                    items = [*prev.items, *items]
                # Elements are expanded where the array is used (their lines are reported).
                self.vars[name] = _Var(None, f"an array assigned at line {cmd.line}", items)
            return
        for w in assigns:
            name, var = self._assign_one(cmd, w)
            self.vars[name] = var
            if name in self.exported:
                self._set_env(name, var, cmd, w)

    def _set_env(self, name: str, var: _Var, cmd: Cmd, w: Word | None) -> None:
        if var.value is None:
            # Keep the literal text (never guess) and report the variable.
            raw = w.raw.split("=", 1)[1] if w is not None and "=" in w.raw else f"${name}"
            value = _unquote_hint(raw)
            self._unresolved(name, var.note)
        else:
            value = var.value
        self._put_env(name, value, cmd.line, self._src(cmd.start, cmd.end))

    def _put_env(self, name: str, value: str, line: int, text: str) -> None:
        """One env var into runtime_env.env_vars, if a profile accepts it."""
        if name == "RAY_ADDRESS":
            self.skip(line, text, "RAY_ADDRESS is the cluster's address, not the job's: "
                                  "verl-tui reaches the cluster through hosts.yaml")
            return
        problem = _rejected(lambda: RuntimeEnv(env_vars={name: value}))
        if problem:
            self.skip(line, text, f"not accepted in env_vars: {problem}")
            return
        self.env[name] = value
        self.env_lines[name] = line
        self.mapped.append(Mapped(line, f"{name}={value}", "runtime_env.env_vars"))

    def _export(self, cmd: Cmd, head: str | None, args: list[Word]) -> None:
        export = head == "export"
        for w in args:
            lit = w.literal
            if lit is not None and lit.startswith("-"):
                if "x" in lit:
                    export = True
                elif head == "export":
                    self.skip(cmd.line, self._src(cmd.start, cmd.end),
                              f"export {lit}: not part of a profile")
                    return
                continue
            if _ASSIGN.match(w.unquoted_prefix):
                name, var = self._assign_one(cmd, w)
                self.vars[name] = var
                if export:
                    self.exported.add(name)
                    self._set_env(name, var, cmd, w)
                continue
            name = lit or w.raw
            if not export:
                continue
            self.exported.add(name)
            var = self.vars.get(name)
            if var is None:
                self._unresolved(name, "exported from the environment: not set in the script")
                self.skip(cmd.line, f"export {name}",
                          "exports a variable the script does not set: its value comes from the "
                          "environment, not added to env_vars")
                continue
            self._set_env(name, var, cmd, None)

    # -- the verl command ---------------------------------------------------------------------
    def _looks_like_ray_submit(self, words: list[Word]) -> bool:
        lits = [w.literal for w in words[:3]]
        return lits == ["ray", "job", "submit"] and any(
            self._entry_index(words[k:]) is not None for k in range(3, len(words)))

    def _python_var(self, p: Piece) -> bool:
        """`$PYTHON -m …`: a variable naming the interpreter."""
        if p.kind != "var" or p.name is None:
            return False
        var = self.vars.get(p.name)
        if var is not None and var.value:
            return _PYTHON.fullmatch(Path(var.value).name) is not None
        return "PY" in p.name.upper()

    def _entry_index(self, words: list[Word]) -> tuple[int, int] | None:
        """(interpreter index, index after the module) for `python … -m verl.trainer.main_ppo`,
        or a `…/verl/trainer/main_ppo.py` script; None when the words hold no verl command."""
        for k, w in enumerate(words):
            lit = w.literal
            name = Path(lit).name if lit is not None else None
            is_py = (name is not None and _PYTHON.fullmatch(name) is not None) or (
                lit is None and len(w.pieces) == 1 and self._python_var(w.pieces[0]))
            if not is_py:
                continue
            j = k + 1
            while j < len(words):
                a = words[j].literal
                if a is None:
                    break
                if a == "-m" and j + 1 < len(words):
                    return (k, j + 2) if words[j + 1].literal == VERL_MODULE else None
                if a == "-m" + VERL_MODULE:
                    return k, j + 1
                if a in _PY_ARG_FLAGS:
                    j += 2
                    continue
                if a.startswith("-") and not a.startswith("-m"):
                    j += 1
                    continue
                if a.endswith("verl/trainer/main_ppo.py"):
                    return k, j + 1
                break
        return None

    def _verl(self, cmd: Cmd, assigns: list[Word], words: list[Word]) -> bool:
        found = self._entry_index(words)
        if found is None:
            return False
        k, args_at = found
        self.command_line = cmd.line
        prefix = words[:k]
        for w in assigns:
            self._prefix_env(cmd, w)
        if prefix and [w.literal for w in prefix[:3]] == ["ray", "job", "submit"]:
            prefix = self._ray_submit(cmd, prefix[3:])
        self._wrappers(cmd, prefix)
        self._interpreter(cmd, words, k, args_at)
        args = self._arg_words(words[args_at:])
        j = 0
        while j < len(args):
            w = args[j]
            flag = self.expand(w, record=False).text
            if flag in _CONFIG_FLAGS and j + 1 < len(args):  # `--config-name NAME`
                self._config_flag(flag, args[j + 1])
                j += 2
                continue
            name, eq, _ = flag.partition("=")
            if eq and name in _CONFIG_FLAGS:
                self._config_flag(name, _strip_prefix(w, len(name) + 1)
                                  if w.unquoted_prefix.startswith(name + "=") else w)
                j += 1
                continue
            self._argument(w)
            j += 1
        self._finish_config()
        for r in cmd.redirs:
            self.skip(r.line, self._src(r.start, r.end),
                      "redirection: dropped (Ray keeps the job's log; `verl-tui logs` shows it)")
        if cmd.sep == "&":
            self.skip(cmd.end_line, "&", "runs in the background: dropped (a Ray job is "
                      "detached from this terminal anyway)")
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            self.skip(cmd.line, self._src(words[0].start, words[min(len(words) - 1,
                                                                    args_at - 1)].end),
                      f"inside the {_COMPOUND_NAMES.get(kw, kw)} at line {line}: imported as "
                      "a single run")
        for n in cmd.notes:
            self.skip(n.line, n.text, n.reason)
        return True

    def _prefix_env(self, cmd: Cmd, w: Word) -> None:
        m = _ASSIGN.match(w.unquoted_prefix)
        assert m is not None
        name = m.group(1)
        exp = self.expand(_strip_prefix(w, m.end()))
        self._put_env(name, exp.text, w.line, w.raw)

    def _ray_submit(self, cmd: Cmd, opts: list[Word]) -> list[Word]:
        """Read `ray job submit` options; return any words between them and the interpreter."""
        j = 0
        while j < len(opts):
            w = opts[j]
            exp = self.expand(w)
            a = exp.text
            if a == "--":
                return opts[j + 1:]
            if not a.startswith("-"):
                return opts[j:]
            name, eq, val = a.partition("=")
            if name in _RAY_SUBMIT_VALUE_OPTS:
                if not eq:
                    if j + 1 >= len(opts):
                        self.skip(w.line, a, "option without a value")
                        return []
                    val = self.expand(opts[j + 1]).text
                    end = opts[j + 1].end
                    j += 2
                else:
                    end = w.end
                    j += 1
                self._ray_option(name, val, w.line, self._src(w.start, end))
                continue
            if name in _RAY_SUBMIT_FLAGS:
                self.skip(w.line, a, "ray job submit flag: verl-tui's submit decides this")
            else:
                self.skip(w.line, a, "unknown ray job submit option: not imported")
            j += 1
        return []

    def _ray_option(self, name: str, val: str, line: int, text: str) -> None:
        if name == "--runtime-env-json":
            self._runtime_env_json(val, line, text)
        elif name == "--working-dir":
            self._put_working_dir(val, line, text)
        elif name == "--address":
            self.skip(line, text, "the cluster's address, not part of a profile: verl-tui "
                                  "reaches the cluster through hosts.yaml")
        elif name == "--runtime-env":
            self.skip(line, text, "a runtime env file is not read: copy its env_vars, "
                                  "working_dir and excludes into the profile")
        elif name in ("--submission-id", "--job-id"):
            self.skip(line, text, "verl-tui names each submission itself")
        else:
            self.skip(line, text, "ray job submit option: not part of a profile")

    def _runtime_env_json(self, val: str, line: int, text: str) -> None:
        try:
            env = json.loads(val)
        except json.JSONDecodeError as exc:
            self.skip(line, text, f"--runtime-env-json is not valid JSON ({exc.msg}): not "
                                  "imported")
            return
        if not isinstance(env, dict):
            self.skip(line, text, "--runtime-env-json is not a JSON object: not imported")
            return
        for key, value in env.items():
            if key == "env_vars" and isinstance(value, dict):
                for k, v in value.items():
                    self._put_env(str(k), v if isinstance(v, str) else json.dumps(v), line,
                                  f"env_vars: {k}={v}")
            elif key == "working_dir" and isinstance(value, str):
                self._put_working_dir(value, line, f"working_dir: {value}")
            elif key == "excludes" and isinstance(value, list):
                self.excludes = [str(x) for x in value]
                self.mapped.append(Mapped(line, f"excludes={self.excludes}",
                                          "runtime_env.excludes"))
            else:
                self.skip(line, f"{key}: {json.dumps(value)}",
                          f"runtime_env key {key!r} is not part of a profile")

    def _put_working_dir(self, value: str, line: int, text: str) -> None:
        problem = _rejected(lambda: RuntimeEnv(working_dir=value))
        if problem:
            self.skip(line, text, f"not accepted as working_dir: {problem}")
            return
        self.working_dir = value
        self.mapped.append(Mapped(line, text, "runtime_env.working_dir"))

    def _wrappers(self, cmd: Cmd, prefix: list[Word]) -> None:
        j = 0
        while j < len(prefix):
            w = prefix[j]
            lit = w.literal
            if lit == "env":
                j += 1
                while j < len(prefix) and (_ASSIGN.match(prefix[j].unquoted_prefix)
                                           or (prefix[j].literal or "").startswith("-")):
                    if _ASSIGN.match(prefix[j].unquoted_prefix):
                        self._prefix_env(cmd, prefix[j])
                    else:
                        self.skip(prefix[j].line, prefix[j].raw, "env option: not imported")
                    j += 1
                continue
            if _ASSIGN.match(w.unquoted_prefix):
                self._prefix_env(cmd, w)  # `ray job submit -- X=1 python3 …`: Ray uses a shell
                j += 1
                continue
            rest = self._src(w.start, prefix[-1].end)
            if lit in _WRAPPERS:
                self.skip(w.line, lit, f"{lit}: dropped (not needed for a Ray job)")
                j += 1
                continue
            self.skip(w.line, rest, "launcher prefix: dropped (verl-tui runs the job through "
                                    "Ray on its hosts)")
            return

    def _interpreter(self, cmd: Cmd, words: list[Word], k: int, args_at: int) -> None:
        w = words[k]
        exp = self.expand(w)
        if exp.unresolved:
            self.skip(w.line, w.raw, "interpreter not resolved: the profile uses the hosts' "
                                     "python (hosts.yaml)")
        elif exp.text.startswith("/"):
            problem = _rejected(lambda: Profile(name="x", python=exp.text))
            if problem:
                self.skip(w.line, w.raw, f"interpreter not accepted: {problem}")
            else:
                self.python = exp.text
                self.mapped.append(Mapped(w.line, exp.text, "python"))
        for flag in words[k + 1:args_at]:
            f = flag.literal or flag.raw
            if f in ("-m", VERL_MODULE, "-m" + VERL_MODULE) or f.endswith("main_ppo.py"):
                continue
            if f == "-u" or (f.startswith("-") and not f.startswith("--") and set(f[1:]) <= {"u"}):
                # -u is unbuffered output; PYTHONUNBUFFERED=1 is the same for every process.
                self.env.setdefault("PYTHONUNBUFFERED", "1")
                self.env_lines.setdefault("PYTHONUNBUFFERED", flag.line)
                self.mapped.append(Mapped(flag.line, f"python {f}",
                                          "runtime_env.env_vars PYTHONUNBUFFERED=1"))
                continue
            self.skip(flag.line, f, "python option: not kept (the profile runs "
                                    "`python -m verl.trainer.main_ppo`)")

    def _arg_words(self, words: list[Word]) -> list[Word]:
        """The command's argument words with `"${ARR[@]}"` spread into one word per element
        (as bash passes them)."""
        out: list[Word] = []
        for w in words:
            ps = [p for p in w.pieces if p.kind != "lit" or p.text]
            if len(ps) == 1 and ps[0].kind == "var" and ps[0].op == "index" and (
                    ps[0].arg or "").strip() in ("@", "*"):
                var = self.vars.get(ps[0].name or "")
                if var is not None and var.items is not None and not (
                        ps[0].quoted and ps[0].arg.strip() == "*"):
                    out.extend(var.items)
                    self.mapped.append(Mapped(w.line, w.raw, f"{len(var.items)} arguments from "
                                                             f"the array {ps[0].name}"))
                    continue
            out.append(w)
        return out

    def _config_flag(self, flag: str, value_word: Word) -> None:
        exp = self.expand(value_word)
        which = "config_name" if flag in ("--config-name", "-cn") else "config_path"
        value = exp.text
        if which == "config_name":
            value = value.removesuffix(".yaml")
        problem = _rejected(lambda: Profile(name="x", **{which: value}))
        if problem:
            self.skip(value_word.line, f"{flag}={exp.text}", f"{which} not imported: {problem}"
                      + (" (set it in the profile)" if exp.unresolved else ""))
            return
        setattr(self, which, value)
        self.config_lines[which] = value_word.line
        self.mapped.append(Mapped(value_word.line, f"{flag}={exp.text}", which))

    def _finish_config(self) -> None:
        """Hydra resolves a relative --config-path against verl/trainer (main_ppo.py's folder),
        so `config` is verl's own; ppo_megatron_trainer is verl 0.9.1's deprecated alias."""
        path = self.config_path
        if path is not None and not path.startswith("/") and "$" not in path and \
                os.path.normpath(path) == "config":
            self.config_path = path = None
        if path is not None and self._from_pwd and not Path(path).is_dir():
            found = _beside_script(path, self.cwd, self.source)
            if found is not None:
                self._assume(self.config_lines.get("config_path", 0), path, found,
                             "the script's project root is the folder holding it: $(pwd) "
                             "taken as that folder")
                self.config_path = path = found
        if path is None and self.config_name == "ppo_trainer":
            self.config_name = None
        if path is None and self.config_name == MEGATRON_ALIAS:
            # verl 0.9.1 trainer/config/ppo_megatron_trainer.yaml: "[Deprecated] … please use
            # ppo_trainer.yaml instead. python3 -m verl.trainer.main_ppo model_engine=megatron"
            line = self.config_lines.get("config_name", self.command_line or 0)
            self.config_name = None
            if not any(k.lstrip("+~") == "model_engine" for k in self.overrides):
                self.overrides = {"model_engine": "megatron", **self.overrides}
                self.override_lines["model_engine"] = line
            self.mapped.append(Mapped(line, f"--config-name={MEGATRON_ALIAS}",
                                      "overrides model_engine=megatron (verl 0.9.1 deprecates "
                                      "ppo_megatron_trainer for ppo_trainer with "
                                      "model_engine=megatron)"))

    def _argument(self, w: Word) -> None:
        if len(w.pieces) == 1 and w.pieces[0].kind == "special" and w.pieces[0].name in "@*":
            self.skip(w.line, w.raw, "passes the script's own arguments through: overrides "
                                     "given when it runs are not in the profile")
            return
        exp = self.expand(w)
        a = exp.text
        flag = a.partition("=")[0]
        if flag in _HYDRA_VALUE_FLAGS or flag in _HYDRA_BARE_FLAGS:
            self.skip(w.line, w.raw, f"Hydra option {flag}: not part of a profile (profiles "
                                     "compose verl's ppo_trainer config)")
            return
        m = _OVERRIDE.fullmatch(a)
        if m is None or a.startswith("-"):
            self.skip(w.line, w.raw, "not a Hydra key=value override: not imported")
            return
        prefix, key, value = m.group(1) or "", m.group(2), m.group(3)
        if value is None and prefix != "~":
            self.skip(w.line, w.raw, "not a Hydra key=value override: not imported")
            return
        if exp.split:
            self.skip(w.line, w.raw, "unquoted variable holding spaces: bash would split this "
                                     "into several arguments; imported as one value")
        parsed: Any = None
        if value is not None:
            parsed, problem = _hydra_value(value, shell_text=bool(exp.unresolved))
            if problem and parsed is _REFUSED:
                self.skip(w.line, w.raw, problem)
                return
            if problem:
                self.skip(w.line, w.raw, problem)
        full = prefix + key
        refused = _rejected(lambda: Profile(name="x", overrides={full: parsed}))
        if refused:
            self.skip(w.line, w.raw, f"not accepted in a profile: {refused}")
            return
        for other in (key, "+" + key, "++" + key, "~" + key):
            if other in self.overrides:
                self.skip(self.override_lines[other], f"{other}=…",
                          f"set again at line {w.line}: the later value is imported")
                del self.overrides[other]
        self.overrides[full] = parsed
        self.override_lines[full] = w.line
        self.mapped.append(Mapped(w.line, a, "overrides"))


_ARITH_TOKEN = re.compile(r"\s+|(\d+)|\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?|\$([A-Za-z_][A-Za-z0-9_]*)"
                          r"|(\*\*|[-+*/%()])|(.)", re.S)


def _eval_int(tokens: list[str | int]) -> str | None:
    """Integer expression: + - * / % ( ) and unary +/-; None for anything else or / by 0."""
    pos = 0

    def peek() -> str | int | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str | int | None:
        nonlocal pos
        pos += 1
        return tokens[pos - 1] if pos <= len(tokens) else None

    def expr() -> int:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term() -> int:
        value = unary()
        while peek() in ("*", "/", "%"):
            op, rhs = take(), unary()
            if op == "*":
                value *= rhs
            else:
                if rhs == 0:
                    raise ValueError("division by zero")
                q = abs(value) // abs(rhs) * (1 if (value >= 0) == (rhs >= 0) else -1)
                value = q if op == "/" else value - rhs * q  # bash truncates toward zero
        return value

    def unary() -> int:
        if peek() in ("+", "-"):
            return unary() if take() == "+" else -unary()
        tok = take()
        if tok == "(":
            value = expr()
            if take() != ")":
                raise ValueError("unbalanced")
            return value
        if isinstance(tok, int):
            return tok
        raise ValueError(f"unexpected {tok!r}")

    try:
        if not tokens or "**" in tokens:
            return None
        value = expr()
        return str(value) if pos == len(tokens) else None
    except (ValueError, RecursionError):
        return None


def _strip_prefix(w: Word, n: int) -> Word:
    """The word without its first n characters of unquoted text (the `NAME=` of an
    assignment)."""
    first = w.pieces[0]
    rest = first.text[n:]
    pieces = ([Piece("lit", rest)] if rest else []) + w.pieces[1:]
    return Word(pieces, w.raw[n:], w.line, w.start + n, w.end)


def _unquote_hint(raw: str) -> str:
    """The literal text of an unresolved assignment, without its outer quotes."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return raw


def _rejected(build: Any) -> str | None:
    """None when the profile model accepts what `build` makes, else its first complaint."""
    try:
        build()
    except ValidationError as exc:
        err = exc.errors()[0]
        return str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return None


def _profile_name(source: str) -> str:
    stem = Path(source).stem if source and not source.startswith("<") else "imported"
    # Profile names: a letter or digit first, then letters, digits, '.', '_', '-'; 64 at most.
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", stem)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)[:64].rstrip("-.")
    return safe or "imported"


def _beside_script(path: str, cwd: str | None, source: str) -> str | None:
    """`$(pwd)/examples/x/config` with cwd elsewhere: the same tail under a folder holding the
    script (verl's examples run from the repository root that holds them)."""
    if not cwd or source.startswith("<") or not path.startswith(cwd.rstrip("/") + "/"):
        return None
    tail = path[len(cwd.rstrip("/")) + 1:]
    for folder in Path(source).resolve().parents:
        if (folder / tail).is_dir():
            return str(folder / tail)
    return None


def import_script(text: str, *, source: str = "<script>", cwd: str | None = None
                  ) -> ImportResult:
    """Read a verl launch script into a profile; report everything that did not map. With
    `cwd`, `$(pwd)` and `$PWD` are that directory (and said so in `assumed`)."""
    imp = _Importer(text, source, cwd)
    imp.run()
    profile = _make_profile(imp, source)
    return ImportResult(profile=profile, unmapped=imp.unmapped,
                        unresolved_vars=list(imp.unresolved), mapped=imp.mapped,
                        var_notes={k: v for k, v in imp.var_notes.items()
                                   if k in imp.unresolved},
                        command_line=imp.command_line,
                        assumed=sorted(imp.assumed, key=lambda a: a.line))


def _make_profile(imp: _Importer, source: str) -> Profile:
    where = Path(source).name if not source.startswith("<") else source
    desc = f"Imported from {where}" + (f" (line {imp.command_line})" if imp.command_line else "")
    return Profile(
        name=_profile_name(source),
        description=desc,
        overrides=dict(imp.overrides),
        runtime_env={"env_vars": dict(imp.env), "working_dir": imp.working_dir,
                     "excludes": list(imp.excludes)},
        python=imp.python,
        config_name=imp.config_name,
        config_path=imp.config_path,
    )
