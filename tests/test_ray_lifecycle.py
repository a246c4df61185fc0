"""Ray across real namespace hosts over real SSH: up, status, a job through the tunnel, down;
and the ways bring-up must refuse or fail cleanly, leaving no Ray process behind."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakenvml.fakenvml import FakeGpu, write_state
from harness.nshosts import NsCluster
from harness.pythons import other_patch_release
from harness.raycluster import (  # noqa: F401 (re-exported)
    RAY_NAMES,
    VENV_PY,
    hosts_yaml,
    ray_processes,
    running_ray,
    tui_cli,
)

from tui.cluster.ray_cluster import BringUpError, RayCluster
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet

# VENV_PY, hosts_yaml, running_ray and ray_processes live in harness.raycluster; they stay
# importable from here for the modules that import them from this one.
pytestmark = pytest.mark.ray


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return tui_cli(dict(os.environ), *args, timeout=timeout)


@pytest.fixture(scope="module")
def _three_hosts(ns_hosts, fake_nvml_lib, tmp_path_factory) -> Iterator[NsCluster]:
    """Three hosts with one fake GPU each (so --num-gpus comes from NVML), for the module."""
    work = tmp_path_factory.mktemp("raylife")
    env = {}
    for name in ("node1", "node2", "node3"):
        state = work / f"{name}.nvml"
        write_state(state, [FakeGpu(util=0)])
        env[name] = {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    cluster = ns_hosts(3, work / "hosts", host_env=env)
    try:
        yield cluster
    finally:
        cluster.stop()


def _routes(cluster: NsCluster, name: str) -> list[str]:
    return cluster.exec_in(name, ["ip", "route", "show", "table", "all"]).stdout.splitlines()


@pytest.fixture
def ray_hosts(_three_hosts: NsCluster) -> Iterator[NsCluster]:
    """The module's three hosts as a fresh boot: no process but sshd, empty /tmp/ray and
    /dev/shm, the routes they started with. Whatever a test did (Ray started, a host killed, a
    route blackholed), every host is restarted after it (sshd is PID 1 of the host: its death
    takes every process along) and its routes are put back."""
    cluster = _three_hosts
    routes = {h.name: _routes(cluster, h.name) for h in cluster.hosts}
    yield cluster
    for h in cluster.hosts:
        cluster.start_host(h.name)
        for line in set(_routes(cluster, h.name)) - set(routes[h.name]):
            cluster.exec_in(h.name, ["ip", "route", "del", *line.split()], check=True)
        assert _routes(cluster, h.name) == routes[h.name], h.name


@pytest.fixture(scope="session")
def system_venvs(tmp_path_factory):
    """Second real interpreters of our minor version but another patch release (Debian's 3.11.2
    and pyenv's 3.11.7 here; run-tests makes the test venv from the first it finds), one
    without ray and one that imports our ray through a .pth file."""
    other, version = other_patch_release()
    base = tmp_path_factory.mktemp("venvs")
    bare, patch = base / "bare", base / "patch"
    for venv in (bare, patch):
        subprocess.run([other, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((patch / "lib").glob("python3*/site-packages"))
    ours = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    (site / "our_ray.pth").write_text(str(ours) + "\n")
    return {
        "bare": str(bare / "bin" / "python3"),
        "patch": str(patch / "bin" / "python3"),
        "version": version,
    }


def test_up_status_job_tunnel_down(ray_hosts, tmp_path):
    path = hosts_yaml(
        ray_hosts, tmp_path / "hosts.yaml", ray_extra="env: {VERL_TUI_TEST_MARK: ray-env}"
    )
    t0 = time.monotonic()
    up = cli("up", str(path))
    assert up.returncode == 0, up.stdout + up.stderr
    took = time.monotonic() - t0
    out = up.stdout
    # The probe table comes first, then the head, then both workers in parallel.
    assert out.index("INTERPRETER") < out.index("ray start --head") < out.index("3 nodes alive")
    assert "node2" in out and "joined in" in out and "Traceback" not in up.stderr
    assert took < 90

    st = cli("status", str(path), "--json")
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert doc["nodes_alive"] == 3 and doc["ray_version"] == "2.60.0"
    by_host = {n["host"]: n for n in doc["nodes"]}
    assert set(by_host) == {"node1", "node2", "node3"}
    assert by_host["node1"]["is_head"] and by_host["node2"]["node_ip"] == ray_hosts.hosts[1].address
    assert all(n["alive"] and n["gpus"] == 1 and n["cpus"] >= 1 for n in doc["nodes"])
    assert doc["dashboard"].startswith(
        "unix:/"
    )  # the private socket (tests/test_forward_private.py)

    # The dashboard listens on the head's loopback only.
    listeners = ray_hosts.exec_in("node1", ["ss", "-ltnH", "sport = :8265"]).stdout.split("\n")
    local = {ln.split()[3] for ln in listeners if ln.strip()}
    assert local == {"127.0.0.1:8265"}, local

    # A trivial job through the tunnel; `python` resolves to the hosts' interpreter.
    async def job() -> tuple[str, str]:
        inv = load_inventory(path)
        async with Fleet(inv) as fleet:
            cluster = RayCluster(fleet, inv)
            try:
                client = await cluster.dashboard()
                sid = f"vt-{uuid.uuid4().hex[:8]}"
                await client.submit_job(
                    {
                        "submission_id": sid,
                        "entrypoint": f"{VENV_PY} -c \"import socket; print('hello from', "
                        f'socket.gethostname())"',
                    }
                )
                for _ in range(120):
                    info = await client.job_info(sid)
                    if info["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                        break
                    await asyncio.sleep(0.5)
                return info["status"], await client.job_logs(sid)
            finally:
                await cluster.close()

    status, logs = asyncio.run(job())
    assert status == "SUCCEEDED", logs
    assert "hello from node1" in logs  # ran on the head, inside its namespace
    # Ray was started with the hosts' interpreter directory first on PATH (and ray.env).
    raylet = ray_hosts.exec_in("node2", ["pgrep", "-x", "raylet"]).stdout.split()[0]
    environ = ray_hosts.exec_in("node2", ["cat", f"/proc/{raylet}/environ"]).stdout.split("\0")
    path_var = next(e for e in environ if e.startswith("PATH="))
    assert path_var.startswith(f"PATH={Path(VENV_PY).parent}:")
    assert "VERL_TUI_TEST_MARK=ray-env" in environ

    # Idempotent: a second `up` leaves the running cluster alone.
    again = cli("up", str(path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already") == 3 and "3 nodes alive" in again.stdout

    down = cli("down", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no Ray process left" in down.stdout
    assert ray_processes(ray_hosts) == {}
    gone = cli("status", str(path), "--json")
    assert gone.returncode == 1 and json.loads(gone.stdout)["nodes_alive"] == 0


def test_head_port_taken_by_another_program(ray_hosts, tmp_path):
    path = hosts_yaml(ray_hosts, tmp_path / "hosts.yaml")
    squatter = (
        "import socket, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 6379)); s.listen(1); print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    ns = ray_hosts.host("node1").netns
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, VENV_PY, "-c", squatter], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        up = cli("up", str(path))
    finally:
        proc.kill()
        proc.wait()
    assert up.returncode == 1
    assert "port 6379 is held by" in up.stderr and "node1" in up.stderr
    assert "Traceback" not in up.stderr
    assert ray_processes(ray_hosts) == {}


def test_worker_without_ray_is_refused_before_anything_starts(ray_hosts, tmp_path, system_venvs):
    path = hosts_yaml(ray_hosts, tmp_path / "hosts.yaml", python={"node3": system_venvs["bare"]})
    up = cli("up", str(path))
    assert up.returncode == 1
    assert "node3: no ray in" in up.stderr and system_venvs["bare"] in up.stderr
    assert ray_processes(ray_hosts) == {}


def test_python_patch_mismatch_is_refused(ray_hosts, tmp_path, system_venvs):
    path = hosts_yaml(ray_hosts, tmp_path / "hosts.yaml", python={"node2": system_venvs["patch"]})
    up = cli("up", str(path))
    assert up.returncode == 1
    ours = ".".join(map(str, sys.version_info[:3]))
    err = up.stderr
    assert "Ray and Python must match" in err
    assert f"node2: ray 2.60.0, Python {system_venvs['version']}" in err and f"Python {ours}" in err
    assert ray_processes(ray_hosts) == {}


def test_worker_that_cannot_reach_gcs_fails_and_rolls_back(ray_hosts, tmp_path):
    path = hosts_yaml(ray_hosts, tmp_path / "hosts.yaml")
    head = ray_hosts.host("node1").address
    ray_hosts.exec_in("node3", ["ip", "route", "add", "blackhole", f"{head}/32"])
    t0 = time.monotonic()
    up = cli("up", str(path))
    assert up.returncode == 1, up.stdout
    assert "node3:" in up.stderr and "Traceback" not in up.stderr
    # Every worker is checked before any starts: node2 never starts, and its row says why.
    assert "not started: 1 worker failed" in up.stdout and "ray start on" not in up.stdout
    assert "rollback" in up.stdout
    assert time.monotonic() - t0 < 200
    assert ray_processes(ray_hosts) == {}


async def test_host_lost_during_bring_up(ray_hosts, tmp_path):
    inv = load_inventory(hosts_yaml(ray_hosts, tmp_path / "hosts.yaml"))
    events = []

    def progress(ev):
        events.append(ev)
        if ev.host == "node1" and ev.phase == "head" and ev.status == "ok":
            ray_hosts.kill_host("node3")  # goes down between the head and the workers

    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv, progress)
        try:
            with pytest.raises(BringUpError) as info:
                await cluster.bring_up()
        finally:
            await cluster.close()
    assert "node3" in info.value.failures
    assert any(e.phase == "rollback" for e in events)
    assert ray_processes(ray_hosts) == {}


def test_node_ip_not_on_its_host_is_refused_at_once(ray_hosts, tmp_path):
    """Ray itself would time out after ~30 s ('Failed to get node info'): refuse up front."""
    path = hosts_yaml(ray_hosts, tmp_path / "hosts.yaml")
    node3 = ray_hosts.host("node3").address
    wrong = ray_hosts.unused_address()
    path.write_text(
        path.read_text().replace(f"address: {node3}\n", f"address: {node3}\n    node_ip: {wrong}\n")
    )
    t0 = time.monotonic()
    up = cli("up", str(path))
    assert up.returncode == 1
    assert f"node3: node_ip {wrong} is not an address of this host (it has {node3})" in up.stderr
    assert time.monotonic() - t0 < 20
    assert ray_processes(ray_hosts) == {}


def test_ray_start_failure_reports_rays_own_error_line(ray_hosts, tmp_path):
    """Ray refuses an object store larger than the machine: its own words, per host."""
    path = hosts_yaml(ray_hosts, tmp_path / "hosts.yaml")
    path.write_text(
        path.read_text().replace(
            "object_store_memory: 100000000", "object_store_memory: 10000000000000"
        )
    )
    up = cli("up", str(path))
    assert up.returncode == 1
    err = up.stderr
    assert "head start failed" in err and "node1:" in err and "Traceback" not in err
    line = next(ln for ln in err.splitlines() if "node1:" in ln)
    assert "object store" in line.lower() or "memory" in line.lower(), err
    assert ray_processes(ray_hosts) == {}
