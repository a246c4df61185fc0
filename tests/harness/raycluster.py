"""Ray on namespace hosts for the test suite: a hosts.yaml for an `NsCluster`, a module's own
cluster with Ray up (`running_ray`), and `RayPool`, the session's clusters shared by shape.

Bringing Ray up on namespace hosts costs 15-60 s of a 2-core machine; most modules only need "a
healthy cluster with Ray up" and leave it as they found it. Those lease one from the session's
pool by shape (host count and what Ray is told); the pool checks the cluster after each lease and
restores it (stops jobs left running) or rebuilds it (a host killed or cut off, a Ray node gone).
Tests that kill hosts, restart Ray on purpose or test bring-up itself keep their own cluster.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

from harness.cli import run_cli
from harness.nshosts import HarnessError, NsCluster, host_at
from tui.cluster.head_files import SHARED_DIR

__all__ = [
    "RAY_NAMES",
    "VENV_PY",
    "Lease",
    "RayPool",
    "Shape",
    "head_job_status",
    "hosts_yaml",
    "ray_processes",
    "ray_up",
    "running_ray",
    "stop_hosts",
    "tui_cli",
    "wait_job",
]

VENV_PY = sys.executable
RAY_NAMES = ("raylet", "gcs_server")
ACTIVE = ("PENDING", "RUNNING")


def hosts_yaml(
    cluster: NsCluster,
    path: Path,
    *,
    python: dict[str, str] | None = None,
    ray_extra: str = "",
    num_gpus: int | None = None,
) -> Path:
    """The product's hosts.yaml for `cluster`: `python` overrides a host's interpreter,
    `ray_extra` adds lines under `ray:`, `num_gpus` is what Ray is told each host has."""
    lines = [
        "cluster: raytest",
        f"python: {VENV_PY}",
        "ssh:",
        "  user: root",
        f"  identity_file: {cluster.client_key}",
        f"  known_hosts: {cluster.known_hosts}",
        "  config: ''",
        "  connect_timeout: 5",
        "ray:",
        # Several Ray nodes share this machine: keep each one small.
        "  memory: 1000000000",
        "  object_store_memory: 100000000",
        # On a busy 2-core machine (parallel test workers) a head took 51-70 s to start and a
        # worker's dashboard agent missed Ray's own 30 s registration wait: room for both.
        "  start_timeout: 150",
        *(f"  {ln}" for ln in _ray_lines(ray_extra)),
        "hosts:",
    ]
    for h in cluster.hosts:
        lines += [f"  - name: {h.name}", f"    address: {h.address}"]
        if python and h.name in python:
            lines.append(f"    python: {python[h.name]}")
        if num_gpus is not None:  # what Ray is told, so verl's sizing rules can pass here
            lines.append(f"    num_gpus: {num_gpus}")
    path.write_text("\n".join(lines) + "\n")
    return path


# What every test cluster's Ray is told (hosts.yaml `ray: env:`, a module's own keys win).
TEST_RAY_ENV = {
    # On a busy 2-core machine a worker's dashboard agent missed Ray's own 30 s registration.
    "RAY_agent_register_timeout_ms": "120000",
    # No idle workers started ahead of a driver's tasks: on a 2-core machine each costs ~1.5 s
    # of CPU (an import of Ray) that most test jobs never use: a cluster's first trivial job
    # cost 9.4 s of CPU with them and 6.3 s without, each later one 6.2 s and 5.5 s.
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
}


def _ray_lines(ray_extra: str) -> list[str]:
    """`ray_extra`'s lines under `ray:`, its `env:` (if any) merged with the harness's own."""
    extra = yaml.safe_load(ray_extra) or {}
    env = {**TEST_RAY_ENV, **(extra.pop("env", None) or {})}
    text = yaml.safe_dump({**extra, "env": env}, default_flow_style=False, sort_keys=False)
    return text.splitlines()


def ray_up(env: dict[str, str], path: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """`verl-tui up PATH`, one at a time across every test process on this machine: parallel
    workers each bringing Ray up at once would starve each other's `ray start` of the CPU
    (a head start past its deadline fails the bring-up); one at a time, each takes 15-60 s."""
    lock = Path(tempfile.gettempdir()) / "verl-tui-tests-ray-up.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return tui_cli(env, "up", str(path), timeout=timeout)


def tui_cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`verl-tui ARGS` in a subprocess of this venv's Python, output captured."""
    return run_cli(args, env=env, timeout=timeout)


# Ray's own status of one job, asked on the head (its dashboard listens on the head's loopback):
# a bare interpreter and http.client, ~0.05 s of CPU where `verl-tui jobs` costs ~1 s.
_HEAD_STATUS = """
import http.client, json, sys, urllib.parse
try:
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
    # Ray before 2.5x answers 500 to a request without a User-Agent
    c.request("GET", "/api/jobs/" + urllib.parse.quote(sys.argv[2], safe=""),
              headers={"User-Agent": "verl-tui-tests"})
    r = c.getresponse()
    body = r.read()
    print(json.loads(body)["status"] if r.status == 200 else "absent")
except (OSError, ValueError, KeyError, TypeError):
    print("unreachable")
"""
RAY_STATUSES = frozenset({"PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"})


