"""No orphans: whatever the cockpit or a headless command starts on a host ends when the caller
gives up or exits — also a hung process that ignores stdin EOF, SIGHUP and SIGTERM, and the
children it started. Checked with `ps` inside the namespace host's own pid namespace."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.cluster.telemetry import TelemetryMonitor
from tui.config.hosts import load_inventory, parse_inventory
from tui.transport.fleet import Fleet
from tui.transport.local import LocalTransport
from tui.transport.types import TransportError

ROOT = Path(__file__).resolve().parents[1]


def hung_agent(path: Path, *, say_hello: bool = True) -> str:
    """A forged agent that ignores EOF, SIGHUP and SIGTERM and has a child doing the same.
    Every process of it carries its path in argv, so `ps` finds them."""
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, signal, subprocess, sys, time\n"
        "for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "if '--child' not in sys.argv:\n"
        "    subprocess.Popen([sys.executable, __file__, '--child'], stdin=subprocess.DEVNULL)\n"
        + ('    print(\'{"type":"hello","hostname":"hung"}\', flush=True)\n' if say_hello else "")
        + "while True:\n"
        "    time.sleep(1000)\n"
    )
    path.chmod(0o755)
    return str(path)


def hosts_yaml(cluster, path: Path, python: str) -> Path:
    h = cluster.hosts[0]
    path.write_text(
        "\n".join(
            [
                "cluster: orphans",
                f"python: {python}",
                "ssh:",
                "  user: root",
                f"  identity_file: {cluster.client_key}",
                f"  known_hosts: {cluster.known_hosts}",
                "  config: ''",
                "  connect_timeout: 3",
                "hosts:",
                f"  - name: {h.name}",
                f"    address: {h.address}",
            ]
        )
        + "\n"
    )
    return path


def on_host(cluster, tag: str) -> list[str]:
    """Processes inside the host's pid namespace whose command line holds `tag`."""
    res = cluster.exec_in("node1", ["ps", "-ww", "-eo", "pid,pgid,args"], timeout=20)
    assert res.returncode == 0, res.stderr
    return [ln for ln in res.stdout.splitlines()[1:] if tag in ln and "ps -ww" not in ln]


def local_procs(tag: str) -> list[str]:
    res = subprocess.run(
        ["ps", "-ww", "-eo", "pid,pgid,stat,args"], capture_output=True, text=True, timeout=20
    )
    return [
        ln
        for ln in res.stdout.splitlines()[1:]
        if tag in ln and "ps -ww" not in ln and " Z" not in ln
    ]


def wait_gone(list_fn, tag: str, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = list_fn(tag)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_present(list_fn, tag: str, count: int, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        found = list_fn(tag)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ns_one(ns_hosts, tmp_path_factory):

    cluster = ns_hosts(1, tmp_path_factory.mktemp("orphans"))
    yield cluster
    cluster.stop()


def test_gpus_once_timeout_leaves_no_hung_agent(ns_one, tmp_path) -> None:
    agent = hung_agent(tmp_path / "hung-agent-cli")
    hosts = hosts_yaml(ns_one, tmp_path / "hosts.yaml", agent)
    for run in range(2):
        t0 = time.monotonic()
        res = run_cli(["gpus", str(hosts), "--once", "--timeout", "2"], cwd=ROOT, timeout=60)
        took = time.monotonic() - t0
        assert res.returncode == 1, res.stderr  # the host never answered
        assert "Traceback" not in res.stderr
        assert res.stdout.startswith("node1  [starting]")
        assert took < 15, took
        assert wait_gone(lambda tag: on_host(ns_one, tag), agent) == [], f"after run {run}"


async def test_monitor_close_kills_the_hung_agent_group(ns_one, tmp_path) -> None:
    agent = hung_agent(tmp_path / "hung-agent-monitor")
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", agent))
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv, interval=0.5)
    fleet.start()
    monitor.start()
    try:
        found = await asyncio.to_thread(wait_present, lambda t: on_host(ns_one, t), agent, 2)
        assert len(found) == 2, found  # the agent and its child run on the host
        for _ in range(100):  # its hello line arrives (the stream is read)
            if monitor.hosts["node1"].hostname == "hung":
                break
            await asyncio.sleep(0.05)
        assert monitor.hosts["node1"].hostname == "hung"
    finally:
        t0 = time.monotonic()
        await monitor.close()
        closed_in = time.monotonic() - t0
        await fleet.close()
    assert closed_in < 8, closed_in
    left = await asyncio.to_thread(wait_gone, lambda t: on_host(ns_one, t), agent)
    assert left == []


async def test_ssh_run_timeout_and_cancel_kill_the_remote_group(ns_one, tmp_path) -> None:
    agent = hung_agent(tmp_path / "hung-run", say_hello=False)
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", sys.executable))
    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node1", 20)
        with pytest.raises(TransportError, match="gave no answer in 1 s"):
            await transport.run([agent], timeout=1)
        assert await asyncio.to_thread(wait_gone, lambda t: on_host(ns_one, t), agent) == []
        task = asyncio.create_task(transport.run([agent, "x"], timeout=60))
        found = await asyncio.to_thread(wait_present, lambda t: on_host(ns_one, t), agent, 2)
        assert len(found) == 2, found
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(wait_gone, lambda t: on_host(ns_one, t), agent) == []
        # A normal command is unaffected: output, status and stderr come back whole.
        res = await transport.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=20)
        assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")


