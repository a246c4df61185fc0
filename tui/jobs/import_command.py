"""The verl command inside a launch script, and the `ray job submit` around it: which command
is verl's (`python -m verl.trainer.main_ppo`, `…/verl/trainer/main_ppo.py`, `$PYTHON -m …`, or
one wrapped in `bash -c STRING`), and how its parts map onto a profile: the interpreter,
`ray job submit` options (--runtime-env-json, --working-dir), launcher prefixes (env, nohup),
--config-name/--config-path and every Hydra override. The script walk around it (variables,
exports, other commands) is tui/jobs/importer.py, which subclasses CommandReader.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tui.jobs.hydra_values import NOT_A_VALUE as _REFUSED
from tui.jobs.hydra_values import parse_value as _hydra_value
from tui.jobs.import_entry import EntryMatch, find_entry, shell_c_index
from tui.jobs.profiles import Profile, RuntimeEnv
from tui.jobs.shell_expand import Expander
from tui.jobs.shell_lexer import Piece, Unmapped, Word
from tui.jobs.shell_parse import COMPOUND_NAMES, Cmd
from tui.jobs.verl_entries import MAIN_PPO, Entry, verl_entries

VERL_MODULE = MAIN_PPO

ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
OVERRIDE = re.compile(r"(~|\+\+|\+)?([A-Za-z_][\w.\-@/]*)(?:=(.*))?", re.S)
_CONFIG_FLAGS = {"--config-path", "-cp", "--config-name", "-cn"}
MEGATRON_ALIAS = "ppo_megatron_trainer"
_HYDRA_VALUE_FLAGS = {
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--package",
    "-p",
    "--cfg",
    "-c",
    "--info",
    "-i",
    "--experimental-rerun",
}
_HYDRA_BARE_FLAGS = {
    "--multirun",
    "-m",
    "--resolve",
    "--run",
    "-r",
    "--help",
    "-h",
    "--hydra-help",
    "--version",
    "--shell-completion",
    "-sc",
}
_RAY_SUBMIT_VALUE_OPTS = {
    "--address",
    "--runtime-env-json",
    "--runtime-env",
    "--working-dir",
    "--submission-id",
    "--job-id",
    "--metadata-json",
    "--entrypoint-num-cpus",
    "--entrypoint-num-gpus",
    "--entrypoint-memory",
    "--entrypoint-resources",
    "--headers",
    "--log-style",
    "--log-color",
    "--verify",
    "--entrypoint-label-selector",
}
_RAY_SUBMIT_FLAGS = {"--no-wait", "-v", "--verbose"}
_WRAPPERS = {"nohup": "nohup", "exec": "exec", "time": "time", "command": "command"}
# GNU env's options that take the next word as their argument (`env -u NAME`, `-C DIR`).
_ENV_OPTS_WITH_ARG = frozenset(("-u", "--unset", "-C", "--chdir", "-S", "--split-string"))


@dataclass(frozen=True)
class Mapped:
    """A script line that did: where it went (``overrides``, ``env_vars``, …)."""

    line: int
    text: str
    target: str


class CommandReader(Expander):
    """What the verl command maps to: its recognition and the mapping of its words (and of the
    `ray job submit` options around it) into overrides, env_vars, runtime_env, python and the
    config name/path. The script walk (tui/jobs/importer.py) decides which command to read."""

    def __init__(self, text: str, source: str, cwd: str | None = None) -> None:
        super().__init__(text, cwd)
        self.script_path = None if source.startswith("<") else source
        self.source = source  # the script's path (or <stdin>): relative config paths
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
        self.entries = verl_entries()
        self.refused: list[Unmapped] = []  # arguments main_ppo refuses: the script fails
        self.entry: Entry | None = None  # the verl entry point the command runs

    # -- recognition --------------------------------------------------------------------------
    def find_entry(self, words: list[Word]) -> EntryMatch | None:
        """The verl entry point the (expanded) argv runs, if any."""
        return find_entry(words, self.entries, self._python_var)

    def shell_c(self, words: list[Word]) -> int | None:
        """Index of STRING in `[ray job submit … --] bash|sh -c STRING` when STRING runs a verl
        entry point (Ray runs an entrypoint through a shell, so scripts wrap `cd …; python …`)."""
        k = shell_c_index(words)
        if k is None:
            return None
        text = self.expand(words[k], record=False).text
        if not any(m in text or e.file in text for m, e in self.entries.items()):
            return None
        return k

    def _python_var(self, w: Word) -> bool:
        """`$PYTHON -m …` with PYTHON from the environment: a variable named like one."""
        ps = [p for p in w.pieces if p.kind != "lit" or p.text]
        return len(ps) == 1 and ps[0].kind == "var" and "PY" in (ps[0].name or "").upper()

    # -- the verl command ---------------------------------------------------------------------
    def _verl(self, cmd: Cmd, assigns: list[Word], words: list[Word]) -> bool:
        """Map the command whose expanded argv is `words`; False when it runs no verl entry."""
        found = self.find_entry(words)
        if found is None:
            return False
        k, args_at = found.start, found.args_at
        self.entry = found.entry
        self.command_line = cmd.line
        prefix = words[:k]
        for w in assigns:
            self._prefix_env(cmd, w)
        if prefix and [w.literal for w in prefix[:3]] == ["ray", "job", "submit"]:
            prefix = self._ray_submit(cmd, prefix[3:])
        self._wrappers(cmd, prefix)
        self._interpreter(cmd, words, k, args_at, found.interpreter)
        args = words[args_at:]
        j = 0
        while j < len(args):
            w = args[j]
            flag = "" if _script_args(w) else self.expand(w, record=False).text
            if flag in _CONFIG_FLAGS and j + 1 < len(args):  # `--config-name NAME`
                self._config_flag(flag, args[j + 1])
                j += 2
                continue
            name, eq, _ = flag.partition("=")
            if eq and name in _CONFIG_FLAGS:
                self._config_flag(
                    name,
                    strip_prefix(w, len(name) + 1)
                    if w.unquoted_prefix.startswith(name + "=")
                    else w,
                )
                j += 1
                continue
            self._argument(w)
            j += 1
        self._finish_config()
        for r in cmd.redirs:
            self.skip(
                r.line,
                self._src(r.start, r.end),
                "redirection: dropped (Ray keeps the job's log; `verl-tui logs` shows it)",
            )
        if cmd.sep == "&":
            self.skip(
                cmd.end_line,
                "&",
                "runs in the background: dropped (a Ray job is detached from this terminal anyway)",
            )
        if cmd.enclosing:
            kw, line = cmd.enclosing[-1]
            self.skip(
                cmd.line,
                self._src(words[0].start, words[min(len(words) - 1, args_at - 1)].end),
                f"inside the {COMPOUND_NAMES.get(kw, kw)} at line {line}: imported as a single run",
            )
        for n in cmd.notes:
            self.skip(n.line, n.text, n.reason)
        return True

    def _prefix_env(self, cmd: Cmd, w: Word) -> None:
        m = ASSIGN.match(w.unquoted_prefix)
        assert m is not None
        name = m.group(1)
        exp = self.expand(strip_prefix(w, m.end()))
        self._put_env(name, exp.text, w.line, w.raw)

    def _ray_submit(self, cmd: Cmd, opts: list[Word]) -> list[Word]:
        """Read `ray job submit` options; return any words between them and the interpreter."""
        j = 0
        while j < len(opts):
            w = opts[j]
            exp = self.expand(w)
            a = exp.text
            if a == "--":
                return opts[j + 1 :]
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
            self.skip(
                line,
                text,
                "the cluster's address, not part of a profile: verl-tui "
                "reaches the cluster through hosts.yaml",
            )
        elif name == "--runtime-env":
            self.skip(
                line,
                text,
                "a runtime env file is not read: copy its env_vars, "
                "working_dir and excludes into the profile",
            )
        elif name in ("--submission-id", "--job-id"):
            self.skip(line, text, "verl-tui names each submission itself")
        else:
            self.skip(line, text, "ray job submit option: not part of a profile")

    def _runtime_env_json(self, val: str, line: int, text: str) -> None:
        try:
            env = json.loads(val)
        except json.JSONDecodeError as exc:
            self.skip(line, text, f"--runtime-env-json is not valid JSON ({exc.msg}): not imported")
            return
        if not isinstance(env, dict):
            self.skip(line, text, "--runtime-env-json is not a JSON object: not imported")
            return
        for key, value in env.items():
            if key == "env_vars" and isinstance(value, dict):
                for k, v in value.items():
                    self._put_env(
                        str(k),
                        v if isinstance(v, str) else json.dumps(v),
                        line,
                        f"env_vars: {k}={v}",
                    )
            elif key == "working_dir" and isinstance(value, str):
                self._put_working_dir(value, line, f"working_dir: {value}")
            elif key == "excludes" and isinstance(value, list):
                self.excludes = [str(x) for x in value]
                self.mapped.append(
                    Mapped(line, f"excludes={self.excludes}", "runtime_env.excludes")
                )
            else:
                self.skip(
                    line,
                    f"{key}: {json.dumps(value)}",
                    f"runtime_env key {key!r} is not part of a profile",
                )

    def _put_working_dir(self, value: str, line: int, text: str) -> None:
        problem = _rejected(lambda: RuntimeEnv(working_dir=value))
        if problem:
            self.skip(line, text, f"not accepted as working_dir: {problem}")
            return
        self.working_dir = value
        self.mapped.append(Mapped(line, text, "runtime_env.working_dir"))

    def _put_env(self, name: str, value: str, line: int, text: str) -> None:
        """One env var into runtime_env.env_vars, if a profile accepts it."""
        if name == "RAY_ADDRESS":
            self.skip(
                line,
                text,
                "RAY_ADDRESS is the cluster's address, not the job's: "
                "verl-tui reaches the cluster through hosts.yaml",
            )
            return
        problem = _rejected(lambda: RuntimeEnv(env_vars={name: value}))
        if problem:
            self.skip(line, text, f"not accepted in env_vars: {problem}")
            return
        self.env[name] = value
        self.env_lines[name] = line
        self.mapped.append(Mapped(line, f"{name}={value}", "runtime_env.env_vars"))

    def _wrappers(self, cmd: Cmd, prefix: list[Word]) -> None:
        j = 0
        while j < len(prefix):
            w = prefix[j]
            lit = w.literal
            if lit == "env":
                j += 1
                while j < len(prefix) and (
                    ASSIGN.match(prefix[j].unquoted_prefix)
                    or (prefix[j].literal or "").startswith("-")
                ):
                    opt = prefix[j].literal or ""
                    if ASSIGN.match(prefix[j].unquoted_prefix):
                        self._prefix_env(cmd, prefix[j])
                    elif opt in _ENV_OPTS_WITH_ARG and j + 1 < len(prefix):
                        # `env -u NAME X=1 cmd`: NAME is the option's, not a command
                        unset = prefix[j + 1].literal if opt in ("-u", "--unset") else None
                        self.skip(
                            prefix[j].line,
                            self._src(prefix[j].start, prefix[j + 1].end),
                            self._env_option(unset),
                        )
                        j += 1
                    else:
                        unset = opt[8:] if opt.startswith("--unset=") else None
                        self.skip(prefix[j].line, prefix[j].raw, self._env_option(unset))
                    j += 1
                    if opt == "--":
                        break
                continue
            if ASSIGN.match(w.unquoted_prefix):
                self._prefix_env(cmd, w)  # `ray job submit -- X=1 python3 …`: Ray uses a shell
                j += 1
                continue
            rest = self._src(w.start, prefix[-1].end)
            if lit in _WRAPPERS:
                self.skip(w.line, lit, f"{lit}: dropped (not needed for a Ray job)")
                j += 1
                continue
            # `srun … env X=1 python3 -m …`: the launcher goes, the environment it hands the
            # command is still the job's (read from the last `env` of the prefix on).
            env_at = max(
                (e for e in range(j + 1, len(prefix)) if prefix[e].literal == "env"), default=0
            )
            if env_at:
                rest = self._src(w.start, prefix[env_at - 1].end)
            self.skip(
                w.line,
                rest,
                "launcher prefix: dropped (verl-tui runs the job through Ray on its hosts)",
            )
            if not env_at:
                return
            j = env_at

    def _env_option(self, unset: str | None) -> str:
        """What an env option does to the job (the import report's words): `-u NAME` takes an
        exported NAME out of its environment, as env does; the others are not imported."""
        if unset and self.env.pop(unset, None) is not None:
            self.env_lines.pop(unset, None)
            return f"env option: {unset} is not in the job's environment"
        return "env option: not imported"

    def _interpreter(
        self, cmd: Cmd, words: list[Word], k: int, args_at: int, is_python: bool = True
    ) -> None:
        w = words[k]
        if not is_python:  # `torchrun … -m MODULE`: the launcher runs the module itself
            self.skip(
                w.line,
                self._src(w.start, words[args_at - 1].end),
                "launcher: dropped (verl-tui runs the job through Ray on its hosts)",
            )
            return
        exp = self.expand(w)
        if exp.unresolved:
            self.skip(
                w.line,
                w.raw,
                "interpreter not resolved: the profile uses the hosts' python (hosts.yaml)",
            )
        elif exp.text.startswith("/"):
            problem = _rejected(lambda: Profile(name="x", python=exp.text))
            if problem:
                self.skip(w.line, w.raw, f"interpreter not accepted: {problem}")
            else:
                self.python = exp.text
                self.mapped.append(Mapped(w.line, exp.text, "python"))
        module = self.entry.module if self.entry is not None else VERL_MODULE
        for flag in words[k + 1 : args_at]:
            f = flag.literal or flag.raw
            if f in ("-m", "--module", module, "-m" + module) or f.endswith(".py"):
                continue
            if f == "-u" or (f.startswith("-") and not f.startswith("--") and set(f[1:]) <= {"u"}):
                # -u is unbuffered output; PYTHONUNBUFFERED=1 is the same for every process.
                self.env.setdefault("PYTHONUNBUFFERED", "1")
                self.env_lines.setdefault("PYTHONUNBUFFERED", flag.line)
                self.mapped.append(
                    Mapped(flag.line, f"python {f}", "runtime_env.env_vars PYTHONUNBUFFERED=1")
                )
                continue
            self.skip(
                flag.line,
                f,
                f"python option: not kept (the profile runs `python -m {module}`)",
            )

    def argv(self, words: list[Word]) -> list[Word]:
        """The argv bash makes of a command's words (Expander.fields), noting each array
        spread into it (`"${ARGS[@]}"`: N arguments from the array ARGS)."""
        out: list[Word] = []
        for w in words:
            before = len(out)
            if self.positional is None and _script_args(w):
                out.append(w)  # kept as written: _argument says what it passes through
                continue
            out.extend(self.fields([w]))
            ps = [p for p in w.pieces if p.kind != "lit" or p.text]
            if len(ps) == 1 and ps[0].op == "index" and (ps[0].arg or "").strip() in ("@", "*"):
                var = self.vars.get(ps[0].name or "")
                if var is not None and var.items is not None:
                    self.mapped.append(
                        Mapped(
                            w.line,
                            w.raw,
                            f"{len(out) - before} arguments from the array {ps[0].name}",
                        )
                    )
        return out

    def _config_flag(self, flag: str, value_word: Word) -> None:
        exp = self.expand(value_word)
        which = "config_name" if flag in ("--config-name", "-cn") else "config_path"
        value = exp.text
        if which == "config_name":
            value = value.removesuffix(".yaml")
        problem = _rejected(lambda: Profile.model_validate({"name": "x", which: value}))
        if problem:
            self.skip(
                value_word.line,
                f"{flag}={exp.text}",
                f"{which} not imported: {problem}"
                + (" (set it in the profile)" if exp.unresolved else ""),
            )
            return
        setattr(self, which, value)
        self.config_lines[which] = value_word.line
        self.mapped.append(Mapped(value_word.line, f"{flag}={exp.text}", which))

    def _finish_config(self) -> None:
        """Hydra resolves a relative --config-path against verl/trainer (main_ppo.py's folder),
        so `config` is verl's own; ppo_megatron_trainer is verl 0.9.1's deprecated alias."""
        self._entry_config()
        main = self.entry is None or self.entry.module == MAIN_PPO  # else: the entry's own
        path = self.config_path
        if (
            main
            and path is not None
            and not path.startswith("/")
            and "$" not in path
            and os.path.normpath(path) == "config"
        ):
            self.config_path = path = None
        if path is not None and self._from_pwd and not Path(path).is_dir():
            found = _beside_script(path, self.cwd, self.source)
            if found is not None:
                self._assume(
                    self.config_lines.get("config_path", 0),
                    path,
                    found,
                    "the script's project root is the folder holding it: $(pwd) "
                    "taken as that folder",
                )
                self.config_path = path = found
        if not main:
            return
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
            self.mapped.append(
                Mapped(
                    line,
                    f"--config-name={MEGATRON_ALIAS}",
                    "overrides model_engine=megatron (verl 0.9.1 deprecates "
                    "ppo_megatron_trainer for ppo_trainer with "
                    "model_engine=megatron)",
                )
            )

    def _entry_config(self) -> None:
        """An entry other than main_ppo composes its own config (its @hydra.main's config_path,
        relative to its module's folder, and config_name): the profile records the entry point
        and keeps only the config the script set (the cluster's verl has the entry's own)."""
        entry = self.entry
        if entry is None or entry.module == MAIN_PPO or entry.root is None:
            return
        path, own_dir = self.config_path, entry.config_dir
        if path is not None and "$" not in path and Path(entry.resolve(path)) == own_dir:
            self.config_path = path = None  # the entry's own folder, however written
        if path is None and self.config_name == entry.config_name:
            self.config_name = None
        own = f"its own config ({entry.config_name})"
        if self.config_name or self.config_path:
            own = f"config {self.config_name or entry.config_name}" + (
                f" in {self.config_path}" if self.config_path else ""
            )
        self.mapped.append(
            Mapped(self.command_line or 0, f"-m {entry.module}", f"entrypoint, with {own}")
        )

    def _refuse(self, w: Word, arg: str) -> None:
        """An argument main_ppo itself refuses (Hydra takes only key=value overrides and its
        own options): the script fails as written. Listed apart, and not imported."""
        shown = w.raw if arg == w.raw else f"{w.raw} (bash passes {arg!r})"
        why = (
            f"{self.entry.module if self.entry else VERL_MODULE} would refuse this argument "
            "(not a Hydra key=value override): the script fails as written"
        )
        self.refused.append(Unmapped(w.line, shown, why))
        self.skip(w.line, shown, why)

    def _argument(self, w: Word) -> None:
        if _script_args(w):
            self.skip(
                w.line,
                w.raw,
                "passes the script's own arguments through: overrides "
                "given when it runs are not in the profile",
            )
            return
        exp = self.expand(w)
        a = exp.text
        flag = a.partition("=")[0]
        if flag in _HYDRA_VALUE_FLAGS or flag in _HYDRA_BARE_FLAGS:
            self.skip(
                w.line,
                w.raw,
                f"Hydra option {flag}: not part of a profile (profiles "
                "compose verl's ppo_trainer config)",
            )
            return
        m = OVERRIDE.fullmatch(a)
        if m is None or a.startswith("-") or (m.group(3) is None and m.group(1) != "~"):
            if exp.unresolved:
                self.skip(
                    w.line,
                    w.raw,
                    "known only when the script runs (it may hold overrides): not imported",
                )
            else:
                self._refuse(w, a)
            return
        prefix, key, value = m.group(1) or "", m.group(2), m.group(3)
        if exp.split:
            self.skip(
                w.line,
                w.raw,
                "unquoted variable holding spaces: bash would split this "
                "into several arguments; imported as one value",
            )
        parsed: Any = None
        if value is not None:
            parsed, problem = _hydra_value(value, shell_text=bool(exp.unresolved))
            if problem and (parsed is _REFUSED or "would refuse" in problem):
                # main_ppo fails on it as written: listed with the refused arguments too
                self.refused.append(Unmapped(w.line, w.raw, problem))
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
                self.skip(
                    self.override_lines[other],
                    f"{other}=…",
                    f"set again at line {w.line}: the later value is imported",
                )
                del self.overrides[other]
        self.overrides[full] = parsed
        self.override_lines[full] = w.line
        self.mapped.append(Mapped(w.line, a, "overrides"))


def strip_prefix(w: Word, n: int) -> Word:
    """The word without its first n characters of unquoted text (the `NAME=` of an
    assignment)."""
    first = w.pieces[0]
    rest = first.text[n:]
    pieces = ([Piece("lit", rest)] if rest else []) + w.pieces[1:]
    return Word(pieces, w.raw[n:], w.line, w.start + n, w.end)


def _script_args(w: Word) -> bool:
    """`"$@"` / `$*` alone: the arguments the script itself was given."""
    return len(w.pieces) == 1 and w.pieces[0].kind == "special" and w.pieces[0].name in ("@", "*")


def _rejected(build: Any) -> str | None:
    """None when the profile model accepts what `build` makes, else its first complaint."""
    try:
        build()
    except ValidationError as exc:
        err = exc.errors()[0]
        return str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return None


def _beside_script(path: str, cwd: str | None, source: str) -> str | None:
    """`$(pwd)/examples/x/config` with cwd elsewhere: the same tail under a folder holding the
    script (verl's examples run from the repository root that holds them)."""
    if not cwd or source.startswith("<") or not path.startswith(cwd.rstrip("/") + "/"):
        return None
    tail = path[len(cwd.rstrip("/")) + 1 :]
    for folder in Path(source).resolve().parents:
        if (folder / tail).is_dir():
            return str(folder / tail)
    return None
