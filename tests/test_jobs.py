"""Jobs on a real Ray cluster over namespace hosts: submit (raw command, working_dir), list,
stop, history across runs; hostile values stay text all the way to the job's argv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from harness.cli import run_cli
from harness.pilot import until
from harness.raycluster import VENV_PY, wait_job


@pytest.fixture(scope="module")
def ray_up(ray_shared2):
    """Two hosts with Ray up, shared with other modules; Ray is told 4 GPUs and 12 CPUs per
    node, so verl's sizing rules can pass on this machine."""
    return ray_shared2


def cli(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


def wait_status(env, path, sid, want, timeout=90.0) -> dict:
    """The CLI's row of `sid` once `verl-tui jobs` lists it in a status of `want`."""
    return wait_job(env, path, sid, want, timeout)


def job_logs(cluster, sid: str) -> str:
    """The driver log, read on the head the way an operator would."""
    out = cluster.exec_in(
        "node1", ["sh", "-c", f"cat /tmp/ray/session_latest/logs/job-driver-{sid}.log"]
    )
    return out.stdout


def test_hostile_values_stay_text(ray_up, tmp_path):
    cluster, path, env = ray_up
    marker = Path(f"/tmp/pwned_job_{os.getpid()}")
    hostile = [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"a; touch {marker}",
        'it\'s "q"',
        "new\nline",
    ]
    sub = cli(
        env,
        "submit",
        str(path),
        "--env",
        f"HOSTILE=$(touch {marker})",
        "--json",
        "--",
        VENV_PY,
        "-c",
        "import json, os, sys; print('ARGV', json.dumps(sys.argv[1:]));"
        "print('ENV', json.dumps(os.environ['HOSTILE']))",
        *hostile,
    )
    assert sub.returncode == 0, sub.stderr
    sid = json.loads(sub.stdout)["submission_id"]
    job = wait_status(env, path, sid, {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job
    logs = job_logs(cluster, sid)
    argv_line = next(ln for ln in logs.splitlines() if ln.startswith("ARGV "))
    assert json.loads(argv_line[5:]) == hostile
    assert f'ENV "$(touch {marker})"' in logs
    assert not marker.exists()


def test_working_dir_upload_list_stop_and_history(ray_up, tmp_path):
    cluster, path, env = ray_up
    wd = tmp_path / "proj"
    (wd / "pkg").mkdir(parents=True)
    (wd / "hello.py").write_text("import pkg.data as d\nprint('from working_dir:', d.VALUE)\n")
    (wd / "pkg" / "__init__.py").write_text("")
    (wd / "pkg" / "data.py").write_text("VALUE = 42\n")
    (wd / "big.bin").write_bytes(b"\0" * 1024)
    sub = cli(
        env,
        "submit",
        str(path),
        "--working-dir",
        str(wd),
        "--exclude",
        "*.bin",
        "--submission-id",
        "wd-job-1",
        "--",
        VENV_PY,
        "hello.py",
    )
    assert sub.returncode == 0, sub.stderr
    job = wait_status(env, path, "wd-job-1", {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED"
    assert "from working_dir: 42" in job_logs(cluster, "wd-job-1")

    long = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        "sleeper-1",
        "--",
        VENV_PY,
        "-c",
        "import time; time.sleep(600)",
    )
    assert long.returncode == 0, long.stderr
    wait_status(env, path, "sleeper-1", {"RUNNING"})
    stop = cli(env, "stop", str(path), "sleeper-1")
    assert stop.returncode == 0 and "STOPPED" in stop.stdout, stop.stdout + stop.stderr

    # A new process (the app restarted) finds both, with what it recorded at submit time.
    doc = json.loads(cli(env, "jobs", str(path), "--json").stdout)
    by_id = {j["submission_id"]: j for j in doc["jobs"]}
    assert by_id["wd-job-1"]["in_history"] and by_id["sleeper-1"]["status"] == "STOPPED"
    assert by_id["wd-job-1"]["driver_node"] == "node1"
    records = list((Path(env["XDG_STATE_HOME"]) / "verl-tui" / "history").rglob("*.json"))
    assert {json.loads(p.read_text())["submission_id"] for p in records} >= {
        "wd-job-1",
        "sleeper-1",
    }
    table = cli(env, "jobs", str(path))
    assert "wd-job-1" in table.stdout and "SUCCEEDED" in table.stdout


def test_dry_run_prints_the_equivalent_command(ray_up, tmp_path):
    _, path, env = ray_up
    out = cli(
        env,
        "submit",
        str(path),
        "--dry-run",
        "--env",
        "A=b c",
        "--",
        "python",
        "-c",
        "print('$(x)')",
    )
    assert out.returncode == 0
    assert out.stdout.startswith("ray job submit \\\n    --address=http://127.0.0.1:8265")
    # `python` is the hosts' interpreter (hosts.yaml python:), shown rewritten.
    assert f"-- {VENV_PY} -c \"print('\\$(x)')\"" in out.stdout  # one level of quoting
    # The printed command is valid shell that yields exactly our argv.
    argv = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + out.stdout.split(" -- ", 1)[1]],
        capture_output=True,
        text=True,
    ).stdout.split("\0")[:-1]
    assert argv == [VENV_PY, "-c", "print('$(x)')"]


def test_bad_submit_input(ray_up):
    _, path, env = ray_up
    for args in (
        ["submit", str(path)],
        ["submit", str(path), "--env", "1X=y", "--", "true"],
        ["submit", str(path), "--working-dir", "/nonexistent", "--", "true"],
    ):
        out = cli(env, *args)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


async def test_jobs_screen_lists_stops_and_deletes(ray_up, monkeypatch):
    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.jobs.screen import JobsScreen

    _, path, env = ray_up
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    sub = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        "screen-sleeper",
        "--",
        VENV_PY,
        "-c",
        "import time; time.sleep(600)",
    )
    assert sub.returncode == 0, sub.stderr
    wait_status(env, path, "screen-sleeper", {"RUNNING"})

    app = VerlTuiApp(load_inventory(path), interval=0.5)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen))
        jobs = app.screen
        await until(pilot, lambda: any(r.submission_id == "screen-sleeper" for r in jobs.rows))
        row = next(i for i, r in enumerate(jobs.rows) if r.submission_id == "screen-sleeper")
        jobs.query_one("DataTable").move_cursor(row=row)
        await pilot.pause(0.2)
        assert jobs.current.submission_id == "screen-sleeper"
        assert "time.sleep(600)" in str(jobs.query_one("#job-detail").render())
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(
            pilot,
            lambda: any(
                r.submission_id == "screen-sleeper" and r.status == "STOPPED" for r in jobs.rows
            ),
            60,
        )
        row = next(i for i, r in enumerate(jobs.rows) if r.submission_id == "screen-sleeper")
        jobs.query_one("DataTable").move_cursor(row=row)
        await pilot.pause(0.2)
        await pilot.press("x", "y")
        await until(pilot, lambda: all(r.submission_id != "screen-sleeper" for r in jobs.rows))
        await pilot.press("escape")
        assert not isinstance(app.screen, JobsScreen)


