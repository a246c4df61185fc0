"""Escapes in outside text reach neither a CLI command's text output nor a real terminal.

- CLI: the SafeWriter the entry point installs cleans every line a headless command prints
  (here `submit --dry-run`, which echoes the job's command line, and a hosts file whose
  `cluster:` holds escapes, refused with one clean line).
- tmux: the installed `verl-tui` in a real terminal against a host whose agent reports a
  hostile hostname (forged interpreter as the host's `python:`) and GPU names holding
  `ESC]0;PWNED BEL`, OSC 52 and `ESC[2J`: the pane's title is unchanged and the rows are intact.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli
from test_terminal_smoke import ENTRY, session, tmux, wait_screen  # noqa: F401

ESC, BEL = "\x1b", "\x07"
PAYLOAD = f"{ESC}]0;PWNED{BEL}{ESC}[2J{ESC}]52;c;aGk={BEL}"


def test_cli_text_output_is_cleaned(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - name: alpha\n    transport: local\n")
    proc = run_cli(
        ["submit", str(hosts), "--dry-run", "--", "echo", f"hi{PAYLOAD}there"], timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "echo" in proc.stdout and "hithere" in proc.stdout
    for out in (proc.stdout, proc.stderr):
        assert ESC not in out and BEL not in out, repr(out)


def test_cluster_value_with_escapes_is_one_clean_line(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        'cluster: "c\\e]0;PWNED\\a\\e[2J"\nhosts:\n  - name: a\n    transport: local\n'
    )
    proc = run_cli(["gpus", str(hosts), "--once"], timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and f"{hosts}:1" in proc.stderr
    assert ESC not in proc.stderr and BEL not in proc.stderr


def test_real_terminal_title_and_rows_survive(
    session,  # noqa: F811 (the tmux fixture imported above)
    tmp_path: Path,
    fake_nvml_lib: Path,
) -> None:
    state = tmp_path / "nvml.txt"
    write_state(state, [FakeGpu(name=f"H100{PAYLOAD}", util=64), FakeGpu(name=f"B{PAYLOAD}")])
    forged = tmp_path / "forged-python"
    forged.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(f"""
        import socket, sys
        socket.gethostname = lambda: {("evil" + PAYLOAD)!r}
        args = sys.argv[1:]
        i = args.index("-c")
        sys.argv = ["-c", *args[i + 2:]]
        exec(compile(args[i + 1], "<agent>", "exec"), {{"__name__": "__main__"}})
    """)
    )
    forged.chmod(0o755)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        f"cluster: lab\nhosts:\n  - name: alpha\n    transport: local\n    python: {forged}\n"
    )
    env = {
        "TERM": "xterm-256color",
        "LD_LIBRARY_PATH": str(fake_nvml_lib),
        "FAKE_NVML_STATE": str(state),
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    cmd = (
        f"env {exports} {shlex.quote(str(ENTRY))} {shlex.quote(str(hosts))}; echo EXITED:$?; "
        "sleep 60"
    )
    tmux("new-session", "-d", "-s", session, "-x", "150", "-y", "40", cmd)
    tmux("set-option", "-t", session, "set-clipboard", "on")
    title_before = tmux("display", "-p", "-t", session, "#{pane_title}").strip()
    screen = wait_screen(session, "64%")
    screen = wait_screen(session, "hosts 1/1 up")
    time.sleep(1.5)  # several samples (and repaints) with the hostile names
    screen = tmux("capture-pane", "-p", "-t", session)
    title_after = tmux("display", "-p", "-t", session, "#{pane_title}").strip()
    assert "PWNED" not in title_after and title_after == title_before, (title_before, title_after)
    rows = screen.splitlines()
    # The rows are where the cockpit put them: nothing cleared or moved them.
    assert rows[0].lstrip().startswith("verl-tui") and "lab" in rows[0], screen
    assert rows[1].startswith("HOST / GPU"), screen
    assert rows[2].startswith("▾ alpha") and "up" in rows[2], screen
    assert "H100" in rows[3] and "64%" in rows[3], screen
    buffers = subprocess.run(["tmux", "list-buffers"], capture_output=True, text=True).stdout
    assert '"hi"' not in buffers  # OSC 52 (base64 "hi") did not reach tmux's clipboard
    tmux("send-keys", "-t", session, "q")
    wait_screen(session, "EXITED:0")
