"""hosts.yaml `container:` with a real runtime: podman (runc, an overlay over / as the image:
no registry here; what it takes in this sandbox is in the fixture and /work/notes/s4) in each
namespace host, and bubblewrap for the generic `exec:` form.

Every command runs inside: the probe and the GPU agent (the fake NVML is found through the
env_setup, which runs inside too: its state file is named after the container's hostname),
`ray start`/`stop`, and a job's driver and tasks, which print the container's hostname, its
PID 1 and a file bound only into the container. Closing a stream kills the command inside the
container; killing only the runtime's client (the pitfall) leaves it running there."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli
from test_jobs import wait_status
from test_ray_lifecycle import VENV_PY

from tui.cluster.probe import probe_all
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet

NAMES = ("node1", "node2")
# The checkout (its .venv is the hosts' interpreter): an overlay over / does not show other mounts.
REPO = Path(__file__).resolve().parents[1]
# `ip netns exec` gives each host a fresh sysfs without cgroup mounts; runc needs them.
CGROUPS = (
    "mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && "
    "for c in cpu cpuacct cpuset memory devices freezer blkio pids; do "
    "mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c; done; "
    "mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup "
    "/sys/fs/cgroup/systemd"
)


def cli(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


def podman_run(cluster, name: str, container: str, work: Path) -> None:
    inside = work / f"inside-{name}"
    inside.mkdir()
    (inside / "marker").write_text(f"only inside the container of {name}\n")
    res = cluster.exec_in(name, ["sh", "-c", CGROUPS])
    assert res.returncode == 0, res.stderr
    argv = [
        "podman", "run", "-d", "--name", container, "--runtime=runc",
        "--network=host", "--uts=private", f"--hostname=ctr-{name}",
        # This sandbox refuses podman's default rlimits (EPERM); these it allows.
        "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
        "--shm-size=512m", "--tmpfs", "/tmp/ray:rw,mode=1777,notmpcopyup",
        "-v", f"{REPO}:{REPO}", "-v", f"{work}:{work}", "-v", f"{inside}:/opt/inside:ro",
        "--rootfs", "/:O", "sleep", "infinity",
    ]  # fmt: skip
    res = cluster.exec_in(name, argv, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def hosts_file(cluster, path: Path, containers: dict[str, dict], setup: list[str]) -> Path:
    lines = [
        "cluster: ctrtest",
        f"python: {VENV_PY}",
        "env_setup:",
        *(f"  - {json.dumps(s)}" for s in setup),
        "ssh:",
        "  user: root",
        f"  identity_file: {cluster.client_key}",
        f"  known_hosts: {cluster.known_hosts}",
        "  config: ''",
        "  connect_timeout: 5",
        "ray:",
        "  memory: 1000000000",
        "  object_store_memory: 100000000",
        "  start_timeout: 90",
        "hosts:",
    ]
    for h in cluster.hosts:
        lines += [
            f"  - name: {h.name}",
            f"    address: {h.address}",
            f"    container: {json.dumps(containers[h.name])}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def in_host(cluster, name: str, pattern: str) -> list[str]:
    """Processes matching `pattern` on the host, its containers' included (their PID
    namespaces are children of the host's)."""
    out = cluster.exec_in(name, ["pgrep", "-af", pattern]).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


@pytest.fixture(scope="module")
def podhosts(ns_hosts, ray_bring_up, tmp_path_factory, fake_nvml_lib):

    work = tmp_path_factory.mktemp("container")
    for name in NAMES:  # named after the container's hostname: found only from inside
        write_state(work / f"ctr-{name}.nvml", [FakeGpu(util=33)])
    cluster = ns_hosts(2, work / "hosts")
    names = {n: f"vt-{cluster.prefix}-{n}" for n in NAMES}
    setup = [f'export LD_LIBRARY_PATH={fake_nvml_lib} FAKE_NVML_STATE="{work}/$(hostname).nvml"']
    path = hosts_file(
        cluster,
        work / "hosts.yaml",
        {n: {"runtime": "podman", "name": c} for n, c in names.items()},
        setup,
    )
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    try:
        for name in NAMES:
            podman_run(cluster, name, names[name], work)
        t0 = time.monotonic()
        up = ray_bring_up(env, path, timeout=300)
        print(f"up inside podman: {time.monotonic() - t0:.1f} s")
        yield cluster, path, env, work, names, up.stdout
    finally:
        cli(env, "down", str(path))
        for name in NAMES:
            if cluster.is_running(name):
                cluster.exec_in(name, ["podman", "rm", "-f", "-t", "0", names[name]])
        cluster.stop()
        for name in NAMES:  # a container whose host died first: podman still lists it
            subprocess.run(["podman", "rm", "-f", "-t", "0", names[name]], capture_output=True)


