"""`verl-tui completion bash|zsh|tcsh` and `verl-tui man`: shell completion and the manual page,
both made from the parsers the commands themselves parse with (tui/commands/__init__.py), so
neither can list a command or flag that the CLI does not take.

`command_tree` joins the registry into one argparse tree (the top level's options, then every
command and group as a subparser, each built by `build_parser`: the parser `verl-tui CMD`
uses). shtab writes the completion script from it at run time (it is small and pure Python).
The manual page is generated from the same tree with argparse-manpage, a build-time tool: the
output is committed as tui/man/verl-tui.1, shipped in the wheel (package data, and
share/man/man1 so `man verl-tui` finds it after a pip or pipx install), and
tests/test_completion.py fails when it no longer matches the parsers. Regenerate it with
`.venv/bin/python -m tui.commands.completion`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tui import __version__
from tui.commands import (
    COMMANDS,
    PROG,
    Command,
    Group,
    Node,
    Parser,
    build_parser,
    group_parser,
)
from tui.commands.present import fail_with

SHELLS = ("bash", "zsh", "tcsh")
# A PROFILE argument is a file or a profile's name: both complete. The names (the presets and
# your own profiles) are written into the script when it is made; only plain words, since they
# are pasted into shell code.
PROFILE_OR_FILE = "_verl_tui_profile_or_file"
_PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
MAN_PAGE = Path(__file__).resolve().parents[1] / "man" / f"{PROG}.1"
# Arguments whose value is a file on this machine complete as file names (argparse knows only
# that a value is a Path, or its metavar says what it is).
_FILE_METAVARS = (".yaml", ".sh", "FILE", "PROFILE")


def _completes_files(action: argparse.Action) -> bool:
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    return action.type is Path or metavar.endswith(_FILE_METAVARS)


def _completer(action: argparse.Action) -> object:
    import shtab

    if action.metavar == "PROFILE":
        return {"bash": PROFILE_OR_FILE, "zsh": PROFILE_OR_FILE, "tcsh": "f"}
    return shtab.FILE


def profile_names() -> list[str]:
    """The presets' and your profiles' names, as `submit` and `profile check` take them."""
    from tui.jobs.profiles import list_profiles, profile_dirs

    names = {e.name for e in list_profiles(profile_dirs()) if e.profile is not None}
    return sorted(n for n in names if _PLAIN_WORD.fullmatch(n))


def _preamble(shell: str) -> str:
    words = " ".join(profile_names())
    if shell == "bash":
        return f'{PROFILE_OR_FILE}() {{\n  compgen -W "{words}" -- "$1"\n  compgen -f -- "$1"\n}}\n'
    if shell == "zsh":
        return (
            f"{PROFILE_OR_FILE}() {{\n"
            f"  _alternative 'profiles:profile:({words})' 'files:file:_files'\n"
            "}\n"
        )
    return ""


def _graft(into: argparse.ArgumentParser, source: argparse.ArgumentParser) -> None:
    """`source`'s arguments (groups and mutually exclusive groups included) onto `into`,
    through argparse's own `parents` copy; -h is `into`'s own."""
    # Every parser made here gets -h from argparse; the copy would clash with it.
    source._actions = [a for a in source._actions if not isinstance(a, argparse._HelpAction)]
    for group in source._action_groups:
        group._group_actions = [
            a for a in group._group_actions if not isinstance(a, argparse._HelpAction)
        ]
    into._add_container_actions(source)


def _add_commands(
    parent: argparse.ArgumentParser, registry: Mapping[str, Node], names: tuple[str, ...]
) -> None:

    sub = parent.add_subparsers(
        title="commands", dest="_".join(("command", *names)), metavar="COMMAND"
    )
    sub.required = True
    for name, node in registry.items():
        path = (*names, name)
        if isinstance(node, Group):
            source = group_parser(path, node)
            child = sub.add_parser(
                name, help=node.summary, prog=source.prog, description=source.description
            )
            _add_commands(child, node.commands, path)
        else:
            source = build_parser(path, node)
            child = sub.add_parser(
                name,
                help=node.summary,
                prog=source.prog,
                description=source.description,
                usage=source.usage,
            )
            _graft(child, source)
        for action in child._actions:
            if action.nargs != 0 and _completes_files(action):
                action.complete = _completer(action)  # type: ignore[attr-defined]


def command_tree() -> argparse.ArgumentParser:
    """Every command of the registry as one parser tree (imports every command module)."""
    from tui.cli import build_parser as cockpit_parser

    cockpit = cockpit_parser()
    top = Parser(prog=PROG, description=cockpit.description)
    # The cockpit's HOSTS.yaml shares the first word with the commands: the subparsers take it
    # here, so only the cockpit's options are copied (a first word that no command starts with
    # falls back to bash's own file names: `complete -o bashdefault`).
    cockpit._actions = [a for a in cockpit._actions if a.option_strings]
    for group in cockpit._action_groups:
        group._group_actions = [a for a in group._group_actions if a.option_strings]
    _graft(top, cockpit)
    _add_commands(top, COMMANDS, ())
    return top


def completion_script(shell: str) -> str:
    import shtab

    return shtab.complete(command_tree(), shell=shell, preamble=_preamble(shell))


def generate_man_page() -> str:
    """The manual page's roff source, from `command_tree` (needs argparse-manpage: a test and
    build tool, not a runtime dependency)."""
    from argparse_manpage.manpage import Manpage  # type: ignore[import-untyped]

    data = {
        "project_name": PROG,
        "version": __version__,
        "date": f"version {__version__}",
        "manual_title": f"{PROG} manual",
        "manual_section": "1",
        "description": "keyboard-driven terminal cockpit for multi-node verl training on Ray",
    }
    # argparse wraps usage lines at the terminal's width: the page must not depend on it.
    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return str(Manpage(command_tree(), _data=data))
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _completion_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "shell",
        choices=SHELLS,
        metavar="SHELL",
        help="the shell to write the completion script for: " + ", ".join(SHELLS),
    )


def _completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(args.shell))
    return 0


def _man_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--path",
        action="store_true",
        help="print where the page is installed instead of the page (man PATH shows it)",
    )


def _man(args: argparse.Namespace) -> int:
    if args.path:
        print(MAN_PAGE)
        return 0
    if os.isatty(1) and shutil.which("man"):  # a person at a terminal: the page, not roff
        return subprocess.call(["man", "-l", str(MAN_PAGE)])
    try:
        text = MAN_PAGE.read_text(encoding="utf-8")
    except OSError as exc:
        return fail_with(f"{PROG}: error", f"cannot read {MAN_PAGE}: {exc.strerror}")
    sys.stdout.write(text)
    return 0


COMPLETION = Command(
    _completion_arguments,
    _completion,
    description="Print the shell completion script for bash, zsh or tcsh, made from the same "
    "parsers as the commands. Install it with, e.g., "
    "`verl-tui completion bash > ~/.local/share/bash-completion/completions/verl-tui` "
    "(zsh: a file named _verl-tui in a folder on $fpath; tcsh: write it to a file and "
    "`source` that file from ~/.tcshrc).",
)
MAN = Command(
    _man_arguments,
    _man,
    description="Show the manual page (at a terminal, through man; otherwise its roff source: "
    "`verl-tui man | man -l -`). A pip or pipx install also puts it where `man verl-tui` "
    "finds it.",
)


if __name__ == "__main__":  # regenerate the committed manual page
    MAN_PAGE.parent.mkdir(exist_ok=True)
    MAN_PAGE.write_text(generate_man_page(), encoding="utf-8")
    print(f"wrote {MAN_PAGE}")
