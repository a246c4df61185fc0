"""The run archive and compare on real namespace hosts with real Ray: jobs print verl's own
console-logger lines (verl's concat_dict_to_str, called in the job); runs are archived while
`logs --follow` follows them, with their GPU use from the fake NVML listing the job's real
worker pid; Ray restarts between runs; afterwards `logs`, `compare` and the cockpit (a new
process: Jobs → details, metrics, space marks, c compares) answer from the archive."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from harness.cli import run_cli
from harness.raycluster import VENV_PY, hosts_yaml, stop_hosts

LR = "actor_rollout_ref.actor.optim.lr"
BATCH = "data.train_batch_size"
STEPS = 6

JOB = '''
"""A training-shaped job: verl's own console-logger lines, one per step."""
import ast, importlib.util, math, numbers, os, pprint, sys, time
from pathlib import Path

import numpy as np
import ray


def verl_formatter():
    # verl/utils/logger/aggregate_logger.py imports torch at its top: compile the one function.
    spec = importlib.util.find_spec("verl")
    path = Path(next(iter(spec.submodule_search_locations))) / "utils/logger/aggregate_logger.py"
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body
              if isinstance(n, ast.FunctionDef) and n.name == "concat_dict_to_str")
    scope = {"numbers": numbers, "pprint": pprint}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    return scope["concat_dict_to_str"]


fmt = verl_formatter()
args = dict(a.split("=", 1) for a in sys.argv[1:])
lr = float(args["actor_rollout_ref.actor.optim.lr"])
steps = int(args["trainer.total_training_steps"])
batch = int(args.get("data.train_batch_size", 1024))
hold = float(os.environ.get("HOLD_S", "0"))


@ray.remote(num_cpus=0)
class Worker:
    def where(self):
        return ray.util.get_node_ip_address(), os.getpid()


ray.init()
if os.environ.get("WORKER") == "1":  # a Ray worker process (~2 s of CPU) only where it is read
    worker = Worker.remote()
    ip, pid = ray.get(worker.where.remote())
    print(f"WORKER {ip} {pid}", flush=True)
time.sleep(hold)
print(f"Total training steps: {steps}", flush=True)
for s in range(1, steps + 1):
    metrics = {
        "critic/score/mean": np.float64(1 - math.exp(-lr * 1e5 * s)),
        "actor/kl_loss": np.float64(lr * 1000 * s),
        "actor/entropy": 1.0 - 0.01 * s,
        "response_length/mean": 100.0 + s,
        "perf/throughput": 1000.0 + batch / 8,
        "timing_s/step": 0.5,
        "training/global_step": s,
    }
    print(fmt(metrics, step=s), flush=True)
    time.sleep(0.2)
