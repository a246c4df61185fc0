"""Shell completion and the manual page (issue 24): both made from the parsers the commands
parse with. The bash script from the real `verl-tui completion bash` is sourced in a real bash
and its completion function is called on partial command lines, as bash does on Tab; the
committed manual page must equal what the parsers give now, and `man` must render it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.commands import COMMANDS, Entry, Group, Node, build_parser
from tui.commands.completion import (
    MAN_PAGE,
    SHELLS,
    command_tree,
    generate_man_page,
    profile_names,
)

ROOT = Path(__file__).resolve().parent.parent


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    # A process of its own, forked from the warm interpreter (harness/cli.py).
    return run_cli(list(argv), timeout=120)


def _entries(
    registry: dict[str, Node], names: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Entry]]:
    out: list[tuple[tuple[str, ...], Entry]] = []
    for name, node in registry.items():
        if isinstance(node, Group):
            out += _entries(dict(node.commands), (*names, name))
        else:
            out.append(((*names, name), node))
    return out


ENTRIES = _entries(COMMANDS)


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> Path:
    done = cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("completion") / "verl-tui.bash"
    path.write_text(done.stdout)
    return path


def complete(script: Path, words: list[str], cwd: Path | None = None) -> list[list[str]]:
    """What bash offers for each partial command line in `words` (the last word of each is
    the one being completed): the script sourced once, its function called per line with
    COMP_WORDS / COMP_CWORD set as bash sets them on Tab."""
    calls = []
    for line in words:
        quoted = " ".join(shlex_quote(w) for w in line)
        calls.append(
            f"COMP_WORDS=({quoted}); COMP_CWORD={len(line) - 1}; COMPREPLY=(); "
            '_shtab_verl_tui; printf "%s\\n" "${COMPREPLY[@]}"; echo "<<end>>"'
        )
    program = f"source {shlex_quote(str(script))}\n" + "\n".join(calls)
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    blocks = done.stdout.split("<<end>>\n")[:-1]
    assert len(blocks) == len(words), done.stdout
    return [[w for w in block.splitlines() if w] for block in blocks]


def shlex_quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def test_bash_completes_commands_flags_choices_and_files(bash_script, tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts: [{name: a}]\n")
    (tmp_path / "hosts-b.yaml").write_text("hosts: [{name: b}]\n")
    (tmp_path / "grpo-mine.yaml").write_text("name: mine\n")
    first, su, dry, group, fmt, shell, files, after_dashdash, profiles = complete(
        bash_script,
        [
            ["verl-tui", ""],
            ["verl-tui", "su"],
            ["verl-tui", "submit", "hosts.yaml", "grpo", "--dr"],
            ["verl-tui", "profile", ""],
            ["verl-tui", "profile", "export", "p.yaml", "--format", ""],
            ["verl-tui", "completion", ""],
            ["verl-tui", "gpus", "hos"],
            ["verl-tui", "submit", "hosts.yaml", "--", "--dr"],
            ["verl-tui", "submit", "hosts.yaml", "grpo"],
        ],
        cwd=tmp_path,
    )
    assert set(first) == set(COMMANDS)
    assert su == ["submit"]
    assert dry == ["--dry-run"]
    assert set(group) == {"check", "list", "import", "export"}
    assert set(fmt) == {"ray-job", "sbatch", "dstack"}
    assert set(shell) == set(SHELLS)
    assert set(files) == {"hosts.yaml", "hosts-b.yaml"}  # a HOSTS.yaml completes as a file
    assert "--dry-run" not in after_dashdash  # after --, the job's own command line
    # a PROFILE is a preset's name or a file
    presets = {n for n in profile_names() if n.startswith("grpo")}
    assert len(presets) >= 2
    assert set(profiles) == presets | {"grpo-mine.yaml"}


def test_every_flag_of_every_command_completes(bash_script):
    """The script holds each command's options exactly as its parser (the one `verl-tui CMD`
    parses with) declares them: nothing missing, nothing the command would refuse."""
    lines, expected = [], []
    for names, entry in ENTRIES:
        parser = build_parser(names, entry)
        flags = {
            s
            for a in parser._actions
            if a.help != argparse.SUPPRESS
            for s in a.option_strings
            if s.startswith("--")
        }
        lines.append(["verl-tui", *names, "--"])
        expected.append(flags)
    offered = complete(bash_script, lines)
    for (names, _), flags, got in zip(ENTRIES, expected, offered, strict=True):
        assert set(got) == flags, names


def test_zsh_and_tcsh_scripts_name_every_command(tmp_path):
    for shell in ("zsh", "tcsh"):
        done = cli("completion", shell)
        assert done.returncode == 0, done.stderr
        for names, _ in ENTRIES:
            assert names[-1] in done.stdout, (shell, names)
    zsh = shutil.which("zsh")
    if zsh:  # where zsh is installed, the script must at least parse
        done = cli("completion", "zsh")
        check = subprocess.run([zsh, "-n"], input=done.stdout, text=True, capture_output=True)
        assert check.returncode == 0, check.stderr
    tcsh = shutil.which("tcsh")
    if tcsh:  # where tcsh is installed, sourcing the script defines verl-tui's completion
        script = tmp_path / "verl-tui.tcsh"
        script.write_text(cli("completion", "tcsh").stdout)
        done = subprocess.run(
            [tcsh, "-f", "-c", f"source {script} && complete"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert "verl-tui" in done.stdout and "submit" in done.stdout


def test_an_unknown_shell_is_one_line_and_exit_2():
    done = cli("completion", "fish")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert "bash" in done.stderr and "fish" in done.stderr


def test_the_committed_man_page_is_current():
    assert MAN_PAGE.read_text(encoding="utf-8") == generate_man_page(), (
        "tui/man/verl-tui.1 is stale: regenerate it with "
        ".venv/bin/python -m tui.commands.completion"
    )


def test_the_man_page_documents_every_command_and_renders(tmp_path):
    text = MAN_PAGE.read_text(encoding="utf-8")
    tree = command_tree()
    assert tree.prog == "verl-tui"
    for names, entry in ENTRIES:
        assert f"COMMAND '{' '.join(['verl-tui', *names])}'".replace("-", "\\-") in text or (
            f"verl\\-tui {' '.join(names)}" in text
        ), names
        for action in build_parser(names, entry)._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag.replace("-", "\\-") in text, (names, flag)
    # `verl-tui man` off a terminal prints the roff source; --path names the shipped file
    done = cli("man")
    assert done.returncode == 0 and done.stdout == text
    where = cli("man", "--path")
    assert where.returncode == 0 and Path(where.stdout.strip()).read_text() == text
    if shutil.which("man"):
        shown = subprocess.run(
            ["man", "-l", str(MAN_PAGE)],
            capture_output=True,
            text=True,
            env={"MANWIDTH": "100", "MANPAGER": "cat", "PATH": "/usr/bin:/bin"},
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "verl-tui submit" in shown.stdout and "--dry-run" in shown.stdout
