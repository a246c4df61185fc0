"""The fleet and live telemetry over real OpenSSH hosts in network namespaces.

Real sshd, real key auth, real known_hosts; each host's agent loads a fake libnvidia-ml.so.1
through LD_LIBRARY_PATH that its sshd sets for the session (SetEnv).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from harness.cli import run_cli as verl_tui

from tui.cluster.models import TelemetryState
from tui.cluster.telemetry import TelemetryMonitor
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet
from tui.transport.types import HostState

INTERVAL = 0.25


def hosts_yaml(
    cluster,
    path: Path,
    *,
    addresses: dict[str, str] | None = None,
    known_hosts: Path | None = None,
    identity: Path | None = None,
    python: str = sys.executable,
    extra_ssh: str = "",
) -> Path:
    lines = [
        "cluster: nstest",
        f"python: {python}",
        "ssh:",
        "  user: root",
        f"  identity_file: {identity or cluster.client_key}",
        f"  known_hosts: {known_hosts or cluster.known_hosts}",
        "  config: ''",  # never read the machine's ~/.ssh/config in tests
        "  connect_timeout: 3",
        *(f"  {ln}" for ln in extra_ssh.splitlines()),
        "hosts:",
    ]
    for h in cluster.hosts:
        lines += [f"  - name: {h.name}", f"    address: {(addresses or {}).get(h.name, h.address)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def gpu_cluster(ns_cluster_factory, fake_nvml_lib, tmp_path):
    """Three hosts with 2, 4 and 8 fake GPUs, each with its own values."""
    states = {}
    host_env = {}
    for i, (name, count) in enumerate([("node1", 2), ("node2", 4), ("node3", 8)]):
        state = tmp_path / f"{name}.nvml"
        write_state(
            state,
            [
                FakeGpu(util=10 * (i + 1) + g, temperature=40 + g, memory_used=(1000 + g) * MIB)
                for g in range(count)
            ],
        )
        states[name] = state
        host_env[name] = {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    cluster = ns_cluster_factory(3, host_env=host_env)
    cluster.states = states
    return cluster


async def until(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_fleet_streams_every_host(gpu_cluster, tmp_path):
    inv = load_inventory(hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml"))
    async with Fleet(inv) as fleet:
        monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL)
        monitor.start()
        try:
            await until(lambda: all(h.latest for h in monitor.hosts.values()), 20, "samples")
            for name, count, base in [("node1", 2, 10), ("node2", 4, 20), ("node3", 8, 30)]:
                ht = monitor.hosts[name]
                assert ht.state == TelemetryState.OK and ht.link.state == HostState.UP
                assert ht.hostname == name  # the agent really ran inside that host
                gpus = ht.latest.gpus
                assert [g.index for g in gpus] == list(range(count))
                assert [g.util_percent for g in gpus] == [base + g for g in range(count)]
                assert gpus[1].memory_used_bytes == 1001 * MIB
                assert gpus[1].temperature_c == 41
                assert ht.latest.mem_total_bytes > 0
            # One connection per host is reused: run() goes over the same link.
            res = await fleet.transport("node2").run(["hostname"])
            assert res.ok and res.stdout.strip() == "node2"
            # Quoting: hostile argv words arrive as literal text, never run.
            res = await fleet.transport("node1").run(["echo", "$(touch /tmp/pwned)", "a;b", "`x`"])
            assert res.stdout.strip() == "$(touch /tmp/pwned) a;b `x`"
            assert not Path("/tmp/pwned").exists()
            # The agent is a process on the host while streaming...
            ps = gpu_cluster.exec_in("node1", ["pgrep", "-f", "--", " -u -c "])
            assert ps.returncode == 0 and ps.stdout.strip()
        finally:
            await monitor.close()
    # ...and closing the channel ends it: nothing of ours is left on the hosts.
    for h in gpu_cluster.hosts:
        for _ in range(40):
            ps = gpu_cluster.exec_in(h.name, ["pgrep", "-f", "--", " -u -c "])
            if ps.returncode == 1:
                break
            time.sleep(0.1)
        assert ps.returncode == 1, f"agent still running on {h.name}: {ps.stdout}"


async def test_host_killed_is_lost_then_recovers(gpu_cluster, tmp_path):
    inv = load_inventory(hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml"))
    async with Fleet(inv) as fleet:
        monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL)
        monitor.start()
        try:
            await until(lambda: all(h.latest for h in monitor.hosts.values()), 20, "samples")
            seq1 = monitor.hosts["node1"].latest.seq
            gpu_cluster.kill_host("node2")
            lost_after = await until(
                lambda: fleet.status("node2").state == HostState.LOST, 5, "node2 lost"
            )
            assert lost_after < 5
            # The others never stall while node2 is down: node1's samples go on within 1 s.
            await until(lambda: monitor.hosts["node1"].latest.seq >= seq1 + 3, 1.0, "node1 on")
            assert monitor.hosts["node3"].link.state == HostState.UP
            assert monitor.hosts["node2"].display_state == "lost"
            gpu_cluster.start_host("node2")
            await until(lambda: fleet.status("node2").state == HostState.UP, 15, "node2 back")
            seq_before = monitor.hosts["node2"].latest.seq
            await until(
                lambda: (
                    monitor.hosts["node2"].latest.seq != seq_before
                    and monitor.hosts["node2"].state == TelemetryState.OK
                ),
                10,
                "samples again",
            )
        finally:
            await monitor.close()


async def test_silent_partition_is_noticed_by_keepalive(gpu_cluster, tmp_path):
    inv = load_inventory(hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml"))
    async with Fleet(inv) as fleet:
        monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL)
        monitor.start()
        try:
            await until(lambda: all(h.latest for h in monitor.hosts.values()), 20, "samples")
            gpu_cluster.link_down("node3")
            took = await until(
                lambda: monitor.hosts["node3"].display_state in ("lost", "stale"),
                5,
                "node3 shown as lost",
            )
            assert took < 5
            await until(lambda: fleet.status("node3").state == HostState.LOST, 6, "link lost")
            gpu_cluster.link_up("node3")
            await until(lambda: monitor.hosts["node3"].display_state == "up", 20, "node3 back")
        finally:
            await monitor.close()


async def test_host_key_mismatch_unknown_and_bad_auth(gpu_cluster, tmp_path):
    n1, n2, n3 = gpu_cluster.hosts
    # node1 listed with node2's key (a changed key); node2 not listed at all.
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{n1.address} {n2.host_key_pub}\n{n3.address} {n3.host_key_pub}\n")
    inv = load_inventory(hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml", known_hosts=kh))
    async with Fleet(inv) as fleet:
        await fleet.wait_settled(15)
        s1, s2, s3 = (fleet.status(h.name) for h in (n1, n2, n3))
        assert s1.state == HostState.HOST_KEY_MISMATCH
        assert "differs" in s1.error and "ssh-keygen" in s1.error and str(kh) in s1.error
        assert s2.state == HostState.HOST_KEY_UNKNOWN and str(kh) in s2.error
        assert s3.state == HostState.UP

    other_key = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True
    )
    inv = load_inventory(hosts_yaml(gpu_cluster, tmp_path / "h2.yaml", identity=other_key))
    async with Fleet(inv) as fleet:
        await fleet.wait_settled(15)
        st = fleet.status("node1")
        assert st.state == HostState.AUTH_FAILED and "refused" in st.error


async def test_insecure_flag_skips_key_check(gpu_cluster, tmp_path):
    kh = tmp_path / "empty_known_hosts"
    kh.write_text("")
    inv = load_inventory(
        hosts_yaml(
            gpu_cluster,
            tmp_path / "hosts.yaml",
            known_hosts=kh,
            extra_ssh="insecure_skip_host_key_check: true",
        )
    )
    assert inv.insecure_hosts == ["node1", "node2", "node3"]
    async with Fleet(inv) as fleet:
        await fleet.wait_settled(15)
        assert all(s.state == HostState.UP for s in fleet.statuses())


async def test_unreachable_and_missing_interpreter(gpu_cluster, tmp_path):
    inv = load_inventory(
        hosts_yaml(
            gpu_cluster,
            tmp_path / "hosts.yaml",
            addresses={"node3": gpu_cluster.unused_address()},
            python="/nonexistent/python3",
        )
    )
    async with Fleet(inv) as fleet:
        monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL)
        monitor.start()
        try:
            await monitor.wait_first(20)
            st = fleet.status("node3")
            assert st.state == HostState.UNREACHABLE and "timed out" in st.error
            ht = monitor.hosts["node1"]
            assert ht.state == TelemetryState.AGENT_FAILED
            assert "/nonexistent/python3" in ht.error and "not found" in ht.error
        finally:
            await monitor.close()


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return verl_tui([*args], timeout=timeout)


def test_gpus_once_json_over_ssh(gpu_cluster, tmp_path):
    write_state(
        gpu_cluster.states["node2"],
        [
            FakeGpu(util=97, memory_used=81559 * MIB, temperature=88, power_mw=650_500),
            FakeGpu(errors={"power": 3}),
            FakeGpu(errors={"all": 15}),
        ],
    )
    path = hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml")
    proc = run_cli("gpus", str(path), "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by_name = {h["name"]: h for h in doc["hosts"]}
    assert set(by_name) == {"node1", "node2", "node3"}
    assert all(h["state"] == "up" and h["error"] is None for h in doc["hosts"])
    g0, g1, g2 = by_name["node2"]["gpus"]
    assert g0["util_percent"] == 97 and g0["temperature_c"] == 88 and g0["power_w"] == 650.5
    assert g0["memory_used_bytes"] == g0["memory_total_bytes"] == 81559 * MIB
    assert g1["power_w"] is None and g1["temperature_c"] is not None
    assert g2["error"] and "lost" in g2["error"].lower()
    assert len(by_name["node3"]["gpus"]) == 8

    # One host down: still one snapshot, the host says why, exit status 1.
    gpu_cluster.kill_host("node1")
    proc = run_cli("gpus", str(path), "--once", "--json")
    assert proc.returncode == 1
    node1 = next(h for h in json.loads(proc.stdout)["hosts"] if h["name"] == "node1")
    assert node1["state"] == "unreachable" and "refused" in node1["error"]
    text = run_cli("gpus", str(path), "--once")
    assert "node1  [unreachable]" in text.stdout and "util  97%" in text.stdout


async def test_forward_local_port_reaches_host_loopback(gpu_cluster, tmp_path):
    """A service bound to a host's 127.0.0.1 (like Ray's dashboard) through the SSH link."""
    inv = load_inventory(hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml"))
    server = (
        "import socket,sys\n"
        "s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
        "print(s.getsockname()[1], flush=True)\n"
        "c,_=s.accept(); c.sendall(socket.gethostname().encode()+b'\\n'); c.close()\n"
    )
    async with Fleet(inv) as fleet:
        transport = await fleet.wait_up("node2", 15)
        proc = await transport.stream([sys.executable, "-u", "-c", server])
        try:
            port = int(await anext(proc.lines()))
            forward = await transport.forward_local_port("127.0.0.1", port)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", forward.local_port)
                assert (await asyncio.wait_for(reader.readline(), 10)).decode().strip() == "node2"
                writer.close()
            finally:
                forward.close()
        finally:
            await proc.close()


async def test_jump_host_shared_by_hosts_behind_it(gpu_cluster, tmp_path):
    n1 = gpu_cluster.hosts[0]
    path = hosts_yaml(gpu_cluster, tmp_path / "hosts.yaml", extra_ssh=f"jump: root@{n1.address}")
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        await fleet.wait_settled(20)
        assert all(s.state == HostState.UP for s in fleet.statuses()), fleet.statuses()
        for name in ("node2", "node3"):
            res = await fleet.transport(name).run(["hostname"])
            assert res.stdout.strip() == name
        # The bastion carries every host's session: one connection, seen from node1's sshd.
        assert len(fleet._jumps) == 1
    # A jump host that does not answer: every host behind it says so.
    path = hosts_yaml(
        gpu_cluster, tmp_path / "h2.yaml", extra_ssh=f"jump: root@{gpu_cluster.unused_address()}"
    )
    async with Fleet(load_inventory(path)) as fleet:
        await fleet.wait_settled(20)
        st = fleet.status("node2")
        assert st.state == HostState.UNREACHABLE and "via jump host" in st.error


async def test_close_while_a_connect_swallows_its_cancellation(ns_cluster3, tmp_path, monkeypatch):
    """asyncio.wait_for before 3.12 (inside asyncssh's connect) can return a finished
    connection instead of raising the cancellation it was given. Fleet.close must still end,
    and close that late connection, instead of waiting on it forever (a CLI that had printed
    its answer hung at exit this way under load)."""
    import tui.transport.ssh as ssh_mod

    real = ssh_mod.open_connection
    late: list = []

    async def swallowing(host, tunnel=None):
        inner = asyncio.ensure_future(real(host, tunnel))
        while True:
            try:
                conn, client = await asyncio.shield(inner)
            except asyncio.CancelledError:
                continue  # what wait_for does when the inner finished as it was cancelled
            late.append(conn)
            return conn, client

    monkeypatch.setattr(ssh_mod, "open_connection", swallowing)
    inv = load_inventory(hosts_yaml(ns_cluster3, tmp_path / "hosts.yaml"))
    fleet = Fleet(inv)
    fleet.start()
    await asyncio.sleep(0.05)  # every host is connecting now
    t0 = time.monotonic()
    await asyncio.wait_for(fleet.close(), 15)
    assert time.monotonic() - t0 < 12
    await until(lambda: late and all(conn.is_closed() for conn in late), 0.5, "late conns closed")
    assert {s.state for s in fleet.statuses()} == {HostState.CLOSED}
