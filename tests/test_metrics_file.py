"""Metrics from verl's own `file` logger (issue 29, item 1).

Pure: FileLogger's JSON lines (orjson's null is a non-finite value, not a missing key; a huge
integer is ±inf; bad lines are skipped, never raised), FileLogger's "Creating file logger at"
line behind Ray's prefix, the path a job's command line names, and `check`'s warning when
trainer.logger has neither console nor file.

Real: on the shared two-host Ray cluster, a Ray job logs through verl 0.9.1's own Tracking class
with the file and console backends from an actor on the other node (tests/workloads/
verl_tracking.py). While it runs, the series are read from the file on that node over SSH
(exact numbers, every key, NaN/Inf as non-finite); the console fallback of the same job agrees on
every finite value; after the gate opens the follow picks up the new steps by offset; `verl-tui
metrics --json --key` prints the same; the archive keeps the series; a console-only job falls
back to console lines. The same job dumps its generations through verl's own
RayPPOTrainer._dump_generations on node2 (issue 29, item 4): the folder is found from verl's
"Dumped generations to" line, the samples, scores and flags read back over SSH, `verl-tui
rollouts --json --grep` prints them and names a bad line file:line. The job is also served for
Prometheus (item 5): /metrics scraped over HTTP and parsed by prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import uuid
from pathlib import Path

import pytest

from tui.jobs.rules_base import _Cfg
from tui.jobs.rules_metrics import metrics_logger_rules
from tui.metrics.filelog import (
    FileLines,
    configured_path,
    find_logger_line,
    parse_file_line,
)

sys.path.insert(0, str(Path(__file__).parent / "workloads"))
from verl_tracking import step_values

WORKLOAD = str(Path(__file__).parent / "workloads" / "verl_tracking.py")


def test_file_lines_keep_non_finite_and_huge_values_as_data() -> None:
    step, m = parse_file_line('{"step":3,"data":{"a":null,"b":1e999,"c":true,"d":"x","e":[1]}}')
    assert step == 3 and math.isnan(m["a"]) and m["b"] == math.inf and m["c"] == 1.0
    assert "d" not in m and "e" not in m
    assert parse_file_line('{"step":1,"data":{"big":' + "9" * 400 + "}}") == (1, {"big": math.inf})
    for bad in (
        '{"step":"1","data":{"a":1}}',
        '{"step":true,"data":{"a":1}}',
        "[" * 100_000,
        '{"step":1,"data":{"a":"x"}}',
        "not json",
        '{"step":1e3,"data":{"a":1}}',
    ):
        assert parse_file_line(bad) is None, bad
    lines = FileLines()
    assert lines.feed('{"step":1,"data":{"a":1.5}}\n{"step":2,"da') == [(1, {"a": 1.5})]
    assert lines.feed('ta":{"a":2}}\ngarbage\n') == [(2, {"a": 2.0})]
    assert lines.bad_lines == 1


def test_logger_line_and_configured_path() -> None:
    text = (
        "(TaskRunner pid=12, ip=10.0.0.7) \x1b[36mCreating file logger at /w/p/e.jsonl\x1b[0m\n"
        "someone printed: Creating file logger at /not/this\n"
    )
    found = find_logger_line(text)
    assert found is not None and found.path == "/w/p/e.jsonl" and found.node_ip == "10.0.0.7"
    assert find_logger_line("Creating file logger at relative/x.jsonl") is None
    assert find_logger_line("Creating file logger at /a/b\x07c") is None
    entry = "python3 -m verl.trainer.main_ppo trainer.logger=[console,file] trainer.project_name=p"
    assert configured_path(entry, {"VERL_FILE_LOGGER_ROOT": "/r"}) == "/r/p/gsm8k.jsonl"
    assert configured_path(entry, {"VERL_FILE_LOGGER_PATH": "/x/m.jsonl"}) == "/x/m.jsonl"
    assert configured_path(entry, {}) is None  # "." is the trainer's cwd: only its line says
    assert configured_path("x trainer.logger=[console]", {"VERL_FILE_LOGGER_ROOT": "/r"}) is None


def test_check_warns_when_no_logger_the_cockpit_reads() -> None:
    def problems(logger):
        out: list = []
        metrics_logger_rules(_Cfg({"trainer": {"logger": logger}}, out), out)
        return out

    assert problems(["console"]) == [] and problems(["wandb", "file"]) == []
    (p,) = problems(["wandb"])
    assert p.key == "trainer.logger" and p.level == "warn" and "add file" in p.message
    assert len(problems("tensorboard")) == 1 and len(problems([])) == 1


# --- the real parts: verl's Tracking in a Ray job on the namespace cluster ------------------


def _submit(lease, *args: str) -> str:
    from test_jobs import cli

    res = cli(lease.env, "submit", str(lease.path), "--json", "--", *args, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["submission_id"]


def _same(got: float, want: float) -> bool:
    if math.isnan(want) or math.isinf(want):  # orjson wrote null: a non-finite value
        return not math.isfinite(got)
    return got == want


async def _until(what, predicate, timeout=180.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := await predicate()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)
    return got


async def test_verl_file_logger_read_over_ssh(ray_shared2, tmp_path, monkeypatch) -> None:
    from harness.raycluster import VENV_PY
    from test_jobs import cli

    from tui.archive import metrics_file
    from tui.archive.metrics_source import job_metrics
    from tui.archive.store import ArchiveStore
    from tui.cluster.dashboard import DashboardError
    from tui.cluster.ray_cluster import RayCluster
    from tui.commands.metrics import phases_of
    from tui.config.hosts import load_inventory
    from tui.metrics import MetricsTracker
    from tui.transport.fleet import Fleet

    lease = ray_shared2
    monkeypatch.setenv("XDG_STATE_HOME", lease.env["XDG_STATE_HOME"])
    root = f"/tmp/vt-metrics-{uuid.uuid4().hex[:12]}"  # on node2: fresh, so no old gate
    gate = f"{root}/gate"
    a = await asyncio.to_thread(
        _submit,
        lease,
        VENV_PY,
        WORKLOAD,
        "--root",
        root,
        "--steps",
        "4",
        "--more",
        "2",
        "--gate",
        gate,
        "--dump",
        f"{root}/rollouts",
    )
    b = await asyncio.to_thread(
        _submit,
        lease,
        VENV_PY,
        WORKLOAD,
        "--root",
        root,
        "--experiment",
        "console_only",
        "--backends",
        "console",
        "--steps",
        "2",
    )
    inv = load_inventory(lease.path)
    store = ArchiveStore(inv.cluster)
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:

            async def four_steps():
                try:
                    t = await job_metrics(cluster, a, store=store)
                except DashboardError:  # the head's dashboard dropped a request (2 busy cores)
                    return None
                return t if t.source.startswith("file:") and t.last_step == 4 else None

            try:
                tracker = await _until("A's four steps in its file", four_steps)
            except AssertionError:
                print(await asyncio.to_thread(_driver_log, lease, a))  # for the failure's report
                raise
            path = f"{root}/vt_proj/vt_exp.jsonl"
            assert tracker.source == f"file:{path}"
            # Every key, exact numbers; NaN/Inf (null in the file) non-finite, never missing.
            for step in range(1, 5):
                for key, want in step_values(step).items():
                    got = dict(tracker.series(key))[step]
                    assert _same(got, want), (step, key, got, want)
            # Where the steps' time went (verl-tui metrics --phases): the file's timing_s/*
            # phases add up to its timing_s/step sums.
            spent = phases_of(tracker)
            assert spent.steps == 4 and spent.total_s == sum(5.5 + s for s in range(1, 5))
            assert spent.phases["gen"] == sum(2.0 + s for s in range(1, 5))
            assert sum(spent.phases.values()) == pytest.approx(spent.total_s)
            assert spent.mfu == {"actor": 0.125}
            assert dict(tracker.series("actor/pg_clipfrac_is_one")) == {
                1: 1.0,
                2: 0.0,
                3: 1.0,
                4: 0.0,
            }
            # The file is on the node of the actor, not the head's: read from there.
            mf = await metrics_file.locate_metrics_file(cluster, a, None)
            assert mf is not None and mf.host == "node2", mf

            # The console fallback (the driver log's step lines) agrees on every finite value.
            console = MetricsTracker()
            console.feed_text(await asyncio.to_thread(_driver_log, lease, a))
            for key in step_values(1):
                for step, v in console.series(key):
                    if math.isfinite(v):
                        assert v == pytest.approx(dict(tracker.series(key))[step], rel=1e-12)

            # The supervisor's health duty on the running job: the file's NaN/Inf and the KL
            # past its bound, each announced once, with the file as the source; the alerts are
            # what `jobs --json` lists (health.json in the state folder).
            await _health_pass(inv, cluster, a, path)

            # The same job dumped its generations through verl's own _dump_generations on
            # node2: found from verl's "Dumped generations to" line, read back over SSH.
            await _rollouts_read_back(lease, cluster, a, f"{root}/rollouts")
            # And served for Prometheus while it runs: scraped over HTTP, parsed by
            # prometheus_client's own parser.
            await _prometheus_scrape(cluster, inv, a, path)

            # Following while it runs: the next steps come by offset after the gate opens.
            follow = MetricsTracker()
            task = asyncio.create_task(
                metrics_file.follow_job_file(cluster, a, follow, store=store, poll_s=0.3)
            )
            await _until("the follower's first rows", _async(lambda: follow.last_step == 4))
            lease.cluster.exec_in("node2", ["touch", gate])
            assert await asyncio.wait_for(task, 120) is not None
            assert follow.last_step == 6 and len(follow.series("timing_s/gen")) == 6
            archived = metrics_file.load(store, a)
            assert archived is not None and archived.source == f"file:{path}"
            assert len(archived.series["timing_s/gen"]) == 6 and archived.offset > 0

            # A console-only job: the driver log's lines are the source.
            async def b_done():
                t = await job_metrics(cluster, b, store=store)
                return t if t.last_step == 2 else None

            tb = await _until("B's console lines", b_done)
            assert tb.source == "console" and tb.series("timing_s/gen") == [(1, 3.0), (2, 4.0)]
        finally:
            await cluster.close()
            lease.cluster.exec_in("node2", ["rm", "-rf", "--", root])

    # The command, with the file removed from node2: the archived series (exact, the file's
    # source) rather than console lines; --json, a key pattern, null for non-finite values.
    res = await asyncio.to_thread(
        cli, lease.env, "metrics", str(lease.path), a, "--json", "--key", "actor/*"
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["source"] == f"file:{path}"
    assert set(doc["series"]) == {k for k in tracker.keys() if k.startswith("actor/")}  # noqa: SIM118
    assert doc["series"]["actor/grad_norm"][2] == [3, None]
    assert doc["series"]["actor/kl_loss"][3] == [4, 1.7976931348623157e308]
    assert [s for s, _v in doc["series"]["actor/entropy"]] == [1, 2, 3, 4, 5, 6]


async def _health_pass(inv, cluster, sid: str, path: str) -> None:
    from tui.jobs.history import JobHistory
    from tui.jobs.service import list_jobs
    from tui.state import state_dir
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.health_duty import HealthDuty, health_shown

    ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), state_dir())
    ctx.jobs = await list_jobs(cluster, ctx.history)
    duty = HealthDuty()
    said = [d for d in await duty.tick(ctx) if d.submission_id == sid]
    got = {(d.details["health"]["rule"], d.details["health"]["key"]) for d in said}
    assert got == {
        ("nonfinite", "actor/entropy"),
        ("nonfinite", "critic/score/mean"),
        ("kl", "actor/kl_loss"),
    }, [d.line() for d in said]
    assert all(d.kind == "job-unhealthy" and d.details["source"] == f"file:{path}" for d in said)
    kl = next(d for d in said if d.details["health"]["rule"] == "kl")
    assert kl.details["health"]["step"] == 4 and "above 1 at step 4" in kl.message
    assert [d for d in await duty.tick(ctx) if d.submission_id == sid] == []  # once per rule
    listed = health_shown(inv.cluster, ctx.jobs)[sid]
    assert {(x["rule"], x["step"]) for x in listed} == {
        ("nonfinite", 3),
        ("nonfinite", 4),
        ("kl", 4),
    }
    assert next(x for x in listed if x["rule"] == "nonfinite")["value"] is None


async def _rollouts_read_back(lease, cluster, sid: str, folder: str) -> None:
    from test_jobs import cli
    from verl_tracking import rollout_samples

    from tui.commands.rollouts import rollouts_doc
    from tui.rollouts.reader import locate_dump

    dump = await locate_dump(cluster, sid)
    assert (dump.host, dump.folder) == ("node2", folder)
    doc, _view = await rollouts_doc(dump, step=2, sort="score")
    assert doc["steps"] == [1, 2, 3, 4] and doc["total"] == 6
    want = rollout_samples(2)
    got = {s["input"]: s for s in doc["samples"]}
    for i, prompt in enumerate(want["inputs"]):
        assert got[prompt]["output"] == want["outputs"][i] and got[prompt]["step"] == 2
    assert [s["score"] for s in doc["samples"]] == [1.0, 1.0, 0.0, 0.0, 0.0, None]  # NaN last
    flags = {s["input"]: s["flags"] for s in doc["samples"]}
    assert [flags[p] for p in want["inputs"]] == [
        [],
        ["empty"],
        ["repeats"],
        ["max_length"],
        [],
        [],
    ]
    # A bad line appended on node2 is named file:line; the command's JSON is the same document.
    lease.cluster.exec_in("node2", ["sh", "-c", f"echo '{{broken' >> {folder}/2.jsonl"])
    res = await asyncio.to_thread(
        cli,
        lease.env,
        "rollouts",
        str(lease.path),
        sid,
        "--json",
        "--step",
        "2",
        "--grep",
        "Q[12]:",
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["steps"] == [1, 2, 3, 4] and [s["input"][:3] for s in out["samples"]] == [
        "Q1:",
        "Q2:",
    ]
    (bad,) = out["bad_lines"]
    assert bad.startswith(f"{folder}/2.jsonl:7: bad JSON: Expecting property name")


async def _prometheus_scrape(cluster, inv, sid: str, path: str) -> None:
    from test_prometheus import scrape

    from tui.export.prometheus import Exporter
    from tui.jobs.history import JobHistory

    exporter = Exporter(cluster, JobHistory(inv.cluster))
    await exporter.refresh()
    host, port = exporter.serve("127.0.0.1", 0)
    try:
        got = await asyncio.to_thread(scrape, host, port)
    finally:
        exporter.close()
    job = ("job", sid)
    assert got[("verl_tui_job_state", (job, ("state", "RUNNING")))] == 1.0
    assert got[("verl_tui_training_step", (job, ("source", f"file:{path}")))] == 4
    metric = lambda key: got[("verl_tui_training_metric", (job, ("key", key)))]  # noqa: E731
    assert math.isnan(metric("critic/score/mean"))  # step 4's -inf: null in verl's file
    assert metric("actor/kl_loss") == 1.7976931348623157e308
    assert metric("timing_s/gen") == 6.0 and metric("actor/pg_clipfrac_is_one") == 0.0
    assert got[("verl_tui_health_alerts", (job, ("rule", "kl")))] == 1.0
    assert got[("verl_tui_health_alerts", (job, ("rule", "nonfinite")))] == 2.0


def _async(fn):
    async def check():
        return fn()

    return check


def _driver_log(lease, sid: str) -> str:
    path = f"/tmp/ray/session_latest/logs/job-driver-{sid}.log"
    return lease.cluster.exec_in("node1", ["cat", path]).stdout
