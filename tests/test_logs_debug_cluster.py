"""Logs and the debugger on a real Ray cluster over namespace sshd hosts: a job's log followed
through the Jobs API tail (every line once, in order), a host's Ray log files over SSH, a task
that raises under post-mortem debugging found, attached over an SSH forward with the DAP
client, inspected and continued; a legacy pdb breakpoint driven from the console."""

from __future__ import annotations

import asyncio
import json
import textwrap
import time

import pytest
from harness.raycluster import VENV_PY, on_ray_cluster, wait_job
from test_jobs import cli, job_logs

from tui.config.hosts import load_inventory


@pytest.fixture(scope="module")
def ray2(ray_shared2):
    """Two hosts with Ray up, shared with other modules."""
    return ray_shared2


def submit(env, path, sid: str, script: str, *extra: str) -> None:
    out = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        sid,
        *extra,
        "--",
        VENV_PY,
        "-c",
        textwrap.dedent(script),
    )
    assert out.returncode == 0, out.stdout + out.stderr


def job_status(env, path, sid: str) -> str:
    doc = json.loads(cli(env, "jobs", str(path), "--json").stdout)
    return next(j["status"] for j in doc["jobs"] if j["submission_id"] == sid)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


METRIC_JOB = """
    import sys, time
    for i in range(600):
        print(f"line {i:05d} of the first part")
    sys.stdout.flush()
    time.sleep(4)
    print("Total training steps: 5")
    for step in range(1, 6):
        print(f"step:{step} - critic/score/mean:{0.1 * step:.3f} - actor/entropy:{1.0 / step:.3f}"
              f" - timing_s/step:{0.5 + step / 10:.3f}")
        for i in range(200):
            print(f"line {600 + (step - 1) * 200 + i:05d} after step {step}")
        sys.stdout.flush()
        time.sleep(0.3)
    print("done")
"""


