"""The one submission flow (tui/jobs/flow.py) without hosts: its step sequence for each mode, its
typed refusals, and a new gate as a one-place edit. verl's config is composed for real (this
Python's verl); Ray's resources are given (a 2 × 4 GPU cluster) and no host is contacted, which
the flow allows for everything that needs none (a print-config job has no preflight; a queue
needs no Ray). The same flow on a real leased Ray cluster, through all five callers:
tests/test_submission_flow_ray.py."""

from __future__ import annotations

import asyncio

import pytest

from tui.cluster.dashboard import DashboardError
from tui.config.hosts import load_inventory
from tui.jobs import flow
from tui.jobs.flow import (
    Checked,
    Checking,
    ClusterRead,
    PreflightSkipped,
    Queued,
    Ready,
    Refusal,
    Refused,
    Request,
    Submitted,
    Sweep,
    outcome,
    submission_flow,
)
from tui.jobs.history import JobHistory
from tui.jobs.pipeline import JobSpec
from tui.jobs.profiles import load_profile
from tui.jobs.queue import JobQueue
from tui.jobs.rules_base import ClusterResources, NodeResources
from tui.jobs.sweep import parse_grid

PROFILE = """\
name: flow-same
overrides:
  algorithm.adv_estimator: grpo
  data.train_batch_size: 64
  data.max_prompt_length: 256
  data.max_response_length: 256
  actor_rollout_ref.model.path: Qwen/Qwen2.5-0.5B-Instruct
  actor_rollout_ref.actor.ppo_mini_batch_size: 16
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: 4
  actor_rollout_ref.rollout.name: vllm
  actor_rollout_ref.rollout.n: 2
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu: 4
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: 4
  trainer.logger: [console]
  trainer.nnodes: 1
"""
GPUS = ClusterResources([NodeResources("node1", 4, 12), NodeResources("node2", 4, 12)])


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """(inventory, history, profile) with this test's own state dir; hosts never contacted."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: flowtest\nhosts:\n  - name: node1\n    address: 10.0.0.1\n")
    profile = tmp_path / "flow.yaml"
    profile.write_text(PROFILE)
    inv = load_inventory(hosts)
    return inv, JobHistory(inv.cluster), load_profile(profile)


async def _given() -> ClusterResources:
    return GPUS


async def _ray_down() -> ClusterResources:
    raise DashboardError("Ray is not running on the head")


def run(setup, request: Request, resources=_given) -> list:
    inv, history, _ = setup

    async def go() -> list:
        return [s async for s in submission_flow(inv, None, history, request, resources=resources)]

    return asyncio.run(go())


def kinds(steps: list) -> list[str]:
    return [type(s).__name__ for s in steps]


def test_each_mode_yields_its_steps_and_one_outcome(setup):
    """dry run, check and queue of a print-config job (no preflight: it opens no data); the
    queued entry carries the checked submission and its size."""
    inv, _, profile = setup
    spec = JobSpec(profile, sets=["trainer.experiment_name=x"], print_config=True)
    head = ["Checking", "ClusterRead", "Checking", "Checked"]

    steps = run(setup, Request(spec, mode="dry_run"))
    assert kinds(steps) == [*head, "Ready"]
    assert [s.stage for s in steps if isinstance(s, Checking)] == ["cluster", "config"]
    assert steps[1] == ClusterRead(GPUS)
    checked, ready = steps[3], steps[-1]
    assert isinstance(checked, Checked) and isinstance(ready, Ready)
    (sub,) = ready.subs
    assert sub is checked.subs[0] and "trainer.experiment_name=x" in sub.entrypoint_argv
    assert ready.reports[0] is not None and ready.reports[0].ok

    assert kinds(run(setup, Request(spec, mode="check"))) == [*head, "Ready"]

    spec_q = JobSpec(profile, print_config=True, submission_id="flow-q1")
    policy = {"retries": 1, "on": ["nccl_timeout"]}
    steps = run(setup, Request(spec_q, mode="queue", retry_policy=policy))
    assert kinds(steps) == [*head, "Checking", "Queued"]
    done = steps[-1]
    assert isinstance(done, Queued)
    (placed,) = done.placed
    assert placed.position == 1 and placed.entry.needs.gpus_per_node == 4
    assert [e.submission_id for e in JobQueue(inv.cluster).entries()] == ["flow-q1"]
    assert placed.entry.retry_policy == policy  # the policy travels on the entry itself
    # The same id again: the queue refuses it, in the flow's words.
    again = run(setup, Request(spec_q, mode="queue"))[-1]
    assert isinstance(again, Refused) and again.kind is Refusal.NOT_QUEUED
    assert "flow-q1" in again.detail and len(JobQueue(inv.cluster).entries()) == 1


def test_refusals_are_typed_and_the_same_in_every_mode(setup):
    inv, _, profile = setup
    bad = JobSpec(profile, sets=["data.train_batch_size=3"], print_config=True)
    refusals = [run(setup, Request(bad, mode=m))[-1] for m in ("send", "queue", "dry_run")]
    first = refusals[0]
    assert isinstance(first, Refused) and first.kind is Refusal.INVALID, first
    assert all(r == first for r in refusals), refusals  # one refusal, whoever asked
    assert first.problems and first.report is not None and not first.report.ok
    assert first.detail.startswith(first.problems[0].key or "profile")
    assert JobQueue(inv.cluster).entries() == []

    # A sweep of that value: the same problems, named by its combination.
    grid = (parse_grid("data.train_batch_size=3"),)
    sweep = JobSpec(profile, print_config=True)
    swept = run(setup, Request(Sweep(sweep, grid, "fs"), mode="queue"))[-1]
    assert isinstance(swept, Refused) and swept.kind is Refusal.INVALID
    assert swept.problems == first.problems and swept.detail == first.detail
    assert swept.run == "data.train_batch_size=3" and swept.reason == "1 of 1 combinations invalid"

    # A malformed --set is the caller's input: refused, the error kept (the CLI exits 2).
    malformed = run(setup, Request(JobSpec(profile, sets=["data.x=[1,"]), mode="dry_run"))[-1]
    assert isinstance(malformed, Refused) and malformed.kind is Refusal.INVALID
    assert malformed.error is not None

    # Ray down: a submit and a queue are refused; a dry run checks without the cluster.
    for mode in ("send", "queue"):
        down = run(setup, Request(bad, mode=mode), resources=_ray_down)
        assert kinds(down) == ["Checking", "Refused"]
        assert down[-1].kind is Refusal.RAY_DOWN and "not running" in down[-1].detail
    dry = run(setup, Request(JobSpec(profile, print_config=True), mode="dry_run"), _ray_down)
    assert dry[1] == ClusterRead(None, "Ray is not running on the head")
    assert isinstance(dry[-1], Ready)


def test_skipping_the_preflight_is_said_and_asked_again_sends_without_it(setup):
    """A job that opens data needs the job preflight (hosts); --skip-preflight and "asked
    again after its refusal" skip it, each said as a step; no host is asked."""
    _, _, profile = setup
    spec = JobSpec(profile)
    (sub,) = run(setup, Request(spec, mode="check"))[-1].subs
    skipped = run(setup, Request(spec, mode="dry_run", skip_preflight=True))
    assert PreflightSkipped("--skip-preflight") in skipped and isinstance(skipped[-1], Ready)
    again = run(setup, Request(spec, mode="dry_run", asked_again={sub.config_hash}))
    assert PreflightSkipped("asked again after its refusal") in again
    other = run(setup, Request(spec, mode="dry_run", asked_again={"0" * 12}, skip_preflight=True))
    assert PreflightSkipped("--skip-preflight") in other