def test_profile_submit_runs_verl_with_the_overrides(ray_up, tmp_path):
    """A preset through validation against the live cluster, then verl's own main_ppo
    --cfg job on the cluster: its log shows the overrides and the cluster-derived sizes."""
    cluster, path, env = ray_up
    preset = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    dry = cli(
        env,
        "submit",
        str(path),
        str(preset),
        "--dry-run",
        "--skip-preflight",  # the job preflight of a dry run: test_preflight.py
        "--set",
        "trainer.experiment_name=from-cli",
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        "verl.trainer.main_ppo" in dry.stdout and "trainer.experiment_name=from-cli" in dry.stdout
    )
    out = cli(
        env,
        "submit",
        str(path),
        str(preset),
        "--print-config",
        "--json",
        "--set",
        "trainer.experiment_name=from-cli",
        "--submission-id",
        "verl-cfg-1",
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["metadata"]["profile"] == "grpo-gsm8k-qwen2.5-0.5b"
    job = wait_status(env, path, "verl-cfg-1", {"SUCCEEDED", "FAILED"}, timeout=180)
    logs = job_logs(cluster, "verl-cfg-1")
    assert job["status"] == "SUCCEEDED", logs[-3000:]
    assert "experiment_name: from-cli" in logs  # --set reached verl
    assert "train_batch_size: 256" in logs and "name: vllm" in logs  # the preset's values
    assert "n_gpus_per_node: 4" in logs  # from the live cluster (the preset pins nnodes: 1)
    assert job["profile"] == "grpo-gsm8k-qwen2.5-0.5b" and job["config_hash"]


def test_profile_refused_when_the_cluster_is_too_small(ray_up):
    _, path, env = ray_up
    preset = Path(__file__).parents[1] / "profiles" / "grpo-qwen3-32b-2x8.yaml"
    out = cli(env, "submit", str(path), str(preset))
    assert out.returncode == 1
    assert "not submitted" in out.stderr and "GPU" in out.stderr