async def test_ssh_stream_close_polite_and_hung(ns_one, tmp_path) -> None:
    """A stream whose command exits on EOF closes at once (no kill needed); one that hangs is
    killed with its children; stderr never shows the wrapper's marker."""
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", sys.executable))
    agent = hung_agent(tmp_path / "hung-stream")
    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node1", 20)
        polite = await transport.stream(["sh", "-c", "echo hi; echo note >&2; cat >/dev/null"])
        lines = polite.lines()
        assert await anext(lines) == "hi"
        t0 = time.monotonic()
        await polite.close()
        assert time.monotonic() - t0 < 1.0 and polite.exit_status == 0
        assert await polite.stderr_tail() == "note"
        hung = await transport.stream([agent])
        assert await anext(hung.lines()) == '{"type":"hello","hostname":"hung"}'
        assert (
            len(await asyncio.to_thread(wait_present, lambda t: on_host(ns_one, t), agent, 2)) == 2
        )
        await hung.close()
        assert await asyncio.to_thread(wait_gone, lambda t: on_host(ns_one, t), agent) == []


# --- the local transport: same promise for local processes ------------------------------------


async def test_local_stream_close_kills_hung_group(tmp_path) -> None:
    agent = hung_agent(tmp_path / "hung-local-stream")
    stream = await LocalTransport().stream([agent])
    assert await anext(stream.lines()) == '{"type":"hello","hostname":"hung"}'
    assert len(await asyncio.to_thread(wait_present, local_procs, agent, 2)) == 2
    t0 = time.monotonic()
    await stream.close()
    assert time.monotonic() - t0 < 6
    assert await asyncio.to_thread(wait_gone, local_procs, agent) == []


async def test_local_run_timeout_and_cancel_kill_group(tmp_path) -> None:
    agent = hung_agent(tmp_path / "hung-local-run", say_hello=False)
    transport = LocalTransport()
    with pytest.raises(TransportError, match="gave no answer in"):
        await transport.run([agent], timeout=1)
    assert await asyncio.to_thread(wait_gone, local_procs, agent) == []
    task = asyncio.create_task(transport.run([agent, "again"], timeout=60))
    assert len(await asyncio.to_thread(wait_present, local_procs, agent, 2)) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(wait_gone, local_procs, agent) == []


async def test_local_run_cancelled_while_its_process_starts_leaves_none(tmp_path) -> None:
    """A cancel landing while the run's process is being set up: forked, its pipes not yet
    connected, and the loop held up meanwhile — as on a busy machine — long enough for the
    agent to start its child. asyncio's own clean-up kills the agent only; the child (same
    group) was left running (a full run once found it so). Both go now."""
    agent = hung_agent(tmp_path / "hung-local-start", say_hello=False)
    task = asyncio.create_task(LocalTransport().run([agent], timeout=60))
    turns = 0
    while not local_procs(agent):  # one loop turn at a time until the agent is forked
        await asyncio.sleep(0)
        turns += 1
        assert turns < 100, "the run never started its process"
    # Blocking on purpose: the loop cannot finish the set-up while the agent starts its child.
    assert len(wait_present(local_procs, agent, 2)) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(wait_gone, local_procs, agent) == []


async def test_local_monitor_close_kills_hung_agent(tmp_path) -> None:
    agent = hung_agent(tmp_path / "hung-local-monitor")
    inv = parse_inventory(
        f"cluster: t\nhosts:\n  - name: h\n    transport: local\n    python: {agent}\n"
    )
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv, interval=0.5)
    fleet.start()
    monitor.start()
    try:
        assert len(await asyncio.to_thread(wait_present, local_procs, agent, 2)) == 2
    finally:
        await monitor.close()
        await fleet.close()
    assert await asyncio.to_thread(wait_gone, local_procs, agent) == []
