"""How the importer follows the script's flow as bash would: the commands in order, `for`
loops over values it can resolve read pass by pass, and text that bash runs as commands read
as commands with the same variables — `eval STRING`, `bash -c STRING`, `source FILE` / `. FILE`
(a file beside the script, read with the one safe reader: regular files only, size-capped,
never a FIFO or a device). Every way of nesting shares one depth bound, and loops and sourced
files share budgets, so a hostile script ends in one line naming its file:line, never a hang.
The commands themselves are read by tui/jobs/importer.py (a subclass).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from tui.config.yamlfile import ConfigError, read_text
from tui.jobs.import_command import CommandReader, Mapped
from tui.jobs.shell_expand import NO_SCRIPT_ARGS, Var
from tui.jobs.shell_lexer import MAX_NESTING, Lexer, Piece, ScriptLimitError, Word
from tui.jobs.shell_parse import Cmd, parse, pipelines
from tui.jobs.shell_test import Kind, Operand, glob_regex, judge, test_operands

# Bounds of one import, whatever the script nests: real launch scripts run a few hundred
# commands; the reader takes ~0.1 ms a command, so these end a hostile script in seconds.
MAX_COMMANDS = 20_000  # commands read in loop passes, eval, bash -c and sourced files
MAX_UNROLLED = 20_000  # of which in loops read pass by pass (past it: read once, unknown)
MAX_RUN_TEXT = 2 << 20  # characters of eval / bash -c strings and sourced files, in total
MAX_SOURCED_FILES = 256  # `source` reads
_UNSET = "not set in the script (comes from the environment when it runs)"


class FlowReader(CommandReader):
    def __init__(self, text: str, source: str, cwd: str | None = None) -> None:
        super().__init__(text, source, cwd)
        self.line = 1  # the line of the command being read (for a bound's message)
        self._shells = 0  # `bash -c`, `eval`, `source` read inside each other
        self._unrolled: set[tuple[str, int]] = set()  # loops being read pass by pass
        self._passes: list[str] = []  # "pass 2 of 3 of the for loop at line 5 (lr=…)"
        self._unroll_left = MAX_UNROLLED
        self._sourcing: list[str] = []  # real paths of the files being sourced
        self._sourced_files = 0
        self._commands = 0
        self._run_chars = 0  # characters of text run as commands (eval, bash -c, source)
        self._quiet = 0  # inside a sourced file: its lines are not the script's
        self.unread_sources: list[str] = []  # "FILE (line N): why", for unresolved notes
        # name → (its ("function", line) key, its body): read where it is called
        self.functions: dict[str, tuple[tuple[str, int], list[list[Cmd]], str]] = {}
        self._called: set[str] = set()
        self._first_line = 1  # the line self.text starts at (an eval string: its line)

    def _command(self, cmd: Cmd) -> None:  # tui/jobs/importer.py
        raise NotImplementedError

    # -- reporting ----------------------------------------------------------------------------
    def skip(self, line: int, text: str, reason: str) -> None:
        if not self._quiet:
            super().skip(line, text, reason)

    def unset_note(self) -> str:
        if not self.unread_sources:
            return _UNSET
        return (
            "not set in the script; it comes from the environment when it runs, or from "
            + "; ".join(self.unread_sources[:3])
            + ("; …" if len(self.unread_sources) > 3 else "")
        )

    # -- the walk -----------------------------------------------------------------------------
    def walk_text(self, text: str, first_line: int) -> None:
        lexer = Lexer(text, first_line)
        saved, self._first_line = self._first_line, first_line
        try:
            self.walk(pipelines(parse(lexer.run(), lexer.notes)))
        finally:
            self._first_line = saved

    def walk(self, pipes: list[list[Cmd]]) -> None:
        i = 0
        while i < len(pipes):
            head = pipes[i][0]
            fn = next(
                (e for e in head.enclosing if e[0] == "function" and e not in self._unrolled),
                None,
            )
            if fn is not None:  # a definition: its body runs where the function is called
                end = _body_end(pipes, i, fn)
                self._define(fn, pipes[i:end])
                i = end
                continue
            loop = _for_loop(head)
            if loop is not None:
                end = _body_end(pipes, i + 1, ("for", head.line))
                name, items = loop
                if items is None and self.positional is not None:  # `for NAME; do`: over the
                    items = list(self.positional)  # function's arguments
                elif items is None and not self.arguments_set:  # … or the script's: none
                    self._assume(head.line, f"for {name}", "", NO_SCRIPT_ARGS)
                    items = []
                if items is not None and self._unroll(head, name, items, pipes[i + 1 : end]):
                    i = end
                    continue
            kind = head.words[0].literal if head.words else None
            if kind == "case" and head.patterns and not head.falls_through:
                key = ("case", head.line)
                end = _body_end(pipes, i + 1, key)
                chosen = self._case_clause(head)
                if chosen is not None:
                    body = [p for p in pipes[i + 1 : end] if (head.line, chosen) in p[0].clauses]
                    self._unrolled.add(key)
                    try:
                        self.walk(body)
                    finally:
                        self._unrolled.discard(key)
                    i = end
                    continue
            if kind in ("while", "until") and self._never_runs(head, kind):
                i = _body_end(pipes, i + 1, (kind, head.line))
                continue
            self._pipeline(pipes[i])
            i += 1

    def _never_runs(self, head: Cmd, kind: str) -> bool:
        """A `while` whose test is false (an `until`'s true) with the script run without
        arguments, as the import reads it: the argument-parsing loop (`while [[ $# -gt 0 ]];
        do case $1 in …`), whose body then sets nothing. Said in the report when so."""
        words: list[Operand] = []
        with self.without_arguments():
            for w in head.words[1:]:
                if w.raw in ("&&", "||", "(", ")"):  # made by the parser inside [[ ]]
                    words.append((w.raw, "op"))
                else:
                    quoted = [p.quoted for p in w.pieces if p.kind != "lit" or p.text]
                    how: Kind = (
                        "quoted" if quoted and all(quoted) else "mixed" if any(quoted) else "plain"
                    )
                    words.append((self._known_text(w), how))
        # `while [ … ] || other`: the loop's test is the whole list, not its first command.
        joined = head.sep in ("&&", "||", "|", "|&")
        parsed = None if head.redirs or joined else test_operands(words)
        if parsed is None:
            return False
        result = judge(*parsed)
        if result is not (kind == "until"):
            return False
        self.skip(
            head.line,
            self._src(head.start, head.end),
            f"{kind} loop: its test is {str(result).lower()} with the script run without "
            "arguments (as the import reads it), so it never runs and sets nothing",
        )
        return True

    def _case_clause(self, head: Cmd) -> int | None:
        """The clause a case statement runs, when its word and the patterns up to the first
        that matches are known (the script's $1 … $9 empty: run without arguments); -1 when
        none matches; None when not known here (then every clause is read, as before). Said in
        the report."""
        if len(head.words) < 3 or head.words[2].literal != "in":
            return None
        with self.without_arguments():
            subject = self._known_text(head.words[1])
            if subject is None:
                return None
            chosen, shown = -1, ""
            for k, patterns in enumerate(head.patterns):
                for w in patterns:
                    parts: list[tuple[str, bool]] = []
                    for p in w.pieces:  # an unquoted expansion is pattern too, as in bash
                        text = p.text if p.kind == "lit" else self._known_text(_alone(p, w))
                        if text is None:
                            return None
                        parts.append((text, p.quoted))
                    rx = glob_regex(parts)
                    if rx is None:
                        return None
                    if rx.match(subject):
                        chosen, shown = k, w.raw
                        break
                if chosen >= 0:
                    break
        what = f"`{shown})`: only that clause is read" if chosen >= 0 else "no pattern: none runs"
        args = any(p.kind == "special" and (p.name or "").isdigit() for p in head.words[1].pieces)
        why = " (the script run without arguments, as the import reads it)" if args else ""
        self.skip(
            head.line,
            self._src(head.start, head.end),
            f"case statement: {subject!r} matches {what}{why}",
        )
        return chosen

    def _pipeline(self, pipe: list[Cmd]) -> None:
        if self._shells or self._sourcing or self._unrolled:  # the script's own: ≤ 1 MiB
            self._commands += len(pipe)
            if self._commands > MAX_COMMANDS:
                raise ScriptLimitError(
                    pipe[0].line,
                    f"loop passes, eval, bash -c and sourced files run more than "
                    f"{MAX_COMMANDS:,} commands",
                )
        first = self._unwrapped(pipe[0])
        before = self.command_line
        self._command(first)
        if before is None and self.command_line is not None and len(pipe) > 1:
            rest = pipe[1:]
            arrow = "|&" if first.sep == "|&" else "|"
            self.skip(
                rest[0].line,
                f"{arrow} {self._src(rest[0].start, rest[-1].end)}",
                "output piped to another command: dropped (Ray keeps the job's log; "
                "`verl-tui logs` shows it)",
            )
            return
        for c in pipe[1:]:
            self._command(self._unwrapped(c))

    def _unwrapped(self, cmd: Cmd) -> Cmd:
        """The command without the loops being read pass by pass around it: inside them its
        variables are known, as in bash."""
        if not self._unrolled or not cmd.enclosing:
            return cmd
        return replace(cmd, enclosing=tuple(e for e in cmd.enclosing if e not in self._unrolled))

    def _unroll(self, head: Cmd, name: str, items: list[Word], body: list[list[Cmd]]) -> bool:
        """`for NAME in WORDS; do …; done` with every WORD known: the body read once a value,
        as bash runs it. False (read once, its variable unknown) when a value is not known or
        the passes would pass the import's budget."""
        values = [self.expand(w, record=False) for w in self.fields(items)]
        if any(v.unresolved for v in values):
            return False
        size = sum(len(p) for p in body) or 1
        if len(values) * size > self._unroll_left:
            return False
        self._unroll_left -= len(values) * size
        shown = " ".join(v.text for v in values)
        self.skip(
            head.line,
            self._src(head.start, head.end),
            f"loop over {len(values)} value(s): read pass by pass, as bash runs it"
            + (f" ({shown})" if shown and len(shown) <= 60 else ""),
        )
        key = ("for", head.line)
        self._unrolled.add(key)
        try:
            for k, v in enumerate(values):
                self.vars[name] = Var(v.text, f"set by the for loop at line {head.line}")
                self._passes.append(
                    f"pass {k + 1} of {len(values)} of the for loop at line {head.line} "
                    f"({name}={v.text})"
                )
                try:
                    self.walk(body)
                finally:
                    self._passes.pop()
        finally:
            self._unrolled.discard(key)
        return True

    # -- functions ----------------------------------------------------------------------------
    def _define(self, key: tuple[str, int], body: list[list[Cmd]]) -> None:
        rows = self.text.split("\n", key[1] - self._first_line + 1)
        row = rows[key[1] - self._first_line] if 0 <= key[1] - self._first_line < len(rows) else ""
        m = _FUNCTION.match(row)
        if m is None:
            return
        name = m.group(1)
        # `function name {`: the header line is a command of its own; not part of the body
        body = [p for p in body if [w.literal for w in p[0].words] != [name, "{"]]
        self.functions[name] = (key, body, self.text)  # spans are of the text it is in

    def call_function(self, cmd: Cmd, argv: list[Word]) -> None:
        """`name ARGS…` of a function the script defined: its body read now, with $1 … $@
        the call's arguments, as bash runs it."""
        name = argv[0].literal or ""
        key, body, text = self.functions[name]
        if self._shells >= MAX_NESTING:
            raise ScriptLimitError(cmd.line, f"function calls nested deeper than {MAX_NESTING}")
        self._called.add(name)
        saved, saved_text = self.positional, self.text
        added = key not in self._unrolled
        self.positional, self.text = list(argv[1:]), text
        self._unrolled.add(key)
        self._shells += 1
        try:
            self.walk(body)
        finally:
            self._shells -= 1
            self.positional, self.text = saved, saved_text
            if added:
                self._unrolled.discard(key)

    def uncalled_functions(self) -> None:
        """No verl command ran: a function the import never saw called (a call through a
        variable, say) is read where it was defined, and said so."""
        for name, (key, body, text) in list(self.functions.items()):
            if self.command_line is not None:
                return
            if name in self._called:
                continue
            before, saved = len(self.unmapped), self.text
            self._unrolled.add(key)
            self.text = text
            try:
                self.walk(body)
            finally:
                self._unrolled.discard(key)
                self.text = saved
            if self.command_line is not None or len(self.unmapped) > before:
                self.skip(
                    key[1],
                    f"{name}()",
                    "a function the import never saw called: read as written",
                )

    # -- text run as commands -----------------------------------------------------------------
    def run_text(self, text: str, line: int, what: str) -> None:
        """`eval`/`bash -c` STRING: a script of its own, read with the same variables."""
        if self._shells >= MAX_NESTING:
            raise ScriptLimitError(line, f"{what} nested deeper than {MAX_NESTING}")
        self._spend_text(len(text), line)
        saved = self.text
        self.text = text
        self._shells += 1
        try:
            self.walk_text(text, line)
        finally:
            self.text = saved
            self._shells -= 1

    def _spend_text(self, size: int, line: int) -> None:
        self._run_chars += size
        if self._run_chars > MAX_RUN_TEXT:
            raise ScriptLimitError(
                line,
                f"eval, bash -c and sourced files run more than {MAX_RUN_TEXT:,} characters "
                "as commands",
            )

    def eval_command(self, cmd: Cmd, argv: list[Word]) -> None:
        """`eval ARGS…`: bash joins its arguments with spaces and runs the result."""
        text = " ".join(self.expand(w, record=False).text for w in argv[1:])
        if not text.strip():
            return
        self.run_text(text, cmd.line, "`eval`")

    def source_command(self, cmd: Cmd, argv: list[Word]) -> None:
        """`source FILE` / `. FILE`: its variables and exports read from the file (beside the
        script, or here); when it cannot be read, what it sets is unknown until the script
        runs, and said so."""
        label = self._src(cmd.start, cmd.end)
        if len(argv) < 2:
            self.skip(cmd.line, label, "source without a file: nothing read")
            return
        target = self.expand(argv[1], record=False)
        if target.unresolved:
            self._unread(cmd.line, target.text, "its path is known only when the script runs")
            return
        path = self._source_path(target.text)
        if path is None:
            self._unread(cmd.line, target.text, "no such file beside the script or here")
            return
        real = os.path.realpath(path)
        if real in self._sourcing:
            self.skip(cmd.line, label, "sources a file it is reading already (a loop): not again")
            return
        if len(self._sourcing) >= MAX_NESTING or self._sourced_files >= MAX_SOURCED_FILES:
            self._unread(cmd.line, target.text, "too many sourced files")
            return
        try:
            text = read_text(path)
        except ConfigError as exc:
            self._unread(cmd.line, target.text, str(exc))
            return
        self._sourced_files += 1
        self._spend_text(len(text), cmd.line)
        self._read_sourced(cmd, path, real, text, label)

    def _read_sourced(self, cmd: Cmd, path: Path, real: str, text: str, label: str) -> None:
        saved = self.text, self.line
        self._sourcing.append(real)
        self.text = text
        self._quiet += 1
        try:
            self.walk_text(text, 1)
        except ScriptLimitError as exc:
            if exc.source == "<script>":
                exc.source = str(path)
            raise
        finally:
            self._quiet -= 1
            self.text, self.line = saved
            self._sourcing.pop()
        if not self._quiet:
            self.mapped.append(Mapped(cmd.line, label, f"read {path}: its variables and exports"))

    def _source_path(self, name: str) -> Path | None:
        p = Path(name).expanduser()
        if p.is_absolute():
            return p if os.path.lexists(p) else None
        bases = [Path(s).parent for s in (*self._sourcing[-1:], self.source) if s[:1] != "<"]
        if self.cwd:
            bases.append(Path(self.cwd))
        for base in bases:
            if os.path.lexists(base / p):
                return base / p
        return None

    def _unread(self, line: int, name: str, why: str) -> None:
        self.unread_sources.append(f"{name} (sourced at line {line}, not read: {why})")
        self.skip(
            line,
            f"source {name}",
            f"not read ({why}): what it sets is unknown until the script runs",
        )


_FUNCTION = re.compile(r"\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_:.-]*)\s*(?:\(\s*\))?")


def _alone(p: Piece, w: Word) -> Word:
    """One piece of a word as a word of its own (expanded apart from the rest)."""
    return Word([p], p.text, w.line, w.start, w.end)


def _body_end(pipes: list[list[Cmd]], start: int, key: tuple[str, int]) -> int:
    """Where the compound `key` (keyword, line) ends: the first pipeline from `start` not
    inside it."""
    end = start
    while end < len(pipes) and key in pipes[end][0].enclosing:
        end += 1
    return end


def _for_loop(cmd: Cmd) -> tuple[str, list[Word] | None] | None:
    """(NAME, WORDS) of a `for NAME in WORDS` header, (NAME, None) of `for NAME` (over the
    arguments); None for any other command."""
    w = cmd.words
    if len(w) >= 2 and w[0].literal == "for" and (len(w) == 2 or w[2].literal == "in"):
        name = w[1].literal or ""
        if name.isidentifier():
            return name, list(w[3:]) if len(w) > 2 else None
    return None