def head_job_status(path: Path, sid: str) -> str:
    """Ray's status of job `sid` on the head of hosts.yaml `path` (a namespace host of this
    process): a Ray status, "absent", or "unreachable"."""
    from tui.config.hosts import load_inventory

    inv = load_inventory(path)
    cluster, host = host_at(inv.head.address)
    port = str(inv.ray.dashboard_port)
    out = cluster.exec_in(host.name, [VENV_PY, "-I", "-S", "-c", _HEAD_STATUS, port, sid])
    return out.stdout.strip() or "unreachable"


def wait_job(
    env: dict[str, str], path: Path, sid: str, want: set[str] | frozenset[str], timeout: float
) -> dict:
    """Until `verl-tui jobs --json` lists `sid` in a status of `want`; returns its row, or fails
    after `timeout` s. The CLI is asked only once Ray's own status on the head is one of `want`
    (where `want` is all Ray statuses): polling it every second cost ~1 s of CPU a poll."""
    deadline = time.monotonic() + timeout
    cheap = set(want) <= RAY_STATUSES
    job: dict | None = None
    seen = "?"
    while True:
        seen = head_job_status(path, sid) if cheap else seen
        if not cheap or seen in want:
            doc = json.loads(tui_cli(env, "jobs", str(path), "--json").stdout or "{}")
            job = next((j for j in doc.get("jobs", []) if j["submission_id"] == sid), None)
            if job is not None and job["status"] in want:
                return job
        if time.monotonic() > deadline:
            raise AssertionError(f"{sid} not in {want} (Ray: {seen}; the CLI lists {job})")
        time.sleep(0.5 if cheap else 1)


def ray_processes(cluster: NsCluster) -> dict[str, list[str]]:
    """Ray's processes left on each running host (an empty dict: none)."""
    out = {}
    for h in cluster.hosts:
        if not cluster.is_running(h.name):
            continue
        ps = cluster.exec_in(h.name, ["ps", "-eo", "comm="])
        names = [n for n in ps.stdout.split() if n in RAY_NAMES or n.startswith("ray::")]
        if names:
            out[h.name] = names
    return out


@contextlib.contextmanager
def running_ray(
    work: Path, count: int, *, ray_extra: str = "", num_gpus: int | None = None
) -> Iterator[tuple[NsCluster, Path, dict[str, str]]]:
    """`count` namespace hosts with Ray up (`verl-tui up`) of the caller's own; yields
    (cluster, hosts.yaml, env with a private XDG_STATE_HOME); the hosts gone after, and Ray
    with them (see `stop_hosts`). For a module that only needs a healthy cluster,
    `RayPool.lease` shares one instead."""
    cluster = NsCluster(count, work / "hosts")
    cluster.start()
    path = hosts_yaml(cluster, work / "hosts.yaml", ray_extra=ray_extra, num_gpus=num_gpus)
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    try:
        up = ray_up(env, path)
        assert up.returncode == 0, up.stdout + up.stderr + head_ray_logs(cluster)
        yield cluster, path, env
    finally:
        stop_hosts(cluster)


# Ray's own logs a failed bring-up is read with: the head's dashboard (its process and, from
# Ray 2.4x, a process per dashboard module), raylet and GCS.
_HEAD_LOGS = ("dashboard.log", "dashboard_*.log", "raylet.out", "gcs_server.out")


def head_ray_logs(cluster: NsCluster, lines: int = 20) -> str:
    """The last `lines` of each of Ray's logs on the first host (the head), for a failed
    bring-up's message: `up` says the dashboard did not answer, these say why. They outlive a
    rollback's `ray stop` (the host's own /tmp/ray)."""
    logs = " ".join(f"/tmp/ray/session_latest/logs/{name}" for name in _HEAD_LOGS)
    try:
        done = cluster.exec_in(
            cluster.hosts[0].name,
            ["sh", "-c", f'for f in {logs}; do [ -f "$f" ] && tail -n {lines} -v "$f"; done'],
            timeout=20,
        )
    except (HarnessError, subprocess.SubprocessError, OSError) as exc:
        return f"\n(the head's Ray logs could not be read: {exc})"
    return f"\n--- the head's Ray logs ---\n{done.stdout}"


def stop_hosts(cluster: NsCluster) -> None:
    """The hosts gone, with their Ray: every Ray process lives in a host's pid namespace, whose
    PID 1 (sshd) takes it along, and /tmp/ray and /dev/shm are the host's own tmpfs. (`verl-tui
    down` first would cost a `ray stop` — an import of Ray, ~2.5 s of CPU — per host; tests of
    `down` itself run it.)"""
    cluster.stop()


