"""Turn a real-world verl launch script into a profile, without running any of it.

Scripts in the wild run `python3 -m verl.trainer.main_ppo key=value …` directly or behind
`ray job submit … --`, with continuations, comments, exports, env prefixes, `$VAR`s, `$@` and
`| tee`. A small shell lexer (not `shlex`: it loses line numbers and treats `$` as text) reads
the script into commands with their lines; variables are resolved only from plain literal
assignments earlier in the script. Everything else is reported, never guessed: an unresolved
reference keeps its literal text in the value, and every line that does not map is listed
with its line number and a reason.

The shell is read in three steps, one module each: shell_lexer.py (tokens with lines and
spans), shell_parse.py (simple commands), shell_expand.py (variables and expansion).
import_command.py recognises the verl command (and `ray job submit` around it) and maps its
words; this module walks the script's commands (variables, exports, the rest reported) and
builds the profile. Its public names (import_script, ImportResult, Unmapped, Mapped, Assumed,
ScriptLimitError, read_hydra_value, VERL_MODULE) stay importable from here.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

# Hydra values are read in one place; read_hydra_value stays importable from here.
from tui.jobs.hydra_values import read_value as read_hydra_value  # noqa: F401

# The verl command's recognition and mapping; Mapped, VERL_MODULE, MEGATRON_ALIAS stay
# importable from here.
from tui.jobs.import_command import (  # noqa: F401
    ASSIGN,
    MEGATRON_ALIAS,
    OVERRIDE,
    VERL_MODULE,
    Mapped,
    strip_prefix,
)
from tui.jobs.import_entry import PYTHON_NAME, command_name
from tui.jobs.import_flow import FlowReader
from tui.jobs.profiles import DEFAULT_ENTRYPOINT, Profile, RuntimeEnv
from tui.jobs.shell_expand import Assumed, Expanded, Var, check_items, check_size
from tui.jobs.shell_lexer import ScriptLimitError, Unmapped, Word
from tui.jobs.shell_parse import CLOSERS, COMPOUND_NAMES, OPENERS, Cmd

# --------------------------------------------------------------------------------------------
# Results


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
    # Arguments the verl command refuses as bash passes them (the script fails as written).
    refused: list[Unmapped] = field(default_factory=list)


_OTHER_REASONS = {
    "set": "shell option; not needed by the job",
    "shopt": "shell option; not needed by the job",
    "ulimit": "shell limit; not part of a profile",
    "cd": "changes directory: if the job needs files from it, set runtime_env.working_dir",
    "pushd": "changes directory: if the job needs files from it, set runtime_env.working_dir",
    "echo": "prints only",
    "printf": "prints only",
    "sleep": "shell control; not part of a profile",
    "wait": "shell control; not part of a profile",
    "trap": "shell control; not part of a profile",
    "exit": "shell control; not part of a profile",
    "pip": "installs packages: not part of a profile (prepare the hosts' environment)",
    "pip3": "installs packages: not part of a profile (prepare the hosts' environment)",
    "mkdir": "file operation on this machine; not part of a profile",
    "nvidia-smi": "not part of a profile",
    "wandb": "not part of a profile",
}


def _sets_arguments(args: list[Word]) -> bool:
    """Whether `set ARGS` gives the script arguments (`set -- a b`, `set a b`), not only
    options (`set -euo pipefail`: -o takes the option's name)."""
    k = 0
    while k < len(args):
        a = args[k].literal
        if a is None or a == "--" or not a.startswith(("-", "+")):
            return True
        k += 2 if a.endswith("o") else 1
    return False


MAX_SCRIPT_CHARS = 1 << 20  # as tui/config/yamlfile.read_text reads at most (1 MiB)


class _Importer(FlowReader):
    """The script → profile mapping: walks the parsed commands in bash's order (FlowReader:
    loops, eval, bash -c, source), keeps the script's variables and exports, and hands the
    verl command to CommandReader (tui/jobs/import_command.py), which maps its arguments (and
    `ray job submit` options around it)."""

    def __init__(self, text: str, source: str, cwd: str | None = None) -> None:
        super().__init__(text, source, cwd)
        self.exported: set[str] = set()

    # -- the script ---------------------------------------------------------------------------
    def run(self) -> None:
        self.walk_text(self.text, 1)
        self.uncalled_functions()
        self.unmapped.sort(key=lambda u: u.line)

    def _command(self, cmd: Cmd) -> None:
        self.line = cmd.line
        words = list(cmd.words)
        if not words:
            if cmd.redirs:
                self.skip(cmd.line, self._src(cmd.start, cmd.end), "redirection only")
            return
        assigns: list[Word] = []
        while words and ASSIGN.match(words[0].unquoted_prefix):
            assigns.append(words.pop(0))
        if not words or (cmd.array_assign and assigns):
            self._assignments(cmd, assigns)
            return
        head = words[0].literal
        if head in OPENERS or head in ("elif", "function"):
            self._compound_header(cmd, head)
            return
        if head in CLOSERS:
            return
        if head in ("export", "declare", "typeset", "readonly", "local"):
            self._export(cmd, head, words[1:])
            return
        if head == "set" and self.positional is None and _sets_arguments(words[1:]):
            self.arguments_set = True  # $1, $@, $# are no longer the none the import assumes
        if head == "unset":
            for w in words[1:]:
                name = w.literal or ""
                self.vars[name] = Var("", f"unset at line {cmd.line}")
                self.env.pop(name, None)
            return
        argv = self.argv(words)  # what bash runs: arrays spread, unquoted expansions split
        if not argv:
            self._assignments(cmd, assigns)
            return
        head = argv[0].literal
        if head in self.functions:
            self.call_function(cmd, argv)
            return
        if head == "shift" and self.positional is not None:
            n = self._known_text(argv[1]) if len(argv) > 1 else "1"
            self.positional = self.positional[int(n) :] if n and n.isdigit() else []
            return
        if head in ("source", "."):
            self.source_command(cmd, argv)
            return
        if head == "eval":
            self.eval_command(cmd, argv)
            return
        inner = self.shell_c(argv)
        if inner is not None:
            self._verl_in_shell_c(cmd, assigns, argv, inner)
            return
        if self.find_entry(argv) is not None:
            if self.command_line is not None:
                self.skip(
                    cmd.line,
                    self._src(cmd.start, cmd.end),
                    f"a second verl command: only the first (line {self.command_line}) is imported",
                )
                return
            if self._verl(cmd, assigns, argv):
                if self._passes:
                    self.skip(
                        cmd.line,
                        self._src(argv[0].start, argv[0].end),
                        f"inside a loop: {self._passes[-1]} imported",
                    )
                return
        self._other(cmd, argv)

    def _verl_in_shell_c(
        self, cmd: Cmd, assigns: list[Word], words: list[Word], inner: int
    ) -> None:
        if self.command_line is not None:
            self.skip(
                cmd.line,
                self._src(cmd.start, cmd.end),
                f"a second verl command: only the first (line {self.command_line}) is imported",
            )
            return
        for w in assigns:
            self._prefix_env(cmd, w)
        prefix = words[: inner - 2]
        if [w.literal for w in prefix[:3]] == ["ray", "job", "submit"]:
            prefix = self._ray_submit(cmd, prefix[3:])
        self._wrappers(cmd, prefix)
        self.skip(
            words[inner - 2].line,
            f"{words[inner - 2].literal} -c",
            "the shell around the command: dropped (the commands inside it are read one by one)",
        )
        # The string is a script of its own: read it with the same variables, report its lines.
        text = self.expand(words[inner], record=False).text
        self.run_text(text, words[inner].line, "`bash -c`")
        for r in cmd.redirs:
            self.skip(
                r.line,
                self._src(r.start, r.end),
                "redirection: dropped (Ray keeps the job's log; `verl-tui logs` shows it)",
            )

    def _compound_header(self, cmd: Cmd, head: str | None) -> None:
        kind = COMPOUND_NAMES.get(head or "", "conditional")
        if head in ("for", "select") and len(cmd.words) > 1 and cmd.words[1].literal:
            name = cmd.words[1].literal
            self.vars[name] = Var(
                None, f"the variable of the {head} loop at line {cmd.line}: it takes several values"
            )
        self.skip(
            cmd.line,
            self._src(cmd.start, cmd.end),
            f"{kind}: not part of a profile (a verl command inside it is imported once)",
        )

    def _other(self, cmd: Cmd, words: list[Word]) -> None:
        head = words[0].literal or words[0].raw
        text = self._src(cmd.start, cmd.end)
        lits = [w.literal for w in words]
        if any(a == "ray" and b in ("start", "stop") for a, b in itertools.pairwise(lits)):
            reason = "cluster lifecycle: verl-tui brings Ray up and down itself (`verl-tui up`)"
        elif head.startswith("-"):
            reason = (
                "starts with an option: a blank line, a comment or a missing backslash ended "
                "the command before it, and bash runs this line on its own"
            )
        elif head in _OTHER_REASONS:
            reason = _OTHER_REASONS[head]
        elif OVERRIDE.fullmatch(head) and "=" in head and "." in head.split("=")[0]:
            reason = (
                "a Hydra override outside the verl command (a comment line or a missing "
                "backslash ended the command before it): not imported"
            )
        elif PYTHON_NAME.fullmatch(command_name(head)):
            reason = "another python command: not part of a profile"
        else:
            reason = "other command: not part of a profile"
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            reason += f" (inside the {COMPOUND_NAMES.get(kw, kw)} at line {line})"
        self.skip(cmd.line, text, reason)

    # -- assignments and exports --------------------------------------------------------------
    def _assign_one(self, cmd: Cmd, w: Word) -> tuple[str, Var]:
        m = ASSIGN.match(w.unquoted_prefix)
        assert m is not None
        name, append = m.group(1), m.group(2) == "+"
        value_word = strip_prefix(w, m.end())
        rhs = w.raw[w.raw.index("=") + 1 :]
        if cmd.array_assign:
            return name, Var(None, f"an array assigned at line {cmd.line}")
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            return name, Var(
                None,
                f"assigned at line {cmd.line} inside the "
                f"{COMPOUND_NAMES.get(kw, kw)} at line {line}: which "
                "value applies is known only when the script runs",
            )
        exp = self.expand(value_word, record=False)
        if exp.unresolved:
            return name, Var(None, self._why(cmd.line, name, rhs, value_word, exp))
        value = exp.text
        if append:
            prev = self.vars.get(name)
            if prev is None or prev.value is None:
                return name, Var(None, f"appended to at line {cmd.line}")
            value = prev.value + value
            check_size(len(value), cmd.line)
        return name, Var(value, f"set at line {cmd.line}")

    @staticmethod
    def _why(line: int, name: str, rhs: str, value: Word, exp: Expanded) -> str:
        """Why an assignment is not a plain literal, in the user's terms."""
        ps = [p for p in value.pieces if p.kind != "lit" or p.text]
        if (
            len(ps) == 1
            and ps[0].kind == "var"
            and ps[0].name == name
            and ps[0].op in (":-", "-", ":=", "=")
        ):
            return (
                f"set at line {line} to {rhs}: the environment's {name} when the script "
                f"runs, else {ps[0].arg!r}"
            )
        deps = list(dict.fromkeys(exp.unresolved))
        if all(d.startswith(("$(", "`")) for d in deps):
            return f"set at line {line} to {rhs}: command output, known only when the script runs"
        return f"set at line {line} to {rhs}, which depends on {', '.join(deps)}"

    def _assignments(self, cmd: Cmd, assigns: list[Word]) -> None:
        if cmd.array_assign:
            for w, items in cmd.arrays:
                m = ASSIGN.match(w.unquoted_prefix)
                if m is None:
                    continue
                name = m.group(1)
                if cmd.enclosing:
                    kw, line = cmd.enclosing[-1]
                    self.vars[name] = Var(
                        None,
                        f"an array assigned at line {cmd.line} inside "
                        f"the {COMPOUND_NAMES.get(kw, kw)} at line "
                        f"{line}: known only when the script runs",
                    )
                    continue
                prev = self.vars.get(name)
                items = self._array_items(items, cmd.line)
                if m.group(2) == "+" and prev is not None and prev.items is not None:
                    items = [*prev.items, *items]
                self.spend_items(len(items), cmd.line)
                self.vars[name] = Var(None, f"an array assigned at line {cmd.line}", items)
            return
        for w in assigns:
            name, var = self._assign_one(cmd, w)
            self.vars[name] = var
            if name in self.exported:
                self._set_env(name, var, cmd, w)

    def _array_items(self, items: list[Word], line: int) -> list[Word]:
        """An array's elements as bash makes them when it is assigned: expanded and split
        (Expander.fields: `"${A[@]}"` spliced in, so `ARGS=("${ARGS[@]}" x)` appends; `$X`
        holding blanks split; `("$kv")` in a loop takes this pass's value). An array the
        script never set is empty (arrays do not come from the environment). What is not
        known stays a reference in its element, reported where the array is used."""
        out: list[Word] = []
        for w in items:
            ps = [p for p in w.pieces if p.kind != "lit" or p.text]
            whole = ps[0] if len(ps) == 1 and ps[0].op == "index" else None
            if (
                whole is not None
                and (whole.arg or "").strip() in ("@", "*")
                and (whole.name or "") not in self.vars
            ):
                self._assume(line, whole.text, "", "an array the script does not set: empty")
                continue
            out.extend(self.fields([w]))
            check_items(len(out), line)
        return out

    def _array(self, name: str | None) -> list[Word] | None:
        var = self.vars.get(name or "")
        return var.items if var is not None else None

    def _set_env(self, name: str, var: Var, cmd: Cmd, w: Word | None) -> None:
        if var.value is None:
            # Keep the literal text (never guess) and report the variable.
            raw = w.raw.split("=", 1)[1] if w is not None and "=" in w.raw else f"${name}"
            value = _unquote_hint(raw)
            self._unresolved(name, var.note)
        else:
            value = var.value
        self._put_env(name, value, cmd.line, self._src(cmd.start, cmd.end))

    def _export(self, cmd: Cmd, head: str | None, args: list[Word]) -> None:
        export = head == "export"
        for w in args:
            lit = w.literal
            if lit is not None and lit.startswith("-"):
                if "x" in lit:
                    export = True
                elif head == "export":
                    self.skip(
                        cmd.line,
                        self._src(cmd.start, cmd.end),
                        f"export {lit}: not part of a profile",
                    )
                    return
                continue
            if ASSIGN.match(w.unquoted_prefix):
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
            known = self.vars.get(name)
            if known is None:
                self._unresolved(name, "exported from the environment: not set in the script")
                self.skip(
                    cmd.line,
                    f"export {name}",
                    "exports a variable the script does not set: its value comes from the "
                    "environment, not added to env_vars",
                )
                continue
            self._set_env(name, known, cmd, None)


def _unquote_hint(raw: str) -> str:
    """The literal text of an unresolved assignment, without its outer quotes."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return raw


def _profile_name(source: str) -> str:
    stem = Path(source).stem if source and not source.startswith("<") else "imported"
    # Profile names: a letter or digit first, then letters, digits, '.', '_', '-'; 64 at most.
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", stem)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)[:64].rstrip("-.")
    return safe or "imported"


def import_script(text: str, *, source: str = "<script>", cwd: str | None = None) -> ImportResult:
    """Read a verl launch script into a profile; report everything that did not map. With
    `cwd`, `$(pwd)` and `$PWD` are that directory (and said so in `assumed`). A script past
    the import's bounds (nesting, expanded size, array length, integer digits: shell_lexer's
    MAX_*) raises ScriptLimitError, whose text is one line naming source:line."""
    if len(text) > MAX_SCRIPT_CHARS:  # the CLI's reader refuses such a file already
        raise ScriptLimitError(
            1,
            f"the script is {len(text):,} characters, over the {MAX_SCRIPT_CHARS:,} "
            "an import reads",
            source,
        )
    imp = _Importer(text, source, cwd)
    try:
        imp.run()
    except ScriptLimitError as exc:
        if exc.source == "<script>":  # else it names the sourced file it happened in
            exc.source = source
        raise
    except RecursionError:  # a shape no bound above foresaw: still one line, never a traceback
        raise ScriptLimitError(imp.line, "nested too deeply to read", source) from None
    profile = _make_profile(imp, source)
    return ImportResult(
        profile=profile,
        unmapped=imp.unmapped,
        unresolved_vars=list(imp.unresolved),
        mapped=imp.mapped,
        var_notes={k: v for k, v in imp.var_notes.items() if k in imp.unresolved},
        command_line=imp.command_line,
        assumed=sorted(imp.assumed, key=lambda a: a.line),
        refused=imp.refused,
    )


def _make_profile(imp: _Importer, source: str) -> Profile:
    where = Path(source).name if not source.startswith("<") else source
    desc = f"Imported from {where}" + (f" (line {imp.command_line})" if imp.command_line else "")
    return Profile(
        name=_profile_name(source),
        description=desc,
        overrides=dict(imp.overrides),
        runtime_env=RuntimeEnv(
            env_vars=dict(imp.env), working_dir=imp.working_dir, excludes=list(imp.excludes)
        ),
        python=imp.python,
        entrypoint=imp.entry.module if imp.entry is not None else DEFAULT_ENTRYPOINT,
        config_name=imp.config_name,
        config_path=imp.config_path,
    )
