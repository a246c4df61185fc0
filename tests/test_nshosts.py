"""The namespace-host harness itself, checked with the real OpenSSH client."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from harness.nshosts import HarnessError, NsCluster


def ssh_argv(
    cluster: NsCluster,
    address: str,
    command: str,
    *,
    known_hosts: Path | None = None,
    connect_timeout: int = 3,
) -> list[str]:
    return [
        "ssh",
        "-F",
        "none",
        "-i",
        str(cluster.client_key),
        "-o",
        f"UserKnownHostsFile={known_hosts or cluster.known_hosts}",
        "-o",
        "GlobalKnownHostsFile=none",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
        f"root@{address}",
        command,
    ]


def ssh(cluster: NsCluster, name: str, command: str, **kw) -> subprocess.CompletedProcess:
    address = kw.pop("address", None) or cluster.host(name).address
    return subprocess.run(
        ssh_argv(cluster, address, command, **kw),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def our_objects(cluster: NsCluster) -> list[str]:
    netns = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout
    names = [e["name"] for e in json.loads(netns or "[]")]
    names += [e["ifname"] for e in json.loads(links or "[]")]
    return [n for n in names if n.startswith(cluster.prefix)]


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(entry))
    return found


def test_each_host_answers_with_its_own_hostname(ns_cluster3: NsCluster) -> None:
    assert [h.name for h in ns_cluster3.hosts] == ["node1", "node2", "node3"]
    assert len({h.address for h in ns_cluster3.hosts}) == 3
    for host in ns_cluster3.hosts:
        result = ssh(ns_cluster3, host.name, "hostname; echo $VERL_TUI_TEST_HOST")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [host.name, host.name]


def test_known_hosts_lists_every_real_key(ns_cluster3: NsCluster) -> None:
    lines = ns_cluster3.known_hosts.read_text().splitlines()
    assert lines == [f"{h.address} {h.host_key_pub}" for h in ns_cluster3.hosts]
    for host in ns_cluster3.hosts:
        assert host.host_key_pub.startswith("ssh-ed25519 AAAA")
        scanned = subprocess.run(
            ["ssh-keyscan", "-t", "ed25519", host.address],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        assert f"{host.address} {host.host_key_pub}" in scanned


def test_host_env_reaches_the_session(ns_cluster_factory) -> None:
    tricky = 'with space "quoted" back\\slash $NOT_EXPANDED'
    cluster = ns_cluster_factory(
        2,
        host_env={
            "node1": {
                "FAKE_NVML_STATE": "/tmp/state.json",
                "LD_LIBRARY_PATH": "/opt/fake",
                "TRICKY": tricky,
            },
        },
    )
    out = ssh(
        cluster,
        "node1",
        'printf "%s|%s|%s|%s" "$VERL_TUI_TEST_HOST" "$FAKE_NVML_STATE" '
        '"$LD_LIBRARY_PATH" "$TRICKY"',
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"node1|/tmp/state.json|/opt/fake|{tricky}"
    out = ssh(cluster, "node2", 'printf "%s|%s" "$VERL_TUI_TEST_HOST" "${FAKE_NVML_STATE-unset}"')
    assert out.stdout == "node2|unset"


def test_wrong_or_missing_known_hosts_entry_is_refused(
    ns_cluster3: NsCluster, tmp_path: Path
) -> None:
    node1, node2 = ns_cluster3.host("node1"), ns_cluster3.host("node2")
    wrong = tmp_path / "known_hosts_wrong"
    wrong.write_text(f"{node1.address} {node2.host_key_pub}\n")
    result = ssh(ns_cluster3, "node1", "hostname", known_hosts=wrong)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr
    assert "node1" not in result.stdout

    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    result = ssh(ns_cluster3, "node1", "hostname", known_hosts=empty)
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr


def test_tmp_ray_is_private_per_host(ns_cluster3: NsCluster) -> None:
    marker = f"/tmp/ray/marker-{uuid.uuid4().hex}"
    assert ssh(ns_cluster3, "node1", f"touch {marker}").returncode == 0
    try:
        assert ssh(ns_cluster3, "node1", f"test -e {marker}").returncode == 0
        assert ssh(ns_cluster3, "node2", f"test -e {marker}").returncode == 1
        assert ns_cluster3.exec_in("node3", ["test", "-e", marker]).returncode == 1
        assert not Path(marker).exists()  # nor in the test's own namespace
    finally:
        ssh(ns_cluster3, "node1", f"rm -f {marker}")


def test_exec_in_and_host_to_host_traffic(ns_cluster3: NsCluster) -> None:
    result = ns_cluster3.exec_in("node2", ["hostname"])
    assert result.stdout.strip() == "node2"
    pid1 = ns_cluster3.exec_in("node2", ["cat", "/proc/1/cmdline"]).stdout
    assert pid1.startswith("sshd")
    # node2 reaches node3's sshd across the bridge; no default route inside.
    probe = (
        "import socket,sys; s=socket.create_connection((sys.argv[1],22),timeout=3); "
        "print(s.recv(64).decode().strip())"
    )
    node3 = ns_cluster3.host("node3").address
    result = ns_cluster3.exec_in("node2", ["python3", "-c", probe, node3])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("SSH-2.0-OpenSSH")
    routes = ns_cluster3.exec_in("node2", ["ip", "route"]).stdout
    assert "default" not in routes


def test_kill_host_then_start_host_keeps_the_host_key(ns_cluster_factory) -> None:
    cluster = ns_cluster_factory(2)
    node1 = cluster.host("node1")
    # Something long-lived inside node1, detached from the ssh session.
    assert ssh(cluster, "node1", "nohup sleep 600 >/dev/null 2>&1 &").returncode == 0
    in_ns = subprocess.run(
        ["ip", "netns", "pids", node1.netns], capture_output=True, text=True
    ).stdout.split()
    assert len(in_ns) >= 3  # unshare, sshd, sleep
    old_pid = node1.sshd_pid

    cluster.kill_host("node1")
    assert node1.sshd_pid is None
    assert (
        subprocess.run(
            ["ip", "netns", "pids", node1.netns], capture_output=True, text=True
        ).stdout.split()
        == []
    )
    down = ssh(cluster, "node1", "hostname")
    assert down.returncode == 255
    assert "Connection refused" in down.stderr
    assert ssh(cluster, "node2", "hostname").stdout.strip() == "node2"
    with pytest.raises(HarnessError):
        cluster.exec_in("node1", ["true"])

    cluster.start_host("node1")
    assert node1.sshd_pid not in (None, old_pid)
    # StrictHostKeyChecking=yes with the original known_hosts: same key.
    up = ssh(cluster, "node1", "hostname; ls -A /tmp/ray | wc -l")
    assert up.returncode == 0, up.stderr
    assert up.stdout.split() == ["node1", "0"]


def test_link_down_is_a_silent_partition(ns_cluster_factory) -> None:
    cluster = ns_cluster_factory(2)
    assert ssh(cluster, "node1", "hostname").returncode == 0
    pid = cluster.host("node1").sshd_pid

    cluster.link_down("node1")
    cut = ssh(cluster, "node1", "hostname", connect_timeout=1)
    assert cut.returncode == 255
    assert "timed out" in cut.stderr  # not "refused", not "No route to host"
    assert ssh(cluster, "node2", "hostname").stdout.strip() == "node2"
    assert cluster.host("node1").sshd_pid == pid  # nothing was killed

    cluster.link_up("node1")
    back = ssh(cluster, "node1", "hostname")
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == "node1"


def test_unused_address_does_not_answer(ns_cluster3: NsCluster) -> None:
    address = ns_cluster3.unused_address()
    assert address.rsplit(".", 1)[0] == ns_cluster3.bridge_ip.rsplit(".", 1)[0]
    assert address not in {h.address for h in ns_cluster3.hosts}
    result = ssh(ns_cluster3, "node1", "hostname", address=address, connect_timeout=1)
    assert result.returncode == 255
    assert "timed out" in result.stderr


def test_write_hosts_yaml(ns_cluster3: NsCluster, tmp_path: Path) -> None:
    path = ns_cluster3.write_hosts_yaml(tmp_path / "hosts.yaml", python="/usr/bin/python3")
    n1, n2, n3 = ns_cluster3.hosts
    assert path.read_text() == (
        f"cluster: {ns_cluster3.prefix}\n"
        "python: /usr/bin/python3\n"
        "ssh:\n"
        "  user: root\n"
        "  port: 22\n"
        f"  identity_file: {ns_cluster3.client_key}\n"
        f"  known_hosts: {ns_cluster3.known_hosts}\n"
        "hosts:\n"
        f"  - name: node1\n    address: {n1.address}\n"
        f"  - name: node2\n    address: {n2.address}\n"
        f"  - name: node3\n    address: {n3.address}\n"
    )
    path = ns_cluster3.write_hosts_yaml(
        tmp_path / "sub.yaml",
        python="/opt/py env/bin/python",
        names=["node3", "node1"],
        extra_host_fields={"node3": {"role": "head", "ssh": {"connect_timeout": 2}}},
    )
    data = yaml.safe_load(path.read_text())
    assert data["python"] == "/opt/py env/bin/python"
    assert data["hosts"] == [
        {"name": "node3", "address": n3.address, "role": "head", "ssh": {"connect_timeout": 2}},
        {"name": "node1", "address": n1.address},
    ]
    from tui.config.hosts import load_inventory

    inventory = load_inventory(path)
    assert inventory.head.name == "node3"
    assert inventory.host("node1").ssh.known_hosts == str(ns_cluster3.known_hosts)


def test_stop_leaves_nothing_behind(tmp_path: Path) -> None:
    cluster = NsCluster(2, tmp_path / "c")
    cluster.start()
    pids = [h.sshd_pid for h in cluster.hosts]
    assert our_objects(cluster)
    assert processes_mentioning(str(cluster.workdir))
    cluster.link_down("node2")  # a cut link must not get in the way

    cluster.stop()
    assert our_objects(cluster) == []
    assert processes_mentioning(str(cluster.workdir)) == []
    assert not any(Path(f"/proc/{p}").exists() for p in pids)
    cluster.stop()  # idempotent
    with pytest.raises(HarnessError):
        cluster.start()


def test_a_host_that_cannot_start_fails_loudly(tmp_path: Path) -> None:
    cluster = NsCluster(1, tmp_path / "bad", sshd="/bin/false", start_timeout=5)
    with pytest.raises(HarnessError, match="sshd of node1 exited with status"):
        cluster.start()
    assert our_objects(cluster) == []  # a failed start cleans up after itself
