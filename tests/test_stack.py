"""`verl-tui stack` on the shared two-host Ray cluster: a real Ray job whose gloo ranks deadlock
(tests/workloads/stack_deadlock.py: three rank actors over two namespace hosts, rank 2 never
enters the all_reduce). One job serves every test here: the waiting ranks are grouped and the odd
one is named first with its frame, Ray's view lists the job's actors, the CLI's --json has the
documented shape and the whole dump lands in the run archive; a host whose interpreter has no
py-spy beside it (nor on PATH) and a host whose interpreter runs without CAP_SYS_PTRACE (what a
container started without --cap-add SYS_PTRACE is) each give one line naming the fix."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.raycluster import VENV_PY, hosts_yaml, tui_cli

from tui.archive.store import ArchiveStore
from tui.cluster.ray_cluster import RayCluster
from tui.cluster.tracing import doctor_findings
from tui.config.hosts import load_inventory
from tui.jobs.preflight import JobNeeds, run_preflight
from tui.stack import JobNotRunning, StackReport, dump_job_stacks
from tui.transport.fleet import Fleet

WORKLOAD = Path(__file__).parent / "workloads" / "stack_deadlock.py"
HANG_S = 150.0
SYSTEM_PY = "/usr/bin/python3"  # no py-spy beside it, none on the hosts' PATH


def driver_log(cluster, sid: str) -> str:
    out = cluster.exec_in(
        "node1", ["sh", "-c", f"cat /tmp/ray/session_latest/logs/job-driver-{sid}.log"]
    )
    return out.stdout


@pytest.fixture(scope="module")
def hung(ray_shared2) -> Iterator[tuple[object, str]]:
    """The deadlocked job, submitted once for the module, waited for until it hangs."""
    cluster, path, env = ray_shared2
    sub = tui_cli(env, "submit", str(path), "--json", "--", VENV_PY, str(WORKLOAD))
    assert sub.returncode == 0, sub.stdout + sub.stderr
    sid = json.loads(sub.stdout)["submission_id"]
    deadline = time.monotonic() + HANG_S
    log = ""
    while "HANG rank 2" not in log:
        assert time.monotonic() < deadline, f"the job never hung:\n{log[-3000:]}"
        time.sleep(1)
        log = driver_log(cluster, sid)
    yield ray_shared2, sid
    tui_cli(env, "stop", str(path), sid)


def dump(path: Path, sid: str, **options) -> StackReport:
    async def body() -> StackReport:
        inv = load_inventory(path)
        async with Fleet(inv) as fleet:
            cluster = RayCluster(fleet, inv)
            try:
                return await dump_job_stacks(fleet, await cluster.dashboard(), sid, **options)
            finally:
                await cluster.close()

    return asyncio.run(body())


def names(group) -> str:
    return " ".join(f.name for f in group.frames)


def test_stack_groups_the_waiting_ranks_and_names_the_odd_one_first(hung, tmp_path) -> None:
    (_cluster, path, env), sid = hung
    # The odd rank is in its sleep as soon as the step starts; the others reach the all_reduce
    # a moment later: dump until both show (each dump is a real one).
    deadline = time.monotonic() + 60
    while True:
        report = dump(path, sid)
        groups = report.groups
        waiting = [g for g in groups if "all_reduce" in names(g)]
        if (waiting and len(waiting[0].dumps) == 2) or time.monotonic() > deadline:
            break
    text = "\n".join(report.text_lines())
    print(text)  # what `verl-tui stack` prints (shown with pytest -s)
    assert not report.problems, text
    assert report.expected == len(report.dumps) == 4, text  # the driver and three ranks

    odd = groups[0]  # odd ones out first: the rank that never entered the all_reduce
    assert odd.who == "rank 2", text
    assert "skip_collective" in names(odd) and "train_step" in names(odd), text
    assert odd.summary.startswith("rank 2: "), text

    assert waiting and waiting[0].who == "ranks 0–1", text
    assert "all_reduce" in waiting[0].summary and "train_step" in names(waiting[0]), text
    assert "skip_collective" not in names(waiting[0]), text
    hosts = {d.target.host for g in groups for d in g.dumps}
    assert hosts == {"node1", "node2"}, text  # ranks on both hosts
    driver = [g for g in groups if any(d.target.role == "driver" for d in g.dumps)]
    assert driver and "main" in names(driver[0]), text

    ray = report.ray
    assert ray["actor_states"] == {"ALIVE": 3}, ray
    assert {a["name"] for a in ray["actors"]} == {f"stack_rank_{i}" for i in range(3)}, ray
    assert ray["placement_groups_waiting"] == [], ray

    # The CLI: the documented JSON, exit 0, and the whole dump in the run archive.
    res = tui_cli(env, "stack", str(path), sid, "--json", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) >= {"groups", "problems", "ray"} and doc["problems"] == []
    first = doc["groups"][0]
    assert first["processes"][0]["rank"] == 2 and set(first["processes"][0]) >= {
        "host",
        "pid",
        "role",
    }
    assert any("skip_collective" in f for f in first["frames"])
    saved = Path(doc["saved"])
    store = ArchiveStore("raytest", root=Path(env["XDG_STATE_HOME"]) / "verl-tui" / "archive")
    assert saved.parent == store.job_dir(sid) / "stacks", saved
    archived = json.loads(gzip.decompress(saved.read_bytes()))
    assert len(archived["threads"]) == 4 and archived["groups"] == doc["groups"]


async def test_p_on_the_jobs_screen_shows_the_groups_without_blocking(hung, monkeypatch) -> None:
    """The cockpit: p on the job's row opens the stack screen, whose worker takes the dump while
    the screen keeps drawing; the odd rank's group comes first with its frames and Ray's view."""
    from textual.widgets import DataTable, Static

    import tui.screens.stack as stack_screen
    from tui.app import VerlTuiApp
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.stack import StackScreen

    (_cluster, path, env), sid = hung
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    app = VerlTuiApp(load_inventory(path), interval=0.5)
    # The real dump, held until the test has seen the screen draw and answer a key meanwhile
    # (a fast dump would otherwise finish before the first look).
    release = asyncio.Event()
    real_dump = stack_screen.dump_job_stacks

    async def held_dump(*args, **kw):
        report = await real_dump(*args, **kw)
        await release.wait()
        return report

    monkeypatch.setattr(stack_screen, "dump_job_stacks", held_dump)

    async def until(pilot, predicate, what: str, timeout: float = 90.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            assert loop.time() < deadline, f"timed out waiting for {what}"
            await pilot.pause(0.1)

    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        jobs = app.screen
        await until(pilot, lambda: any(r.submission_id == sid for r in jobs.rows), "the job")
        row = next(i for i, r in enumerate(jobs.rows) if r.submission_id == sid)
        jobs.query_one(DataTable).move_cursor(row=row)
        await pilot.pause(0.2)
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, StackScreen), "the stack screen")
        screen = app.screen
        assert "taking the dump" in str(screen.query_one("#stack-title", Static).render())
        await pilot.press("n")  # the screen answers while the dump runs: native frames on
        assert screen.native and screen.report is None
        await pilot.press("n")
        release.set()
        await until(pilot, lambda: screen.report is not None, "the dump")
        assert not screen.native
        title = str(screen.query_one("#stack-title", Static).render())
        assert "4 of 4 processes" in title, title
        table = screen.query_one(DataTable)
        assert str(table.get_row_at(0)[1]) == "rank 2"
        frames = str(screen.query_one("#stack-frames", Static).render())
        assert "skip_collective" in frames, frames
        ray = str(screen.query_one("#stack-ray", Static).render())
        assert "3 of 3 actor(s) alive" in ray and "dump saved: " in ray and "stacks/" in ray, ray
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is jobs, "back on the Jobs screen")


def test_py_spy_missing_and_ptrace_denied_each_name_their_fix(hung, tmp_path) -> None:
    (cluster, _path, _env), sid = hung
    # node1's interpreter runs without CAP_SYS_PTRACE (its py-spy then may not read Ray's
    # processes, which have it); node2's is the system Python, with no py-spy beside it.
    nocap = tmp_path / "python-without-ptrace"
    nocap.write_text(
        "#!/bin/sh\nexec setpriv --bounding-set -sys_ptrace --inh-caps -sys_ptrace -- "
        f'{VENV_PY} "$@"\n'
    )
    nocap.chmod(0o755)
    assert not os.path.exists("/usr/bin/py-spy")
    path = hosts_yaml(
        cluster,
        tmp_path / "hosts.yaml",
        python={"node1": str(nocap), "node2": SYSTEM_PY},
        ray_extra="num_cpus: 12",
        num_gpus=4,
    )
    report = dump(path, sid)
    lines = [str(p) for p in report.problems]
    assert not report.dumps, lines
    assert len(lines) == 2, lines  # one line per host
    node1, node2 = lines
    assert node1.startswith("node1: ptrace denied for pids ") and "--cap-add SYS_PTRACE" in node1
    assert node2.startswith(f"node2: py-spy not found beside {SYSTEM_PY} nor on PATH")
    assert "pip install py-spy" in node2 and "ray[default]" in node2

    # The doctor (its probe) and a job's preflight say the same before any job: one warning each.
    async def checks() -> tuple[list, list]:
        inv = load_inventory(path)
        async with Fleet(inv) as fleet:
            facts = await RayCluster(fleet, inv).probe()
            pre = await run_preflight(fleet, inv, JobNeeds(), unasked="warn")
        return doctor_findings(inv, facts), pre

    doctor, pre = asyncio.run(checks())
    for findings in (doctor, pre):
        warned = {(f.host, f.check): f.fix for f in findings if f.check in ("py-spy", "ptrace")}
        assert set(warned) == {("node1", "py-spy"), ("node1", "ptrace"), ("node2", "py-spy")}
        assert "--cap-add SYS_PTRACE" in warned[("node1", "ptrace")], findings
        assert "pip install py-spy" in warned[("node2", "py-spy")], findings
        statuses = {(f.host, f.check): f.status for f in findings if (f.host, f.check) in warned}
        assert statuses[("node1", "ptrace")] == statuses[("node2", "py-spy")] == "warn"
        assert statuses[("node1", "py-spy")] == "ok"


def test_a_job_that_ended_is_one_line_not_an_empty_dump(hung) -> None:
    """(Last: it stops the module's job.) Nothing of a stopped job runs: one line says so."""
    (_cluster, path, env), sid = hung
    assert tui_cli(env, "stop", str(path), sid).returncode == 0
    with pytest.raises(JobNotRunning, match=f"job {sid} is STOPPED: nothing runs to dump"):
        dump(path, sid)
