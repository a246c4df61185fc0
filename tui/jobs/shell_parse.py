"""The shell parser of the script importer: tokens (tui/jobs/shell_lexer.py) into simple
commands, each with the operator that ended it, the loops/conditionals around it, its array
assignments and the lexer's notes on its lines."""

from __future__ import annotations

from dataclasses import dataclass, field

from tui.jobs.shell_lexer import Op, Redir, Token, Unmapped, Word


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
        for k, t in enumerate(cur[:-1]):
            nxt = cur[k + 1]
            if isinstance(t, Word) and isinstance(nxt, Op) and nxt.text == "(":
                items: list[Word] = []
                for e in cur[k + 2 :]:
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
        if head in OPENERS:
            stack.append((head, cmd.line))
        elif head in CLOSERS and stack:
            stack.pop()
            if head == "}" and stack and stack[-1][0] == "function":
                stack.pop()
        cmd.notes = [n for n in notes if cmd.line <= n.line <= cmd.end_line]
        cmds.append(cmd)
        cur.clear()

    for k, tok in enumerate(tokens):
        if isinstance(tok, Op):
            if tok.text == "(":
                prev = cur[-1] if cur else None
                prev_word = isinstance(prev, Word)
                nxt = tokens[k + 1] if k + 1 < len(tokens) else None
                if prev_word and isinstance(nxt, Op) and nxt.text == ")":
                    if not (stack and stack[-1] == ("function", tok.line)):  # `function f()`
                        stack.append(("function", tok.line))  # name() { … }
                    cur.clear()
                    continue
                if isinstance(prev, Word) and prev.raw.endswith("="):
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
    return bool(opens) and not any(isinstance(t, Op) and t.text == ")" for t in cur[opens[-1] :])


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
