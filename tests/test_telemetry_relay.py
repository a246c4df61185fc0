"""Telemetry relays (issue 16): a group's agent lines gathered on one of its hosts and sent to
the cockpit in batches. On real namespace sshd hosts with the real agent (fake NVML): lines
arrive through the relay, a killed relay sends its hosts direct at once and comes back, a dead
relayed host is still LOST within 5 s. The relay program admits only leaves with the right
token, and the cockpit takes no line a relay host forged or replayed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest
from fakenvml.fakenvml import FakeGpu, write_state
from test_fleet_ssh import until

from tui.cluster.relay_plan import (
    RELAYED_KEEPALIVE_S,
    RelayGroup,
    RelayHub,
    hello_token,
    relay_groups,
)
from tui.cluster.telemetry import TelemetryMonitor
from tui.config.hosts import load_inventory
from tui.remote import python_argv
from tui.remote.relay_wire import RelayLink, sign
from tui.transport.fleet import Fleet
from tui.transport.types import HostState


@pytest.fixture
def three_hosts(ns_cluster_factory, fake_nvml_lib, tmp_path):
    env = {}
    for name in ("node1", "node2", "node3"):
        state = tmp_path / f"{name}.nvml"
        write_state(state, [FakeGpu(util=5)] * 8)
        env[name] = {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    return ns_cluster_factory(3, host_env=env)


def _relay_pids(cluster, name: str) -> list[str]:
    out = cluster.exec_in(name, ["pgrep", "-f", "telemetry relay"]).stdout
    return out.split()


async def test_relay_carries_the_lines_and_heals(three_hosts, tmp_path):
    path = three_hosts.write_hosts_yaml(
        tmp_path / "hosts.yaml",
        python=sys.executable,
        ssh_fields={"connect_timeout": 3},
        top_fields={"telemetry": {"interval": 1.0, "relay": "on", "relay_group": 8}},
    )
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        monitor = TelemetryMonitor(fleet, inv)
        delivered: Counter[str] = Counter()
        deliver = monitor.relays._deliver

        def counting(name: str, line: str) -> None:
            delivered[name] += 1
            deliver(name, line)

        monitor.relays._deliver = counting
        monitor.start()
        hosts = monitor.hosts
        try:
            await until(
                lambda: all(h.route == "relay node1" for h in hosts.values()), 30, "relayed"
            )
            # Samples keep coming at 1 Hz, through the relay, for every host.
            before = {n: (h.latest.seq, delivered[n]) for n, h in hosts.items()}
            await until(
                lambda: all(
                    h.latest.seq >= before[n][0] + 2 and delivered[n] >= before[n][1] + 2
                    for n, h in hosts.items()
                ),
                3.2,
                "two more relayed samples from every host",
            )
            for name, h in hosts.items():
                assert h.latest.seq >= before[name][0] + 2, name
                assert delivered[name] >= before[name][1] + 2, name
                assert h.state.value == "ok" and not h.current_problems(time.time())
            [conn_kept] = {
                fleet._links["node2"].conn._keepalive_interval  # the link goes quiet
            }
            assert conn_kept == RELAYED_KEEPALIVE_S

            # The relay dies: its hosts go direct at once, then a new relay takes them back.
            assert _relay_pids(three_hosts, "node1")
            three_hosts.exec_in("node1", ["pkill", "-KILL", "-f", "telemetry relay"])
            await until(lambda: all(h.route is None for h in hosts.values()), 5, "direct")
            seq = hosts["node2"].latest.seq
            await until(lambda: hosts["node2"].latest.seq >= seq + 2, 4, "direct samples")
            await until(
                lambda: all(h.route == "relay node1" for h in hosts.values()), 20, "relayed again"
            )

            # A relayed host that dies is LOST within 5 s; the others stream on.
            three_hosts.kill_host("node3")
            took = await until(
                lambda: fleet.status("node3").state == HostState.LOST, 6, "node3 lost"
            )
            assert took < 5, took
            # The relay's own host dies: LOST within 5 s; node2 streams on (direct at once),
            # and the group's relay moves to the next host that is up: node2 itself.
            seq = hosts["node2"].latest.seq
            three_hosts.kill_host("node1")
            took = await until(
                lambda: fleet.status("node1").state == HostState.LOST, 6, "node1 lost"
            )
            assert took < 5, took
            await until(lambda: hosts["node2"].latest.seq >= seq + 3, 6, "node2 streams on")
            await until(lambda: hosts["node2"].route == "relay node2", 20, "relay moved")
            seq = hosts["node2"].latest.seq
            await until(lambda: hosts["node2"].latest.seq >= seq + 2, 4, "relayed samples")
            assert hosts["node2"].state.value == "ok"
        finally:
            await monitor.close()


def _relay_process(key: bytes, leaves: int = 4) -> tuple[subprocess.Popen, int]:
    argv = python_argv(sys.executable, "gpu_relay", "--bind", "127.0.0.1", "--leaves", str(leaves))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin and proc.stdout
    proc.stdin.write(key.hex().encode() + b"\n")
    proc.stdin.flush()
    hello = json.loads(proc.stdout.readline())
    assert hello["type"] == "relay" and hello["address"] == "127.0.0.1"
    return proc, hello["port"]


def _refused(port: int, hello: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(hello)
        sock.settimeout(6)
        return sock.recv(16) == b""


def test_relay_admits_only_leaves_with_their_token():
    key = os.urandom(32)
    proc, port = _relay_process(key)
    try:
        assert _refused(port, b"HELLO 1 " + hello_token(os.urandom(32), 1).encode() + b"\n")
        assert _refused(port, b"HELLO 9 " + hello_token(key, 9).encode() + b"\n")  # no index 9
        assert _refused(port, b"GET / HTTP/1.0\r\n\r\n")
        leaf_key = os.urandom(32)
        link = RelayLink("127.0.0.1", port, 1, hello_token(key, 1), leaf_key)
        # One connection per index: a second one for index 1 is refused.
        assert _refused(port, b"HELLO 1 " + hello_token(key, 1).encode() + b"\n")
        link.send('{"type":"sample"}')
        link.send("second")
        assert proc.stdout is not None
        got = [proc.stdout.readline(), proc.stdout.readline()]
        sig1 = sign(leaf_key, 1, b'{"type":"sample"}').decode()
        assert got[0].decode() == f'1 1 {sig1} {{"type":"sample"}}\n'
        assert got[1].decode().startswith("1 2 ") and got[1].endswith(b" second\n")
        link.close()
        # The relay ends with its stdin (the SSH channel closing).
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_cockpit_takes_no_forged_or_replayed_relayed_line(tmp_path):
    """What a hostile relay host could send: lines for its leaves signed with the wrong key,
    an old line again, garbage. Only the genuine ones reach the monitor."""
    inv = load_inventory(_hosts_yaml(tmp_path, 3, relay="on"))
    got: list[tuple[str, str]] = []
    notes: list[tuple[str, str | None]] = []
    hub = RelayHub(
        None,  # type: ignore[arg-type]  # no relay is started here
        relay_groups(inv),
        1.0,
        deliver=lambda name, line: got.append((name, line)),
        note=lambda name, problem: notes.append((name, problem)),
        route_shown=lambda name, route: None,
    )
    [group] = hub.groups
    assert isinstance(group, RelayGroup) and [leaf.name for leaf in group.leaves] == [
        "h000",
        "h001",
        "h002",
    ]
    leaf = group.leaves[1]
    leaf.key, leaf.state, leaf.stream = os.urandom(32), "relayed", object()  # type: ignore[assignment]

    def relayed(counter: int, line: bytes, key: bytes) -> str:
        return f"1 {counter} {sign(key, counter, line).decode()} {line.decode()}"

    hub._relay_line(group, relayed(1, b'{"a":1}', leaf.key))
    hub._relay_line(group, relayed(2, b'{"a":2}', os.urandom(32)))  # forged
    hub._relay_line(group, relayed(1, b'{"a":1}', leaf.key))  # replayed
    hub._relay_line(group, relayed(3, b'{"a":3}', leaf.key))
    hub._relay_line(group, "1 x y z")
    hub._relay_line(group, "7 1 abc {}")  # no such leaf
    last = group.leaves[2]
    last.key, last.state, last.stream = os.urandom(32), "relayed", object()  # type: ignore[assignment]
    hub._relay_line(group, "-" + relayed(1, b'{"a":4}', last.key))  # "-1": not the last leaf
    hub._relay_line(group, relayed(1, b"{}", leaf.key).replace("1 ", "2 ", 1))  # h001's, as h002
    hub._relay_line(group, '{"type":"relay","port":99999}')  # out of range: ignored
    hub._relay_line(group, '{"type":"relay-stats","leaves":3,"lines":-1,"x":"y"}')
    assert got == [("h001", '{"a":1}'), ("h001", '{"a":3}')]
    assert leaf.refused == 3 and group.port is None and group.stats == {"leaves": 3}
    assert ("h001", "relay: 3 lines refused (last: a malformed line)") in notes
    assert last.refused == 1 and notes[-1] == (
        "h002",
        "relay: 1 line refused (last: a line with a bad signature)",
    )


def _hosts_yaml(tmp_path, count: int, relay: str = "auto", group: int = 128):
    lines = ["telemetry:", f"  relay: {relay}", f"  relay_group: {group}", "hosts:"]
    for i in range(count):
        lines += [f"  - name: h{i:03d}", f"    address: 10.0.{i // 250}.{i % 250 + 1}"]
    path = tmp_path / f"hosts{count}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_relay_groups(tmp_path):
    def sizes(n: int, **kw: object) -> list[int]:
        return [len(g) for g in relay_groups(load_inventory(_hosts_yaml(tmp_path, n, **kw)))]

    assert sizes(63) == []  # auto: direct below 64 hosts
    assert sizes(64) == [64]
    assert sizes(1024) == [128] * 8
    assert sizes(130) == [128, 2]
    assert sizes(129) == [128]  # a last group of one stays direct
    assert sizes(1024, relay="off") == []
    assert sizes(3, relay="on", group=2) == [2]


class _Sent:
    """What the hub wrote to an agent's stdin and set as its keepalive (no host needed)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.keepalive: list[float | None] = []

    def send(self, text: str) -> None:
        self.lines.append(text)

    def set_keepalive(self, interval: float | None) -> None:
        self.keepalive.append(interval)


