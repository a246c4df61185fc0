"""The shell parser of the script importer: tokens (tui/jobs/shell_lexer.py) into simple
commands, each with the operator that ended it, the loops/conditionals around it, its array
assignments and the lexer's notes on its lines."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from tui.jobs.shell_lexer import Op, Piece, Redir, Token, Unmapped, Word


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
    # In case statements: (the statement's line, the clause's number) of each around it.
    clauses: tuple[tuple[int, int], ...] = ()
    # A case statement's header: each clause's pattern words, and whether a clause ends in
    # `;&` / `;;&` (it runs on into the next: not one clause alone) or has an extglob pattern:
    # then which clauses run is not judged.
    patterns: list[list[Word]] = field(default_factory=list)
    falls_through: bool = False


OPENERS = {
    "if": "fi",
    "for": "done",
    "while": "done",
    "until": "done",
    "select": "done",
    "case": "esac",
    "{": "}",
}
CLOSERS = {"fi", "done", "esac", "}"}
CASE_ENDS = {";;", ";&", ";;&"}  # what ends a case clause (the next pattern follows)
_PREFIX_KEYWORDS = {"then", "do", "else", "!", "time"}
COMPOUND_NAMES = {
    "if": "conditional",
    "for": "loop",
    "while": "loop",
    "until": "loop",
    "select": "loop",
    "case": "case statement",
    "{": "group",
    "(": "subshell",
    "function": "function",
}


def parse(tokens: list[Token], notes: list[Unmapped]) -> list[Cmd]:
    """Every step is linear in the tokens: notes are found by line with bisect, arrays in one
    pass (a script of 60,000 commands with a note each, or an array of 200,000 lines, took
    minutes when each command scanned all notes or each newline the whole array)."""
    cmds: list[Cmd] = []
    stack: list[tuple[str, int]] = []
    cur: list[Token] = []
    notes = sorted(notes, key=lambda n: n.line)
    note_lines = [n.line for n in notes]
    in_array = False  # inside NAME=( … ) (newlines do not end the command there)
    # In a case statement where a clause's pattern comes (`a|b)`, after `case W in` and after
    # each `;;`): its words are the pattern, not a command.
    case_pattern = False
    cases: list[Cmd] = []  # the headers of the case statements being read, innermost last

    def close(sep: str) -> None:
        nonlocal in_array, case_pattern
        if not cur:
            return
        words = [t for t in cur if isinstance(t, Word)]
        redirs = [t for t in cur if isinstance(t, Redir)]
        first, last = cur[0], cur[-1]
        # Enclosing loops/conditionals as they were before this command's own keywords;
        # a `{ …; }` group changes nothing and is left out.
        cmd = Cmd(
            words,
            redirs,
            first.line,
            _end_line(last),
            first.start,
            last.end,
            sep,
            tuple(s for s in stack if s[0] != "{"),
        )
        cmd.array_assign = any(isinstance(t, Op) and t.text == "(" for t in cur)
        cmd.clauses = tuple((c.line, len(c.patterns) - 1) for c in cases)
        items: list[Word] | None = None  # the elements of the array being read
        for k, t in enumerate(cur):
            if isinstance(t, Op) and t.text == "(":
                prev = cur[k - 1] if k else None
                if isinstance(prev, Word):
                    if items is not None and items and items[-1] is prev:
                        items.pop()  # `a=(x b=(y)`: b= names the next array
                    items = []
                    cmd.arrays.append((prev, items))
            elif isinstance(t, Op) and t.text == ")":
                items = None
            elif isinstance(t, Word) and items is not None:
                items.append(t)
        while cmd.words and cmd.words[0].literal in _PREFIX_KEYWORDS | {"{"}:
            if cmd.words[0].literal == "{":
                stack.append(("{", cmd.words[0].line))
            cmd.words = cmd.words[1:]
            if cmd.words:  # the command's text starts after `then`, `do`, …
                cmd.start, cmd.line = cmd.words[0].start, cmd.words[0].line
        head = cmd.words[0].literal if cmd.words else None
        if head in OPENERS:
            stack.append((head, cmd.line))
            case_pattern = head == "case"
            if head == "case":
                cases.append(cmd)
        elif head in CLOSERS and stack:
            if stack.pop()[0] == "case":
                case_pattern = False
                if cases:
                    cases.pop()
            if head == "}" and stack and stack[-1][0] == "function":
                stack.pop()
        # A note on the line after the command may say why it ended there (a comment or a
        # blank line after its last backslash).
        cmd.notes = notes[
            bisect_left(note_lines, cmd.line) : bisect_right(note_lines, cmd.end_line + 1)
        ]
        cmds.append(cmd)
        cur.clear()
        in_array = False

    for k, tok in enumerate(tokens):
        if (
            isinstance(tok, Op)
            and tok.text in (")", "|")
            and not in_array
            and cur
            and isinstance(cur[0], Word)
            and cur[0].literal == "case"
        ):
            at = next(
                (i for i, t in enumerate(cur) if isinstance(t, Word) and t.literal == "in"), 0
            )
            if 2 <= at < len(cur) - 1 and tok.text == "|":
                continue  # `case $1 in a|b) …`: between the first pattern's words
            if 2 <= at < len(cur) - 1:  # `case $1 in --lr) …`: the first pattern on its line
                first = [t for t in cur[at + 1 :] if isinstance(t, Word)]
                del cur[at + 1 :]
                close("\n")
                cases[-1].patterns.append(first)
                case_pattern = False
                continue
        if isinstance(tok, Op) and tok.text in ("&&", "||", "(", ")") and _in_test(cur):
            # Inside `[[ … ]]` these join and group its tests: words of the command, which
            # goes on (tui/jobs/shell_test.py judges them).
            cur.append(Word([Piece("lit", tok.text)], tok.text, tok.line, tok.start, tok.end))
            continue
        in_case = bool(stack) and stack[-1][0] == "case"
        if in_case and not case_pattern and isinstance(tok, Op) and tok.text in CASE_ENDS:
            close(tok.text)
            case_pattern = True
            if tok.text != ";;" and cases:
                cases[-1].falls_through = True
            continue
        if in_case and case_pattern:
            if isinstance(tok, Word) and tok.literal == "esac" and not cur:
                case_pattern = False  # the statement ends: `esac` closes it below
            elif isinstance(tok, Op) and tok.text == ")":
                if cases:  # the pattern: `*)`, `--lr|-l)`
                    cases[-1].patterns.append([t for t in cur if isinstance(t, Word)])
                cur.clear()
                case_pattern = False
                continue
            elif isinstance(tok, Op) and tok.text in ("|", "(", "\n"):
                if tok.text == "(" and cur and cases:  # `!(a)`: an extglob, not judged
                    cases[-1].falls_through = True
                continue  # between a pattern's words, its optional `(`, blank lines
            elif isinstance(tok, Word):
                cur.append(tok)
                continue
        if isinstance(tok, Op):
            if tok.text == "(":
                prev = cur[-1] if cur else None
                prev_word = isinstance(prev, Word)
                nxt = tokens[k + 1] if k + 1 < len(tokens) else None
                if isinstance(prev, Word) and prev.raw.endswith("="):
                    cur.append(tok)  # NAME=( … ) array assignment (`NAME=()`: empty)
                    in_array = True
                    continue
                if prev_word and isinstance(nxt, Op) and nxt.text == ")":
                    if not (stack and stack[-1] == ("function", tok.line)):  # `function f()`
                        stack.append(("function", tok.line))  # name() { … }
                    cur.clear()
                    continue
                if not cur:
                    stack.append(("(", tok.line))
                    continue
            if tok.text == ")":
                if in_array:
                    cur.append(tok)  # end of an array assignment
                    in_array = False
                    continue
                close(")")
                if stack and stack[-1][0] == "(":
                    stack.pop()
                continue
            if tok.text == "\n" and in_array:
                continue  # NAME=( one element a line )
            close(tok.text)
            continue
        if isinstance(tok, Word) and tok.literal == "function" and not cur:
            stack.append(("function", tok.line))
            continue
        cur.append(tok)
    close("")
    return cmds


def _in_test(cur: list[Token]) -> bool:
    """Whether the command read so far has opened a `[[` it has not closed."""
    for t in reversed(cur):
        if isinstance(t, Word) and t.literal in ("[[", "]]"):
            return t.literal == "[["
    return False


def pipelines(cmds: list[Cmd]) -> list[list[Cmd]]:
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
