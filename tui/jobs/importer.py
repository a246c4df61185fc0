"""Turn a real-world verl launch script into a profile, without running any of it.

Scripts in the wild run `python3 -m verl.trainer.main_ppo key=value …` directly or behind
`ray job submit … --`, with continuations, comments, exports, env prefixes, `$VAR`s, `$@` and
`| tee`. A small shell lexer (not `shlex`: it loses line numbers and treats `$` as text) reads
the script into commands with their lines; variables are resolved only from plain literal
assignments earlier in the script. Everything else is reported, never guessed: an unresolved
reference keeps its literal text in the value, and every line that does not map is listed
with its line number and a reason.

The shell is read in three steps, one module each: shell_lexer.py (tokens with lines and
spans), shell_parse.py (simple commands), shell_expand.py (variables and expansion). This
module maps the commands onto a profile; its public names (import_script, ImportResult,
Unmapped, Mapped, Assumed, read_hydra_value, VERL_MODULE) stay importable from here.
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
from tui.jobs.shell_expand import Assumed, Expanded, Expander, Var
from tui.jobs.shell_lexer import Lexer, Piece, Unmapped, Word
from tui.jobs.shell_parse import CLOSERS, COMPOUND_NAMES, OPENERS, Cmd, parse, pipelines

VERL_MODULE = "verl.trainer.main_ppo"

# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Mapped:
    """A script line that did: where it went (``overrides``, ``env_vars``, …)."""

    line: int
    text: str
    target: str


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


class _Importer(Expander):
    """The script → profile mapping: walks the parsed commands, keeps the script's variables
    and exports, and maps the verl command's arguments (and `ray job submit` options around it)
    into overrides, env_vars and runtime_env."""

    def __init__(self, text: str, source: str, cwd: str | None = None) -> None:
        super().__init__(text, cwd)
        self.source = source
        self.exported: set[str] = set()
        self.env: dict[str, str] = {}
        self.env_lines: dict[str, int] = {}
        self.overrides: dict[str, Any] = {}
        self.override_lines: dict[str, int] = {}
        self.python: str | None = None
        self.working_dir: str | None = None
        self.excludes: list[str] = []
        self.mapped: list[Mapped] = []
        self.command_line: int | None = None
        self.config_name: str | None = None
        self.config_path: str | None = None
        self.config_lines: dict[str, int] = {}

    # -- the script ---------------------------------------------------------------------------
    def run(self) -> None:
        lexer = Lexer(self.text)
        for pipe in pipelines(parse(lexer.run(), lexer.notes)):
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
        if head in OPENERS or head in ("elif", "function"):
            self._compound_header(cmd, head)
            return
        if head in CLOSERS:
            return
        if head in ("export", "declare", "typeset", "readonly", "local"):
            self._export(cmd, head, words[1:])
            return
        if head == "unset":
            for w in words[1:]:
                name = w.literal or ""
                self.vars[name] = Var("", f"unset at line {cmd.line}")
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
            lexer = Lexer(text, words[inner].line)
            for pipe in pipelines(parse(lexer.run(), lexer.notes)):
                self._pipeline(pipe)
        finally:
            self.text = saved
        for r in cmd.redirs:
            self.skip(r.line, self._src(r.start, r.end),
                      "redirection: dropped (Ray keeps the job's log; `verl-tui logs` shows it)")

    def _compound_header(self, cmd: Cmd, head: str | None) -> None:
        kind = COMPOUND_NAMES.get(head or "", "conditional")
        if head in ("for", "select") and len(cmd.words) > 1 and cmd.words[1].literal:
            name = cmd.words[1].literal
            self.vars[name] = Var(None, f"the variable of the {head} loop at line {cmd.line}: "
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
            reason += f" (inside the {COMPOUND_NAMES.get(kw, kw)} at line {line})"
        self.skip(cmd.line, text, reason)

    # -- assignments and exports --------------------------------------------------------------
    def _assign_one(self, cmd: Cmd, w: Word) -> tuple[str, Var]:
        m = _ASSIGN.match(w.unquoted_prefix)
        assert m is not None
        name, append = m.group(1), m.group(2) == "+"
        value_word = _strip_prefix(w, m.end())
        rhs = w.raw[w.raw.index("=") + 1:]
        if cmd.array_assign:
            return name, Var(None, f"an array assigned at line {cmd.line}")
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            return name, Var(None, f"assigned at line {cmd.line} inside the "
                                    f"{COMPOUND_NAMES.get(kw, kw)} at line {line}: which "
                                    "value applies is known only when the script runs")
        exp = self.expand(value_word, record=False)
        if exp.unresolved:
            return name, Var(None, self._why(cmd.line, name, rhs, value_word, exp))
        value = exp.text
        if append:
            prev = self.vars.get(name)
            if prev is None or prev.value is None:
                return name, Var(None, f"appended to at line {cmd.line}")
            value = prev.value + value
        return name, Var(value, f"set at line {cmd.line}")

    @staticmethod
    def _why(line: int, name: str, rhs: str, value: Word, exp: Expanded) -> str:
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
                    self.vars[name] = Var(None, f"an array assigned at line {cmd.line} inside "
                                                 f"the {COMPOUND_NAMES.get(kw, kw)} at line "
                                                 f"{line}: known only when the script runs")
                    continue
                prev = self.vars.get(name)
                if m.group(2) == "+" and prev is not None and prev.items is not None:
                    items = [*prev.items, *items]
                # Elements are expanded where the array is used (their lines are reported).
                self.vars[name] = Var(None, f"an array assigned at line {cmd.line}", items)
            return
        for w in assigns:
            name, var = self._assign_one(cmd, w)
            self.vars[name] = var
            if name in self.exported:
                self._set_env(name, var, cmd, w)

    def _set_env(self, name: str, var: Var, cmd: Cmd, w: Word | None) -> None:
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
                      f"inside the {COMPOUND_NAMES.get(kw, kw)} at line {line}: imported as "
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