'''


def cli(env, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


@pytest.fixture(scope="module")
def ray_up(ns_hosts, ray_bring_up, tmp_path_factory, fake_nvml_lib):
    """Two hosts, one fake GPU each (their NVML state files are the test's), Ray up."""

    work = tmp_path_factory.mktemp("archive")
    states = {n: work / f"{n}.nvml" for n in ("node1", "node2")}
    for state in states.values():
        write_state(state, [FakeGpu(util=0)])
    host_env = {
        n: {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(s)}
        for n, s in states.items()
    }
    cluster = ns_hosts(2, work / "hosts", host_env=host_env)
    path = hosts_yaml(cluster, work / "hosts.yaml")
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    jobdir = work / "job"
    jobdir.mkdir()
    (jobdir / "job.py").write_text(textwrap.dedent(JOB))
    try:
        ray_bring_up(env, path)
        yield cluster, path, env, states, jobdir
    finally:
        stop_hosts(cluster)


def submit(
    env, path, jobdir, sid: str, *overrides: str, hold: float = 0, worker: bool = False
) -> None:
    """`worker`: the job starts a Ray actor and prints `WORKER ip pid` (its GPU use is read)."""
    out = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        sid,
        "--working-dir",
        str(jobdir),
        "--env",
        f"HOLD_S={hold}",
        "--env",
        f"WORKER={int(worker)}",
        "--",
        "python",
        "job.py",
        f"trainer.total_training_steps={STEPS}",
        *overrides,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def archive_dir(env) -> Path:
    return Path(env["XDG_STATE_HOME"]) / "verl-tui" / "archive" / "raytest"


def meta_of(env, sid: str) -> dict:
    return json.loads((archive_dir(env) / sid / "meta.json").read_text())


def head_log(cluster, sid: str) -> str:
    out = cluster.exec_in(
        "node1", ["sh", "-c", f"cat /tmp/ray/session_latest/logs/job-driver-{sid}.log"]
    )
    return out.stdout


def test_runs_are_archived_across_a_ray_restart(ray_up):
    cluster, path, env, states, jobdir = ray_up
    # run-a: followed to its end.
    submit(env, path, jobdir, "run-a", f"{LR}=1e-6")
    follow = cli(env, "logs", str(path), "run-a", "--follow")
    assert follow.returncode == 0, follow.stderr
    assert "step:6 - critic/score/mean:np.float64(" in follow.stdout  # verl's own format
    meta = meta_of(env, "run-a")
    assert meta["status"] == "SUCCEEDED" and meta["final"], meta
    assert f"{LR}=1e-6" in meta["entrypoint"] and meta["start_time"] <= meta["end_time"]
    assert "node1" in meta["hosts"]
    # The log: gzip members that inflate to exactly the head's driver log.
    raw = (archive_dir(env) / "run-a" / "log.gz").read_bytes()
    assert gzip.decompress(raw).decode() == head_log(cluster, "run-a")
    series = json.loads(
        gzip.decompress((archive_dir(env) / "run-a" / "metrics.json.gz").read_bytes())
    )
    assert [p[0] for p in series["series"]["critic/score/mean"]] == list(range(1, STEPS + 1))
    assert series["total_steps"] == STEPS

    # run-b: while it runs, the fake NVML lists its worker's real pid on the worker's host.
    submit(env, path, jobdir, "run-b", f"{LR}=3e-6", hold=20, worker=True)
    follower = subprocess.Popen(
        [VENV_PY, "-m", "tui", "logs", str(path), "run-b", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and not line:
            line = next(
                (ln for ln in head_log(cluster, "run-b").splitlines() if "WORKER" in ln), ""
            )
            time.sleep(0.5)
        assert line, "the job's worker never reported its pid"
        ip, pid = line.split()[-2], int(line.split()[-1])
        host = next(h.name for h in cluster.hosts if h.address == ip)
        other = next(n for n in states if n != host)
        write_state(
            states[host], [FakeGpu(util=41, memory_used=5000 * MIB, processes=[(pid, 3072 * MIB)])]
        )
        # Another process keeps the other host's GPU busy: not this job's, not counted.
        write_state(states[other], [FakeGpu(util=97, processes=[(pid + 100000, 1024 * MIB)])])
        _out, err = follower.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            follower.kill()
        for state in states.values():
            write_state(state, [FakeGpu(util=0)])
    assert follower.returncode == 0, err
    use = meta_of(env, "run-b")["gpu_use"]
    assert use["util_mean"] == 41 and use["mem_mean_bytes"] == 3072 * MIB, use
    assert use["gpus"] == [f"{host}:0"] and use["samples"] >= 2, use
    assert host in meta_of(env, "run-b")["hosts"]

    # Ray restarts: the head forgets run-a and run-b.
    up = cli(env, "up", str(path), "--restart", timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    submit(env, path, jobdir, "run-c", f"{LR}=1e-6", f"{BATCH}=128")
    assert cli(env, "logs", str(path), "run-c", "--follow").returncode == 0

    # logs of a run from before the restart: the archive (whole run, its real final status).
    again = cli(env, "logs", str(path), "run-a", "--follow")
    assert again.returncode == 0, again.stderr
    assert again.stdout == follow.stdout
    assert "--- run-a: SUCCEEDED (from the run archive)" in again.stderr


def test_compare_three_runs(ray_up):
    _, path, env, _, _ = ray_up
    from tui.jobs.verl_compose import base_plain, flat_keys

    default_batch = flat_keys(base_plain().config)[BATCH]
    out = cli(env, "compare", str(path), "run-a", "run-b", "run-c", "--json", "--offline")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"runs", "config_diff", "insecure_host_keys"}
    assert doc["config_diff"] == {
        LR: {"run-a": 1e-6, "run-b": 3e-6, "run-c": 1e-6},
        BATCH: {"run-a": default_batch, "run-b": default_batch, "run-c": 128},
    }
    runs = {r["submission_id"]: r for r in doc["runs"]}
    assert list(runs) == ["run-a", "run-b", "run-c"]
    for r in runs.values():
        assert r["status"] == "SUCCEEDED"
        assert [p[0] for p in r["series"]["critic/score/mean"]] == list(range(1, STEPS + 1))
        assert r["summary"]["steps"] == STEPS and r["summary"]["mean_s_per_step"] == 0.5
    # lr 3e-6 learns fastest: its best score is the highest.
    best = {sid: r["summary"]["best_score"] for sid, r in runs.items()}
    assert max(best, key=best.__getitem__) == "run-b"
    assert runs["run-b"]["summary"]["gpu_util_mean"] == 41
    assert runs["run-c"]["summary"]["tokens_per_s_per_gpu"] == 1000 + 128 / 8

    csv_path = Path(env["XDG_STATE_HOME"]) / "cmp.csv"
    text = cli(env, "compare", str(path), "run-a", "run-b", "run-c", "--csv", str(csv_path))
    assert text.returncode == 0, text.stderr
    assert "config keys that differ (2)" in text.stdout and "(default)" in text.stdout
    assert "run-b reached the best score" in text.stdout
    rows = csv_path.read_text().splitlines()
    assert rows[0] == "submission_id,key,step,value"
    assert sum(1 for r in rows if ",critic/score/mean," in r) == 3 * STEPS

    bad = cli(env, "compare", str(path), "run-a", "--offline")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


async def _until(pilot, predicate, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await pilot.pause(0.2)


async def test_cockpit_reads_the_archive_after_the_restart(ray_up, monkeypatch):
    """A new cockpit process: the Jobs screen names run-b's GPU use, run-a's metrics come from
    the archive (the head forgot it), and space/c compare the three runs."""
    from textual.widgets import Static

    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.screens.compare import CompareScreen
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.logs.job_logs import JobLogsScreen

    _, path, env, _, _ = ray_up
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    app = VerlTuiApp(load_inventory(path), interval=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        await _until(pilot, lambda: len(jobs.rows) >= 3, 30, "the jobs listed")
        table = jobs.query_one("DataTable")
        table.move_cursor(row=table.get_row_index("run-b"))
        await pilot.pause()
        detail = str(jobs.query_one("#job-detail", Static).content)
        assert "kept its GPUs 41 % busy" in detail, detail

        table.move_cursor(row=table.get_row_index("run-a"))
        await pilot.press("m")
        logs = app.screen
        assert isinstance(logs, JobLogsScreen)
        await _until(pilot, lambda: logs.status == "SUCCEEDED", 30, "run-a from the archive")
        tracker = logs.metrics.tracker
        await _until(pilot, lambda: len(tracker.series("critic/score/mean")) == STEPS, 10, "series")
        assert tracker.total_steps == STEPS
        await pilot.press("escape")

        for sid in ("run-a", "run-b", "run-c"):
            table.move_cursor(row=table.get_row_index(sid))
            await pilot.press("space")
        assert jobs.marked == ["run-a", "run-b", "run-c"]
        await pilot.press("c")
        await _until(pilot, lambda: isinstance(app.screen, CompareScreen), 60, "compare opened")
        cmp = app.screen
        await _until(pilot, lambda: bool(cmp.charts[0].plotted), 10, "charts drawn")
        assert set(cmp.diff) == {LR, BATCH}
        for chart in cmp.charts:
            assert list(chart.plotted) == ["run-a", "run-b", "run-c"], chart.spec
        await pilot.press("escape")


async def test_supervisor_followers_archive_each_job_once(ray_up, monkeypatch):
    """What a supervisor calls on every tick: one background follower per running job; a job
    whose archive is whole is not read again."""
    from tui.archive.follow import ArchiveFollowers
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.transport.fleet import Fleet

    _, path, env, _, jobdir = ray_up
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    submit(env, path, jobdir, "run-d", f"{LR}=2e-6", hold=2)
    inv = load_inventory(path)
    followers = ArchiveFollowers()
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:
            started = followers.ensure(cluster, ["run-c", "run-d"], samples=dict)
            assert started == ["run-d"]  # run-c is archived whole already
            assert followers.ensure(cluster, ["run-d"], samples=dict) == []  # one follower
            end = await asyncio.wait_for(followers.tasks["run-d"], 120)
        finally:
            await followers.close()
            await cluster.close()
    assert end.status == "SUCCEEDED"
    meta = meta_of(env, "run-d")
    assert meta["final"] and meta["metrics"]["last_step"] == STEPS