def _hub_with_relay(tmp_path, hosts: int, shown: list) -> RelayHub:
    """A hub over `hosts` hosts in one group, its relay listening on h000 (no fleet needed:
    the quiet check only talks to the agents)."""
    inv = load_inventory(_hosts_yaml(tmp_path, hosts, relay="on"))
    hub = RelayHub(
        None,  # type: ignore[arg-type]
        relay_groups(inv),
        1.0,
        deliver=lambda name, line: None,
        note=lambda name, problem: None,
        route_shown=lambda name, route: shown.append((name, route)),
    )
    [group] = hub.groups
    group.relay_host, group.address, group.port, group.key = "h000", "10.0.0.1", 4000, b"k" * 32
    return hub


def test_quiet_host_goes_direct_then_back_to_the_relay(tmp_path):
    from tui.cluster import relay_plan

    shown: list[tuple[str, str | None]] = []
    hub = _hub_with_relay(tmp_path, 2, shown)
    agent = _Sent()
    hub.leaf_started("h001", agent, agent)  # type: ignore[arg-type]
    assert agent.lines[-1].startswith("relay 10.0.0.1 4000 1 " + hello_token(b"k" * 32, 1))
    hub.on_route("h001", "relay", None)
    assert agent.keepalive == [relay_plan.RELAYED_KEEPALIVE_S]
    assert shown[-1] == ("h001", "relay h000")
    t0 = time.time()
    hub.check_quiet(t0 + 1.0, {"h001": t0})  # one interval without a sample: fine
    assert agent.lines[-1].startswith("relay ")
    hub.check_quiet(t0 + 1.7, {"h001": t0})  # 1.6 intervals: direct, link checked
    assert agent.lines[-1] == "direct\n"
    assert agent.keepalive[-1] == relay_plan.QUIET_KEEPALIVE_S
    hub.on_route("h001", "direct", None)
    assert agent.keepalive[-1] is None and shown[-1] == ("h001", None)
    now = time.time()
    hub.check_quiet(now + 10, {"h001": now + 10})
    assert agent.lines[-1] == "direct\n"  # not yet
    hub.check_quiet(now + relay_plan.BACK_TO_RELAY_S + 1, {"h001": now})
    assert agent.lines[-1].startswith("relay 10.0.0.1 4000 1 ")  # asked back, a new key
    # One that could not reach the relay waits longer before it tries again.
    hub.on_route("h001", "direct", "cannot reach relay 10.0.0.1:4000: refused")
    now = time.time()
    # (past the last look at the hosts off their relay: this look happens, and waits)
    later = now + relay_plan.BACK_TO_RELAY_S + relay_plan.RETRY_SCAN_S + 1
    hub.check_quiet(later, {"h001": now})
    assert hub._retry_scanned == later
    assert agent.lines[-1].startswith("relay ") and len(agent.lines) == 3
    hub.check_quiet(now + relay_plan.RETRY_FAILED_S + 1, {"h001": now})
    assert len(agent.lines) == 4 and agent.lines[-1].startswith("relay ")


