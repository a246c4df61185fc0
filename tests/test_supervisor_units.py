"""The supervisor's pure parts (no cluster): which failures are retried, retry policies from
flags and profiles, history records old and new, retry ids, decisions read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.jobs.history import MAX_DECISIONS, JobHistory, JobRecord
from tui.logs.cause import CAUSE_CHARS, scan_log
from tui.logs.retriable import RETRIABLE_KEYS, judge
from tui.supervisor.events import Decision
from tui.supervisor.policy import RetryPolicy, parse_policy
from tui.supervisor.rebuild import retry_id

WATCHDOG = (
    "(WorkerDict pid=7, ip=10.0.0.2) [rank1]:[E1124 03:12:09.873 ProcessGroupNCCL.cpp:616] "
    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, "
    "OpType=ALLREDUCE) ran for 600020 milliseconds before timing out."
)


@pytest.mark.parametrize(
    ("log", "retriable", "key"),
    [
        (WATCHDOG + "\nError executing job with overrides: []", True, "nccl_timeout"),
        ("RuntimeError: [../gloo/transport/tcp/pair.cc:446] connectFullMesh failed", True,
         "gloo_full_mesh"),
        ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
         True, "actor_died"),
        ("ray.exceptions.NodeDiedError: node 10.0.0.2 has been marked dead", True, "node_died"),
        ("RaySystemError: System error: lost connection to the raylet", True, "ray_connection"),
        # The cause wins over what followed it: one rank ran out of memory, the rest timed out.
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + WATCHDOG,
         False, "cuda_oom"),
        ("Could not override 'actor_rollout_ref.rollout.nme'.", False, "hydra_override"),
        ("omegaconf.errors.ConfigAttributeError: Key 'x' is not in struct", False, "config_error"),
        ("Traceback (most recent call last):\n  File \"train.py\", line 3\nKeyError: 'reward'",
         False, None),
        ("all good\n", False, None),
    ],
)  # fmt: skip
def test_what_is_retried(log, retriable, key):
    v = judge(log)
    assert (v.retriable, v.signature) == (retriable, key), v
    assert "\n" not in v.reason


def test_a_failed_logs_cause_is_the_jobs_own_failure_with_its_hint():
    """The cause on a job-failed decision (tui/logs/cause.py): the job's own failure before
    the cluster failures it set off, as its signature's hint; else the last exception."""
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    key, text = scan_log(WATCHDOG + "\n" + oom + WATCHDOG).cause()
    assert key == "cuda_oom" and "memory" in text.lower() and "\n" not in text
    key, text = scan_log(WATCHDOG).cause()
    assert key == "nccl_timeout" and text and "\n" not in text
    key, text = scan_log(
        'Traceback (most recent call last):\nKeyError: "reward" ' + "x" * 900
    ).cause()
    assert key is None and text.startswith('KeyError: "reward"') and len(text) <= CAUSE_CHARS
    key, text = scan_log("omegaconf.errors.ConfigAttributeError: Key 'x' is not in struct").cause()
    assert key == "hydra_struct" and "no key 'x'" in text  # the hint, not the bare exception
    conf = "omegaconf.errors.InterpolationResolutionError: ${oops}"  # a class with no hint
    assert scan_log(conf).cause() == ("config_error", conf)
    assert scan_log("all good\nstep:1 reward:0.5\n").cause() is None
    assert scan_log("").cause() is None


def test_user_exception_is_named_and_host_lost_counts_only_without_a_job_failure():
    v = judge("Traceback (most recent call last):\nValueError: bad reward shape")
    assert not v.retriable and "ValueError: bad reward shape" in v.reason
    assert judge("", host_lost=True).signature == "host_lost"
    assert not judge("CUDA out of memory", host_lost=True).retriable


def test_retry_on_narrows_what_is_retried():
    v = judge(WATCHDOG, retry_on=("node_died",))
    assert not v.retriable and "not in retry_on" in v.reason


def test_policies_from_flags_and_their_errors():
    assert parse_policy(None) is None and parse_policy("0") is None
    p = parse_policy("2", "nccl_timeout, node_died")
    assert p == RetryPolicy(2, ("nccl_timeout", "node_died"))
    assert parse_policy("1").retry_on == RETRIABLE_KEYS
    for retries, on, words in (
        ("x", None, "not a number"),
        ("101", None, "0..100"),
        ("1", "cuda_oom", "unknown retriable signature 'cuda_oom'"),
        (None, "nccl_timeout", "needs retries"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_policy(retries, on)
    assert RetryPolicy.from_json({"retries": True}) is None  # a bool is not a count
    assert RetryPolicy.from_json({"retries": 1, "retry_on": ["bogus"]}) is None
    assert RetryPolicy.from_json(p.to_json()) == p


def test_profile_keys(tmp_path):
    from tui.config.yamlfile import ConfigError
    from tui.jobs.profiles import load_profile, profile_to_yaml

    path = tmp_path / "p.yaml"
    path.write_text("name: p\nretries: 2\nretry_on: [nccl_timeout]\n")
    prof = load_profile(path)
    assert (prof.retries, prof.retry_on) == (2, ["nccl_timeout"])
    assert "retries: 2" in profile_to_yaml(prof)
    path.write_text("name: p\nretries: -1\n")
    with pytest.raises(ConfigError, match=r"p\.yaml:2"):
        load_profile(path)
    path.write_text("name: p\nretries: 1\nretry_on: ['NCCL timeout']\n")
    with pytest.raises(ConfigError, match=r"p\.yaml:3"):
        load_profile(path)


def test_old_records_load_and_decisions_stay_bounded(tmp_path: Path):
    history = JobHistory("c", root=tmp_path)
    old = {  # a record written before retries existed
        "submission_id": "old-1",
        "cluster": "c",
        "submitted_at": 1.0,
        "entrypoint": "python x.py",
        "kind": "raw",
        "status": "FAILED",
    }
    (history.dir).mkdir(parents=True)
    (history.dir / "old-1.json").write_text(json.dumps(old))
    rec = history.get("old-1")
    assert rec is not None and (rec.attempt, rec.retry_of, rec.decisions) == (1, None, [])
    for i in range(MAX_DECISIONS + 7):
        assert history.add_decision("old-1", Decision("waiting", "old-1", f"w{i}").to_json())
    kept = history.get("old-1").decisions
    assert len(kept) == MAX_DECISIONS and kept[-1]["message"] == f"w{MAX_DECISIONS + 6}"
    assert not history.add_decision("never-was", {"kind": "retry"})
    child = JobRecord("old-1-retry1", "c", 2.0, "python x.py", retry_of="old-1", attempt=2)
    history.save(child)
    assert [r.submission_id for r in history.retries_of("old-1")] == ["old-1-retry1"]


def test_retry_ids_follow_the_chain():
    rec = JobRecord("grpo-1", "c", 0.0, "x")
    assert retry_id(rec, 2) == "grpo-1-retry1"
    rec.submission_id = "grpo-1-retry1"
    assert retry_id(rec, 3) == "grpo-1-retry2"


def test_decisions_read_back_and_print_one_line():
    d = Decision("no-retry", "j", "why\x1b[31m\nsecond line", details={"k": 1})
    assert "\n" not in d.line() and "\x1b" not in d.line()
    assert Decision.from_json(d.to_json()) == d
    for bad in (None, [], {"kind": "nope"}, {"kind": 3}):
        assert Decision.from_json(bad) is None
    with pytest.raises(ValueError):
        Decision("not-a-kind", None, "x")
