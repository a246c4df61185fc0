"""`verl-tui` command line: the cockpit by default, headless commands for scripts.

The commands live in tui/commands (one registry, `tui.commands.COMMANDS`); this module only
routes the first word. Heavy modules (Textual, asyncssh, pydantic, Hydra) are imported only by
the command that needs them: `verl-tui --help` imports none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tui import __version__
from tui.commands import (
    COMMANDS,
    EXIT_BAD_INPUT,
    PROG,
    Parser,
    commands_text,
    hosts_argument,
    unknown_message,
)


def build_parser() -> argparse.ArgumentParser:
    """The top level: the cockpit's arguments, and every command with its one line."""
    parser = Parser(
        prog=PROG,
        usage=f"{PROG} [-h] [-V] [HOSTS.yaml | --slurm JOBID [--base BASE.yaml]]\n"
        f"       {PROG} COMMAND [ARGS...]",
        description="Terminal cockpit for multi-node verl training on Ray.\n"
        "Without a command, opens the cockpit on HOSTS.yaml.",
        epilog=f"commands ({PROG} COMMAND --help for each one's arguments):\n"
        + commands_text(COMMANDS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"{PROG} {__version__}")
    hosts_argument(parser, required=False)
    parser.add_argument(
        "--slurm", metavar="JOBID", help="open on a running Slurm allocation (see `slurm`)"
    )
    parser.add_argument(
        "--base", type=Path, metavar="BASE.yaml", help="with --slurm: ssh/python/... keys"
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="show everything, change nothing: every action that would is refused "
        "(also `readonly: true` in hosts.yaml)",
    )
    return parser


@dataclass(frozen=True)
class Route:
    """What the first word of a command line asks for."""

    kind: Literal["command", "cockpit", "unknown"]
    message: str = ""  # for "unknown": the line to print


def _names_a_file(word: str) -> bool:
    # A word that exists, or reads like a path, is a hosts file: a missing hosts.yaml then
    # gets "cannot read hosts.yaml", not "unknown command".
    return Path(word).exists() or os.sep in word or "." in word.lstrip(".")


def route(argv: Sequence[str]) -> Route:
    """A registered command; else the cockpit (no word, an option, or a file); else unknown."""
    if not argv or argv[0].startswith("-"):
        return Route("cockpit")
    word = argv[0]
    if word in COMMANDS:
        return Route("command")
    if _names_a_file(word):
        return Route("cockpit")
    return Route("unknown", unknown_message(PROG, word, list(COMMANDS)))


# Young objects between two of the collector's passes while a command runs (Python's own: 700).
BATCH_GC_THRESHOLD = (50_000, 20, 10)


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """A command's run: the objects made before it (the modules it imported) frozen out of the
    collector's passes, and a pass every 50,000 young objects, not every 700. A command is a
    batch that makes many objects and keeps few cycles: at 256 simulated hosts the collector
    took ~250 ms of a `check`'s ~2.9 s of CPU in ~130 passes (mostly over asyncssh's packets;
    so, ~50 ms), and ~45 % of a 120,000-command `profile import` (15.2 → 8.5 s without it).
    Both are undone after, for a caller that goes on in the same process."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*BATCH_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def _headless(words: list[str]) -> int:
    from tui.commands import UnknownCommand, run
    from tui.errors import VerlTuiError
    from tui.interrupts import OutputLost, exit_code, output_lost, report_crash

    try:
        with few_collections():
            code = run(words)
        sys.stdout.flush()  # a full device or a closed pipe shows here at the latest
        return code
    except OutputLost as exc:  # stdout: `> /dev/full`, `| head`
        return output_lost(exc, PROG)
    except VerlTuiError as exc:  # a bad file or value (2), the state dir (1), a refusal (3)…
        from tui.commands.present import fail  # here: a group's --help imports no command module

        # A group's unknown command (`profile chek`) is said by that group.
        return fail(exc, exc.prog if isinstance(exc, UnknownCommand) else None)
    except KeyboardInterrupt:
        return exit_code() or 130
    except Exception as exc:  # last resort: a bug gets one line (traceback saved), exit 1
        print(report_crash(exc), file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    from tui.interrupts import stdout_closed

    if stdout_closed():  # `>&-`: whatever runs, its output (or the cockpit) would go nowhere
        print(
            f"{PROG}: error: standard output is closed (redirect it to a file or /dev/null)",
            file=sys.stderr,
        )
        return 1
    where = route(args_list)
    if where.kind == "unknown":
        print(where.message, file=sys.stderr)
        return EXIT_BAD_INPUT
    if where.kind == "command":
        from tui.interrupts import exit_code, guarded_output, headless_signals

        # SIGINT/SIGTERM: exit 130/143, nothing else printed (tui/interrupts.py).
        from tui.sanitize import safe_output

        # Text output is cleaned in one place: whatever a host, a file or Ray sent, nothing
        # printed acts on the terminal (tui/sanitize.py SafeWriter).
        # stdout write errors (a full device, a closed pipe) end any command in one line
        # (tui/interrupts.py guarded_output); a closed stdout refuses to run at all.
        with guarded_output(), headless_signals(), safe_output():
            code = _headless(args_list)
            return exit_code() or code

    from tui.interrupts import OutputLost, guarded_output, output_lost

    parser = build_parser()
    try:
        with guarded_output():
            try:
                args = parser.parse_args(args_list)  # --help and --version end here, light
            except SystemExit:
                sys.stdout.flush()  # their text, written now: a full stdout says so below
                raise
    except OutputLost as exc:
        return output_lost(exc, PROG)

    from tui.commands import load_hosts
    from tui.commands.present import fail
    from tui.errors import VerlTuiError

    if args.base is not None and args.slurm is None:
        parser.error("--base goes with --slurm JOBID")
    if args.slurm is not None and args.hosts is not None:
        parser.error("give HOSTS.yaml or --slurm JOBID, not both")
    try:
        if args.slurm is not None:  # the allocation's inventory, written to the state dir
            from tui.commands.slurm import cockpit_hosts

            args.hosts = cockpit_hosts(args.slurm, args.base)
        inventory = load_hosts(args.hosts)
    except VerlTuiError as exc:  # a bad hosts file (2); --slurm's inventory not written (1)
        return fail(exc)
    except KeyboardInterrupt:
        return 130

    from tui.app import VerlTuiApp

    VerlTuiApp(inventory, read_only=args.read_only or inventory.readonly).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
