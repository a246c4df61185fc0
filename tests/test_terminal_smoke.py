"""End to end in a real terminal (tmux): the installed `verl-tui` entry point, no hosts file,
the built-in localhost inventory over the local transport."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state

ENTRY = Path(sys.executable).with_name("verl-tui")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def wait_screen(session: str, needle: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if needle in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{needle!r} not on screen after {timeout} s:\n{screen}")


@pytest.fixture
def session():
    assert shutil.which("tmux"), "tmux is required (run-tests installs it)"
    assert ENTRY.exists(), f"{ENTRY} missing: the package is not installed in this venv"
    name = f"vt-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def start(session: str, env: dict[str, str]) -> None:
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    cmd = f"env {exports} {shlex.quote(str(ENTRY))}; echo EXITED:$?; sleep 60"
    tmux("new-session", "-d", "-s", session, "-x", "150", "-y", "40", cmd)


def test_no_driver_is_shown_plainly_and_q_quits(session, tmp_path):
    start(
        session,
        {
            "TERM": "xterm-256color",
            "LD_LIBRARY_PATH": str(tmp_path),
            "HOME": os.environ.get("HOME", "/root"),
        },
    )
    screen = wait_screen(session, "NVML library not found")
    assert "HOST / GPU" in screen and "localhost" in screen and "no NVML" in screen
    assert "Traceback" not in screen
    tmux("send-keys", "-t", session, "?")
    wait_screen(session, "Everywhere")
    tmux("send-keys", "-t", session, "Escape")
    time.sleep(0.3)
    tmux("send-keys", "-t", session, "q")
    wait_screen(session, "EXITED:0")


def test_fake_gpus_filter_and_quit(session, tmp_path, fake_nvml_lib):
    state = tmp_path / "nvml.txt"
    write_state(state, [FakeGpu(util=64, memory_used=40_000 * MIB), FakeGpu(util=3)])
    start(
        session,
        {
            "TERM": "xterm-256color",
            "LD_LIBRARY_PATH": str(fake_nvml_lib),
            "FAKE_NVML_STATE": str(state),
        },
    )
    wait_screen(session, "64%")
    screen = wait_screen(session, "hosts 1/1 up")  # the summary follows within 0.5 s
    assert "H100 80GB HBM3" in screen and "39.1/80G" in screen and "GPUs 2" in screen
    tmux("send-keys", "-t", session, "/")
    tmux("send-keys", "-t", session, "-l", "nomatch")
    wait_screen(session, "no host matches the filter")
    tmux("send-keys", "-t", session, "Escape")
    wait_screen(session, "64%")
    tmux("send-keys", "-t", session, "q")
    wait_screen(session, "EXITED:0")
