"""`verl-tui logs HOSTS --grep PATTERN` and the node-logs screen's search (ctrl+f), on the
shared two-host Ray cluster (real Ray session logs on namespace sshd hosts, each with its own
/tmp/ray): every host's logs searched there at once, `host:file:line: text` back, the regex
checked at the boundary, a hostile file (escapes, a FIFO, a link) neither shown raw nor able to
hang the search, and a big file searched in its newest bytes with its own line numbers."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import pytest
from harness.cli import run_cli

from tui.cluster.node_logs import SESSION_LOGS, check_pattern, grep_host
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet

MARK = "VTGREP-7731"
PLANTED = ("vt-grep-marker.log", "vt-grep-fifo.out", "vt-grep-link.out", "vt-grep-big.log")
BIG_LINES = 60_000  # ~3.4 MiB: over the 1 MiB bound the bounds test gives


def cli(lease, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_cli([*args], env=lease.env, timeout=timeout)


@pytest.fixture(scope="module")
def planted(ray_shared2) -> Iterator[object]:
    """node2's session log folder with hostile neighbours of Ray's own files (removed after:
    the cluster is shared)."""
    cluster = ray_shared2.cluster
    script = (
        f"cd {SESSION_LOGS} && "
        f"printf 'first line\\n\\033]0;pwned\\007{MARK} needle \\033[31mred\\n' "
        "> vt-grep-marker.log && mkfifo vt-grep-fifo.out && "
        "ln -s /etc/shadow vt-grep-link.out && "
        f"{{ echo '{MARK} at the start'; "
        f'for i in $(seq 2 {BIG_LINES - 1}); do echo "filler line $i of the big log"; done; '
        f"echo '{MARK} at the end'; }} > vt-grep-big.log"
    )
    cluster.exec_in("node2", ["sh", "-c", script], check=True)
    try:
        yield ray_shared2
    finally:
        cluster.exec_in(
            "node2", ["rm", "-f", *(f"{SESSION_LOGS}/{n}" for n in PLANTED)], check=True
        )


def test_grep_finds_each_hosts_lines_cleaned_and_is_not_hung_by_a_fifo(planted) -> None:
    lease = planted
    res = cli(lease, "logs", str(lease.path), "--grep", f"{MARK} needle")
    assert res.returncode == 0, res.stdout + res.stderr
    # The title escape and the colour are gone; the FIFO and the link were skipped unread.
    assert res.stdout == f"node2:vt-grep-marker.log:2: {MARK} needle red\n", repr(res.stdout)
    assert "matching line(s)" in res.stderr

    # Ray's own logs on both hosts: every raylet logs where its session lives.
    real = cli(lease, "logs", str(lease.path), "--grep", r"session_\d", "--node", "node1")
    assert real.returncode == 0, real.stdout + real.stderr
    assert all(line.startswith("node1:") for line in real.stdout.splitlines())
    both = cli(lease, "logs", str(lease.path), "--grep", "RAYLET", "-i")
    hosts = {line.split(":", 1)[0] for line in both.stdout.splitlines()}
    assert hosts == {"node1", "node2"}, both.stdout[:2000] + both.stderr

    nothing = cli(lease, "logs", str(lease.path), "--grep", "VTGREP-no-such-line-0042")
    assert nothing.returncode == 1 and nothing.stdout == "", nothing.stderr


def test_a_bad_pattern_or_host_is_one_line_exit_2_before_any_ssh(planted) -> None:
    lease = planted
    bad = cli(lease, "logs", str(lease.path), "--grep", "(unclosed")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "--grep: not a regular expression" in bad.stderr
    node = cli(lease, "logs", str(lease.path), "--grep", "x", "--node", "node9")
    assert node.returncode == 2 and "--node 'node9': not a host" in node.stderr
    with pytest.raises(ValueError, match="over 500"):
        check_pattern("a" * 501)


async def test_a_big_file_is_searched_in_its_newest_bytes_with_its_own_line_numbers(
    planted,
) -> None:
    inv = load_inventory(planted.path)
    async with Fleet(inv) as fleet:
        found = await grep_host(fleet, "node2", MARK, file_bytes=1 << 20)
    big = [m for m in found.matches if m.file == "vt-grep-big.log"]
    assert [(m.line, m.text) for m in big] == [(BIG_LINES, f"{MARK} at the end")], found
    assert any("vt-grep-big.log: searched its last 1048576 of" in n for n in found.notes)
    assert found.error is None and found.bytes <= 128 << 20


async def test_the_node_logs_screen_searches_every_host(planted, monkeypatch) -> None:
    from textual.widgets import Input

    from tui.app import VerlTuiApp
    from tui.screens.logs.node_logs import NodeLogsScreen
    from tui.screens.logs.node_logs_grep import GrepPrompt
    from tui.widgets.logview import LogPane

    monkeypatch.setenv("XDG_STATE_HOME", planted.env["XDG_STATE_HOME"])
    app = VerlTuiApp(load_inventory(planted.path), interval=0.5)

    async def until(pilot, predicate, what: str, timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            assert loop.time() < deadline, f"timed out waiting for {what}"
            await pilot.pause(0.05)

    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, NodeLogsScreen), "node logs")
        screen = app.screen
        await pilot.press("ctrl+f")
        await until(pilot, lambda: isinstance(app.screen, GrepPrompt), "the prompt")
        prompt = app.screen
        prompt.query_one(Input).value = "(unclosed"
        await pilot.press("enter")
        error = str(prompt.query_one("#grep-error").render())
        assert "not a regular expression" in error and app.screen is prompt
        prompt.query_one(Input).value = f"{MARK} needle"
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is screen, "back on the node logs")
        pane = screen.query_one(LogPane)
        await until(pilot, lambda: len(pane.store) >= 1 and "match" in pane.status_text, "hits")
        assert pane.store.line(0).startswith("node2:vt-grep-marker.log:2: ")
        assert "1 match in" in pane.status_text


def test_status_says_its_dashboard_url_dies_with_it_and_prints_the_laptop_line(planted) -> None:
    """(On this module's Ray cluster.) `status` prints the URL of its own tunnel, says it closes
    with the command, and the `ssh -L` a laptop runs, quoted so a shell reads back the argv."""
    import getpass
    import shlex
    import socket

    lease = planted
    inv = load_inventory(lease.path)
    res = cli(lease, "status", str(lease.path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "(this command's tunnel: it closes when the command exits)" in res.stdout
    line = next(ln for ln in res.stdout.splitlines() if "from a laptop: " in ln)
    command, _, then = line.split("from a laptop: ", 1)[1].rpartition(", then ")
    port = inv.ray.dashboard_port
    assert shlex.split(command) == [
        "ssh",
        "-N",
        "-L",
        f"{port}:127.0.0.1:{port}",
        "-J",
        f"{getpass.getuser()}@{socket.getfqdn()}",
        f"{inv.head.ssh.user}@{inv.head.address}",
    ]
    assert then == f"http://127.0.0.1:{port}"
