"""SSH errors name the cause and the file (issue 10, item 6), against real OpenSSH hosts in
namespaces: through the CLI (`verl-tui gpus HOSTS --once`) and the Fleet's LinkStatus.
IPv6 literal addresses reach a real sshd over real SSH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tui.config.hosts import load_inventory
from tui.transport import sshfiles
from tui.transport.fleet import Fleet
from tui.transport.types import HostState

CLI = str(Path(sys.executable).parent / "verl-tui")


def hosts_yaml(
    cluster,
    path: Path,
    *,
    identity: Path | str | None = None,
    known_hosts: Path | str | None = None,
    config: str = "''",
    addresses: dict[str, str] | None = None,
    port: int | None = None,
) -> Path:
    lines = [
        "cluster: sshtest",
        f"python: {sys.executable}",
        "ssh:",
        "  user: root",
        f"  identity_file: {identity or cluster.client_key}",
        f"  known_hosts: {known_hosts or cluster.known_hosts}",
        f"  config: {config}",
        "  connect_timeout: 5",
    ]
    if port:
        lines.append(f"  port: {port}")
    lines.append("hosts:")
    for h in cluster.hosts:
        addr = (addresses or {}).get(h.name, h.address)
        lines += [f"  - name: {h.name}", f'    address: "{addr}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _env_without_agent() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}


def run_gpus(
    path: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [CLI, "gpus", str(path), "--once", "--timeout", "15"],
        capture_output=True,
        text=True,
        timeout=90,
        env=env or _env_without_agent(),
    )
    return proc, time.monotonic() - start


async def fleet_errors(path: Path) -> dict[str, tuple[HostState, str]]:
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        await fleet.wait_settled(20)
        return {s.host: (s.state, s.error or "") for s in fleet.statuses()}


def _keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True
    )
    return path


def _case(name: str, cluster, tmp: Path) -> tuple[dict, HostState, str]:
    """(hosts_yaml keyword arguments, expected state, expected message) for one failure."""
    key = cluster.client_key
    if name == "identity-missing":
        p = tmp / "nokey"
        return {"identity": p}, HostState.AUTH_FAILED, f"identity file not found: {p}"
    if name == "identity-in-missing-dir":
        p = tmp / "nodir" / "key"
        return {"identity": p}, HostState.AUTH_FAILED, f"identity file not found: {p}"
    if name == "identity-directory":
        p = tmp / "keydir"
        p.mkdir()
        return {"identity": p}, HostState.AUTH_FAILED, f"identity file {p} is a directory"
    if name == "identity-fifo":
        p = tmp / "keyfifo"
        os.mkfifo(p)
        return {"identity": p}, HostState.AUTH_FAILED, f"identity file {p} is a FIFO"
    if name == "identity-not-a-key":
        p = tmp / "notakey"
        p.write_text("hello\n")
        p.chmod(0o600)
        return {"identity": p}, HostState.AUTH_FAILED, f"identity file {p} is not a private key"
    if name == "identity-public-key":
        p = tmp / "pubkey"
        shutil.copy(key.with_suffix(".pub"), p)
        p.chmod(0o600)
        return {"identity": p}, HostState.AUTH_FAILED, "it holds a public key"
    if name == "identity-0644":
        p = tmp / "open_key"
        shutil.copy(key, p)
        p.chmod(0o644)
        return (
            {"identity": p},
            HostState.AUTH_FAILED,
            f"unprotected private key file {p}: permissions 0644 are too open",
        )
    if name == "identity-0640":
        p = tmp / "group_key"
        shutil.copy(key, p)
        p.chmod(0o640)
        return (
            {"identity": p},
            HostState.AUTH_FAILED,
            f"unprotected private key file {p}: permissions 0640 are too open",
        )
    if name == "identity-encrypted-no-agent":
        p = tmp / "enc_key"
        shutil.copy(key, p)
        p.chmod(0o600)
        subprocess.run(
            ["ssh-keygen", "-q", "-p", "-P", "", "-N", "secret", "-f", str(p)], check=True
        )
        return (
            {"identity": p},
            HostState.AUTH_FAILED,
            f"identity file {p} is encrypted (passphrase-protected) and no ssh-agent",
        )
    if name == "known-hosts-missing":
        p = tmp / "no_known_hosts"
        return ({"known_hosts": p}, HostState.HOST_KEY_UNKNOWN, f"known_hosts file not found: {p}")
    if name == "known-hosts-directory":
        p = tmp / "khdir"
        p.mkdir()
        return (
            {"known_hosts": p},
            HostState.HOST_KEY_UNKNOWN,
            f"known_hosts file {p} is a directory",
        )
    if name == "known-hosts-garbage":
        p = tmp / "kh_garbage"
        p.write_text(cluster.known_hosts.read_text().splitlines()[0] + "\ngarbage\n")
        return ({"known_hosts": p}, HostState.HOST_KEY_UNKNOWN, f"known_hosts {p}:2: invalid entry")
    if name == "ssh-config-missing":
        p = tmp / "no_ssh_config"
        return ({"config": str(p)}, HostState.UNREACHABLE, f"ssh config file not found: {p}")
    if name == "ssh-config-directory":
        p = tmp / "cfgdir"
        p.mkdir()
        return ({"config": str(p)}, HostState.UNREACHABLE, f"ssh config file {p} is a directory")
    raise KeyError(name)


CASES = [
    "identity-missing",
    "identity-in-missing-dir",
    "identity-directory",
    "identity-fifo",
    "identity-not-a-key",
    "identity-public-key",
    "identity-0644",
    "identity-0640",
    "identity-encrypted-no-agent",
    "known-hosts-missing",
    "known-hosts-directory",
    "known-hosts-garbage",
    "ssh-config-missing",
    "ssh-config-directory",
]


@pytest.mark.parametrize("name", CASES)
async def test_file_problem_named_in_cli_and_fleet(name, ns_cluster3, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    kwargs, state, message = _case(name, ns_cluster3, tmp_path)
    path = hosts_yaml(ns_cluster3, tmp_path / "hosts.yaml", **kwargs)

    proc, took = run_gpus(path)
    print(f"{name}: gpus exit {proc.returncode} in {took:.2f} s")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1, (proc.stdout, proc.stderr)  # no host answered
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3, proc.stdout  # one line per host, each naming the file
    for line in lines:
        assert message in line, line
    assert took < 30  # checked before connecting: no timeouts waited out

    sshfiles.clear_cache()
    errors = await fleet_errors(path)
    assert set(errors) == {"node1", "node2", "node3"}
    for host, (st, err) in errors.items():
        assert st == state, (host, st, err)
        assert message in err, (host, err)
    # Three hosts, one file: checked (read, parsed) once.
    assert len([k for k in sshfiles._cache if k[0] in ("identity", "known_hosts")]) <= 2


async def test_fixed_file_is_seen_at_the_next_connect(ns_cluster3, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    p = tmp_path / "key"
    shutil.copy(ns_cluster3.client_key, p)
    p.chmod(0o644)
    path = hosts_yaml(ns_cluster3, tmp_path / "hosts.yaml", identity=p)
    errors = await fleet_errors(path)
    assert all("unprotected private key file" in e for _, e in errors.values())
    p.chmod(0o600)
    errors = await fleet_errors(path)
    assert all(st == HostState.UP for st, _ in errors.values()), errors


async def test_encrypted_key_is_used_through_the_agent(ns_cluster3, tmp_path, monkeypatch):
    """An encrypted identity file with a running ssh-agent that holds it: connects (asyncssh
    is told to leave the file to the agent)."""
    p = tmp_path / "enc_key"
    shutil.copy(ns_cluster3.client_key, p)
    shutil.copy(ns_cluster3.client_key.with_suffix(".pub"), p.with_suffix(".pub"))
    p.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "secret", "-f", str(p)], check=True)
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        askpass = tmp_path / "askpass.sh"
        askpass.write_text("#!/bin/sh\necho secret\n")
        askpass.chmod(0o700)
        env = {
            **os.environ,
            "SSH_AUTH_SOCK": str(sock),
            "SSH_ASKPASS": str(askpass),
            "SSH_ASKPASS_REQUIRE": "force",
            "DISPLAY": ":0",
        }
        subprocess.run(
            ["ssh-add", str(p)],
            env=env,
            check=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=30,
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        path = hosts_yaml(ns_cluster3, tmp_path / "hosts.yaml", identity=p)
        errors = await fleet_errors(path)
        assert all(st == HostState.UP for st, _ in errors.values()), errors
        # Without the agent: the file is named and the cause said.
        monkeypatch.delenv("SSH_AUTH_SOCK")
        sshfiles.clear_cache()
        errors = await fleet_errors(path)
        assert all("is encrypted" in e and str(p) in e for _, e in errors.values()), errors
    finally:
        agent.terminate()
        agent.wait(10)


def test_ipv6_addresses_are_valid_in_hosts_yaml(tmp_path):
    for addr in ("::1", "[fe80::1%eth0]", "fd00::5", "[fd00::5]", "2001:db8::1"):
        path = tmp_path / "h.yaml"
        path.write_text(
            f'hosts:\n  - name: a\n    address: "{addr}"\n'
            f'    ssh: {{jump: "root@[fd00::9]:2222"}}\n'
        )
        inv = load_inventory(path)
        assert inv.hosts[0].address == addr.strip("[]")
    for bad in ("fe80::1%eth0;ls", "[::1", "::g", "a:b"):
        path.write_text(f'hosts:\n  - name: a\n    address: "{bad}"\n')
        proc = subprocess.run(
            [CLI, "gpus", str(path), "--once"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2 and f"{path}:3:" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


async def test_ipv6_host_over_real_ssh(ns_cluster_factory, tmp_path):
    cluster = ns_cluster_factory(1)
    host = cluster.hosts[0]
    octet = cluster.subnet.rsplit(".", 1)[1]
    bridge_v6, host_v6 = f"fd00:{octet}::1", f"fd00:{octet}::11"
    subprocess.run(
        ["ip", "-6", "addr", "add", f"{bridge_v6}/64", "dev", cluster.bridge, "nodad"], check=True
    )
    subprocess.run(
        ["ip", "-n", host.netns, "-6", "addr", "add", f"{host_v6}/64", "dev", "eth0", "nodad"],
        check=True,
    )
    # A second sshd in the host, on its IPv6 address, port 2222, same host key.
    cfg = host.workdir / "sshd_config_v6"
    cfg.write_text(
        host.sshd_config.read_text().replace(
            f"ListenAddress {host.address}:22", f"ListenAddress [{host_v6}]:2222"
        )
    )
    v6 = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            host.netns,
            "/usr/sbin/sshd",
            "-D",
            "-f",
            str(cfg),
            "-E",
            str(host.workdir / "sshd_v6.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while (
            subprocess.run(
                ["ip", "netns", "exec", host.netns, "ss", "-ltn", "sport = :2222"],
                capture_output=True,
                text=True,
            ).stdout.count("2222")
            == 0
        ):
            assert time.monotonic() < deadline, "the IPv6 sshd did not listen"
            time.sleep(0.05)
        # known_hosts as OpenSSH writes it for a non-22 port: [addr]:port key
        kh = tmp_path / "known_hosts_v6"
        kh.write_text(f"[{host_v6}]:2222 {host.host_key_pub}\n")
        path = hosts_yaml(
            cluster,
            tmp_path / "hosts.yaml",
            known_hosts=kh,
            port=2222,
            addresses={host.name: host_v6},
        )
        errors = await fleet_errors(path)
        assert errors[host.name][0] == HostState.UP, errors
        proc, _ = run_gpus(path)
        assert "Traceback" not in proc.stderr
        assert proc.stdout.startswith(f"{host.name}  ["), proc.stdout
        assert "[unreachable]" not in proc.stdout and "[auth" not in proc.stdout, proc.stdout
        # The bracket form in hosts.yaml works the same; an unknown key names [addr]:port.
        kh.write_text("")
        path = hosts_yaml(
            cluster,
            tmp_path / "h2.yaml",
            known_hosts=kh,
            port=2222,
            addresses={host.name: f"[{host_v6}]"},
        )
        errors = await fleet_errors(path)
        st, err = errors[host.name]
        assert st == HostState.HOST_KEY_UNKNOWN and f"[{host_v6}]:2222 is not in {kh}" in err
        assert f"ssh-keyscan -p 2222 {host_v6}" in err
    finally:
        v6.terminate()
        v6.wait(10)