def test_probe_table_names_the_container(podhosts):
    _, _, _, _, names, up_out = podhosts
    rows = [ln for ln in up_out.splitlines() if ln.startswith(NAMES)][:2]
    assert len(rows) == 2, up_out
    for row, name in zip(rows, NAMES, strict=True):
        assert row.rstrip().endswith(f"{VENV_PY}  (in podman:{names[name]})"), row


def test_agent_runs_inside_the_container(podhosts):
    _, path, env, _, _, _ = podhosts
    out = cli(env, "gpus", str(path), "--once", "--json", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    hosts = json.loads(out.stdout.splitlines()[-1])["hosts"]
    assert [(h["name"], h["hostname"]) for h in hosts] == [(n, f"ctr-{n}") for n in NAMES]
    assert all(h["state"] == "up" and [g["util_percent"] for g in h["gpus"]] == [33] for h in hosts)


def test_job_driver_and_tasks_run_inside(podhosts):
    _, path, env, work, _, _ = podhosts
    prog = work / "inside.py"
    prog.write_text(
        "import socket, ray\n"
        "from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On\n"
        "def here():\n"
        "    pid1 = open('/proc/1/cmdline').read().replace(chr(0), ' ').strip()\n"
        "    marker = open('/opt/inside/marker').read().strip()\n"
        "    return f'{socket.gethostname()}|{pid1}|{marker}'\n"
        "print('DRIVER', here())\n"
        "ray.init()\n"
        "task = ray.remote(num_cpus=0)(here)\n"
        "for n in ray.nodes():\n"
        "    if n['Alive']:\n"
        "        s = On(n['NodeID'], soft=False)\n"
        "        print('NODE', ray.get(task.options(scheduling_strategy=s).remote()))\n"
    )
    sid = f"ctr-{os.getpid()}"
    out = cli(env, "submit", str(path), "--submission-id", sid, "--", "python", str(prog))
    assert out.returncode == 0, out.stdout + out.stderr
    status = wait_status(env, path, sid, {"SUCCEEDED", "FAILED", "STOPPED"}, 120)["status"]
    log = cli(env, "logs", str(path), sid).stdout
    assert status == "SUCCEEDED", log
    inside = {n: f"ctr-{n}|sleep infinity|only inside the container of {n}" for n in NAMES}
    assert f"DRIVER {inside['node1']}" in log
    nodes = sorted(ln.split(" ", 1)[1] for ln in log.splitlines() if ln.startswith("NODE "))
    assert nodes == [inside["node1"], inside["node2"]], log


def test_closing_a_stream_kills_inside_the_container(podhosts):
    cluster, path, _, _, _, _ = podhosts
    inv = load_inventory(path)

    async def go() -> tuple[list[str], list[str]]:
        async with Fleet(inv) as fleet:
            stream = await (await fleet.ready("node2", 10)).stream(["sleep", "317"])
            for _ in range(100):  # until it runs inside
                if any(
                    " sleep 317" in p and "podman" not in p
                    for p in in_host(cluster, "node2", "sleep 317")
                ):
                    break
                await asyncio.sleep(0.1)
            before = in_host(cluster, "node2", "sleep 317")
            await stream.close()  # sleep ignores EOF: its groups are killed
            return before, in_host(cluster, "node2", "sleep 317")

    before, after = asyncio.run(go())
    assert any(p.endswith("sleep 317") and "podman" not in p for p in before), before
    assert after == [], after


def test_pitfall_killing_the_runtime_client_leaves_it_inside(podhosts):
    """What the in-container prologue is for: the same command through `podman exec` as a
    plain host command; closing the stream kills the client, the process inside lives on."""
    cluster, path, _, _, names, _ = podhosts
    bare = path.with_name("bare.yaml")
    bare.write_text(
        "\n".join(ln for ln in path.read_text().splitlines() if "container:" not in ln) + "\n"
    )
    inv = load_inventory(bare)
    assert inv.host("node2").container is None

    async def go() -> list[str]:
        async with Fleet(inv) as fleet:
            argv = ["podman", "exec", "-i", names["node2"], "sleep", "318"]
            stream = await (await fleet.ready("node2", 10)).stream(argv)
            await asyncio.sleep(2)
            await stream.close()
            await asyncio.sleep(1)
            return in_host(cluster, "node2", "sleep 318")

    try:
        left = asyncio.run(go())
        assert [p for p in left if "podman" not in p], left  # still running inside
        assert not [p for p in left if "podman exec" in p], left  # the client is gone
    finally:
        cluster.exec_in("node2", ["pkill", "-f", "^sleep 318"])


def test_generic_exec_form_with_bubblewrap(podhosts, fake_nvml_lib):
    """`container: {exec: [...]}` with bwrap as the runtime (a PID and UTS namespace per
    command, a directory bound only inside): the agent and commands run in it."""
    cluster, _, env, work, _, _ = podhosts
    containers = {}
    for name in NAMES:
        write_state(work / f"bwrap-{name}.nvml", [FakeGpu(util=44), FakeGpu(util=55)])
        containers[name] = {
            "exec": [
                "bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--unshare-pid", "--unshare-uts", "--hostname", f"bwrap-{name}",
                "--die-with-parent", "--ro-bind", str(work / f"inside-{name}"), "/opt/inside",
                "--",
            ]
        }  # fmt: skip
    setup = [f'export LD_LIBRARY_PATH={fake_nvml_lib} FAKE_NVML_STATE="{work}/$(hostname).nvml"']
    path = hosts_file(cluster, work / "bwrap.yaml", containers, setup)
    out = cli(env, "gpus", str(path), "--once", "--json", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    hosts = json.loads(out.stdout.splitlines()[-1])["hosts"]
    assert [(h["name"], h["hostname"]) for h in hosts] == [(n, f"bwrap-{n}") for n in NAMES]
    assert all([g["util_percent"] for g in h["gpus"]] == [44, 55] for h in hosts), hosts

    inv = load_inventory(path)

    async def go() -> str:
        async with Fleet(inv) as fleet:
            res = await (await fleet.ready("node1", 10)).run(["cat", "/opt/inside/marker"])
            return res.stdout

    assert asyncio.run(go()) == "only inside the container of node1\n"
    assert not (Path("/opt/inside") / "marker").exists()


def test_zz_down_stops_ray_inside(podhosts):
    cluster, path, env, _, _, _ = podhosts
    out = cli(env, "down", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    for name in NAMES:
        # `sleep infinity` (PID 1) reaps nothing: stopped Ray processes stay as zombies, which
        # the stop check (remote/ray_procs.py) rightly counts as stopped.
        procs = in_host(cluster, name, "raylet|gcs_server")
        assert not [p for p in procs if "<defunct>" not in p], (name, procs)


def test_host_details_name_the_container(tmp_path):
    """The Cluster screen's host pane says where the agent runs (no hosts needed)."""
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.widgets.details import host_details

    path = tmp_path / "hosts.yaml"
    path.write_text(
        "container: {runtime: podman, name: verl}\n"
        "hosts:\n  - name: a\n  - name: b\n    container: null\n"
    )
    inv = load_inventory(path)
    monitor = TelemetryMonitor(Fleet(inv), inv)
    assert "  in podman:verl" in host_details(monitor.hosts["a"]).plain
    assert " in " not in host_details(monitor.hosts["b"]).plain


def test_a_missing_container_is_one_line_naming_it(podhosts):
    cluster, _, env, work, _, _ = podhosts
    path = hosts_file(
        cluster,
        work / "missing.yaml",
        {n: {"runtime": "podman", "name": f"no-such-{n}"} for n in NAMES},
        [],
    )
    out = cli(env, "gpus", str(path), "--once", timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr
    heads = [ln for ln in out.stdout.splitlines() if ln.startswith("node")]
    assert len(heads) == 2 and all("no-such-node" in ln for ln in heads), out.stdout
    inv = load_inventory(path)

    async def go() -> dict:
        async with Fleet(inv) as fleet:
            return await probe_all(fleet, inv)

    facts = asyncio.run(go())
    error = facts["node1"].error or ""
    assert error.startswith(f"probe failed with {VENV_PY} in podman:no-such-node1: "), error
    assert "no-such-node1" in error.split(": ", 1)[1] and "\n" not in error
    print(heads[0], error, sep="\n")
