"""The CLI registry (tui/commands/__init__.py): every registered command's --help, the top-level
list, unknown words, the cockpit route for files, and that --help stays light."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.cli import build_parser, route
from tui.commands import COMMANDS, Entry, Group, Node, parse

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("textual", "asyncssh", "hydra", "omegaconf", "pydantic", "ray", "verl", "torch")


def _walk(
    registry: dict[str, Node], names: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Node]]:
    out = []
    for name, node in registry.items():
        out.append(((*names, name), node))
        if isinstance(node, Group):
            out += _walk(dict(node.commands), (*names, name))
    return out


ALL = _walk(COMMANDS)
ENTRIES = [(names, node) for names, node in ALL if isinstance(node, Entry)]


def cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # A process of its own, forked from the warm interpreter (harness/cli.py).
    return run_cli(list(argv), timeout=60, cwd=cwd)


def _help_of(words: list[str]) -> str:
    """What `verl-tui WORDS --help` prints (parsed in this process), asserting exit 0."""
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as done:
        parse([*words, "--help"])
    assert done.value.code == 0, words
    return out.getvalue()


def test_the_registry_holds_the_commands_and_profile_holds_its_own():
    assert set(COMMANDS) >= {
        "gpus",
        "check",
        "up",
        "down",
        "status",
        "tunnel",
        "submit",
        "jobs",
        "stop",
        "logs",
        "debug",
        "ckpt",
        "explain",
        "profile",
    }
    profile = COMMANDS["profile"]
    assert isinstance(profile, Group)
    assert set(profile.commands) >= {"check", "list", "import", "export"}
    for names, node in ALL:
        assert node.summary and "\n" not in node.summary and len(node.summary) <= 80, names


@pytest.mark.parametrize("names,entry", ENTRIES, ids=[" ".join(n) for n, _ in ENTRIES])
def test_every_command_help_exits_0_and_every_argument_has_help(names, entry):
    text = _help_of(list(names))
    assert text.startswith("usage: verl-tui " + " ".join(names)), text[:200]
    from tui.commands import build_parser as command_parser

    parser = command_parser(names, entry)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        shown = action.option_strings[-1] if action.option_strings else action.metavar
        assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, (
            f"{' '.join(names)}: {shown} has no help text"
        )
        assert shown in text, shown
    # A usage line written by hand (several forms) still names every option.
    usage = parser.format_usage()
    for action in parser._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            assert any(o in usage for o in action.option_strings), (
                f"{' '.join(names)}: usage line lacks {action.option_strings[-1]}"
            )


def test_group_help_lists_its_commands_and_a_bare_group_is_bad_input():
    text = _help_of(["profile"])
    profile = COMMANDS["profile"]
    assert isinstance(profile, Group)
    for name, node in profile.commands.items():
        assert f"  {name}" in text and node.summary.split()[0] in text, name
    p = cli("profile")
    assert p.returncode == 2 and "give a command: check, list, import, export" in p.stderr


def test_top_level_help_names_every_command_with_its_line():
    p = cli("--help")
    assert p.returncode == 0, p.stderr
    flat = " ".join(p.stdout.split())
    for name, node in COMMANDS.items():
        assert f"\n  {name} " in p.stdout, name
        assert " ".join(node.summary.split()) in flat, name
    assert "HOSTS.yaml" in build_parser().format_help()  # the cockpit's own argument


# Modules whose bodies import pydantic models at the top (submission and profile models):
# their --help loads pydantic, never Textual, asyncssh, Hydra or Ray.
PYDANTIC_AT_IMPORT = {"tui.commands.jobs", "tui.commands.profile_io"}
HELP_ARGVS = [[], *([*names] for names, _ in ALL)]


@pytest.mark.parametrize("argv", HELP_ARGVS, ids=[" ".join(a) or "top" for a in HELP_ARGVS])
def test_help_imports_no_heavy_module(argv):
    # Laziness, measured without a clock: a fresh interpreter, then what got imported.
    code = (
        "import sys, json, contextlib, io\n"
        "from tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({[*argv, '--help']!r})\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    mods = json.loads(p.stdout.splitlines()[-1])
    loaded = {m.split(".")[0] for m in mods}
    heavy = set(HEAVY) - {"pydantic"}
    assert not loaded & heavy, (argv, sorted(loaded & heavy))
    node = dict(ALL).get(tuple(argv))
    module = node.target.partition(":")[0] if isinstance(node, Entry) else None
    if module not in PYDANTIC_AT_IMPORT:
        assert "pydantic" not in loaded, argv
    if not argv or isinstance(node, Group):  # a list of commands imports no command module
        assert not [m for m in mods if m.startswith("tui.commands.")], mods


def test_unknown_command_says_did_you_mean_exit_2(tmp_path: Path):
    p = cli("gpu", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr == "verl-tui: unknown command 'gpu' (did you mean 'gpus'?)\n"
    p = cli("prfile", "check", "x", cwd=tmp_path)
    assert p.returncode == 2 and "did you mean 'profile'?" in p.stderr
    p = cli("zzzzzz", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr == "verl-tui: unknown command 'zzzzzz' (see verl-tui --help)\n"
    # a group's unknown command, through the same helper
    p = cli("profile", "chek", "p.yaml", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr == "verl-tui profile: unknown command 'chek' (did you mean 'check'?)\n"
    # a hostile word is echoed as a clean, escaped line
    p = cli("\x1b]0;pwned\x07up", cwd=tmp_path)
    assert p.returncode == 2 and "\x1b" not in p.stderr and "\x07" not in p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1


def test_route_a_file_opens_the_cockpit_a_name_runs_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster").write_text("hosts: []\n")  # a hosts file without an extension
    (tmp_path / "gpus").write_text("hosts: []\n")  # a file named like a command
    assert route(["cluster"]).kind == "cockpit"
    assert route([str(tmp_path / "cluster")]).kind == "cockpit"
    assert route([]).kind == "cockpit"
    assert route(["--version"]).kind == "cockpit"
    # a missing hosts.yaml is a file the cockpit cannot read, not an unknown command
    assert route(["hosts.yaml"]).kind == "cockpit"
    assert route(["gpus"]).kind == "command"  # a registered name wins over a file
    assert route(["profile", "list"]).kind == "command"
    unknown = route(["chek"])
    assert unknown.kind == "unknown" and "did you mean 'check'?" in unknown.message


def test_missing_hosts_file_says_so(tmp_path: Path):
    p = cli("hosts.yaml", cwd=tmp_path)
    assert p.returncode == 2 and "hosts.yaml" in p.stderr and "unknown command" not in p.stderr


def test_parse_submit_keeps_the_command_after_dashdash_and_logs_intermixes():
    cmd, args = parse(
        [
            "submit",
            "h.yaml",
            "--dry-run",
            "--env",
            "A=1",
            "--",
            "python",
            "-c",
            "print(1)",
            "--json",
        ]
    )
    assert args.command == ["python", "-c", "print(1)", "--json"]
    assert args.dry_run and not args.json and args.env == ["A=1"] and args.profile is None
    assert cmd.hosts == "required" and args.hosts == Path("h.yaml")
    _, args = parse(["submit", "h.yaml", "ppo_gsm8k", "--set", "a=1"])
    assert args.command == [] and args.profile == Path("ppo_gsm8k") and args.set == ["a=1"]
    _, args = parse(["logs", "h.yaml", "--node", "n1", "raylet.out", "-f"])
    assert (args.node, args.job, args.follow) == (["n1"], "raylet.out", True)
    cmd, args = parse(["profile", "check", "p.yaml", "--hosts", "h.yaml"])
    assert cmd.hosts is None and args.hosts == Path("h.yaml")  # loaded by the command itself


@pytest.mark.parametrize(
    "argv,expect",
    [
        (["submit"], "the following arguments are required: HOSTS.yaml"),
        (["gpus", "--interval", "0"], "out of range"),
        (["profile", "--json"], "unrecognized arguments: --json"),
        (["profile", "export", "p.yaml", "--format", "x"], "invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(argv, expect):
    err = io.StringIO()
    from contextlib import redirect_stderr

    with redirect_stderr(err), pytest.raises(SystemExit) as done:
        parse(argv)
    assert done.value.code == 2
    assert expect in err.getvalue() and err.getvalue().count("\n") == 1, err.getvalue()
