"""Jobs across Ray restarts, on real namespace hosts. After `up --restart` (a new Ray session on
the head, which forgets its job table): a job that had finished keeps its outcome and its real
duration (which never grows), with "Ray restarted since" as a note; only a job that was still
running when Ray went away is LOST (outcome unknown), with when the head's Ray restarted. Every
driver log is still printed, read from the head's old session directory over SSH."""

from __future__ import annotations

import json
import time

import pytest
from test_jobs import cli, wait_status

from tui.cluster.job_logs import session_start


@pytest.fixture(scope="module")
def ray_up(ray_shared2):
    """The shared two-host cluster: its test restarts Ray (`up --restart`), which leaves the
    cluster healthy for the next module."""
    return ray_shared2


def test_session_start_names():
    t = session_start("/tmp/ray/session_2026-11-23_23-01-34_716403_1234")
    assert t is not None and time.localtime(t)[:6] == (2026, 11, 23, 23, 1, 34)
    assert abs(t % 1 - 0.716403) < 1e-3
    for bad in ("session_latest", "/tmp/ray/x", "session_2026-13-99_99-99-99_000000_1", ""):
        assert session_start(bad) is None, bad


SLEEPER = "import time; print('RUNNING', flush=True); time.sleep(900)"


def _jobs(env, path) -> dict[str, dict]:
    """`verl-tui jobs --json`'s rows by submission id (one listing: one warm CLI run)."""
    out = cli(env, "jobs", str(path), "--json")
    assert out.returncode == 0, out.stderr
    return {j["submission_id"]: j for j in json.loads(out.stdout)["jobs"]}


def _submit(env, path, sid, code) -> None:
    sub = cli(env, "submit", str(path), "--submission-id", sid, "--", "python", "-c", code)
    assert sub.returncode == 0, sub.stderr


