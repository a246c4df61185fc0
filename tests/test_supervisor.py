"""Runs that heal themselves (issue 14, supervisor + retry policy), on a real two-node namespace
Ray cluster: a job that writes a real verl FSDP checkpoint across both hosts (each its own ranks,
a later save left half-written) and then fails with an NCCL watchdog timeout is resubmitted once
by `verl-tui watch`, from the latest COMPLETE step, after the missing shards were collected; the
chain shows in `jobs --json`. A real verl config error is not retried. A retry waits while a host
is cut off. Two supervisors: the second refuses; one killed with -9 is taken over, and neither a
restart nor a crash between deciding and sending submits anything twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ckpt.make_fsdp_checkpoint import files_by_writer
from harness.pilot import until
from harness.raycluster import VENV_PY
from test_jobs import cli, wait_status

from tui.logs.retriable import RETRIABLE_KEYS

STEP = 3  # the complete save
HALF_STEP = 6  # a later save cut short by the failure: rank 1's shards never written
PRESET = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
NCCL_TIMEOUT_LOG = """\
(WorkerDict pid=4242, ip=10.0.0.2) [rank1]:[E1124 03:12:09.873421 ProcessGroupNCCL.cpp:616] \
[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, \
NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
(WorkerDict pid=4242, ip=10.0.0.2) [rank1]:[E1124 03:12:09.874011 ProcessGroupNCCL.cpp:1785] \
[PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by \
watchdog at work: 8812, last enqueued NCCL work: 8812, last completed NCCL work: 8811.
Traceback (most recent call last):
  File "verl/trainer/main_ppo.py", line 42, in main
ray.exceptions.RayTaskError(DistBackendError): ray::TaskRunner.run() (pid=4100, ip=10.0.0.1)
torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.
Error executing job with overrides: []
"""

# A stand-in for `python -m verl.trainer.main_ppo …` (the profile's interpreter): the first
# attempt has each node write its own part of a real verl checkpoint through a Ray task pinned
# to that node, as verl's workers do, then dies like a multi-node run whose NCCL watchdog fired;
# an attempt given trainer.resume_from_path says where it resumed and succeeds.
FAKE_MAIN = """\
import json, os, shutil, sys
kv = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
unq = lambda v: v.strip().strip("'\\"")
root = unq(kv["trainer.default_local_dir"])
if "trainer.resume_from_path" in kv:
    print("RESUMED FROM " + unq(kv["trainer.resume_from_path"]), flush=True)
    print("step:%s - actor/loss:0.25" % (int(unq(kv["trainer.resume_from_path"]).rsplit("_", 1)[1]) + 1))
    sys.exit(0)
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
plan = json.load(open(os.environ["FAKE_PLAN"]))

@ray.remote(num_cpus=0)
def write(src, root, rels):
    for rel in rels:
        s, d = os.path.join(src, rel.rstrip("/")), os.path.join(root, rel.split("=>")[-1].rstrip("/"))
        if "=>" in rel:
            s = os.path.join(src, rel.split("=>")[0])
        os.makedirs(os.path.dirname(d), exist_ok=True)
        (shutil.copytree if os.path.isdir(s) else shutil.copy2)(s, d)
    return len(rels)

ray.init(address="auto")
refs = []
for node in ray.nodes():
    ip = node["NodeManagerAddress"]
    if node["Alive"] and ip in plan["layout"]:
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        refs.append(write.options(scheduling_strategy=strategy).remote(
            plan["src"], root, plan["layout"][ip]))
print("wrote", sum(ray.get(refs)), "checkpoint files", flush=True)
sys.stdout.write(plan["log"])
sys.exit(1)
"""


@pytest.fixture(scope="module")
def real_ckpt(fsdp_checkpoint: dict) -> dict:
    assert fsdp_checkpoint["step_dir"].name == f"global_step_{STEP}"
    return fsdp_checkpoint


@pytest.fixture(scope="module")
def ray_up(ray_own, tmp_path_factory):
    """Two hosts of the module's own (its tests cut links and stop a node's Ray)."""
    work = tmp_path_factory.mktemp("supervisor")
    with ray_own(work, 2, ray_extra="num_cpus: 4", num_gpus=1) as up:
        _cluster, path, _env = up
        # Quick keepalive: a cut host is noticed in ~2 s (the retry must wait for it).
        text = path.read_text().replace(
            "  connect_timeout: 5\n",
            "  connect_timeout: 5\n  keepalive_interval: 1\n  keepalive_count_max: 2\n",
        )
        path.write_text(text)
        yield up


def _disks(cluster, work: Path) -> Path:
    """One checkpoint root path on both hosts, each host's own disk behind it."""
    root = work / "ckpt" / "run"
    root.mkdir(parents=True)
    for h in cluster.hosts:
        disk = work / "disks" / h.name
        disk.mkdir(parents=True)
        res = cluster.exec_in(h.name, ["mount", "--bind", str(disk), str(root)])
        assert res.returncode == 0, res.stderr
    return root


def _heal_profile(cluster, work: Path, real_ckpt: dict, root: Path) -> Path:
    writers = files_by_writer(STEP)
    half = [
        f"global_step_{STEP}/actor/{k}_world_size_2_rank_0.pt=>"
        f"global_step_{HALF_STEP}/actor/{k}_world_size_2_rank_0.pt"
        for k in ("model", "optim", "extra_state")
    ] + [
        f"global_step_{STEP}/actor/fsdp_config.json=>global_step_{HALF_STEP}/actor/fsdp_config.json"
    ]
    node1, node2 = cluster.hosts
    plan = {
        "src": str(real_ckpt["out_dir"]),
        "layout": {
            node1.address: writers["rank0"] + writers["driver"] + half,
            node2.address: writers["rank1"],
        },
        "log": NCCL_TIMEOUT_LOG,
    }
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "fake_main.py").write_text(FAKE_MAIN)
    fakepy = work / "fakepy"
    fakepy.write_text(f'#!/bin/sh\nexec {VENV_PY} {work / "fake_main.py"} "$@"\n')
    fakepy.chmod(0o755)
    doc = yaml.safe_load(PRESET.read_text())
    doc["name"] = "heal"
    doc["python"] = str(fakepy)
    doc["overrides"].update(
        {
            "trainer.nnodes": 2,
            "trainer.n_gpus_per_node": 1,
            "trainer.default_local_dir": str(root),
        }
    )
    doc["runtime_env"] = {"env_vars": {"FAKE_PLAN": str(work / "plan.json")}}
    doc["retries"] = 1
    profile = work / "heal.yaml"
    profile.write_text(yaml.safe_dump(doc, sort_keys=False))
    return profile


def _jobs(env, path) -> dict[str, dict]:
    res = cli(env, "jobs", str(path), "--json")
    assert res.returncode == 0, res.stderr
    return {j["submission_id"]: j for j in json.loads(res.stdout)["jobs"]}


def _watch(env, path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [VENV_PY, "-m", "tui", "watch", str(path), "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


class Lines:
    """A watch process's JSON decision lines, read in a thread (no blocking reads in tests)."""

    def __init__(self, proc: subprocess.Popen):
        import threading

        self.proc, self.items, self._lock = proc, [], threading.Lock()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.items.append(json.loads(line))

    def wait(self, pred, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                hit = next((d for d in self.items if pred(d)), None)
            if hit is not None:
                return hit
            assert self.proc.poll() is None or self.items, self.proc.stderr.read()
            time.sleep(0.2)
        self.proc.kill()  # to read what it said on stderr
        err = self.proc.stderr.read() if self.proc.stderr else ""
        raise AssertionError(f"no such decision in {timeout:.0f} s: {self.items}; stderr: {err}")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


async def _holder(path: Path):
    from tui.config.hosts import load_inventory
    from tui.supervisor.lease import HeadLease
    from tui.transport.fleet import Fleet

    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        return (await HeadLease(inv, fleet).read()).owner


def _lease_holder(path: Path):
    return asyncio.run(_holder(path))


def _submit_in_process(path: Path, env: dict, profile: Path, sid: str, retries: int) -> str:
    """Through the supervisor's validated path (prepare_submission against Ray's live nodes):
    `submit` would also run the job preflight, which this stand-in interpreter cannot pass."""
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.profiles import load_profile
    from tui.state import state_dir
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.policy import RetryPolicy
    from tui.transport.fleet import Fleet

    inv = load_inventory(path)

    async def body() -> str:
        async with Fleet(inv) as fleet:
            cluster = RayCluster(fleet, inv)
            try:
                ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), state_dir())
                spec = JobSpec(load_profile(profile), submission_id=sid)
                return await ctx.submit(
                    spec, profile_path=str(profile), retry_policy=RetryPolicy(retries).to_json()
                )
            finally:
                await cluster.close()

    return asyncio.run(body())


# -- the tests --------------------------------------------------------------------------------


def test_nccl_timeout_is_retried_once_from_the_latest_complete_checkpoint(
    ray_up, real_ckpt, tmp_path, monkeypatch
):
    cluster, path, env = ray_up
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    root = _disks(cluster, tmp_path)
    profile = _heal_profile(cluster, tmp_path, real_ckpt, root)
    watch = _watch(env, path, "--interval", "1")
    lines = Lines(watch)
    try:
        lines.wait(lambda d: d["kind"] == "lock")
        assert _submit_in_process(path, env, profile, "heal-a", 1) == "heal-a"
        failed = wait_status(env, path, "heal-a", {"FAILED"}, timeout=120)
        retry = lines.wait(lambda d: d["kind"] == "retry" and d["submission_id"] == "heal-a")
        ok = wait_status(env, path, "heal-a-retry1", {"SUCCEEDED", "FAILED"}, timeout=120)
        # Nothing more: the retry is settled, the success announced, no second attempt.
        lines.wait(lambda d: d["kind"] == "job-end" and d["submission_id"] == "heal-a-retry1")
        time.sleep(3)
    finally:
        code = _stop(watch)
    assert code == 143, watch.stderr.read() if watch.stderr else ""  # SIGTERM, as every command
    assert _lease_holder(path) is None  # it gave the cluster back on its way out

    resume = f"{root}/global_step_{STEP}"  # not the half-written global_step_6
    details = retry["details"]
    assert details["resume_from"] == resume, retry
    assert details["new_submission_id"] == "heal-a-retry1" and details["attempt"] == 2
    assert details["signature"] == "nccl_timeout"
    assert any("collected" in n for n in details["notes"]), details
    seconds = details["seconds_to_resubmit"]
    assert seconds is not None and 0 <= seconds < 60, details
    print(f"\nfailure (job end) to resubmission: {seconds:.2f} s; {details['phases_s']}")
    assert set(details["phases_s"]) >= {"noticed", "log_verdict", "checkpoint", "validate"}
    (Path(env["XDG_STATE_HOME"]) / "seconds_to_resubmit").write_text(str(seconds))

    assert ok["status"] == "SUCCEEDED", ok
    logs = cli(env, "logs", str(path), "heal-a-retry1")
    assert f"RESUMED FROM {resume}\n" in logs.stdout, logs.stdout
    jobs = _jobs(env, path)
    first, second = jobs["heal-a"], jobs["heal-a-retry1"]
    assert (first["attempt"], first["retry_of"]) == (1, None), first
    assert (second["attempt"], second["retry_of"]) == (2, "heal-a"), second
    assert (
        second["retry_policy"]
        == first["retry_policy"]
        == {"retries": 1, "retry_on": list(RETRIABLE_KEYS)}
    )
    assert {"nccl_timeout", "node_died", "host_lost"} <= set(RETRIABLE_KEYS)
    kinds = [d["kind"] for d in first["decisions"]]
    assert kinds.index("job-failed") < kinds.index("retry"), kinds
    # The failure's cause, read from the real driver log: the NCCL watchdog's hint.
    ended = first["decisions"][kinds.index("job-failed")]
    assert ended["details"]["signature"] == "nccl_timeout", ended
    assert ended["message"] == f"FAILED: {ended['details']['cause']}", ended
    assert [j for j in jobs.values() if j["retry_of"] == "heal-a"] == [second]
    assert failed["end_time"] <= retry["details"]["submitted_at"]
    # The shards were collected: every host now holds the whole step.
    listed = cli(env, "ckpt", str(path), "--dir", str(root), "--json")
    steps = {s["step"]: s for s in json.loads(listed.stdout)["steps"]}
    assert sorted(steps[STEP]["complete_on"]) == ["node1", "node2"], steps[STEP]
    assert steps[HALF_STEP]["complete"] is False


def test_config_error_is_not_retried(ray_up):
    _, path, env = ray_up
    # Real verl, real Hydra: an unknown key fails composition.
    sub = cli(
        env, "submit", str(path), "--retries", "2", "--submission-id", "cfg-err-1",
        "--", "python", "-m", "verl.trainer.main_ppo", "no_such_group.no_such_key=1",
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    wait_status(env, path, "cfg-err-1", {"FAILED"}, timeout=180)
    for _ in range(2):  # a second pass decides nothing new
        once = cli(env, "watch", str(path), "--once", "--json")
        assert once.returncode == 0, once.stderr
    decisions = [json.loads(ln) for ln in once.stdout.splitlines()]
    assert not [d for d in decisions if d["submission_id"] == "cfg-err-1"], decisions
    job = _jobs(env, path)["cfg-err-1"]
    no = [d for d in job["decisions"] if d["kind"] == "no-retry"]
    assert len(no) == 1 and "config error" in no[0]["message"], job["decisions"]
    assert not [j for j in _jobs(env, path).values() if j["retry_of"] == "cfg-err-1"]
    assert job["retry_policy"]["retries"] == 2


def test_bad_retry_flags_are_one_line_exit_2(ray_up):
    _, path, env = ray_up
    for args, words in (
        (["--retries", "x"], "not a number"),
        (["--retries", "1", "--retry-on", "cuda_oom"], "unknown retriable signature"),
        (["--retries", "-1"], "0..100"),
    ):
        res = cli(env, "submit", str(path), *args, "--", "true")
        assert res.returncode == 2, res
        assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


RAW_NCCL = (
    "import sys, time; time.sleep({sleep}); "
    "print('[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600001 milliseconds before timing out.'); "
    "sys.exit(1)"
)


class TestHostCutOff:
    """One `watch --bring-up` and one retried chain (cut-1, then cut-1-retry1) for two tests: the
    retry waits while a host is cut off, and the cockpit, opened beside that watch, stands by
    and shows the chain (two Ray jobs and a watch process of their own before)."""

    @pytest.fixture(scope="class")
    def cut_run(self, ray_up):
        cluster, path, env = ray_up
        # --bring-up: should Ray mark node2 dead meanwhile, its node is started again first.
        watch = _watch(env, path, "--interval", "1", "--bring-up")
        lines = Lines(watch)
        run: dict = {}
        try:
            lines.wait(lambda d: d["kind"] == "lock")
            sub = cli(
                env, "submit", str(path), "--retries", "1", "--submission-id", "cut-1",
                "--", "python", "-c", RAW_NCCL.format(sleep=8),
            )  # fmt: skip
            assert sub.returncode == 0, sub.stderr
            wait_status(env, path, "cut-1", {"RUNNING"}, timeout=60)
            cluster.link_down("node2")
            try:
                run["waiting"] = lines.wait(
                    lambda d: d["kind"] == "waiting" and d["submission_id"] == "cut-1",
                    timeout=60,
                )
                time.sleep(4)  # what it decided while the host stayed cut off
                run["while_cut"] = list(lines.items)
            finally:
                run["back"] = time.time()
                cluster.link_up("node2")
            run["retry"] = lines.wait(
                lambda d: d["kind"] == "retry" and d["submission_id"] == "cut-1"
            )
            wait_status(env, path, "cut-1-retry1", {"FAILED"}, timeout=60)
            run["spent"] = lines.wait(
                lambda d: d["kind"] == "no-retry" and d["submission_id"] == "cut-1-retry1"
            )
            yield watch, run
        finally:
            _stop(watch)

    def test_retry_waits_for_a_host_cut_off_mid_run(self, cut_run):
        _watch, run = cut_run
        waiting = run["waiting"]
        assert "node2 unreachable" in waiting["message"], waiting
        assert not [d for d in run["while_cut"] if d["kind"] == "retry"], run["while_cut"]
        retry = run["retry"]
        assert retry["details"]["submitted_at"] > run["back"]
        assert retry["details"]["resume_from"] is None  # a raw command is retried as is
        spent = run["spent"]
        assert "budget spent" in spent["message"], spent

    async def test_cockpit_stands_by_names_the_holder_and_shows_the_chain(
        self, ray_up, cut_run, monkeypatch
    ):
        """The cockpit runs the same supervisor: while a `watch` holds the cluster it stands by
        and the Jobs screen says who supervises; a retried job shows its chain and the
        decisions."""
        from textual.widgets import DataTable

        from tui.app import VerlTuiApp
        from tui.config.hosts import load_inventory
        from tui.screens.jobs.screen import JobsScreen

        _, path, env = ray_up
        watch, _run = cut_run
        monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
        monkeypatch.setenv("VERL_TUI_SUPERVISE", "1")

        app = VerlTuiApp(load_inventory(path), interval=0.5)
        async with app.run_test(size=(200, 50)) as pilot:
            # Standing by: the watch holds the cluster (the first tick may find SSH not up yet).
            await until(pilot, lambda: app.supervisor is not None and app.supervisor.holder)
            assert not app.supervisor.acting
            await pilot.press("2")
            await until(pilot, lambda: isinstance(app.screen, JobsScreen))
            jobs = app.screen
            await until(pilot, lambda: any(r.submission_id == "cut-1-retry1" for r in jobs.rows))
            await until(
                pilot, lambda: "supervised by" in str(jobs.query_one("#jobs-title").render())
            )
            title = str(jobs.query_one("#jobs-title").render())
            assert "supervised by root@" in title and f"(pid {watch.pid})" in title, title
            table = jobs.query_one(DataTable)
            ids = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
            assert "↻2/2 cut-1-retry1" in ids and "cut-1" in ids, ids
            table.move_cursor(row=ids.index("cut-1"))
            await pilot.pause(0.2)
            detail = str(jobs.query_one("#job-detail").render())
            assert "↻ retried as cut-1-retry1" in detail, detail
            assert "retry: resubmitted as cut-1-retry1, attempt 2/2" in detail, detail
            table.move_cursor(row=ids.index("↻2/2 cut-1-retry1"))
            await pilot.pause(0.2)
            detail = str(jobs.query_one("#job-detail").render())
            assert "↻ retry of cut-1" in detail and "retry budget spent" in detail, detail
        # Closed: the cockpit never held the lease, so the watch still does.
        assert watch.poll() is None
        assert (await _holder(path)).pid == watch.pid


def test_second_supervisor_refuses_and_a_killed_one_is_taken_over(ray_up):
    _, path, env = ray_up
    first = _watch(env, path, "--interval", "1")
    lines = Lines(first)
    try:
        lines.wait(lambda d: d["kind"] == "lock")
        second = cli(env, "watch", str(path), "--once")
        assert second.returncode == 3, second
        assert "supervised by root@" in second.stderr and f"(pid {first.pid})" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        # --standby (a teammate's watch): one pass standing by, not acting, exit 0.
        standby = cli(env, "watch", str(path), "--once", "--standby", "--json")
        assert standby.returncode == 0, standby
        assert "standing by: " in standby.stderr and f"(pid {first.pid})" in standby.stderr
        assert not any(json.loads(x)["kind"] == "lock" for x in standby.stdout.splitlines())
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    # Killed with -9: its lease still stands on the head, yet a watch on this machine sees
    # the holder's process is gone and takes over at once.
    third = cli(env, "watch", str(path), "--once", "--json")
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout.splitlines()[0])["kind"] == "lock"
    text = cli(env, "watch", str(path), "--once")  # one line per decision: HH:MM:SS kind …
    assert text.returncode == 0, text.stderr
    assert " lock: supervising as root@" in text.stdout.splitlines()[0], text.stdout


def test_lease_expires_for_a_holder_elsewhere(ray_up):
    """A holder on another machine cannot be checked for life: its lease must expire."""
    from tui.config.hosts import load_inventory
    from tui.supervisor.lease import HeadLease, LeaseHeld
    from tui.transport.fleet import Fleet

    _, path, _env = ray_up
    inv = load_inventory(path)

    async def body() -> None:
        async with Fleet(inv) as fleet:
            a = HeadLease(inv, fleet, ttl=2.0, directory="/tmp/ray/lease-test")
            b = HeadLease(inv, fleet, ttl=2.0, directory="/tmp/ray/lease-test")
            await a.acquire()
            with pytest.raises(LeaseHeld) as held:
                await b.acquire()
            assert held.value.owner is not None and held.value.owner.pid == os.getpid()
            await a.acquire()  # the heartbeat renews it
            await asyncio.sleep(2.5)
            state = await b.acquire()  # a stopped heartbeat: expired, taken
            assert state.held
            with pytest.raises(LeaseHeld):
                await a.acquire()
            await b.release()
            assert (await a.read()).owner is None

    asyncio.run(body())


def test_kill9_and_crashes_never_submit_twice(ray_up, monkeypatch):
    """watch killed with -9 right after a retry, then restarted: nothing new is sent. And the
    two crash windows of one retry (after the intent was written but before the POST; after the
    POST but before the bookkeeping), replayed in-process with a submitter that dies there."""
    _, path, env = ray_up
    sub = cli(
        env, "submit", str(path), "--retries", "3", "--submission-id", "k9-1",
        "--", "python", "-c", RAW_NCCL.format(sleep=2),
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    wait_status(env, path, "k9-1", {"FAILED"}, timeout=60)
    watch = _watch(env, path, "--interval", "1")
    lines = Lines(watch)
    first = lines.wait(lambda d: d["kind"] == "retry" and d["submission_id"] == "k9-1")
    watch.send_signal(signal.SIGKILL)
    raw = first["details"]
    print(f"\nraw job, failure to resubmission: {raw['seconds_to_resubmit']} s; {raw['phases_s']}")
    watch.wait(timeout=30)
    wait_status(env, path, "k9-1-retry1", {"FAILED"}, timeout=60)
    # The restarted watch retries the retry (attempt 3), and never k9-1 again.
    again = cli(env, "watch", str(path), "--once", "--json")
    assert again.returncode == 0, again.stderr
    assert next(json.loads(ln)["kind"] for ln in again.stdout.splitlines()) == "lock"
    jobs = _jobs(env, path)
    assert [s for s, j in jobs.items() if j["retry_of"] == "k9-1"] == ["k9-1-retry1"]
    assert [s for s, j in jobs.items() if j["retry_of"] == "k9-1-retry1"] == ["k9-1-retry2"]
    wait_status(env, path, "k9-1-retry2", {"FAILED"}, timeout=60)

    # Crash windows, in-process: the submitter dies, a fresh supervisor finishes the job.
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.jobs.history import JobHistory
    from tui.state import state_dir
    from tui.supervisor.core import Supervisor
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.ends import EndsDuty
    from tui.supervisor.retry import RetryDuty
    from tui.supervisor.submitting import submit_validated
    from tui.transport.fleet import Fleet

    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    inv = load_inventory(path)

    class Crash(BaseException):
        pass

    async def die_before_post(ctx, spec, **kw):
        async def dies():  # the process ends where it would open the POST
            raise Crash

        ctx.dashboard = dies
        await submit_validated(ctx, spec, **kw)

    async def die_after_post(ctx, spec, **kw):
        await submit_validated(ctx, spec, **kw)
        raise Crash

    async def one_pass(submitter=None) -> list:
        async with Fleet(inv) as fleet:
            cluster = RayCluster(fleet, inv)
            try:
                ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), state_dir())
                ctx.submitter = submitter
                sup = Supervisor(ctx, [EndsDuty(), RetryDuty()], interval=1)
                try:
                    return await sup.tick()
                finally:
                    await sup.close()
            finally:
                await cluster.close()

    with pytest.raises(Crash):
        asyncio.run(one_pass(die_before_post))
    rec = JobHistory(inv.cluster).get("k9-1-retry2")
    assert rec.pending_retry["submission_id"] == "k9-1-retry3"
    assert JobHistory(inv.cluster).get("k9-1-retry3").status == "SUBMITTING"
    assert "k9-1-retry3" not in _jobs(env, path) or not _jobs(env, path)["k9-1-retry3"]["on_head"]
    done = asyncio.run(one_pass())
    # (job-failed too: the crashed pass died before it published anything)
    assert [d.kind for d in done if d.submission_id == "k9-1-retry2"] == ["job-failed", "retry"]
    wait_status(env, path, "k9-1-retry3", {"FAILED"}, timeout=60)

    # Budget 3: this is attempt 4, the last. Crash after the POST: the head has it, no twin.
    last = JobHistory(inv.cluster).get("k9-1-retry3")

    async def raise_budget() -> None:  # on the head, the policies' one home
        from tui.jobs.queue_shared import cluster_policies

        async with Fleet(inv) as fleet:
            await cluster_policies(inv, fleet).put(
                last, {"retries": 4, "retry_on": ["nccl_timeout"]}
            )

    asyncio.run(raise_budget())
    with pytest.raises(Crash):
        asyncio.run(one_pass(die_after_post))
    done = asyncio.run(one_pass())
    [d] = [d for d in done if d.submission_id == "k9-1-retry3" and d.kind == "retry"]
    assert "found already submitted" in d.message
    jobs = _jobs(env, path)
    chain = sorted(s for s in jobs if s.startswith("k9-1"))
    assert chain == ["k9-1", "k9-1-retry1", "k9-1-retry2", "k9-1-retry3", "k9-1-retry4"]
    assert [jobs[s]["attempt"] for s in chain] == [1, 2, 3, 4, 5]
    assert all(jobs[s]["on_head"] for s in chain)


def test_bring_up_starts_a_missing_node_before_the_retry(ray_up):
    """Ray gone on node2 when the job failed (its raylet stopped): with --bring-up the
    supervisor starts Ray there again (the `up` service), then retries."""
    cluster, path, env = ray_up
    stop = cluster.exec_in("node2", [VENV_PY, "-m", "ray.scripts.scripts", "stop"])
    assert stop.returncode == 0, stop.stderr
    deadline = time.monotonic() + 60
    while json.loads(cli(env, "status", str(path), "--json").stdout)["nodes_alive"] != 1:
        assert time.monotonic() < deadline, "node2 still counted alive"
        time.sleep(1)
    watch = _watch(env, path, "--interval", "1", "--bring-up")
    lines = Lines(watch)
    try:
        lines.wait(lambda d: d["kind"] == "lock")
        sub = cli(
            env, "submit", str(path), "--retries", "1", "--submission-id", "up-1",
            "--", "python", "-c", RAW_NCCL.format(sleep=0),
        )  # fmt: skip
        assert sub.returncode == 0, sub.stderr
        waiting = lines.wait(
            lambda d: d["kind"] == "waiting" and d["submission_id"] == "up-1", timeout=90
        )
        assert "Ray node not alive on node2" in waiting["message"], waiting
        assert "bring-up" in waiting["message"], waiting
        retry = lines.wait(
            lambda d: d["kind"] == "retry" and d["submission_id"] == "up-1", timeout=180
        )
        assert retry["details"]["new_submission_id"] == "up-1-retry1"
        assert retry["at"] > waiting["at"]
        status = json.loads(cli(env, "status", str(path), "--json").stdout)
        assert status["nodes_alive"] == 2, status
    finally:
        _stop(watch)
