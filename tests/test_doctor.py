"""The preflight doctor and the host probe over real OpenSSH hosts in network namespaces.

One module-wide cluster of three hosts (fake NVML GPUs through sshd's SetEnv) serves every
scenario: each test changes one thing — hosts.yaml, a host's interfaces, routes, mounts, a
listener, the fake GPU count — runs the doctor for real, and puts the thing back. Checks whose
cause cannot be made real here (clock skew: the namespaces share one clock) are tested on the
pure functions that decide them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import yaml
from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli
from harness.nshosts import NsCluster
from harness.pythons import other_patch_release
from textual.app import App
from textual.widgets import DataTable

from tui.cluster.doctor import (
    CHECKS,
    Finding,
    IfSpec,
    arrange,
    classify_clock_offsets,
    classify_port,
    evaluate,
    run_doctor,
)
from tui.cluster.probe import (
    HostFacts,
    Listener,
    NetInterface,
    facts_from_json,
    probe_all,
    probe_argv,
)
from tui.commands.check import format_table, run_check
from tui.config.hosts import Inventory, load_inventory, local_inventory
from tui.screens.doctor import DoctorScreen
from tui.screens.help import collect_bindings
from tui.transport.fleet import Fleet

NAMES = ("node1", "node2", "node3")

# --------------------------------------------------------------------------- fixtures


class Env:
    def __init__(self, cluster: NsCluster, root: Path, states: dict[str, Path]):
        self.cluster = cluster
        self.root = root
        self.states = states
        self.count = 0

    def addr(self, name: str) -> str:
        return self.cluster.host(name).address

    def set_gpus(self, counts: dict[str, int | None]) -> None:
        """Fake GPUs per host; None: the state file is gone (NVML init fails)."""
        for name, n in counts.items():
            if n is None:
                self.states[name].unlink(missing_ok=True)
            else:
                write_state(self.states[name], [FakeGpu() for _ in range(n)])

    def inventory(
        self,
        *,
        python: str = sys.executable,
        hosts: dict[str, dict] | None = None,
        ray: dict | None = None,
        extra_hosts: list[dict] | None = None,
    ) -> Inventory:
        self.count += 1
        data = {
            "cluster": "doctortest",
            "python": python,
            "ssh": {
                "user": "root",
                "identity_file": str(self.cluster.client_key),
                "known_hosts": str(self.cluster.known_hosts),
                "config": "",
                "connect_timeout": 2,
            },
            # 2 fake GPUs per host by default, and 2 real CPUs: ray.num_cpus keeps verl's
            # 3 CPUs per GPU satisfied unless a test says otherwise.
            "ray": {"num_cpus": 6, **(ray or {})},
            "hosts": [
                {"name": n, "address": self.addr(n), **(hosts or {}).get(n, {})} for n in NAMES
            ]
            + (extra_hosts or []),
        }
        path = self.root / f"hosts{self.count}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return load_inventory(path)

    def ns(self, name: str, *argv: str) -> None:
        res = self.cluster.exec_in(name, list(argv))
        assert res.returncode == 0, f"{argv} in {name}: {res.stderr}"


@pytest.fixture(scope="module")
def dc(ns_hosts, tmp_path_factory, fake_nvml_lib):
    root = tmp_path_factory.mktemp("doctor")
    states = {n: root / f"{n}.nvml" for n in NAMES}
    host_env = {
        n: {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(states[n])} for n in NAMES
    }
    cluster = ns_hosts(3, root / "cluster", host_env=host_env)
    try:
        yield Env(cluster, root, states)
    finally:
        cluster.stop()


@pytest.fixture
def env(dc):
    dc.set_gpus({n: 2 for n in NAMES})
    return dc


@pytest.fixture(scope="module")
def venvs(tmp_path_factory) -> dict[str, str]:
    """Real venvs of a Python of our minor version, another patch release: one bare (no ray),
    one that sees our ray."""
    other, _ = other_patch_release()
    root = tmp_path_factory.mktemp("venvs")
    out = {}
    for kind in ("noray", "patch"):
        subprocess.run(
            [other, "-m", "venv", "--without-pip", str(root / kind)],
            check=True,
            capture_output=True,
        )
        out[kind] = str(root / kind / "bin" / "python")
    site = subprocess.run(
        [out["patch"], "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    # Same minor version, so our venv's packages (ray 2.60) import there; only the patch differs.
    Path(site.stdout.strip(), "verl_tui_test_ray.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    return out


@pytest.fixture(scope="module")
def fakesite(tmp_path_factory) -> Path:
    """A site dir holding only metadata: numexpr, mkl and mkl-service 'installed'."""
    root = tmp_path_factory.mktemp("fakesite")
    for dist, version in (("numexpr", "2.10.1"), ("mkl", "2024.2.0"), ("mkl_service", "2.4.1")):
        info = root / f"{dist}-{version}.dist-info"
        info.mkdir()
        name = dist.replace("_", "-")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


async def doctor(inv: Inventory, timeout: float = 30) -> list[Finding]:
    async with Fleet(inv) as fleet:
        return await run_doctor(fleet, inv, timeout=timeout)


def where(f: Finding) -> set[str]:
    """The hosts a finding is about (folded rows name theirs: "(2 hosts: a, b)", "(all 3 …)")."""
    if f.host is not None:
        return {f.host}
    if re.search(r"\((?:ok on )?all \d+ hosts\)$", f.finding):
        return set(NAMES)
    m = re.search(r"\((?:ok on )?\d+ hosts: ([^)]*)\)$", f.finding)
    return set(m.group(1).split(", ")) if m else set()


def hosts_with(findings: list[Finding], check: str, status: str) -> set[str]:
    out: set[str] = set()
    for f in findings:
        if f.check == check and f.status == status:
            out |= where(f)
    return out


def rows(findings: list[Finding], check: str, status: str | None = None) -> list[Finding]:
    return [f for f in findings if f.check == check and (status is None or f.status == status)]


def show(findings: list[Finding]) -> str:
    return format_table(findings)


_LISTEN = r"""
import ctypes, signal, socket, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: our comm
signal.alarm(120)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[2])))
s.listen(16)
print("ready", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def listener_in(env: Env, name: str, port: int, comm: str):
    """A program named `comm` listening on `port` inside host `name`, until the block ends."""
    pid = env.cluster.host(name).sshd_pid
    proc = subprocess.Popen(
        [
            "nsenter",
            f"--target={pid}",
            "--net",
            "--pid",
            "--mount",
            "--",
            sys.executable,
            "-c",
            _LISTEN,
            comm,
            str(port),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.stdin.close()
        proc.wait(10)


def listening(env: Env, name: str, port: int) -> bool:
    """Whether anything listens on TCP `port` in host `name`'s network namespace."""
    pid = env.cluster.host(name).sshd_pid
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


# --------------------------------------------------------------------------- probe


async def test_probe_reports_each_host(env):
    env.set_gpus({"node1": 2, "node2": 4, "node3": None})
    inv = env.inventory(ray={"env": {"NCCL_SOCKET_IFNAME": "eth0", "HF_HOME": str(env.root)}})
    async with Fleet(inv) as fleet:
        facts = await probe_all(fleet, inv, timeout=20)
    assert list(facts) == list(NAMES)
    for name, f in facts.items():
        assert f.ok and f.error is None, f.error
        assert f.hostname == name  # it ran inside that host
        assert f.python_version == platform.python_version()
        assert f.python_executable == sys.executable
        assert Path(f.python_realpath).resolve() == Path(sys.executable).resolve()
        assert f.ray_version == "2.60.0"
        assert f.verl_version == _installed_version("verl")  # read by the probe on the host
        assert f.nvml_py_version is not None
        assert f.cpu_count and f.cpu_count >= 1 and f.ray_cpu_count
        assert 0 < f.mem_available_bytes <= f.mem_total_bytes
        eth0 = next(i for i in f.interfaces if i.name == "eth0")
        assert eth0.ipv4 == (env.addr(name),) and eth0.up and not eth0.loopback
        assert next(i for i in f.interfaces if i.name == "lo").loopback
        # ray.env is exported for the probe: it sees what `ray start` will see.
        assert f.env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert f.hf_cache.path == str(env.root / "hub") and f.hf_cache.writable
        assert f.listeners == {6379: None, 8265: None}
        assert not f.ray_running and f.ray_processes == {}
        assert f.rtt_s is not None and 0 < f.rtt_s < 20
        assert abs(f.clock_offset_s) < f.rtt_s  # one clock: the offset is within the rtt
        assert f.ib_source is None and f.probe_errors == {}
    assert (facts["node1"].gpu_count, facts["node2"].gpu_count) == (2, 4)
    assert facts["node1"].gpu_source == "nvml" and facts["node1"].driver_version == "550.54.15"
    assert facts["node3"].gpu_count is None and "NVML" in facts["node3"].gpu_error


async def test_probe_of_missing_interpreter_and_dead_host(env):
    inv = env.inventory(
        hosts={"node2": {"python": "/nonexistent/bin/python3"}},
        extra_hosts=[{"name": "ghost", "address": env.cluster.unused_address()}],
    )
    async with Fleet(inv) as fleet:
        t0 = time.monotonic()
        facts = await probe_all(fleet, inv, timeout=20)
        spent = time.monotonic() - t0
    assert facts["node1"].ok
    bad = facts["node2"]
    assert not bad.ok and bad.reached
    assert bad.error.startswith("interpreter not found: /nonexistent/bin/python3")
    ghost = facts["ghost"]
    assert not ghost.ok and not ghost.reached and "unreachable" in ghost.error
    assert "\n" not in bad.error and "\n" not in ghost.error
    assert spent < 10  # a host that failed to connect fails at once, it is not waited for


def test_probe_script_runs_on_other_interpreters(tmp_path):
    """Stdlib only, Python 3.8+: it answers with whatever interpreter a host has."""
    import glob
    import os

    pythons = [sys.executable, other_patch_release()[0]]
    pythons += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))[:1]
    for python in pythons:
        # A stray json.py in the working directory must not shadow the stdlib.
        (tmp_path / "json.py").write_text("raise SystemExit('shadowed')\n")
        res = subprocess.run(
            probe_argv(python, [1]), capture_output=True, text=True, cwd=tmp_path, timeout=30
        )
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        assert data["errors"] == {}, (python, data["errors"])
        facts = facts_from_json("h", data)
        assert (
            facts.python_version
            == subprocess.run(
                [python, "-c", "import platform; print(platform.python_version())"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        assert facts.listeners == {1: None}


# --------------------------------------------------------------------------- doctor, real


async def test_baseline_cluster_passes(env):
    inv = env.inventory()
    t0 = time.monotonic()
    findings = await doctor(inv)
    spent = time.monotonic() - t0
    fails = [f for f in findings if f.status == "fail"]
    assert not fails, show(findings)
    # Only what this venv really lacks is a warning.
    assert {f.check for f in findings if f.status == "warn"} <= {"verl-installed", "debugpy"}, show(
        findings
    )
    assert {f.check for f in findings} == set(CHECKS), show(findings)
    for check in (
        "ssh-reach",
        "python-interpreter",
        "ray-installed",
        "socket-ifname",
        "infiniband",
        "hf-cache",
        "memory",
        "clock-skew",
        "numexpr-threads",
        "mkl-threading",
        "cpus-per-gpu",
    ):
        assert hosts_with(findings, check, "ok") == set(NAMES), (check, show(findings))
    assert hosts_with(findings, "gcs-reach", "ok") == {"node2", "node3"}
    assert "test listener" in rows(findings, "gcs-reach")[0].finding
    assert [f.finding for f in rows(findings, "gpu-count")] == ["2 GPU(s) on each of 3 node(s)"]
    assert [f.status for f in rows(findings, "head-ports")] == ["ok", "ok"]
    assert all(f.title == CHECKS[f.check] and "\n" not in f.finding + f.fix for f in findings)
    # The temporary GCS listener is gone once the doctor returns.
    assert not listening(env, "node1", 6379)
    assert spent < 20


async def test_ssh_problems_named_with_their_fix(env, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-f", str(stranger)], check=True)
    inv = env.inventory(
        hosts={
            "node2": {"ssh": {"known_hosts": str(empty)}},
            "node3": {"ssh": {"identity_file": str(stranger)}},
        }
    )
    findings = await doctor(inv)
    reach = {f.host: f for f in rows(findings, "ssh-reach", "fail")}
    assert set(reach) == {"node2", "node3"}, show(findings)
    assert reach["node2"].finding.startswith("host key unknown:")
    assert f"ssh-keyscan {env.addr('node2')} >> {empty}" in reach["node2"].fix
    assert reach["node3"].finding.startswith("auth failed: key authentication refused")
    assert "ssh.identity_file" in reach["node3"].fix
    # Hosts that cannot be reached get no other rows: one cause, one row.
    assert all(not where(f) & {"node2", "node3"} for f in findings if f.check != "ssh-reach")


async def test_interpreter_without_ray_fails(env, venvs):
    inv = env.inventory(
        hosts={"node2": {"python": venvs["noray"]}, "node3": {"python": "/nonexistent/bin/python3"}}
    )
    findings = await doctor(inv)
    [missing] = rows(findings, "ray-installed", "fail")
    assert missing.host == "node2" and "ray is not installed" in missing.finding
    assert missing.fix == f"{venvs['noray']} -m pip install 'ray[default]==2.60.0'"
    [interp] = rows(findings, "python-interpreter", "fail")
    assert interp.host == "node3" and "interpreter not found" in interp.finding
    assert "python:" in interp.fix
    # No pynvml in a bare venv: the GPU count is unknown there, said plainly.
    assert "node2" in hosts_with(findings, "gpu-count", "warn")


async def test_python_patch_mismatch_fails_naming_both(env, venvs):
    ours = platform.python_version()
    theirs = subprocess.run(
        [venvs["patch"], "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert theirs != ours and theirs.rsplit(".", 1)[0] == ours.rsplit(".", 1)[0]
    inv = env.inventory(hosts={"node3": {"python": venvs["patch"]}})
    findings = await doctor(inv)
    [bad] = rows(findings, "python-version", "fail")
    assert bad.host == "node3", show(findings)
    assert theirs in bad.finding and ours in bad.finding and "head node1" in bad.finding
    # ray itself imports there (same minor) and is the same version: only Python differs.
    assert not rows(findings, "ray-installed", "fail") and not rows(findings, "ray-version", "fail")
    # Ray's own escape hatch turns it into a warning.
    inv = env.inventory(
        hosts={"node3": {"python": venvs["patch"]}},
        ray={"env": {"RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor"}},
    )
    findings = await doctor(inv)
    assert [f.status for f in rows(findings, "python-version")] == ["warn"]


async def test_head_ports_held_by_another_program(env):
    inv = env.inventory()
    with (
        listener_in(env, "node1", 6379, "fakeredis"),
        listener_in(env, "node1", 8265, "gcs_server"),
    ):
        findings = await doctor(inv)
    gcs, dash = rows(findings, "head-ports")
    assert gcs.status == "fail" and gcs.host == "node1", show(findings)
    assert re.search(r"port 6379 \(GCS\) is held by fakeredis \(pid \d+\)", gcs.finding)
    assert "ray.port: 6380" in gcs.fix and "kill" in gcs.fix
    # A process that is Ray's own is fine (a running cluster holds its ports).
    assert dash.status == "ok" and "held by Ray (gcs_server" in dash.finding
    # Something listens already, so the workers connect to it instead of a test listener.
    assert hosts_with(findings, "gcs-reach", "ok") == {"node2", "node3"}
    assert "node1's GCS port" in rows(findings, "gcs-reach")[0].finding


async def test_gcs_port_unreachable_from_one_worker(env):
    head = env.addr("node1")
    inv = env.inventory()
    env.ns("node3", "ip", "route", "add", "blackhole", f"{head}/32")
    try:
        findings = await doctor(inv)
    finally:
        env.ns("node3", "ip", "route", "del", "blackhole", f"{head}/32")
    # SSH from here still reaches node3: only its way to the head is cut.
    assert hosts_with(findings, "ssh-reach", "ok") == set(NAMES)
    [bad] = rows(findings, "gcs-reach", "fail")
    assert bad.host == "node3", show(findings)
    assert f"cannot reach {head}:6379" in bad.finding and "Invalid argument" in bad.finding
    assert "firewall" in bad.fix and "node_ip" in bad.fix
    assert hosts_with(findings, "gcs-reach", "ok") == {"node2"}
    assert not listening(env, "node1", 6379)


async def test_each_host_goes_on_without_waiting_for_the_others(env, tmp_path):
    # node2's probe and node3's GCS connect each take 6 s more (their interpreter sleeps for
    # that program only). Steps done in phases would wait for node2's probe, then for node3's
    # connect: 12 s and more. Host by host, node3 connects while node2 is still probing: 6 s
    # and the doctor's own time, which may be several seconds on a loaded 2-core box (the
    # margin was 1.8 s with 2 s sleeps, and load alone failed it).
    def slow_for(marker: str, name: str) -> str:
        wrapper = tmp_path / name
        wrapper.write_text(
            f'#!/bin/sh\ncase "$*" in *"{marker}"*) sleep 6;; esac\nexec {sys.executable} "$@"\n'
        )
        wrapper.chmod(0o755)
        return str(wrapper)

    inv = env.inventory(
        hosts={
            "node2": {"python": slow_for("verl-tui host probe", "slow-probe")},
            "node3": {"python": slow_for("open a TCP connection", "slow-connect")},
        }
    )
    t0 = time.monotonic()
    findings = await doctor(inv)
    spent = time.monotonic() - t0
    assert not [f for f in findings if f.status == "fail"], show(findings)
    assert hosts_with(findings, "gcs-reach", "ok") == {"node2", "node3"}, show(findings)
    assert hosts_with(findings, "python-interpreter", "ok") == set(NAMES), show(findings)
    assert hosts_with(findings, "gpu-health", "warn") | hosts_with(
        findings, "gpu-health", "ok"
    ) == set(NAMES), show(findings)
    assert 6.0 < spent < 12.0, spent


async def test_head_node_ip_not_an_address_of_the_head(env):
    inv = env.inventory(hosts={"node1": {"node_ip": "10.254.254.254"}})
    findings = await doctor(inv)
    [bad] = rows(findings, "gcs-reach", "fail")
    assert bad.host == "node1" and "cannot listen on node_ip 10.254.254.254:6379" in bad.finding
    assert "Cannot assign requested address" in bad.finding and env.addr("node1") in bad.fix


async def test_socket_ifname(env):
    env.ns("node2", "ip", "link", "add", "x0", "type", "veth", "peer", "name", "x1")
    try:
        env.ns("node2", "ip", "addr", "add", "192.168.77.2/24", "dev", "x0")
        env.ns("node2", "ip", "link", "set", "x0", "up")
        env.ns("node2", "ip", "link", "set", "x1", "up")
        # Unset, with two candidate interfaces on node2: a warning there only.
        findings = await doctor(env.inventory())
        [warn] = rows(findings, "socket-ifname", "warn")
        assert warn.host == "node2" and "eth0, x0" in warn.finding, show(findings)
        assert "NCCL_SOCKET_IFNAME: eth0" in warn.fix  # the interface carrying node_ip
        assert hosts_with(findings, "socket-ifname", "ok") == {"node1", "node3"}
        # Set to an interface only node2 has: the others fail.
        findings = await doctor(
            env.inventory(ray={"env": {"NCCL_SOCKET_IFNAME": "x0", "GLOO_SOCKET_IFNAME": "x0"}})
        )
        assert hosts_with(findings, "socket-ifname", "fail") == {"node1", "node3"}, show(findings)
        bad = rows(findings, "socket-ifname", "fail")[0]
        assert "NCCL_SOCKET_IFNAME=x0 matches no interface" in bad.finding
        assert "GLOO_SOCKET_IFNAME=x0: no interface x0" in bad.finding
        assert hosts_with(findings, "socket-ifname", "ok") == {"node2"}
        # NCCL's own syntax: "^" excludes, a plain name is a prefix.
        findings = await doctor(
            env.inventory(ray={"env": {"NCCL_SOCKET_IFNAME": "^x", "GLOO_SOCKET_IFNAME": "eth0"}})
        )
        assert hosts_with(findings, "socket-ifname", "ok") == set(NAMES), show(findings)
    finally:
        env.ns("node2", "ip", "link", "del", "x0")


async def test_gpu_counts_and_cpus_per_gpu(env):
    env.set_gpus({"node1": 2, "node2": 4, "node3": 2})
    findings = await doctor(env.inventory())
    [bad] = rows(findings, "gpu-count", "fail")
    assert bad.finding.startswith("GPU counts differ: 2 on node1, node3; 4 on node2"), bad
    assert "num_gpus: 2" in bad.fix
    assert hosts_with(findings, "cpus-per-gpu", "fail") == {"node2"}  # 6 CPUs for 4 GPUs
    # hosts.yaml num_gpus wins over what NVML counts.
    findings = await doctor(env.inventory(hosts={"node2": {"num_gpus": 2}}))
    assert [f.status for f in rows(findings, "gpu-count")] == ["ok"], show(findings)

    env.set_gpus({n: 8 for n in NAMES})
    # Without ray.num_cpus, Ray counts the machine's CPUs: far fewer than 3 x 8.
    inv = env.inventory()
    inv = inv.model_copy(update={"ray": inv.ray.model_copy(update={"num_cpus": None})})
    findings = await doctor(inv)
    [bad] = rows(findings, "cpus-per-gpu", "fail")
    assert where(bad) == set(NAMES) and "for 8 GPUs" in bad.finding and "(24)" in bad.finding
    assert "ray.num_cpus: 24" in bad.fix
    findings = await doctor(env.inventory(ray={"num_cpus": 24}))
    assert hosts_with(findings, "cpus-per-gpu", "ok") == set(NAMES)

    # No NVML answer on a host: a warning, never a crash.
    env.set_gpus({"node3": None})
    findings = await doctor(env.inventory(ray={"num_cpus": 24}))
    assert hosts_with(findings, "gpu-count", "warn") == {"node3"}
    assert [f.status for f in rows(findings, "gpu-count") if f.host is None] == ["ok"]


async def test_hf_cache_not_writable(env):
    # A read-only bind mount inside node2's own mount namespace: root cannot write there
    # either, while node1 and node3 see the same directory writable.
    shared = env.root / "hfhome"
    shared.mkdir(exist_ok=True)
    env.ns("node2", "mount", "--bind", str(shared), str(shared))
    try:
        env.ns("node2", "mount", "-o", "remount,bind,ro", str(shared))
        findings = await doctor(env.inventory(ray={"env": {"HF_HOME": str(shared)}}))
    finally:
        env.ns("node2", "umount", str(shared))
    [bad] = rows(findings, "hf-cache", "fail")
    assert bad.host == "node2" and "Read-only file system" in bad.finding, show(findings)
    assert "HF_HOME" in bad.fix
    assert hosts_with(findings, "hf-cache", "ok") == {"node1", "node3"}
    # The hub cache inside a regular file: nothing can be created there, on any host.
    blocker = env.root / "blocker"
    blocker.write_text("")
    findings = await doctor(env.inventory(ray={"env": {"HF_HUB_CACHE": str(blocker / "hub")}}))
    assert hosts_with(findings, "hf-cache", "fail") == set(NAMES)
    assert f"{blocker} is not a directory" in rows(findings, "hf-cache", "fail")[0].finding


async def test_mkl_numexpr_and_infiniband(env, fakesite, tmp_path):
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    ibstat = fakebin / "ibstat"
    ibstat.write_text(
        "#!/bin/sh\ncat <<'EOF'\n"
        "CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n"
        "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n"
        "\t\tLink layer: InfiniBand\n"
        "CA 'mlx5_1'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n"
        "\t\tRate: 10\n\t\tLink layer: InfiniBand\nEOF\n"
    )
    ibstat.chmod(0o755)
    base = {"PYTHONPATH": str(fakesite), "PATH": f"{fakebin}:/usr/bin:/bin"}
    # node2 shows 128 CPUs to os.cpu_count(): a bind mount in its own mount namespace.
    online = tmp_path / "online"
    online.write_text("0-127\n")
    env.ns("node2", "mount", "--bind", str(online), "/sys/devices/system/cpu/online")
    try:
        findings = await doctor(env.inventory(ray={"env": base}))
    finally:
        env.ns("node2", "umount", "/sys/devices/system/cpu/online")
    [mkl] = rows(findings, "mkl-threading", "warn")
    assert where(mkl) == set(NAMES) and "mkl 2024.2.0" in mkl.finding, show(findings)
    assert "incompatible with libgomp" in mkl.finding
    assert mkl.fix.startswith('ray.env: {MKL_SERVICE_FORCE_INTEL: "1"}')
    [numexpr] = rows(findings, "numexpr-threads", "warn")
    assert numexpr.host == "node2" and "128 CPUs" in numexpr.finding and "2.10.1" in numexpr.finding
    assert "NUMEXPR_MAX_THREADS" in numexpr.fix
    assert hosts_with(findings, "numexpr-threads", "ok") == {"node1", "node3"}
    [ib] = rows(findings, "infiniband", "warn")
    assert where(ib) == set(NAMES) and "mlx5_1:1 Down/Polling" in ib.finding, show(findings)

    fixed = {**base, "MKL_SERVICE_FORCE_INTEL": "1", "NCCL_IB_HCA": "=mlx5_0"}
    findings = await doctor(env.inventory(ray={"env": fixed}))
    assert hosts_with(findings, "mkl-threading", "ok") == set(NAMES), show(findings)
    assert hosts_with(findings, "infiniband", "ok") == set(NAMES)
    clash = {**base, "MKL_THREADING_LAYER": "INTEL", "NCCL_IB_HCA": "mlx5_1"}
    findings = await doctor(env.inventory(ray={"env": clash}))
    assert "MKL_THREADING_LAYER=INTEL" in rows(findings, "mkl-threading", "warn")[0].finding
    assert hosts_with(findings, "infiniband", "fail") == set(NAMES)


# --------------------------------------------------------------------------- headless


def test_check_command_json_and_exit_status(env, capsys):
    inv = env.inventory()
    proc = run_cli(["check", str(inv.source), "--json", "--timeout", "30"], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress noise when stderr is not a terminal
    out = json.loads(proc.stdout)
    assert set(out) == {"checks", "summary", "insecure_host_keys"}
    assert out["insecure_host_keys"] is False  # (true: tests/test_insecure_visible.py)
    assert all(
        set(c) == {"check", "title", "status", "host", "finding", "fix"} for c in out["checks"]
    )
    statuses = [c["status"] for c in out["checks"]]
    assert out["summary"] == {s: statuses.count(s) for s in ("ok", "warn", "fail")}
    assert out["summary"]["fail"] == 0

    ghost = {"name": "ghost", "address": env.cluster.unused_address()}
    assert run_check(env.inventory(extra_hosts=[ghost]), as_json=False, timeout=30) == 1
    text = capsys.readouterr().out
    assert "\x1b[" not in text  # no colours when stdout is not a terminal
    line = next(ln for ln in text.splitlines() if "ghost" in ln)
    assert line.startswith("✗ ssh-reach") and "unreachable" in line
    assert re.search(r"^\s+fix: check that sshd runs", text, re.M)
    assert re.search(r"\d+ ok, \d+ warn, 1 fail$", text.strip())


async def test_doctor_on_the_local_transport():
    findings = await doctor(local_inventory(), timeout=20)
    assert hosts_with(findings, "python-interpreter", "ok") == {"localhost"}
    assert [f.status for f in rows(findings, "gcs-reach")] == ["ok"]  # one node


# --------------------------------------------------------------------------- screen


class DoctorApp(App):
    def __init__(self, inventory: Inventory):
        super().__init__()
        self.inventory = inventory
        self.fleet = Fleet(inventory)

    async def on_mount(self) -> None:
        self.fleet.start()
        await self.push_screen(DoctorScreen(self.fleet, self.inventory))

    async def on_unmount(self) -> None:
        await self.fleet.close()


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.05)


async def test_doctor_screen_keys(env):
    app = DoctorApp(env.inventory(hosts={"node3": {"python": "/nonexistent/bin/python3"}}))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DoctorScreen)
        await until(lambda: screen.findings and not screen.running, 30, "first run")
        await pilot.pause()
        table = screen.query_one("#findings", DataTable)
        assert table.row_count == len(screen.findings)
        assert str(table.get_row_at(0)[0]) in ("✓ ok", "! warn", "✗ fail")
        progress = str(screen.query_one("#doctor-progress").render())
        assert re.search(r"\d+ ok · \d+ warn · 1 fail", progress), progress

        await pilot.press("f")
        assert table.row_count == len(screen.shown_findings) < len(screen.findings)
        assert {f.status for f in screen.shown_findings} <= {"warn", "fail"}
        fail_row = next(i for i, f in enumerate(screen.shown_findings) if f.status == "fail")
        table.move_cursor(row=fail_row)
        await pilot.pause()
        fix = str(screen.query_one("#doctor-fix").render())
        assert "interpreter not found" in fix and "fix: set python:" in fix

        first = screen.findings
        await pilot.press("c")
        # A re-run's findings are a new list (on a fast machine it may be done already when
        # the key's frame is drawn, so `running` is not looked at in between).
        await until(lambda: screen.findings is not first and not screen.running, 30, "re-run")
        await pilot.pause()
        assert table.row_count == len(screen.shown_findings)

        keys = {(where_, k) for where_, k, _ in collect_bindings(screen)}
        assert {("Doctor screen", "c"), ("Doctor screen", "f"), ("Doctor screen", "esc, b")} <= keys
        await pilot.press("b")
        await pilot.pause()
        assert not isinstance(app.screen, DoctorScreen)


# --------------------------------------------------------------------------- pure decisions


def test_clock_skew_classification():
    def status(offsets, ref="h1"):
        return {f.host: f.status for f in classify_clock_offsets(offsets, ref)}

    # Offsets relative to the cockpit; skew is what differs from the head.
    assert status({"h1": (100.0, 0.1), "h2": (100.5, 0.1)}) == {"h1": "ok", "h2": "ok"}
    assert status({"h1": (0.0, 0.1), "h2": (3.0, 0.1)})["h2"] == "warn"
    assert status({"h1": (0.0, 0.1), "h2": (-45.0, 0.1)})["h2"] == "fail"
    # The estimate is only good to ± rtt/2: a slow answer is not called skewed.
    assert status({"h1": (0.0, 0.2), "h2": (2.5, 1.6)})["h2"] == "ok"
    # Without the head, the median host is the reference: the odd one out is named.
    got = status({"a": (0.0, 0.0), "b": (0.1, 0.0), "c": (40.0, 0.0)}, ref=None)
    assert got == {"a": "ok", "b": "ok", "c": "fail"}
    [f] = [
        f
        for f in classify_clock_offsets({"h1": (0.0, 0.0), "h2": (5.0, 0.0)}, "h1")
        if f.host == "h2"
    ]
    assert "+5.000 s vs head h1" in f.finding and "chrony" in f.fix


def _inv(n: int = 2) -> Inventory:
    from tui.config.hosts import parse_inventory

    hosts = "\n".join(f"  - name: h{i}\n    address: 10.0.0.{i}" for i in range(1, n + 1))
    return parse_inventory(f"hosts:\n{hosts}\n")


def test_numexpr_and_mkl_rules():
    inv = _inv(2)
    facts = {
        "h1": HostFacts(host="h1", ok=True, cpu_count=128, numexpr_version="2.10.1"),
        "h2": HostFacts(
            host="h2",
            ok=True,
            cpu_count=128,
            numexpr_version="2.10.1",
            env={"NUMEXPR_MAX_THREADS": "64"},
            mkl_present=True,
            numpy_mkl=True,
            numpy_version="1.26.4",
        ),
    }
    found = {(f.check, f.host): f.status for f in evaluate(inv, facts)}
    assert found[("numexpr-threads", "h1")] == "warn"
    assert found[("numexpr-threads", "h2")] == "ok"
    assert found[("mkl-threading", "h1")] == "ok"
    assert found[("mkl-threading", "h2")] == "warn"


def test_nccl_interface_syntax():
    assert IfSpec.parse("eth").selects("eth0")  # a plain name is a prefix
    assert not IfSpec.parse("=eth").selects("eth0")  # "=" is exact
    assert IfSpec.parse("=eth0,ib0").selects("ib0")
    assert not IfSpec.parse("^docker,lo").selects("docker0")  # "^" excludes
    assert IfSpec.parse("^docker,lo").selects("eth0")
    assert IfSpec.parse("^=eth0").selects("eth01") and not IfSpec.parse("^=eth0").selects("eth0")
    assert IfSpec.parse("mlx5_0:1").names == ("mlx5_0",)  # NCCL_IB_HCA's port suffix


def test_port_classification():
    assert classify_port(6379, "GCS", None)[0] == "ok"
    ray = Listener(pid=9, name="gcs_server", is_ray=True)
    assert classify_port(6379, "GCS", ray) == (
        "ok",
        "port 6379 (GCS) is held by Ray (gcs_server (pid 9))",
    )
    other = Listener(pid=12, name="redis-server")
    assert classify_port(6379, "GCS", other) == (
        "fail",
        "port 6379 (GCS) is held by redis-server (pid 12)",
    )
    hidden = Listener(pid=None, name=None)
    assert "cannot see" in classify_port(6379, "GCS", hidden)[1]


def test_folding_keeps_problems_per_host():
    def f(check, status, host, text="same"):
        return Finding(check, CHECKS[check], status, host, text, "fix" if status != "ok" else "")

    out = arrange(
        [
            f("memory", "ok", "h2"),
            f("memory", "ok", "h1"),
            f("memory", "warn", "h3"),
            f("debugpy", "warn", "h1"),
            f("debugpy", "warn", "h2"),
            f("debugpy", "warn", "h3", "other"),
        ],
        ["h1", "h2", "h3"],
    )
    assert [(x.check, x.status, x.host) for x in out] == [
        ("debugpy", "warn", None),
        ("debugpy", "warn", "h3"),
        ("memory", "warn", "h3"),
        ("memory", "ok", None),
    ]
    assert out[0].finding == "same (2 hosts: h1, h2)"
    assert out[3].finding == "same (2 hosts: h1, h2)"


def test_facts_tolerate_junk():
    facts = facts_from_json(
        "h",
        {
            "python": "x",
            "packages": {"ray": 3},
            "listeners": {"a": 1, "6379": {"pid": "x", "name": "n"}},
            "interfaces": [None],
        },
    )
    assert facts.ok and facts.ray_version is None and facts.python_version is None
    assert facts.listeners == {6379: Listener(pid=None, name="n")}
    assert facts.interfaces == ()
    assert NetInterface("eth0", ipv4=("1.2.3.4",)).has_address


def _installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
