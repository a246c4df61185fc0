"""The headless commands: one registry, name → where the command lives and one line about it.

`verl-tui --help` lists the commands from here without importing a single command module (so
not Textual, asyncssh, pydantic or Hydra either); a command's module is imported only to run it
or to show its own --help. Each module declares its commands as `Command` values: a function that
adds the command's arguments (every one with help text) and a run function taking the parsed
arguments. A new command is a module (or a `Command` in one) plus one line in `COMMANDS`.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

from tui.errors import VerlTuiError

if TYPE_CHECKING:
    from tui.config.hosts import Inventory

PROG = "verl-tui"
EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """Bad arguments end like every other bad input: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class Command:
    """What a command module declares for one command."""

    arguments: Callable[[argparse.ArgumentParser], None]  # adds its arguments, each with help
    run: Callable[[argparse.Namespace], int]  # the parsed arguments → exit status
    description: str = ""  # its --help text (default: the registry's one line)
    usage: str | None = None  # only where argparse's own line cannot show the forms
    # A HOSTS.yaml positional comes first; before `run`, args.inventory holds the loaded file
    # (after the insecure-host-keys warning). "optional": left out, this machine.
    hosts: Literal["optional", "required"] | None = None
    intermixed: bool = False  # a positional may follow an option (`logs H --node N FILE`)
    dashdash_command: bool = False  # everything after `--` is args.command, not parsed


@dataclass(frozen=True)
class Entry:
    """A registered command: its `Command` as "module:ATTRIBUTE", imported only when used."""

    target: str
    summary: str  # one line for the list in --help

    def load(self) -> Command:
        module, _, attr = self.target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, Command):
            raise TypeError(f"{self.target} is not a Command")
        return command


@dataclass(frozen=True)
class Group:
    """A command made of commands (`verl-tui profile check …`): a registry of its own."""

    summary: str
    commands: Mapping[str, Entry | Group] = field(default_factory=dict)
    description: str = ""


Node = Entry | Group

PROFILE_COMMANDS: dict[str, Node] = {
    "check": Entry(
        "tui.commands.profile:CHECK",
        "validate a profile against verl's rules (and the live cluster: --hosts)",
    ),
    "list": Entry("tui.commands.profile:LIST", "the presets shipped with verl-tui, then yours"),
    "import": Entry(
        "tui.commands.profile_io:IMPORT", "read a shell script that runs main_ppo into a profile"
    ),
    "export": Entry(
        "tui.commands.profile_io:EXPORT",
        "write a profile as a ray job submit, sbatch or dstack launcher",
    ),
}