@dataclass(frozen=True)
class Shape:
    """What a shared cluster is: its host count and what Ray is told on every host."""

    hosts: int
    ray_extra: str = ""
    num_gpus: int | None = None

    @property
    def name(self) -> str:
        extra = "".join(ch for ch in self.ray_extra if ch.isalnum())
        return f"h{self.hosts}{extra}g{self.num_gpus}"


@dataclass
class _Live:
    cluster: NsCluster
    path: Path  # the hosts.yaml Ray was brought up with (the pool's own)
    env: dict[str, str]


class Lease(NamedTuple):
    """A shared cluster lent to one module: its own copy of hosts.yaml (add keys freely: Ray is
    already up) and its own XDG_STATE_HOME (history, queue, locks); unpacks as running_ray's."""

    cluster: NsCluster
    path: Path
    env: dict[str, str]


class RayPool:
    """The session's shared clusters, one per `Shape`, each with Ray up; see the module text.

    `bring_ups` counts the bring-ups per shape and `rebuilds` why a cluster was not found
    healthy after a lease (both printed at the end of the run)."""

    def __init__(self, root: Path):
        self.root = root
        self._live: dict[Shape, _Live] = {}
        self.bring_ups: Counter[Shape] = Counter()
        self.rebuilds: list[str] = []

    @contextlib.contextmanager
    def lease(self, shape: Shape, work: Path) -> Iterator[Lease]:
        """A healthy cluster of `shape` for the `with` body (a test module); checked after."""
        live = self._live.get(shape) or self._bring_up(shape)
        work.mkdir(parents=True, exist_ok=True)
        path = work / "hosts.yaml"
        shutil.copyfile(live.path, path)
        env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
        try:
            yield Lease(live.cluster, path, env)
        finally:
            problem = self._restore(live)
            if problem:
                self.rebuilds.append(f"{shape.name}: {problem}")
                self.stop(shape)

    def live(self) -> list[Shape]:
        return list(self._live)

    def stop(self, shape: Shape) -> None:
        """Ray down and the hosts gone (the next lease of `shape` brings a new one up)."""
        live = self._live.pop(shape, None)
        if live is not None:
            stop_hosts(live.cluster)

    def stop_all(self) -> None:
        for shape in list(self._live):
            self.stop(shape)

    def _bring_up(self, shape: Shape) -> _Live:
        self.bring_ups[shape] += 1
        work = self.root / f"{shape.name}-{self.bring_ups[shape]}"
        work.mkdir(parents=True)
        cluster = NsCluster(shape.hosts, work / "hosts")
        cluster.start()
        try:
            path = hosts_yaml(
                cluster, work / "hosts.yaml", ray_extra=shape.ray_extra, num_gpus=shape.num_gpus
            )
            env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
            up = ray_up(env, path)
            if up.returncode != 0:
                raise HarnessError(
                    f"shared cluster {shape.name}: up failed\n{up.stdout}{up.stderr}"
                    + head_ray_logs(cluster)
                )
        except BaseException:
            cluster.stop()
            raise
        live = _Live(cluster, path, env)
        self._live[shape] = live
        return live

    def _restore(self, live: _Live) -> str | None:
        """Leave the cluster as the next module expects it: every host up with its link, every
        Ray node alive, no job running (those are stopped). Returns what could not be restored."""
        cluster = live.cluster
        down = [h.name for h in cluster.hosts if not cluster.is_running(h.name)]
        cut = [h.name for h in cluster.hosts if not cluster.link_is_up(h.name)]
        if down or cut:
            return f"hosts down {down}, links cut {cut}"
        status = tui_cli(live.env, "status", str(live.path), "--json", timeout=120)
        try:
            alive = json.loads(status.stdout)["nodes_alive"]
        except (ValueError, KeyError, TypeError):
            return f"status: {status.stdout}{status.stderr}"
        if status.returncode != 0 or alive != len(cluster.hosts):
            return f"{alive} of {len(cluster.hosts)} Ray nodes alive"
        jobs = tui_cli(live.env, "jobs", str(live.path), "--json", timeout=120)
        if jobs.returncode != 0:
            return f"jobs: {jobs.stderr}"
        for job in json.loads(jobs.stdout)["jobs"]:
            if job["status"] in ACTIVE:
                # --force: a job another test user submitted is otherwise refused (exit 3)
                sid = job["submission_id"]
                stop = tui_cli(live.env, "stop", str(live.path), sid, "--force")
                if stop.returncode != 0:
                    return f"stop {sid}: {stop.stderr}"
        # The queue lives on the head (tui/cluster/head_files.py) and outlives a module's
        # state folder: the next module starts with an empty one.
        head = cluster.hosts[0].name
        cluster.exec_in(head, ["rm", "-f", f"{SHARED_DIR}/queue.json"])
        return None


async def on_ray_cluster(inv, body):
    """`await body(cluster)` with a RayCluster over a Fleet of `inv`, both closed after."""
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.fleet import Fleet

    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:
            return await body(cluster)
        finally:
            await cluster.close()
