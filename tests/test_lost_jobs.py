"""Jobs across Ray restarts, on real namespace hosts: a job submitted before `up --restart` is
LOST (with when the head's Ray restarted), not "PENDING (history)", and its driver log is still
printed, read from the head's old session directory over SSH."""

from __future__ import annotations

import json
import time

import pytest
from test_jobs import cli, wait_status
from test_ray_lifecycle import running_ray

from tui.cluster.job_logs import session_start


@pytest.fixture(scope="module")
def ray_up(tmp_path_factory):
    with running_ray(tmp_path_factory.mktemp("lost"), 2) as up:
        yield up


def test_session_start_names():
    t = session_start("/tmp/ray/session_2026-11-23_23-01-34_716403_1234")
    assert t is not None and time.localtime(t)[:6] == (2026, 11, 23, 23, 1, 34)
    assert abs(t % 1 - 0.716403) < 1e-3
    for bad in ("session_latest", "/tmp/ray/x", "session_2026-13-99_99-99-99_000000_1", ""):
        assert session_start(bad) is None, bad


def test_job_from_before_a_restart_is_lost_and_its_log_stays(ray_up):
    _, path, env = ray_up
    sub = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        "before-restart-1",
        "--",
        "python",
        "-c",
        "print('OLD SESSION LINE')",
    )
    assert sub.returncode == 0, sub.stderr
    wait_status(env, path, "before-restart-1", {"SUCCEEDED"})
    # Recorded as last seen; then Ray restarts (a new session on the head).
    restart_at = time.time()
    up = cli(env, "up", str(path), "--restart", timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr

    doc = json.loads(cli(env, "jobs", str(path), "--json").stdout)
    job = next(j for j in doc["jobs"] if j["submission_id"] == "before-restart-1")
    assert job["status"] == "LOST" and not job["on_head"], job
    assert job["last_known_status"] == "SUCCEEDED"
    # The restart time is the head's new session start (this machine's clock: same host).
    assert restart_at - 2 <= job["head_restarted_at"] <= time.time() + 2, job
    assert "restarted at" in job["message"]
    table = cli(env, "jobs", str(path)).stdout
    line = next(ln for ln in table.splitlines() if "before-restart-1" in ln)
    assert "LOST" in line and "(history)" not in line and "PENDING" not in line, line

    logs = cli(env, "logs", str(path), "before-restart-1")
    assert logs.returncode == 0, logs.stderr
    assert "OLD SESSION LINE" in logs.stdout
    follow = cli(env, "logs", str(path), "before-restart-1", "--follow")
    assert "OLD SESSION LINE" in follow.stdout and "LOST" in follow.stderr
    assert follow.returncode == 1

    # An id nobody knows: neither the head nor an old session has it.
    none = cli(env, "logs", str(path), "never-was-1")
    assert none.returncode == 1 and "no job 'never-was-1'" in none.stderr
    assert "Traceback" not in none.stderr


def test_bad_id_is_refused_before_anything_runs(ray_up):
    _, path, env = ray_up
    bad = cli(env, "logs", str(path), "../../etc/passwd")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