COMMANDS: dict[str, Node] = {
    "gpus": Entry(
        "tui.commands.gpus:GPUS", "every host's GPUs: utilization, memory, temperature, power"
    ),
    "check": Entry(
        "tui.commands.check:CHECK", "preflight checks that catch what makes multi-node verl hang"
    ),
    "up": Entry(
        "tui.commands.ray:UP", "start Ray: the head, then every worker; wait until all are ALIVE"
    ),
    "down": Entry("tui.commands.ray:DOWN", "stop Ray on every worker, then the head"),
    "status": Entry("tui.commands.ray:STATUS", "Ray's nodes: alive, resources, versions"),
    "tunnel": Entry(
        "tui.commands.ray:TUNNEL", "forward the head's dashboard and Jobs API here until Ctrl-C"
    ),
    "submit": Entry(
        "tui.commands.jobs:SUBMIT", "submit a verl profile, or any command, as a Ray job"
    ),
    "jobs": Entry(
        "tui.commands.jobs:JOBS", "the cluster's jobs, with their profiles from the local history"
    ),
    "stop": Entry("tui.commands.jobs:STOP", "stop a job and wait until it stopped"),
    "queue": Entry("tui.commands.queue:QUEUE", "jobs waiting for free GPUs: list, cancel, reorder"),
    "sweep": Entry(
        "tui.commands.sweep:SWEEP", "validate a grid of a profile's values, queue every run"
    ),
    "watch": Entry(
        "tui.commands.watch:WATCH", "supervise jobs headless: retry failed runs, run the queue"
    ),
    "logs": Entry("tui.commands.logs:LOGS", "a job's driver log, or a host's Ray log files"),
    "compare": Entry(
        "tui.commands.compare:COMPARE",
        "runs side by side from the run archive: summary, differing config keys, series",
    ),
    "debug": Entry(
        "tui.commands.debug:DEBUG", "workers paused for a debugger, and pdb breakpoints"
    ),
    "metrics": Entry(
        "tui.commands.metrics:METRICS",
        "a job's training metrics (verl's file logger, else its console lines)",
    ),
    "rollouts": Entry(
        "tui.commands.rollouts:ROLLOUTS",
        "a job's rollout samples from verl's dump: paged, flagged, score histogram",
    ),
    "export": Entry(
        "tui.commands.export:EXPORT",
        "serve GPU telemetry, job states and training metrics for Prometheus",
    ),
    "stack": Entry(
        "tui.commands.stack:STACK",
        "a job's stacks on every host (py-spy), grouped; Ray's view of the job",
    ),
    "ckpt": Entry(
        "tui.commands.ckpt:CKPT", "a job's checkpoints on every host; collect a step; merge it"
    ),
    "explain": Entry(
        "tui.commands.explain:EXPLAIN",
        "known failures in a saved log, each with its line and a hint",
    ),
    "slurm": Entry(
        "tui.commands.slurm:SLURM", "a running Slurm allocation as an inventory (hosts.yaml)"
    ),
    "completion": Entry(
        "tui.commands.completion:COMPLETION", "the shell completion script for bash, zsh or tcsh"
    ),
    "man": Entry("tui.commands.completion:MAN", "the manual page (roff; verl-tui man | man -l -)"),
    "help": Entry("tui.commands.meta:HELP", "the commands, or one command's arguments"),
    "version": Entry("tui.commands.meta:VERSION", "print verl-tui's version (also -V)"),
    "profile": Group(
        "hyperparameter profiles: " + ", ".join(PROFILE_COMMANDS),
        PROFILE_COMMANDS,
        "Hyperparameter profiles: check one (a file or a preset's name), list the "
        "presets and yours, import one from a shell script, export one as a "
        "launch script.",
    ),
}


