"""SIGINT/SIGTERM during headless commands: exit 130/143 and nothing else printed (issue 10,
item 5). The host "never answers": a real TCP listener that accepts and then stays silent, so
the SSH handshake waits (connect_timeout 60 s) — the signal arrives while the command waits.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "verl-tui")
BOUND = 20.0  # seconds from the signal to the exit: only to catch a hang (GRACE_S is 15)


class SilentHost:
    """Accepts TCP connections and never says a word (no SSH banner)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent_hosts(tmp_path):
    host = SilentHost()
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "cluster: silent\nssh:\n  user: root\n"
        f"  port: {host.port}\n  known_hosts: {kh}\n  config: ''\n"
        "  connect_timeout: 60\nhosts:\n  - name: quiet\n    address: 127.0.0.1\n"
    )
    yield host, path
    host.close()


COMMANDS = {
    "gpus": ["gpus", "{hosts}", "--once", "--timeout", "60"],
    "gpus-json": ["gpus", "{hosts}", "--json"],
    "jobs": ["jobs", "{hosts}"],
    "up": ["up", "{hosts}"],
    "status": ["status", "{hosts}"],
    "check": ["check", "{hosts}"],
}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_signal_while_waiting_for_a_host(name, sig, silent_hosts):
    host, hosts_file = silent_hosts
    argv = [CLI, *(a.format(hosts=hosts_file) for a in COMMANDS[name])]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        # The command has reached its SSH connect (and waits for a banner that never comes).
        assert host.accepted.wait(30), "the command never connected"
        time.sleep(0.3)
        start = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=BOUND + 10)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"{name} {sig.name}: exit {proc.returncode} after {took:.3f} s")
    assert proc.returncode == 128 + sig, (proc.returncode, out, err)
    assert out == b"" and err == b"", (out, err)
    assert took < BOUND


def test_signal_outside_any_event_loop(tmp_path):
    """SIGTERM while `profile check` composes verl's config (no event loop running; several
    seconds of work for 6000 --set values): 143, nothing printed."""
    profile = Path(__file__).resolve().parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    sets = [a for i in range(6000) for a in ("--set", f"+trainer.extra_{i}={i}")]
    proc = subprocess.Popen(
        [CLI, "profile", "check", str(profile), *sets],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(2.0)  # past start-up (the handlers are installed in main)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=BOUND + 10)
    took = time.monotonic() - start
    print(f"profile check SIGTERM: exit {proc.returncode} after {took:.3f} s")
    assert proc.returncode == 143, (proc.returncode, out, err)
    assert out == b"" and err == b""
    assert took < BOUND
