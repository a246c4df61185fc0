"""An older Ray and verl on the hosts: what the cockpit's Ray and Jobs paths meet on a cluster
set up a year earlier. Two namespace sshd hosts whose environment (hosts.yaml `env_setup:`, as
a site's `module load` would) puts Ray 2.46.0 and verl 0.5.0 first on the interpreter's path;
this machine keeps Ray 2.60 and verl 0.9.1. Each release is the real wheel from PyPI
(`--no-deps`, cached as tests/test_verl_versions.py caches verl's).

One bring-up serves the lifecycle and the Jobs paths: `up` (every node reports 2.46.0), `status`,
a job through the tunnel and its log, a stop, the job list, the rules read from the head's verl
0.5.0 (`profile check --hosts`), `down` (no Ray process left).

scripts/version_matrix.py runs the same over other pairs (docs/verl-versions.md has its table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from harness.raycluster import hosts_yaml, ray_processes, wait_job

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
# The releases on the hosts; scripts/version_matrix.py runs this module over other pairs.
RAY = os.environ.get("VERL_TUI_ERA_RAY", "2.46.0")
VERL = os.environ.get("VERL_TUI_ERA_VERL", "0.5.0")
PRESET = "grpo-gsm8k-qwen2.5-0.5b"


def _cache() -> Path:
    base = os.environ.get("VERL_TUI_TEST_CACHE") or os.path.expanduser("~/.cache/verl-tui-tests")
    return Path(base) / "wheels"


def release_site(package: str, version: str) -> Path:
    """A folder holding `package==version` alone (its wheel, `--no-deps`), made once and kept
    in the test cache: put it first on PYTHONPATH to run that release over this venv's
    dependencies."""
    cache = _cache()
    site = cache / f"site-{package}-{version}"
    if (site / ".complete").exists():
        return site
    cache.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    wheels = sorted(cache.glob(f"{package}-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [*pip, "download", "--no-deps", f"{package}=={version}", "-d", str(cache)],
            check=True,
            timeout=600,
        )
        wheels = sorted(cache.glob(f"{package}-{version}-*.whl"))
    # Compiled at install (~7 s of CPU for Ray): left to the first imports, Ray's head
    # processes — the dashboard and each of its module processes at once — compiled the same
    # files side by side, and on CI's loaded 2-core box the head's dashboard missed `up`'s
    # deadline (no cache there, so every run is a first import).
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheels[0])],
        check=True,
        timeout=600,
    )
    (site / ".complete").write_text(version)
    return site


def cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_cli(list(args), env=env, timeout=timeout)


@pytest.fixture(scope="module")
def old_cluster(ns_hosts, ray_bring_up, tmp_path_factory):
    """Two hosts with Ray 2.46.0 and verl 0.5.0 first on their Python's path; Ray up."""
    sites = f"{release_site('ray', RAY)}:{release_site('verl', VERL)}"
    work = tmp_path_factory.mktemp("eras")
    cluster = ns_hosts(2, work / "hosts")
    # Ray is told each host has a GPU and 3 CPUs: the preset's sizing rules then hold.
    path = hosts_yaml(cluster, work / "hosts.yaml", num_gpus=1, ray_extra="num_cpus: 3")
    text = path.read_text()
    # Every command on a host, `ray start` and so every raylet, worker and job driver, runs
    # after env_setup: the older releases shadow this venv's.
    path.write_text(text.replace("hosts:\n", f'env_setup: "export PYTHONPATH={sites}"\nhosts:\n'))
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    try:
        up = ray_bring_up(env, path, cluster=cluster)
        yield cluster, path, env, up
    finally:
        cli(env, "down", str(path), timeout=240)
        cluster.stop()


def test_up_status_jobs_logs_stop_and_down_on_an_older_ray(old_cluster) -> None:
    _, path, env, up = old_cluster
    # up: each node's Ray is the older release, and the cockpit's login-node Ray is not used.
    assert f"ray {RAY}" in up.stdout, up.stdout
    status = cli(env, "status", str(path), "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["ray_version"] == RAY and doc["nodes_alive"] == 2 and not doc["missing"], doc
    assert {n["host"] for n in doc["nodes"] if n["alive"]} == {"node1", "node2"}, doc

    # A job through the tunnel: Ray 2.46's Jobs API takes the submission and answers its log.
    prog = "import ray; print('RAY', ray.__version__)"
    sub = cli(env, "submit", str(path), "--submission-id", "era-1", "--", "python", "-c", prog)
    assert sub.returncode == 0, sub.stderr
    assert wait_job(env, path, "era-1", {"SUCCEEDED", "FAILED"}, 120)["status"] == "SUCCEEDED"
    log = cli(env, "logs", str(path), "era-1")
    assert log.returncode == 0 and f"RAY {RAY}" in log.stdout, log.stdout + log.stderr

    # A stop: the job is running, then STOPPED, with its end time.
    sleeper = "import time; print('sleeping', flush=True); time.sleep(600)"
    sub = cli(env, "submit", str(path), "--submission-id", "era-2", "--", "python", "-c", sleeper)
    assert sub.returncode == 0, sub.stderr
    wait_job(env, path, "era-2", {"RUNNING"}, 120)
    stop = cli(env, "stop", str(path), "era-2")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    jobs = cli(env, "jobs", str(path), "--json")
    assert jobs.returncode == 0, jobs.stderr
    rows = {j["submission_id"]: j for j in json.loads(jobs.stdout)["jobs"]}
    assert rows["era-1"]["status"] == "SUCCEEDED" and rows["era-2"]["status"] == "STOPPED"
    assert rows["era-2"].get("end_time"), rows["era-2"]


def test_rules_come_from_the_heads_older_verl(old_cluster) -> None:
    """`profile check --hosts` composes with node1's verl 0.5.0 (read over SSH), says so, and
    refuses nothing that release accepts: its own default rollout mode is not called removed.
    The GRPO preset is clean on every release tests/test_verl_versions.py checks."""
    _, path, env, _ = old_cluster
    out = cli(env, "profile", "check", PRESET, "--hosts", str(path), "--json", timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert (doc["verl"]["version"], doc["verl"]["host"]) == (VERL, "node1"), doc["verl"]
    assert doc["ok"] and not [p for p in doc["problems"] if p["level"] == "error"], doc
    assert "removed" not in json.dumps(doc["problems"]), doc["problems"]


def test_down_leaves_no_ray_process(old_cluster) -> None:
    cluster, path, env, _ = old_cluster
    down = cli(env, "down", str(path), timeout=240)
    assert down.returncode == 0, down.stdout + down.stderr
    deadline = time.monotonic() + 30
    left = ray_processes(cluster)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = ray_processes(cluster)
    assert not left, left