class UnknownCommand(VerlTuiError, title="unknown command", kind="bad_input"):
    """A word that names no command (of the top level, or of a group)."""

    def __init__(self, prog: str, word: str, choices: Iterable[str]) -> None:
        from tui.sanitize import one_line

        self.prog, self.word, self.choices = prog, word, list(choices)
        close = difflib.get_close_matches(word, self.choices, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"see {prog} --help"
        super().__init__(f"unknown command {one_line(repr(word), 80)}", hint=hint)


def unknown_message(prog: str, word: str, choices: Sequence[str]) -> str:
    """`PROG: unknown command 'X' (did you mean …?)`, one clean line."""
    from tui.commands.present import error_line

    return error_line(UnknownCommand(prog, word, choices), prog)


def resolve(
    words: Sequence[str], registry: Mapping[str, Node] | None = None
) -> tuple[tuple[str, ...], Node, list[str]]:
    """Walk `words` down the registry: (the command's names, its node, the rest). A group
    followed by no name (or by an option) is returned as the group. UnknownCommand for a word
    that no command of a group has."""
    registry = COMMANDS if registry is None else registry
    names: list[str] = []
    node: Node | None = None
    rest = list(words)
    choices: Mapping[str, Node] = registry
    while rest and (node is None or isinstance(node, Group)):
        word = rest[0]
        if node is not None and word.startswith("-"):
            break  # the group's own --help (or a stray option: its parser says so)
        if word not in choices:
            raise UnknownCommand(prog_of(names), word, choices)
        names.append(word)
        node = choices[word]
        rest.pop(0)
        if isinstance(node, Group):
            choices = node.commands
    if node is None:
        raise UnknownCommand(PROG, "", registry)
    return tuple(names), node, rest


def prog_of(names: Sequence[str]) -> str:
    return " ".join([PROG, *names])


def commands_text(registry: Mapping[str, Node], *, width: int = 78) -> str:
    """The commands and their one line each, aligned and wrapped (for an epilog)."""
    name_w = max(len(n) for n in registry) + 2
    out = []
    for name, node in registry.items():
        wrapped = textwrap.wrap(node.summary, max(30, width - name_w - 2))
        out.append(f"  {name:<{name_w}}{wrapped[0]}")
        out += [f"  {'':<{name_w}}{more}" for more in wrapped[1:]]
    return "\n".join(out)


def _wrap(text: str, width: int = 78) -> str:
    return "\n\n".join(textwrap.fill(p, width) for p in text.split("\n\n"))


def group_parser(names: Sequence[str], group: Group) -> Parser:
    """A group's parser: only --help; the commands are listed in its epilog."""
    prog = prog_of(names)
    return Parser(
        prog=prog,
        usage=f"{prog} COMMAND [ARGS...]",
        description=_wrap(group.description or group.summary),
        epilog=f"commands ({prog} COMMAND --help for each one's arguments):\n"
        + commands_text(group.commands),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def hosts_argument(p: argparse.ArgumentParser, *, required: bool) -> None:
    if required:
        p.add_argument(
            "hosts", type=Path, metavar="HOSTS.yaml", help="the cluster's inventory file"
        )
    else:
        p.add_argument(
            "hosts",
            nargs="?",
            type=Path,
            metavar="HOSTS.yaml",
            help="inventory file (default: this machine through a local transport)",
        )


def build_parser(names: Sequence[str], entry: Entry, command: Command | None = None) -> Parser:
    """The parser of one registered command (imports its module)."""
    command = command or entry.load()
    p = Parser(
        prog=prog_of(names),
        usage=command.usage,
        description=command.description or entry.summary[:1].upper() + entry.summary[1:] + ".",
    )
    if command.hosts is not None:
        hosts_argument(p, required=command.hosts == "required")
    command.arguments(p)
    return p


def seconds(text: str) -> float:
    """An argparse type: seconds between 0.1 and 3600."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0.1 to 3600)")
    return value


def load_hosts(path: Path | None) -> Inventory:
    """hosts.yaml (None: this machine), after saying on stderr when it turns host-key checking
    off: every command that reads a hosts file says it, before anything else."""
    from tui.commands.output import insecure_warning
    from tui.config.hosts import load_inventory, local_inventory

    inventory = local_inventory() if path is None else load_inventory(path)
    warning = insecure_warning(inventory)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    return inventory


def parse(words: Sequence[str]) -> tuple[Command, argparse.Namespace]:
    """A headless command line (`words` starts with a registered name) → its command and
    arguments; nothing is loaded or run. Bad arguments and --help leave through SystemExit
    (2 / 0), as argparse does; UnknownCommand for a name no group has."""
    names, node, rest = resolve(words)
    if isinstance(node, Group):
        parser = group_parser(names, node)
        if rest:
            parser.parse_args(rest)  # --help, or an option a group does not take
        parser.error("give a command: " + ", ".join(node.commands))
    command = node.load()
    parser = build_parser(names, node, command)
    after: list[str] = []
    if command.dashdash_command and "--" in rest:  # everything after -- is the job's command
        cut = rest.index("--")
        rest, after = rest[:cut], rest[cut + 1 :]
    args = parser.parse_intermixed_args(rest) if command.intermixed else parser.parse_args(rest)
    if command.dashdash_command:
        args.command = after
    return command, args


def run(words: Sequence[str]) -> int:
    """Parse a headless command line, load its hosts file (if it takes one), run it."""
    command, args = parse(words)
    if command.hosts is not None:
        args.inventory = load_hosts(args.hosts)
    return command.run(args)