@pytest.fixture(scope="module")
def restarted(ray_up):
    """Three jobs, then `up --restart`: one succeeded, one failed (both listed once finished,
    as the Jobs screen and the supervisor do, so the outcome and the head's start/end times
    are on their records), one still running. Yields (hosts.yaml, env, the failed job as
    listed before the restart, when the restart began)."""
    _, path, env = ray_up
    _submit(env, path, "before-restart-1", "print('OLD SESSION LINE')")
    _submit(env, path, "failed-before-1", "import time, sys; time.sleep(2); sys.exit(3)")
    _submit(env, path, "running-at-restart-1", SLEEPER)
    wait_status(env, path, "before-restart-1", {"SUCCEEDED"})
    failed = wait_status(env, path, "failed-before-1", {"FAILED"})
    wait_status(env, path, "running-at-restart-1", {"RUNNING"})
    assert failed["end_time"] and failed["duration_s"] >= 2, failed
    restart_at = time.time()
    up = cli(env, "up", str(path), "--restart", timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    return path, env, failed, restart_at


# The restart (the fixture, timed with its first test) takes ~1 min, minutes on a loaded box.
@pytest.mark.timeout(600)
def test_finished_jobs_keep_their_outcome_across_a_restart_running_ones_are_lost(restarted):
    path, env, failed, restart_at = restarted
    listed = _jobs(env, path)
    ok = listed["before-restart-1"]
    assert ok["status"] == "SUCCEEDED" and not ok["on_head"], ok
    assert "Ray restarted since" in ok["message"] and ok["ray_restarted_since"], ok
    gone = listed["failed-before-1"]
    assert gone["status"] == "FAILED", gone
    assert gone["end_time"] == pytest.approx(failed["end_time"], abs=0.01)
    assert gone["duration_s"] == pytest.approx(failed["duration_s"], abs=0.01)
    lost = listed["running-at-restart-1"]
    assert lost["status"] == "LOST" and lost["last_known_status"] == "RUNNING", lost
    assert "restarted at" in lost["message"] and "outcome unknown" in lost["message"]
    # The restart time is the head's new session start (this machine's clock: same host).
    assert restart_at - 2 <= lost["head_restarted_at"] <= time.time() + 2, lost
    assert lost["duration_s"] is None and lost["end_time"] is None, lost  # unknown, not growing

    table = cli(env, "jobs", str(path)).stdout
    line = next(ln for ln in table.splitlines() if "failed-before-1" in ln)
    assert "FAILED" in line and "LOST" not in line and "(history)" not in line, line
    assert "Ray restarted since" in line, line
    line = next(ln for ln in table.splitlines() if "running-at-restart-1" in ln)
    assert line.split()[1] == "LOST" and "(history)" not in line, line
    # A finished job's duration never grows: listed again later, it is the same.
    time.sleep(1.5)
    again = _jobs(env, path)["failed-before-1"]
    assert again["duration_s"] == pytest.approx(failed["duration_s"], abs=0.01), again

    logs = cli(env, "logs", str(path), "before-restart-1")
    assert logs.returncode == 0, logs.stderr
    assert "OLD SESSION LINE" in logs.stdout
    follow = cli(env, "logs", str(path), "before-restart-1", "--follow")
    # Its outcome, from the old session or (read once already) the run archive: not LOST.
    assert "OLD SESSION LINE" in follow.stdout and "SUCCEEDED" in follow.stderr, follow.stderr
    assert "LOST" not in follow.stderr
    assert follow.returncode == 0
    follow = cli(env, "logs", str(path), "running-at-restart-1", "--follow")
    assert "RUNNING" in follow.stdout and "LOST" in follow.stderr, follow.stderr
    assert follow.returncode == 1

    # An id nobody knows: neither the head nor an old session has it.
    none = cli(env, "logs", str(path), "never-was-1")
    assert none.returncode == 1 and "no job 'never-was-1'" in none.stderr
    assert "Traceback" not in none.stderr


async def test_jobs_screen_after_a_restart_and_a_failed_jobs_metrics(restarted, monkeypatch):
    """The cockpit (Pilot) on the restarted cluster: the failed job is FAILED with its own
    duration and the note, the running one LOST; its metrics tab says the job ended with no
    step lines (not "waiting" for them) and its log ends FAILED, read from the old session."""
    from textual.widgets import DataTable

    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.fmt import duration
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.logs.job_logs import JobLogsScreen

    path, env, failed, _ = restarted
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    monkeypatch.setenv("VERL_TUI_SUPERVISE", "0")
    app = VerlTuiApp(load_inventory(path), interval=1.0)
    async with app.run_test(size=(160, 46)) as pilot:
        await pilot.press("2")
        await _until(pilot, lambda: isinstance(app.screen, JobsScreen) and app.screen.loaded)
        jobs = app.screen
        rows = {r.submission_id: r for r in jobs.rows}
        gone = rows["failed-before-1"]
        assert gone.status_text == "FAILED" and "Ray restarted since" in (gone.message or "")
        assert duration(gone.duration_s) == duration(failed["duration_s"])
        assert rows["running-at-restart-1"].status_text == "LOST"
        table = jobs.query_one(DataTable)
        table.move_cursor(row=table.get_row_index("failed-before-1"))
        await pilot.press("m")
        await _until(pilot, lambda: isinstance(app.screen, JobLogsScreen))
        logs = app.screen
        await _until(pilot, lambda: logs.status is not None, 60)
        assert logs.status == "FAILED"
        step = str(logs.metrics.query_one("#metrics-step").render())
        assert "ended (FAILED) with no step lines" in step and "waiting" not in step, step


async def _until(pilot, predicate, timeout: float = 30.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "not within the timeout"
        await pilot.pause(0.05)


def test_bad_id_is_refused_before_anything_runs(ray_up):
    _, path, env = ray_up
    bad = cli(env, "logs", str(path), "../../etc/passwd")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