def test_a_new_gate_is_one_edit_and_every_caller_meets_it(setup, monkeypatch):
    """A gate appended to GATES refuses submits, queued jobs, dry runs, sweeps and prebuilt
    submissions alike, with its own refusal, before anything is queued or sent."""
    inv, history, profile = setup
    seen: list[int] = []

    async def quota(f, runs):
        seen.append(len(runs))
        yield Checking("preflight")
        yield Refused(Refusal.INVALID, "over the GPU quota", f"{len(runs)} run(s)")

    monkeypatch.setattr(flow, "GATES", (*flow.GATES, quota))
    spec = JobSpec(profile, print_config=True)
    grid = (parse_grid("trainer.total_epochs=1,2"),)
    (built,) = run(setup, Request(spec, mode="check"))[-1].subs  # a check runs no gate
    outcomes = [
        run(setup, Request(spec, mode="send"))[-1],
        run(setup, Request(spec, mode="queue"))[-1],
        run(setup, Request(spec, mode="dry_run"))[-1],
        run(setup, Request(Sweep(spec, grid, "q"), mode="queue"))[-1],
        asyncio.run(outcome(submission_flow(inv, None, history, Request(built, mode="queue")))),
    ]
    assert [o.reason for o in outcomes] == ["over the GPU quota"] * 5, outcomes
    assert seen == [1, 1, 1, 2, 1] and JobQueue(inv.cluster).entries() == []
    assert not any(isinstance(o, Submitted) for o in outcomes)


def test_the_refusal_names_failing_checks_once(setup):
    from tui.cluster.doctor.findings import Finding
    from tui.screens.job_form.submit import preflight_problems, refusal_bar

    rows = (
        Finding("path:data.train_files", "data", "fail", "node1", "no such file", "fix"),
        Finding("path:data.train_files", "data", "fail", "node1", "no such file", "fix"),
        Finding("import:vllm", "verl's imports", "fail", None, "node1, node2: no vllm", ""),
        Finding("shm", "/dev/shm", "warn", "node2", "64 MiB", ""),
    )
    refused = Refused(
        Refusal.PREFLIGHT, "the job preflight failed", "node1: no such file", findings=rows
    )
    assert refused.failing_checks == ["data.train_files (node1)", "import:vllm"]
    bar = refusal_bar(refused).plain
    assert bar.startswith("not submitted: the job preflight failed: data.train_files (node1), ")
    assert "ctrl+r" in bar
    shown = preflight_problems(rows, refused=True)
    assert shown[0].message.startswith("job preflight: 3 problems, not submitted")
    assert [p.key for p in shown[1:]] == ["data.train_files", "data.train_files", None, None]
