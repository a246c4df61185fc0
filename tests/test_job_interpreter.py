"""The job's interpreter is the hosts' interpreter: on namespace hosts whose shell start-up
(BASH_ENV, read by the `bash -c` Ray starts each worker with, after Ray has set the job's
env) puts a Python without Ray first on PATH, `-- python ...` still runs hosts.yaml's
`python:` and the job sees that interpreter's directory first on PATH."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from harness.cli import run_cli
from harness.raycluster import VENV_PY, hosts_yaml, wait_job


def cli(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


@pytest.fixture(scope="module")
def shadowed(ns_hosts, ray_bring_up, tmp_path_factory):
    """A host whose start-up file prepends a bare venv's bin (no ray) to PATH: one is enough
    (a job's driver runs on the head), and each more Ray node costs CPU the suite lacks."""

    work = tmp_path_factory.mktemp("interp")
    bare = work / "bare"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(bare)], check=True)
    startup = work / "startup.sh"
    startup.write_text(f'export PATH="{bare}/bin:$PATH"\n')
    host_env = {"node1": {"BASH_ENV": str(startup)}}
    # ~/.bashrc runs it for every SSH command (as a cluster's conda base does); BASH_ENV for
    # the `bash -c` Ray starts workers with.
    cluster = ns_hosts(1, work / "hosts", host_env=host_env, bashrc=f". {startup}\n")
    path = hosts_yaml(cluster, work / "hosts.yaml")
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    try:
        ray_bring_up(env, path)
        yield cluster, path, env, bare
    finally:
        cluster.stop()


def _finished(env, path, sid: str, timeout: float = 90.0) -> dict:
    return wait_job(env, path, sid, {"SUCCEEDED", "FAILED"}, timeout)


def _driver_log(cluster, sid: str) -> str:
    return cluster.exec_in(
        "node1", ["cat", f"/tmp/ray/session_latest/logs/job-driver-{sid}.log"]
    ).stdout


PROG = "import os, sys, ray; print('EXE', sys.executable); print('PATH', os.environ['PATH'])"


def test_start_up_file_shadows_python_without_the_rewrite(shadowed):
    """The pitfall itself: a job whose command names the shell's `python` gets the bare one."""
    cluster, path, env, _ = shadowed
    out = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        "shadowed-1",
        "--",
        "/bin/sh",
        "-c",
        f"python -c {json.dumps(PROG)}",
    )
    assert out.returncode == 0, out.stderr
    assert _finished(env, path, "shadowed-1")["status"] == "FAILED"
    assert "No module named 'ray'" in _driver_log(cluster, "shadowed-1")


def test_python_runs_the_hosts_interpreter(shadowed):
    cluster, path, env, _ = shadowed
    out = cli(env, "submit", str(path), "--submission-id", "interp-1", "--", "python", "-c", PROG)
    assert out.returncode == 0, out.stderr
    job = _finished(env, path, "interp-1")
    log = _driver_log(cluster, "interp-1")
    assert job["status"] == "SUCCEEDED", log
    assert f"EXE {VENV_PY}" in log
    # Ray sets the runtime env's PATH before the worker's `bash -c` reads the start-up files,
    # so those still prepend theirs; the interpreter's directory follows right after them.
    path_line = next(ln for ln in log.splitlines() if ln.startswith("PATH "))
    dirs = path_line[5:].split(":")
    assert os.path.dirname(VENV_PY) in dirs, path_line
    print(path_line)


def test_dry_run_shows_the_rewrite(shadowed):
    _, path, env, _ = shadowed
    out = cli(env, "submit", str(path), "--dry-run", "--", "python3", "boom.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith(f"-- {VENV_PY} boom.py"), out.stdout
    runtime = json.loads(out.stdout.split("--runtime-env-json=", 1)[1].split("' \\", 1)[0])
    assert runtime["env_vars"]["PATH"] == f"{os.path.dirname(VENV_PY)}:${{PATH}}"
    other = cli(env, "submit", str(path), "--dry-run", "--", "pythonx", "a.py")
    assert other.stdout.rstrip().endswith("-- pythonx a.py"), other.stdout
