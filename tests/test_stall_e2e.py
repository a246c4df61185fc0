"""Stall detection end to end on the shared two-host Ray cluster (issue 28): two real jobs of
tests/workloads/gloo_deadlock.py, each a rank actor on each host in one torch.distributed gloo
group. Job A prints step lines, then one rank never enters the all_reduce: the real supervisor
pass flags it STALLED within hosts.yaml's small stall: thresholds (Ray still says RUNNING),
takes one stack dump of every rank into the run archive, sends job-stalled once to a loopback
webhook, stops it (stall: retry: true, submit --retries 1) and resubmits it as its retry. Job B
hangs before its first step (one rank never joins the group): flagged by the start-up
allowance, not retried (no retries), shown in `jobs --json` as a stall object."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from pathlib import Path

import pytest
from harness.raycluster import VENV_PY
from test_jobs import cli
from test_notify import Hook

from tui.config.hosts import load_inventory

WORKLOAD = str(Path(__file__).parent / "workloads" / "gloo_deadlock.py")
# Small thresholds: a step every 0.5 s, so "no step for 5 s" is a stall; no first step 20 s
# after the start is one too.
STALL = "stall:\n  factor: 2\n  min_s: 5\n  startup_s: 20\n  retry: true\n"
DEADLINE_S = 150.0


@pytest.fixture(scope="module")
def hook():
    h = Hook()
    yield h
    h.close()


def _submit(lease, *args: str) -> str:
    res = cli(lease.env, "submit", str(lease.path), "--json", *args, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["submission_id"]


async def test_a_deadlocked_job_is_flagged_dumped_notified_and_retried(
    ray_shared2, hook, tmp_path, monkeypatch
) -> None:
    lease = ray_shared2
    monkeypatch.setenv("XDG_STATE_HOME", lease.env["XDG_STATE_HOME"])
    text = lease.path.read_text()
    notify = f"notify:\n  webhook: {hook.url}\n  events: [job-stalled, retry]\n"
    lease.path.write_text(STALL + notify + text)
    inv = load_inventory(lease.path)
    marker = tmp_path / "hung-once"

    # A: steps, then rank 1 skips the all_reduce at step 3 (once: its retry runs through).
    common = [VENV_PY, WORKLOAD, "--step-s", "0.5", "--steps", "4"]
    a = await asyncio.to_thread(
        _submit,
        lease,
        "--retries",
        "1",
        "--",
        *common,
        "--hang-at",
        "3",
        "--hang-once",
        str(marker),
    )
    # B: rank 1 never joins the gloo group: no first step ever.
    b = await asyncio.to_thread(_submit, lease, "--", *common, "--hang-at", "0")
    # The supervisor starts once A is past its start-up (how long that takes depends on the
    # machine's load), so the short start-up allowance is for B alone.
    await _until("A's first step", lambda: "step:1 " in _log(lease, a), 240, every=1.0)

    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.history import JobHistory
    from tui.state import state_dir
    from tui.supervisor.core import Supervisor
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.notify import install
    from tui.transport.fleet import Fleet

    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), state_dir())
        sup = Supervisor(ctx, interval=1.0)
        install(ctx)
        stop = asyncio.Event()
        loop = asyncio.create_task(sup.run(stop=stop))
        try:
            await _scenario(ctx, sup, hook, lease, a, b)
        except AssertionError:
            for sid in (a, b):  # what the jobs printed, for the failure's report
                print(f"--- {sid} at {time.time():.0f}\n{_log(lease, sid)[-3000:]}")
            print("decisions:", [d.line() for d in sup.recent])
            raise
        finally:
            stop.set()
            sup.wake()
            await asyncio.wait_for(loop, 60)
            await sup.close()
            client = await cluster.dashboard()
            for sid in (a, b, f"{a}-retry1"):
                with contextlib.suppress(Exception):  # already ended, or never sent
                    await client.stop_job(sid)
            await cluster.close()


async def _until(what: str, predicate, timeout: float = DEADLINE_S, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while not (got := await asyncio.to_thread(predicate)):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(every)
    return got


def _log(lease, sid: str) -> str:
    """The driver log, read on the head as an operator would."""
    path = f"/tmp/ray/session_latest/logs/job-driver-{sid}.log"
    return lease.cluster.exec_in("node1", ["sh", "-c", f"cat {path} 2>/dev/null"]).stdout


def _bodies(hook: Hook, event: str, sid: str) -> list[dict]:
    return [x for x in hook.bodies if x["event"] == event and x["submission_id"] == sid]


async def _scenario(ctx, sup, hook: Hook, lease, a: str, b: str) -> None:
    # A: flagged after its last step (2), with the stack dump taken first.
    stalled_a = (await _until("A's job-stalled", lambda: _bodies(hook, "job-stalled", a)))[0]
    stall = stalled_a["details"]
    assert stall["reasons"] == ["no_step"] and stall["last_step"] == 2, stall
    assert stall["limit_s"] == 5 and stall["median_step_s"] == pytest.approx(0.5, abs=0.1)
    assert stalled_a["message"].startswith("no step for "), stalled_a["message"]
    assert "(last step 2); median step 0.5 s" in stalled_a["message"]
    dump = stall["stack_dump"]
    assert dump["path"] and dump["groups"] and not dump["problems"], dump
    # The archived dump (every frame, --native): the rank that never reached the collective
    # stands apart, in its own frame, from the rank that waits in the all_reduce.
    saved = json.loads(gzip.decompress(Path(dump["path"]).read_bytes()))
    frames = [" ".join(g["frames"]) for g in saved["groups"]]
    skipping = [i for i, f in enumerate(frames) if "skip_collective" in f]
    waiting = [i for i, f in enumerate(frames) if "all_reduce" in f and "train_step" in f]
    assert len(skipping) == 1 and len(waiting) == 1 and skipping != waiting, frames
    hosts = {saved["groups"][i]["processes"][0]["host"] for i in skipping + waiting}
    assert hosts == {"node1", "node2"}, saved["groups"]
    assert stall["stopped"] is True and "stopped for a retry" in stalled_a["message"]

    # Stopped, then resubmitted from the supervisor as attempt 2 of the same command.
    retry = (await _until("A's retry", lambda: _bodies(hook, "retry", a)))[0]
    assert retry["details"]["new_submission_id"] == f"{a}-retry1"
    assert retry["details"]["signature"] == "stall"
    rec = ctx.history.get(f"{a}-retry1")
    assert rec is not None and rec.retry_of == a and rec.attempt == 2

    # B: flagged by the start-up allowance; no retries, so it stays RUNNING (Ray's word).
    stalled_b = (await _until("B's job-stalled", lambda: _bodies(hook, "job-stalled", b)))[0]
    assert stalled_b["details"]["reasons"] == ["no_first_step"]
    assert stalled_b["details"]["last_step"] is None
    assert stalled_b["message"].startswith("no first step ")
    assert "not retried: the job has no retries: in its policy" in stalled_b["message"]

    # `jobs --json`: Ray's status, and the stall beside it.
    listed = await asyncio.to_thread(cli, lease.env, "jobs", str(lease.path), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {j["submission_id"]: j for j in json.loads(listed.stdout)["jobs"]}
    assert rows[b]["status"] == "RUNNING" and rows[b]["stall"]["reasons"] == ["no_first_step"]
    assert rows[b]["stall"]["evidence"].startswith("no first step")
    assert rows[a]["status"] in ("STOPPED", "FAILED") and rows[a]["stall"] is None

    # Once per stall: a few more passes send nothing new.
    ticks = sup.ticks
    await _until("three more passes", lambda: sup.ticks >= ticks + 3, 60)
    assert len(_bodies(hook, "job-stalled", a)) == 1 and len(_bodies(hook, "job-stalled", b)) == 1