def test_quiet_check_finds_a_relayed_host_that_never_sent_and_looks_off_relay_seldom(tmp_path):
    from tui.cluster import relay_plan

    hub = _hub_with_relay(tmp_path, 3, [])
    silent, talking = _Sent(), _Sent()
    hub.leaf_started("h001", silent, silent)  # type: ignore[arg-type]
    hub.leaf_started("h002", talking, talking)  # type: ignore[arg-type]
    for name in ("h001", "h002"):
        hub.on_route(name, "relay", None)
    t0 = time.time()
    hub.check_quiet(t0 + 2.0, {"h002": t0 + 1.9})  # h001: relayed, no sample ever
    assert silent.lines[-1] == "direct\n" and talking.lines[-1].startswith("relay ")
    hub.on_route("h001", "direct", None)
    # Off its relay for longer than BACK_TO_RELAY_S, but looked at again only RETRY_SCAN_S
    # after the last look: then asked back.
    hub._retry_scanned = t0 + relay_plan.BACK_TO_RELAY_S + 3
    hub.check_quiet(t0 + relay_plan.BACK_TO_RELAY_S + 4, {"h002": t0 + 33})
    assert silent.lines[-1] == "direct\n"
    hub.check_quiet(t0 + relay_plan.BACK_TO_RELAY_S + 9, {"h002": t0 + 38})
    assert silent.lines[-1].startswith("relay 10.0.0.1 4000 1 ")


def test_relays_write_less_often_the_more_there_are():
    from tui.cluster.relay_plan import (
        RELAY_FLUSH_MAX_MS,
        RELAY_FLUSH_MS,
        RELAY_WRITES_PER_S,
        relay_flush_ms,
    )

    assert relay_flush_ms(1) == relay_flush_ms(8) == RELAY_FLUSH_MS  # 1,024 hosts: as before
    assert relay_flush_ms(32) == 200  # 4,096 hosts in groups of 128
    assert relay_flush_ms(10_000) == RELAY_FLUSH_MAX_MS
    for relays in range(1, 64):
        ms = relay_flush_ms(relays)
        assert RELAY_FLUSH_MS <= ms <= RELAY_FLUSH_MAX_MS
        # the writes a second, all relays together, stay at the budget where the cap allows
        assert relays * 1000 / ms <= RELAY_WRITES_PER_S * 1.05 or ms == RELAY_FLUSH_MAX_MS
