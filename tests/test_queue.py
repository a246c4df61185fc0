"""The queue and sweeps on a real namespace Ray cluster (one host, Ray told 4 GPUs and 12 CPUs),
driven through the real CLI: `submit --queue`, `sweep`, `queue`, and `verl-tui watch --once`
(the supervisor: its lease on the head, the QueueDuty, hosts.yaml notify: to a real command and
a real local webhook)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from harness.raycluster import wait_job
from test_notify import Hook, recorder

from tui.config.hosts import load_inventory
from tui.jobs.queue import free_resources

PRESET = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
HOLD = """
import time, ray
from ray.util.placement_group import placement_group
ray.init()
pg = placement_group([{"GPU": 1, "CPU": 1}] * 4, strategy="PACK")
ray.get(pg.ready())
print("HELD", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def ray_q(ray_shared1, tmp_path_factory):
    """(cluster, hosts.yaml, env, payload file, webhook) for the module: one host with Ray
    (4 GPUs, 12 CPUs), shared with other modules."""
    work = tmp_path_factory.mktemp("queue")
    hook = Hook()
    argv, payloads = recorder(work)
    cluster, path, env = ray_shared1
    with path.open("a") as f:
        f.write(f"notify:\n  command: {json.dumps(list(argv))}\n  webhook: {hook.url}\n")
    yield cluster, path, env, payloads, hook
    hook.close()


def cli(env, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


def on_head(env, path, method: str, *args, **kw):
    """One call on the cluster's shared queue (on the head, over SSH), as this module's user."""
    from unittest import mock

    from tui.jobs.queue_shared import SharedQueue
    from tui.transport.fleet import Fleet

    async def go():
        inv = load_inventory(path)
        async with Fleet(inv) as fleet:
            return await getattr(SharedQueue(inv, fleet), method)(*args, **kw)

    with mock.patch.dict("os.environ", {"XDG_STATE_HOME": env["XDG_STATE_HOME"]}):
        return asyncio.run(go())


def watch_once(env, path) -> str:
    out = cli(env, "watch", str(path), "--once")
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def queue_doc(env, path) -> list[dict]:
    out = cli(env, "queue", str(path), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["queue"]


def free_gpus(path: Path, env: dict) -> float:
    """What the queue duty reads: Ray's free GPUs per the dashboard's report, summed."""
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.fleet import Fleet

    async def ask() -> float:
        inv = load_inventory(path)
        async with Fleet(inv) as fleet:
            cluster = RayCluster(fleet, inv)
            try:
                free = await free_resources(await cluster.dashboard(), inv)
            finally:
                await cluster.close()
        return sum(n.gpus for n in free.nodes) if free else -1.0

    return asyncio.run(ask())


def wait_free(path, env, want: float, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (got := free_gpus(path, env)) != want:
        assert time.monotonic() < deadline, f"free GPUs {got}, want {want}"
        time.sleep(1)


def wait_held(path, env, sid: str, timeout: float = 120.0) -> None:
    """Until the holder printed HELD and Ray's report shows no free GPU three times running
    (the report lags and can show 0 free before the placement group exists, then 4)."""
    deadline = time.monotonic() + timeout
    while "HELD" not in cli(env, "logs", str(path), sid).stdout:
        assert time.monotonic() < deadline, f"{sid} never printed HELD"
        time.sleep(1)
    zeros = 0
    while zeros < 3:
        assert time.monotonic() < deadline, f"free GPUs {free_gpus(path, env)}, want 0"
        zeros = zeros + 1 if free_gpus(path, env) == 0.0 else 0
        time.sleep(1)


def job_status(env, path, sid) -> str | None:
    doc = json.loads(cli(env, "jobs", str(path), "--json").stdout)
    return next((j["status"] for j in doc["jobs"] if j["submission_id"] == sid), None)


def wait_status(env, path, sid, want: set[str], timeout: float = 180.0) -> str:
    return wait_job(env, path, sid, want, timeout)["status"]


def payloads_of(file: Path) -> list[dict]:
    return [json.loads(x) for x in file.read_text().splitlines()] if file.exists() else []


@pytest.fixture(autouse=True)
def _isolated(ray_q):
    """Each test starts from an empty queue and ends with no job running: one failing test (a
    holder left with every GPU, entries left queued) must not fail the ones after it."""
    _cluster, path, env, _p, _h = ray_q
    for row in queue_doc(env, path):
        cli(env, "queue", str(path), "--cancel", row["submission_id"])
    yield
    doc = json.loads(cli(env, "jobs", str(path), "--json").stdout or "{}")
    for job in doc.get("jobs", []):
        if job.get("status") in ("PENDING", "RUNNING"):
            cli(env, "stop", str(path), job["submission_id"])
    for row in queue_doc(env, path):
        cli(env, "queue", str(path), "--cancel", row["submission_id"])


def test_queue_waits_for_the_gpus_in_priority_order(ray_q, tmp_path):
    _cluster, path, env, payloads, hook = ray_q
    wd = tmp_path / "holder"
    wd.mkdir()
    (wd / "hold.py").write_text(HOLD)
    held = cli(env, "submit", str(path), "--working-dir", str(wd), "--submission-id", "holder-1",
               "--", "python", "hold.py")  # fmt: skip
    assert held.returncode == 0, held.stderr
    wait_held(path, env, "holder-1")  # the holder's placement group has every GPU

    common = ("submit", str(path), str(PRESET), "--queue", "--print-config")
    low = cli(env, *common, "--submission-id", "q-low")
    high = cli(env, *common, "--priority", "5", "--submission-id", "q-high")
    assert low.returncode == 0 and high.returncode == 0, low.stderr + high.stderr
    assert "queued q-high at position 1" in high.stdout
    rows = queue_doc(env, path)
    assert [(r["position"], r["submission_id"]) for r in rows] == [(1, "q-high"), (2, "q-low")]
    assert rows[0]["needs"]["gpus"] == 4 and rows[0]["needs"]["cpus_per_node"] == 12
    assert rows[0]["overrides"][-1] == "trainer.n_gpus_per_node=4"  # sized from the live cluster

    out = watch_once(env, path)
    holder = job_status(env, path, "holder-1")
    assert "queue-wait q-high: waiting for free resources: needs 1×4 GPU" in out, (out, holder)
    assert "free now: node1 0 GPU" in out and "queue-start" not in out
    assert [r["submission_id"] for r in queue_doc(env, path)] == ["q-high", "q-low"]
    assert job_status(env, path, "q-high") is None  # nothing reached Ray

    assert cli(env, "stop", str(path), "holder-1").returncode == 0
    wait_free(path, env, 4.0)
    out = watch_once(env, path)
    assert "queue-start q-high: submitted from the queue" in out
    assert "queue-start q-low" not in out  # q-high's GPUs are reserved until it ends
    assert [r["submission_id"] for r in queue_doc(env, path)] == ["q-low"]
    # Ended by a stop, not run through verl: the preset's print-config run to SUCCEEDED on a
    # live cluster is test_jobs.py::test_profile_submit_runs_verl_with_the_overrides.
    assert cli(env, "stop", str(path), "q-high").returncode == 0
    assert wait_status(env, path, "q-high", {"SUCCEEDED", "FAILED", "STOPPED"}) == "STOPPED"

    out = watch_once(env, path)
    assert "queue-start q-low" in out
    assert queue_doc(env, path) == []
    assert cli(env, "stop", str(path), "q-low").returncode == 0
    assert wait_status(env, path, "q-low", {"SUCCEEDED", "FAILED", "STOPPED"}) == "STOPPED"

    # The notify: command and webhook got the same payloads, in order.
    starts = [p["submission_id"] for p in payloads_of(payloads) if p["event"] == "queue-start"]
    assert starts == ["q-high", "q-low"]
    assert [b["submission_id"] for b in hook.bodies if b["event"] == "queue-start"] == starts
    ends = {p["submission_id"]: p for p in payloads_of(payloads) if p["event"] == "job-end"}
    assert "holder-1" in ends and ends["holder-1"]["cluster"] == "raytest"


def test_a_crash_between_mark_and_answer_never_submits_twice(ray_q):
    """A supervisor killed after its POST but before the queue was updated: the next one finds
    the id on the head and does not send it again."""
    _cluster, path, env, _p, _h = ray_q
    queued = cli(env, "submit", str(path), "--queue", "--submission-id", "q-crash", "--",
                 "python", "-c", "print('once')")  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    assert on_head(env, path, "begin_start", "q-crash") is not None  # the dead one's mark
    # ... and its POST reached the head before it was killed:
    sent = cli(env, "submit", str(path), "--submission-id", "q-crash", "--",
               "python", "-c", "print('once')")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    out = watch_once(env, path)
    assert "queue-start q-crash: found on the head after a restart" in out
    assert queue_doc(env, path) == []
    again = cli(env, "submit", str(path), "--submission-id", "q-crash", "--", "true")
    assert again.returncode == 1  # Ray takes an id once: a second send could not pass either
    jobs = json.loads(cli(env, "jobs", str(path), "--json").stdout)["jobs"]
    assert [j["submission_id"] for j in jobs].count("q-crash") == 1


def test_sweep_queues_every_validated_combination(ray_q):
    _cluster, path, env, _p, _h = ray_q
    grid = ("--grid", "actor_rollout_ref.actor.optim.lr=1e-6,2e-6",
            "--grid", "data.train_batch_size=64,128")  # fmt: skip
    bad = cli(env, "sweep", str(path), str(PRESET), "--grid", "data.train_batch_size=64,3")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "combination data.train_batch_size=3: data.train_batch_size:" in bad.stderr
    assert "nothing queued (1 of 2 combinations invalid)" in bad.stderr
    assert queue_doc(env, path) == []  # all or nothing

    out = cli(env, "sweep", str(path), str(PRESET), *grid, "--name", "lr bs",
              "--set", "trainer.experiment_name=sw", "--print-config", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ids = [r["submission_id"] for r in doc["runs"]]
    assert ids == ["lr-bs-lr1e-6-tbs64", "lr-bs-lr1e-6-tbs128",
                   "lr-bs-lr2e-6-tbs64", "lr-bs-lr2e-6-tbs128"]  # fmt: skip
    rows = queue_doc(env, path)
    assert [r["submission_id"] for r in rows] == ids
    for row, run in zip(rows, doc["runs"], strict=True):
        lr, bs = run["values"].values()
        assert f"actor_rollout_ref.actor.optim.lr={lr}" in row["overrides"]
        assert f"data.train_batch_size={bs}" in row["overrides"]
        assert "trainer.experiment_name=sw" in row["overrides"]
        assert row["group"] == "lr bs" and row["tags"]["sweep"] == "lr bs"
        assert row["needs"]["gpus"] == 4
    again = cli(
        env,
        "sweep",
        str(path),
        str(PRESET),
        *grid,
        "--name",
        "lr bs",
        "--dry-run",
        "--skip-preflight",
    )
    assert again.returncode == 0 and "lr-bs-lr1e-6-tbs64-2" in again.stdout  # ids stay unique

    # The first run starts (the GPUs are free); its history record carries the sweep's tags.
    out = watch_once(env, path)
    assert "queue-start lr-bs-lr1e-6-tbs64" in out and "queue-wait lr-bs-lr1e-6-tbs128" in out
    rec = next((Path(env["XDG_STATE_HOME"]) / "verl-tui" / "history").rglob(
        "lr-bs-lr1e-6-tbs64.json"))  # fmt: skip
    tags = json.loads(rec.read_text())["tags"]
    assert tags == {"sweep": "lr bs", "grid": "actor_rollout_ref.actor.optim.lr=1e-6, "
                    "data.train_batch_size=64"}  # fmt: skip
    for sid in ids[1:]:
        assert cli(env, "queue", str(path), "--cancel", sid).returncode == 0
    # Its record is what is checked, not verl's run (test_jobs.py runs the preset through).
    assert cli(env, "stop", str(path), "lr-bs-lr1e-6-tbs64").returncode == 0
    wait_status(env, path, "lr-bs-lr1e-6-tbs64", {"SUCCEEDED", "FAILED", "STOPPED"})
    jobs = json.loads(cli(env, "jobs", str(path), "--json").stdout)["jobs"]
    row = next(j for j in jobs if j["submission_id"] == "lr-bs-lr1e-6-tbs64")
    assert row["tags"] == tags and row["profile"] == "grpo-gsm8k-qwen2.5-0.5b"


def test_a_failing_notifier_is_shown_not_fatal(ray_q, tmp_path):
    _cluster, path, env, _p, _h = ray_q
    broken = tmp_path / "hosts-broken-notify.yaml"
    text = path.read_text().split("notify:")[0]
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('pager down'); sys.exit(4)"]
    broken.write_text(text + f"notify:\n  command: {json.dumps(fail)}\n  timeout: 5\n")
    queued = cli(env, "submit", str(broken), "--queue", "--submission-id", "q-notify", "--",
                 "python", "-c", "print(1)")  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    out = cli(env, "watch", str(broken), "--once")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "queue-start q-notify" in out.stdout
    assert (
        "error q-notify: notifier failed for queue-start: notify command "
        f"{sys.executable}: exit status 4: pager down" in out.stdout
    )
    assert queue_doc(env, path) == [] and "Traceback" not in out.stderr
    wait_status(env, path, "q-notify", {"SUCCEEDED", "FAILED"})


def test_ray_unreachable_keeps_the_queue_quietly(ray_q, tmp_path):
    """The head answers SSH but its dashboard does not (a wrong port here): the supervisor
    acts on nothing, says no error, and the queued job stays."""
    _cluster, path, env, _p, _h = ray_q
    off = tmp_path / "hosts-wrong-dashboard.yaml"
    off.write_text(path.read_text().replace("ray:\n", "ray:\n  dashboard_port: 8999\n", 1))
    queued = cli(env, "submit", str(off), "--queue", "--submission-id", "q-down", "--", "true")
    assert queued.returncode == 0, queued.stderr  # a raw command is queued without Ray
    out = watch_once(env, off)
    assert "q-down" not in out and " error" not in out, out
    rows = queue_doc(env, path)
    assert [(r["submission_id"], r["state"]) for r in rows] == [("q-down", "queued")]
    assert job_status(env, path, "q-down") is None
    assert cli(env, "queue", str(path), "--cancel", "q-down").returncode == 0


def test_an_entry_the_cluster_no_longer_holds_stays_blocked_and_the_rest_go_on(ray_q):
    """Queued on a bigger cluster (here: its needs raised in the file to 2 nodes × 4 GPUs, as if
    a node had left since): kept with the reason, BLOCKED, and the job behind it starts."""
    _cluster, path, env, _p, _h = ray_q
    common = ("submit", str(path), str(PRESET), "--queue", "--print-config")
    assert cli(env, *common, "--submission-id", "q-big").returncode == 0
    assert cli(env, "submit", str(path), "--queue", "--submission-id", "q-small", "--",
               "python", "-c", "print(1)").returncode == 0  # fmt: skip
    big = on_head(env, path, "get", "q-big")
    assert big is not None and big.needs.nnodes == 1
    big.needs.nnodes = 2
    on_head(env, path, "update", "q-big", needs=big.needs)
    wait_free(path, env, 4.0)  # earlier tests' jobs are done
    out = watch_once(env, path)
    assert "queue-wait q-big: cannot start on this cluster now: needs 8 GPUs" in out, out
    assert "queue-start q-small" in out
    rows = queue_doc(env, path)
    assert [(r["submission_id"], r["blocked"]) for r in rows] == [("q-big", True)]
    assert "blocked: cannot start" in cli(env, "queue", str(path)).stdout
    assert cli(env, "queue", str(path), "--cancel", "q-big").returncode == 0
