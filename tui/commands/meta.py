"""`verl-tui version` and `verl-tui help [COMMAND ...]`: the words a new user tries first, the
same answers as `--version` and `--help`."""

from __future__ import annotations

import argparse

from tui import __version__
from tui.commands import PROG, Command


def _version_arguments(p: argparse.ArgumentParser) -> None:
    pass


def _show_version(_args: argparse.Namespace) -> int:
    print(f"{PROG} {__version__}")
    return 0


def _help_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "words", nargs="*", metavar="COMMAND", help="a command (or a group and its command)"
    )


def _show_help(args: argparse.Namespace) -> int:
    """The top level's --help, or the named command's (`help profile check`)."""
    if not args.words:
        from tui.cli import build_parser

        build_parser().print_help()
        return 0
    from tui.commands import parse

    parse([*args.words, "--help"])  # prints it and leaves through SystemExit(0)
    return 0


VERSION = Command(_version_arguments, _show_version, description=f"Print {PROG}'s version.")
HELP = Command(
    _help_arguments,
    _show_help,
    description=f"The list of commands ({PROG} --help), or one command's arguments "
    f"({PROG} help submit is {PROG} submit --help).",
)