def test_job_log_follow_gets_every_line_once(ray2):
    _, path, env = ray2
    submit(env, path, "log-follow-1", METRIC_JOB)
    # Start following while the job runs, after its first part is written: the snapshot and
    # the websocket tail must join without a gap or a repeat.
    wait_job(env, path, "log-follow-1", {"RUNNING"}, 60)
    time.sleep(1.5)
    out = cli(env, "logs", str(path), "log-follow-1", "--follow", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "log-follow-1: SUCCEEDED" in out.stderr
    numbered = [ln for ln in out.stdout.splitlines() if ln.startswith("line ")]
    assert [int(ln.split()[1]) for ln in numbered] == list(range(1600))
    assert out.stdout.count("step:3 - critic/score/mean:0.300") == 1
    assert out.stdout.rstrip().endswith("done")

    # A finished job's log comes at once, identical.
    again = cli(env, "logs", str(path), "log-follow-1")
    assert again.returncode == 0 and again.stdout == out.stdout

    missing = cli(env, "logs", str(path), "no-such-job")
    assert missing.returncode == 1 and "no job 'no-such-job'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_node_logs_list_and_print(ray2):
    _, path, env = ray2
    listing = cli(env, "logs", str(path), "--node", "node2")
    assert listing.returncode == 0, listing.stderr
    names = [ln.split()[-1] for ln in listing.stdout.splitlines()]
    assert "raylet.out" in names and "gcs_server.out" not in names  # a worker has no GCS
    raylet = cli(env, "logs", str(path), "--node", "node2", "raylet.out")
    assert raylet.returncode == 0 and "raylet" in raylet.stdout.lower()
    head = cli(env, "logs", str(path), "--node", "node1")
    assert "gcs_server.out" in head.stdout
    bad = cli(env, "logs", str(path), "--node", "node2", "../../etc/passwd")
    assert bad.returncode != 0 and "root:" not in bad.stdout
    unknown = cli(env, "logs", str(path), "--node", "node9")
    assert unknown.returncode == 2 and "not a host" in unknown.stderr


POST_MORTEM_JOB = """
    import ray
    ray.init()

    @ray.remote
    def failing_task(n):
        secret = n * 7
        raise ValueError(f"boom {secret}")

    ray.get(failing_task.remote(6))
"""

LEGACY_JOB = """
    import ray
    ray.init()

    @ray.remote
    def stops_at_breakpoint():
        x = 42
        breakpoint()
        return x + 1

    print("result", ray.get(stops_at_breakpoint.remote()))
"""


async def _paused(cluster, job: str, timeout: float = 60) -> list:
    """The paused workers of `job` once the list `verl-tui debug` shows has one (Ray's state
    API through the dashboard: cheap to ask every half second)."""
    from tui.debug.targets import paused_workers

    deadline = time.monotonic() + timeout
    while True:
        found = [w for w in await paused_workers(cluster) if w.job == job]
        if found:
            return found
        assert time.monotonic() < deadline, f"{job} never paused"
        await asyncio.sleep(0.5)


def wait_log(cluster, sid: str, text: str, timeout: float = 60) -> None:
    """Until the head's driver log of `sid` has `text` (a file read in the head's namespace:
    `verl-tui debug` starts a Python with Ray's GCS client on the head, ~1.2 s of CPU a call)."""
    wait_for(lambda: text in job_logs(cluster, sid), timeout, f"{text!r} in {sid}'s log")


def test_post_mortem_worker_listed_attached_and_continued(ray2):
    from tui.debug.dap import DapClient
    from tui.debug.targets import open_debug_connection, paused_workers

    _, path, env = ray2
    submit(env, path, "post-mortem-1", POST_MORTEM_JOB, "--env", "RAY_DEBUG_POST_MORTEM=1")
    t0 = time.monotonic()

    def listed():
        out = cli(env, "debug", str(path), "--json")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        return [p for p in doc["paused"] if p["job"] == "post-mortem-1"]

    # Asked once the worker is paused (what the command lists it from), not every second.
    asyncio.run(on_ray_cluster(load_inventory(path), lambda c: _paused(c, "post-mortem-1")))
    t_paused = time.monotonic()
    # Listed within the 20 s of the pause. From the submit it depends on how fast Ray
    # starts a worker on a loaded machine (39.5 s once, beside three other test workers).
    paused = wait_for(listed, 20, "the paused worker in `verl-tui debug`", interval=1)
    now = time.monotonic()
    print(f"post-mortem worker paused {t_paused - t0:.1f} s after submit, listed {now - t0:.1f} s")
    p = paused[0]
    assert p["host"] in ("node1", "node2") and p["port"] > 0 and p["pid"] > 0
    assert "failing_task" in p["task"]
    assert set(p) >= {"host", "pid", "port", "task", "job"}

    async def attach(cluster):
        [target] = [w for w in await paused_workers(cluster) if w.job == "post-mortem-1"]
        # As the cockpit does: a stream over the host's SSH connection, no listener here.
        dap = DapClient(*await open_debug_connection(cluster, target))
        try:
            stopped = await dap.attach_post_mortem(timeout=20)
            info = await dap.exception_info(stopped.thread_id)
            frames = await dap.stack_trace(stopped.thread_id)
            frame = next(f for f in frames if f.name == "failing_task")
            value = await dap.evaluate("secret", frame.id)
            scopes = await dap.scopes(frame.id)
            local_vars = await dap.variables(scopes[0].reference)
            await dap.continue_(stopped.thread_id)
        finally:
            await dap.close()
        return info, value, {v.name: v.value for v in local_vars}

    info, value, local_vars = asyncio.run(on_ray_cluster(load_inventory(path), attach))
    assert "ValueError" in (info.exception_id + info.description)
    assert value.result == "42"
    assert local_vars.get("n") == "6" and local_vars.get("secret") == "42"
    wait_job(env, path, "post-mortem-1", {"FAILED"}, 60)
    log = cli(env, "logs", str(path), "post-mortem-1").stdout
    assert "ValueError: boom 42" in log


def test_legacy_breakpoint_console(ray2):
    from tui.debug.pdb_console import PdbConsole
    from tui.debug.targets import legacy_breakpoints, open_debug_connection

    cluster, path, env = ray2
    submit(env, path, "legacy-1", LEGACY_JOB, "--env", "RAY_DEBUG=legacy")

    def listed():
        out = cli(env, "debug", str(path), "--json")
        assert out.returncode == 0, out.stderr
        return [b for b in json.loads(out.stdout)["breakpoints"] if b["job"] == "legacy-1"]

    # Ray's rpdb stores the breakpoint's record, then says so on the worker's stderr (which
    # reaches the driver log): the command is asked from then on, not every second before.
    wait_log(cluster, "legacy-1", "RemotePdb session open at")
    [bp] = wait_for(listed, 20, "the breakpoint in `verl-tui debug`", interval=1)
    assert bp["port"] > 0 and bp["host"] in ("node1", "node2")

    async def drive(cluster):
        [target] = [b for b in await legacy_breakpoints(cluster) if b.job == "legacy-1"]
        console = await PdbConsole.start(*await open_debug_connection(cluster, target))
        x = await console.send("p x")
        where = await console.send("where")
        await console.send("c")
        return x, where, console.closed

    x, where, closed = asyncio.run(on_ray_cluster(load_inventory(path), drive))
    assert x.strip() == "42"
    assert "stops_at_breakpoint" in where
    assert closed
    wait_job(env, path, "legacy-1", {"SUCCEEDED"}, 60)
    assert "result 43" in cli(env, "logs", str(path), "legacy-1").stdout


# ----------------------------------------------------------------------------- the cockpit


async def _until(pilot, predicate, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await pilot.pause(0.2)


def _store_text(pane) -> str:
    store = pane.store
    return "\n".join(store.plain(i) for i in range(len(store)))


def _select_row(table, key: str) -> None:
    table.move_cursor(row=table.get_row_index(key))


async def test_cockpit_log_metrics_debugger_and_node_logs(ray2, monkeypatch):
    """Pilot over the real cluster: Jobs → l (log follows, status at the end) → t (charts and
    progress from verl lines); 4 → Debugger → a (DAP: exception, stack, evaluate, c); a
    legacy breakpoint's console (p x, c); 3 → a host's raylet.out followed."""
    from tui.app import VerlTuiApp
    from tui.screens.dap_session import DapSessionScreen
    from tui.screens.debugger import DebuggerScreen
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.logs.job_logs import JobLogsScreen
    from tui.screens.logs.node_logs import NodeLogsScreen
    from tui.screens.pdb_console import PdbConsoleScreen

    _, path, env = ray2
    submit(env, path, "pilot-metrics", METRIC_JOB)
    submit(env, path, "pilot-pm", POST_MORTEM_JOB, "--env", "RAY_DEBUG_POST_MORTEM=1")
    submit(env, path, "pilot-legacy", LEGACY_JOB, "--env", "RAY_DEBUG=legacy")
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    app = VerlTuiApp(load_inventory(path), interval=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        await _until(
            pilot,
            lambda: any(r.submission_id == "pilot-metrics" for r in jobs.rows),
            30,
            "the job listed",
        )
        _select_row(jobs.query_one("DataTable"), "pilot-metrics")
        await pilot.press("l")
        logs = app.screen
        assert isinstance(logs, JobLogsScreen)
        await _until(pilot, lambda: logs.status == "SUCCEEDED", 90, "the log followed to the end")
        text = _store_text(logs.pane)
        assert [int(ln.split()[1]) for ln in text.splitlines() if ln.startswith("line ")] == list(
            range(1600)
        )
        await pilot.press("t")
        metrics = logs.metrics
        await _until(
            pilot,
            lambda: len(metrics.tracker.series("critic/score/mean")) == 5,
            10,
            "metric series",
        )
        assert metrics.tracker.total_steps == 5
        assert metrics.tracker.series("critic/score/mean")[-1] == (5, 0.5)
        await pilot.press("escape")
        await pilot.press("escape")

        await pilot.press("4")
        dbg = app.screen
        assert isinstance(dbg, DebuggerScreen)
        await _until(
            pilot,
            lambda: any(getattr(t, "job", "") == "pilot-pm" for t in dbg.paused),
            60,
            "paused worker listed",
        )
        await _until(
            pilot,
            lambda: any(t.job == "pilot-legacy" for t in dbg.breakpoints),
            60,
            "breakpoint listed",
        )
        pm = next(t for t in dbg.paused if t.job == "pilot-pm")
        _select_row(dbg.query_one("DataTable"), f"pm:{pm.worker_id}")
        await pilot.press("a")
        session = app.screen
        assert isinstance(session, DapSessionScreen)
        await _until(pilot, lambda: session.state == "paused", 30, "attached and paused")
        assert "ValueError" in str(session.query_one("#dap-exception").render())
        assert session.frame is not None and session.frame.name == "failing_task"
        await pilot.press("e")
        for ch in "secret * 2":
            await pilot.press("space" if ch == " " else ("asterisk" if ch == "*" else ch))
        await pilot.press("enter")
        log = session.query_one("#dap-eval-log")
        await _until(
            pilot, lambda: any("84" in str(line.text) for line in log.lines), 10, "evaluation shown"
        )
        await pilot.press("escape")  # out of the prompt
        await pilot.press("c")
        await _until(pilot, lambda: session.state.startswith("continued"), 10, "continued")
        await pilot.press("escape")

        bp = next(t for t in dbg.breakpoints if t.job == "pilot-legacy")
        _select_row(dbg.query_one("DataTable"), f"bp:{bp.key}")
        await pilot.press("a")
        console = app.screen
        assert isinstance(console, PdbConsoleScreen)
        await _until(pilot, lambda: console.console is not None, 20, "pdb connected")
        for keys in (["p", "space", "x", "enter"], ["c", "enter"]):
            for k in keys:
                await pilot.press(k)
            await pilot.pause(0.5)
        transcript = console.query_one("#pdb-log")
        await _until(pilot, lambda: console.console is None, 15, "session ended by c")
        lines = [str(line.text) for line in transcript.lines]
        assert "42" in [ln.strip() for ln in lines]
        await pilot.press("escape")
        await pilot.press("escape")

        await pilot.press("3")
        nodes = app.screen
        assert isinstance(nodes, NodeLogsScreen)
        table = nodes.query_one("DataTable")
        await _until(pilot, lambda: table.row_count > 0, 20, "log files listed")
        _select_row(table, "node2\traylet.out")
        await pilot.press("enter")
        await _until(
            pilot, lambda: len(nodes.query_one("LogPane").store) > 0, 20, "raylet.out followed"
        )
    assert job_status(env, path, "pilot-pm") in ("FAILED", "RUNNING")
    wait_job(env, path, "pilot-pm", {"FAILED"}, 60)
    wait_job(env, path, "pilot-legacy", {"SUCCEEDED"}, 60)


def test_vscode_attach_config_maps_rays_working_dir_copy(ray2, tmp_path, monkeypatch):
    """`v` in the Debugger: a kept forward and a launch.json whose pathMappings turn the frame
    paths (Ray's copy of the working_dir on the node) into the user's folder. A DAP client on
    the forwarded port, as VS Code would attach, sees frames under the mapped remote root."""
    from tui.debug.attach import attach_in_vscode
    from tui.debug.dap import DapClient

    _, path, env = ray2
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(textwrap.dedent(POST_MORTEM_JOB))
    out = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        "vscode-1",
        "--env",
        "RAY_DEBUG_POST_MORTEM=1",
        "--working-dir",
        str(project),
        "--",
        VENV_PY,
        "train.py",
    )
    assert out.returncode == 0, out.stderr
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])  # the submit's history

    async def body(cluster):
        found = await _paused(cluster, "vscode-1")
        launch, forward = await attach_in_vscode(cluster, found[0], workspace)
        try:
            dap = await DapClient.connect("127.0.0.1", forward.local_port)
            try:
                stopped = await dap.attach_post_mortem(timeout=20)
                frames = await dap.stack_trace(stopped.thread_id)
                await dap.continue_(stopped.thread_id)
            finally:
                await dap.close()
        finally:
            forward.close()
        return launch, forward.local_port, frames

    launch, port, frames = asyncio.run(on_ray_cluster(load_inventory(path), body))
    doc = json.loads(launch.read_text())
    [conf] = doc["configurations"]
    assert conf["type"] == "debugpy" and conf["request"] == "attach"
    assert conf["connect"] == {"host": "127.0.0.1", "port": port}
    [mapping] = conf["pathMappings"]
    assert mapping["localRoot"] == str(project)
    remote = mapping["remoteRoot"]
    assert "/runtime_resources/working_dir_files/_ray_pkg_" in remote
    failing = next(f for f in frames if f.name == "failing_task")
    assert failing.path == f"{remote}/train.py"
    wait_job(env, path, "vscode-1", {"FAILED"}, 60)
