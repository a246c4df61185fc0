"""Locks (issue 10, item 10): one cluster-changing action at a time, here and on the head; a
killed holder's lock is taken over; a draft open in two forms makes the second one choose."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from test_ray_lifecycle import VENV_PY, hosts_yaml

from tui.cluster.lock import EXIT_BUSY, LocalLock, LockHeld, LockOwner

BUSY_RE = re.compile(
    r"cluster busy: (up|restart|down) by \S+@\S+ pid (\d+) "
    r"since \d\d:\d\d:\d\d$"
)


def _holder(code: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A second process that takes a lock, says READY, and sleeps."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "READY"
    return proc


def test_local_lock_refuses_then_dead_holder_is_taken_over(tmp_path):
    path = tmp_path / "locks" / "c.lock"
    proc = _holder(f"""
        import time
        from pathlib import Path
        from tui.cluster.lock import LocalLock, LockOwner
        lock = LocalLock(Path({str(path)!r}))
        lock.acquire(LockOwner.here("restart"))
        print("READY", flush=True)
        time.sleep(600)
    """)
    try:
        with pytest.raises(LockHeld) as err:
            LocalLock(path).acquire(LockOwner.here("up"))
        assert BUSY_RE.match(str(err.value)), str(err.value)
        assert f"pid {proc.pid} " in str(err.value) and "restart by" in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lock = LocalLock(path)
    lock.acquire(LockOwner.here("up"))  # the kernel dropped the dead holder's flock
    lock.release()


def _read_head_lock(cluster) -> str:
    return cluster.exec_in("node1", ["cat", "/tmp/ray/verl-tui-cluster.lock"]).stdout


@pytest.mark.ray  # brings Ray up itself
def test_two_restarts_at_once_then_a_killed_holder(ns_cluster_factory, tmp_path):
    cluster = ns_cluster_factory(2)
    path = hosts_yaml(cluster, tmp_path / "hosts.yaml")
    # Separate state dirs: only the head's lock stands between the two.
    envs = [{**os.environ, "XDG_STATE_HOME": str(tmp_path / f"state{i}")} for i in range(3)]
    # No `down` on the way out: the hosts' teardown ends Ray with them (their pid namespaces),
    # where a `down` cost a `ray stop` (an import of Ray) per host.
    procs = [
        subprocess.Popen(
            [VENV_PY, "-m", "tui", "up", "--restart", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=envs[i],
        )
        for i in range(2)
    ]
    ends: dict[int, float] = {}
    while len(ends) < 2:
        for i, p in enumerate(procs):
            if i not in ends and p.poll() is not None:
                ends[i] = time.monotonic()
        time.sleep(0.1)
    outs = [(p.returncode, *p.communicate()) for p in procs]
    codes = sorted(o[0] for o in outs)
    assert codes == [0, EXIT_BUSY], outs
    loser = next(i for i, o in enumerate(outs) if o[0] == EXIT_BUSY)
    winner = 1 - loser
    err = outs[loser][2].strip()
    assert len(err.splitlines()) == 1, err
    m = BUSY_RE.search(err)
    assert m and m.group(1) == "restart" and int(m.group(2)) == procs[winner].pid, err
    assert ends[loser] < ends[winner]  # refused at once, not after the other finished
    assert "Traceback" not in outs[loser][2] + outs[winner][2]
    st = run_cli(["status", str(path)], env=envs[2], timeout=60)
    assert st.returncode == 0 and "2 nodes alive" in st.stdout, st.stdout + st.stderr

    # A holder killed with -9 in the middle of a restart: its lock frees itself.
    victim = subprocess.Popen(
        [VENV_PY, "-m", "tui", "up", "--restart", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=envs[0],
    )
    deadline = time.monotonic() + 60
    while f'"pid": {victim.pid}' not in _read_head_lock(cluster):
        assert time.monotonic() < deadline and victim.poll() is None, "lock never taken"
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    time.sleep(0.5)  # sshd sees the connection close; the helper's stdin ends
    again = run_cli(["up", "--restart", str(path)], env=envs[0], timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 nodes alive" in again.stdout
    # Released at the end: the next action is not refused.
    down = run_cli(["down", str(path)], env=envs[1], timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr


# -- drafts in two forms --------------------------------------------------------------------

PRESET = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
PROFILE = "grpo-gsm8k-qwen2.5-0.5b"


async def _until(pilot, predicate, timeout: float = 60.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        assert loop.time() - start < timeout, f"timed out waiting for {what}"
        await pilot.pause(0.05)


async def test_draft_open_in_two_forms_asks(tmp_path, monkeypatch):
    from textual.widgets import Input

    from tui.app import VerlTuiApp
    from tui.config.hosts import local_inventory
    from tui.jobs.formstate import draft_path
    from tui.screens.job_form.screen import DraftBusyScreen, JobFormScreen

    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    draft = draft_path("local", PROFILE)

    async def open_form(app, pilot, answer: str | None) -> JobFormScreen | None:
        form = JobFormScreen(app.services, PRESET)
        await app.push_screen(form)
        if answer is None:
            await _until(pilot, lambda: form.fields and form.validated, what="form")
            return form

        def shown() -> str:
            return " ".join(str(w.render()) for w in app.screen.query("Static"))

        # The question's text, once composed (a loaded machine pushes it a frame before).
        await _until(
            pilot,
            lambda: isinstance(app.screen, DraftBusyScreen) and "pid" in shown(),
            what="question",
        )
        text = shown()
        assert "this draft is open in another form: pid" in text
        assert f"pid {holder.pid} " in text
        await pilot.press(answer)
        if answer == "c":
            await _until(pilot, lambda: not form.is_attached, what="form closed")
            return None
        await _until(pilot, lambda: form.fields and form.validated, what="form")
        return form

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from tui.jobs.formstate import DraftLock
            lock = DraftLock("local", {PROFILE!r})
            assert lock.acquire()
            print("READY", flush=True)
            sys.stdin.readline()
            print("MINE" if lock.still_mine() else "LOST", flush=True)
            time.sleep(600)
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )
    assert holder.stdout.readline().strip() == "READY"
    try:
        app = VerlTuiApp(local_inventory(), interval=0.5)
        async with app.run_test(size=(160, 50)) as pilot:
            # Cancel: the form closes, nothing written.
            assert await open_form(app, pilot, "c") is None
            # Read-only copy: typing writes no draft.
            form = await open_form(app, pilot, "r")
            assert form.read_only and "read-only copy" in (form.draft_note or "")
            inp = form.fields["trainer.experiment_name"].query_one(Input)
            inp.focus()
            await pilot.press(*"copy-edit")
            await pilot.pause(0.6)
            form.flush_draft()
            assert not draft.exists()
            await pilot.press("escape")
            await _until(pilot, lambda: not form.is_attached, what="form left")
            # Take over: this form writes, the other process learns it lost the draft.
            form = await open_form(app, pilot, "t")
            assert not form.read_only
            inp = form.fields["trainer.experiment_name"].query_one(Input)
            inp.focus()
            await pilot.press(*"mine")
            await pilot.pause(0.6)
            form.flush_draft()
            await _until(pilot, draft.exists, 10, "draft written")
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "LOST"
            await pilot.press("escape")
            await _until(pilot, lambda: not form.is_attached, what="form left")
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (killed): the next form opens without asking.
    app = VerlTuiApp(local_inventory(), interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        form = await open_form(app, pilot, None)
        assert form.draft_lock is not None and form.draft_lock.held and not form.read_only
