"""Big job logs (issue 16): the driver log file read by byte offset (its tail first, the part
before it in the background, new lines by following from where the tail began), through the
real local transport (real `sh`, `tail`, `head`), the log pane's tail-then-backfill swap in a
real App, and the whole path on a real Ray head in a namespace host: `logs`, `logs --follow`
and the job log screen, with the Jobs API as the fallback."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from tui.cluster import driver_log
from tui.cluster.dashboard import BadJobId
from tui.cluster.driver_log import JobEnd, locate, read_from, read_range
from tui.transport.local import LocalTransport
from tui.widgets.logview import LogPane

SESSION = "session_2026-11-24_00-00-00_000001_1"


def _line(i: int) -> str:
    return f"line {i:06d} " + "x" * (i % 50) + ("ü" if i % 7 == 0 else "")


def _make_log(tmp: Path, sid: str, n: int, session: str = SESSION) -> Path:
    logs = tmp / session / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"job-driver-{sid}.log"
    path.write_text("".join(_line(i) + "\n" for i in range(n)))
    return path


async def _collect(it) -> str:
    return "".join([t async for t in it])


async def test_locate_finds_the_newest_session_and_aligns_the_tail(tmp_path):
    t = LocalTransport()
    path = _make_log(tmp_path, "job-a", 5000)
    _make_log(tmp_path, "job-a", 10, session="session_2026-11-23_00-00-00_000001_1")
    log = await locate(t, "job-a", tail_bytes=4096, temp=str(tmp_path))
    assert log is not None and log.path == str(path)
    data = path.read_bytes()
    assert log.size == len(data)
    # The tail starts at a line start, within tail_bytes of the end.
    assert data[log.tail_start - 1 : log.tail_start] == b"\n"
    assert 0 < log.size - log.tail_start <= 4096
    # A small log: the whole file is the tail.
    small = await locate(t, "job-a", tail_bytes=1 << 30, temp=str(tmp_path))
    assert small is not None and small.tail_start == 0
    assert await locate(t, "job-b", temp=str(tmp_path)) is None
    with pytest.raises(BadJobId):  # checked before anything runs
        await locate(t, "../x", temp=str(tmp_path))


async def test_older_part_plus_tail_is_the_file_exactly(tmp_path):
    t = LocalTransport()
    path = _make_log(tmp_path, "job-c", 20000)
    log = await locate(t, "job-c", tail_bytes=64 << 10, temp=str(tmp_path))
    assert log is not None and log.tail_start > 0
    older = await _collect(read_range(log, 0, log.tail_start))
    tail = await _collect(read_from(log, log.tail_start))
    assert older + tail == path.read_text()
    # Any range at line starts.
    mid = path.read_bytes().index(b"\n", 5000) + 1
    assert (
        await _collect(read_range(log, mid, log.tail_start))
        == path.read_bytes()[mid : log.tail_start].decode()
    )


async def test_follow_from_the_tail_has_no_gap_or_duplicate(tmp_path):
    """A writer appends while the reader takes the older part and follows from the tail's
    start: older + followed == everything written, once each, in order."""
    t = LocalTransport()
    path = _make_log(tmp_path, "job-d", 3000)
    log = await locate(t, "job-d", tail_bytes=8 << 10, temp=str(tmp_path))
    assert log is not None
    total = 3000 + 4000

    def writer() -> None:
        with path.open("a") as f:
            for i in range(3000, total):
                f.write(_line(i) + "\n")
                if i % 200 == 0:
                    f.flush()
                    time.sleep(0.02)

    ended = JobEnd()
    thread = threading.Thread(target=writer)
    thread.start()

    async def watch() -> None:
        while thread.is_alive():
            await asyncio.sleep(0.05)
        ended.set()

    watcher = asyncio.ensure_future(watch())
    t0 = time.monotonic()
    followed = await _collect(read_from(log, log.tail_start, follow=True, ended=ended, quiet_s=0.5))
    await watcher
    older = await _collect(read_range(log, 0, log.tail_start))
    lines = (older + followed).splitlines()
    assert lines == [_line(i) for i in range(total)]
    assert time.monotonic() - t0 < 30


class _PaneApp(App):
    def compose(self) -> ComposeResult:
        yield LogPane(id="p")


def _text(pane: LogPane) -> list[str]:
    return [pane.store.plain(i) for i in range(len(pane.store))]


async def test_pane_shows_the_tail_then_backfills_in_order():
    lines = [f"row {i:05d}" + (" ERROR boom" if i == 10 else "") for i in range(6000)]
    older, tail = lines[:5000], lines[5000:]
    app = _PaneApp()
    async with app.run_test(size=(100, 30)) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pane.start_backfill(sum(len(x) + 1 for x in older))
        pane.append("\n".join(tail) + "\n")
        await pilot.pause(0.1)
        # First screen: the end, following.
        assert _text(pane) == tail and view.follow
        assert pane.backfilling and "loading older lines" in pane.status_text
        for k in range(0, 5000, 1000):
            pane.backfill("\n".join(older[k : k + 1000]) + "\n")
            if k == 2000:  # new lines arrive while the older ones load
                pane.append("new 0\nnew 1\npartial")
        await pilot.pause(0.1)
        assert _text(pane) == [*tail, "new 0", "new 1"]  # older lines not shown yet
        pane.end_backfill()
        pane.append(" line\n")
        await pilot.pause(0.2)
        assert _text(pane) == [*lines, "new 0", "new 1", "partial line"]
        assert not pane.backfilling and "loading" not in pane.status_text
        assert view.follow and view.scroll_offset.y == view.max_scroll_y
        # The error in the older part is found (classified in the swapped-in store).
        await pilot.press("g", "e")
        assert view.current == 10

    # Scrolled away (not following): the same line stays at the top across the swap.
    app = _PaneApp()
    async with app.run_test(size=(100, 30)) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pane.start_backfill(1)
        pane.append("\n".join(tail) + "\n")
        await pilot.pause(0.1)
        view.focus()
        await pilot.press("g")
        assert view.top_line() == 0 and not view.follow
        pane.backfill("\n".join(older) + "\n")
        pane.end_backfill()
        await pilot.pause(0.1)
        assert view.top_line() == 5000 and view.store.plain(5000) == "row 05000"
        # Another log (the screen starts over): the half-loaded older lines are dropped.
        pane.start_backfill(1)
        pane.backfill("stale\n")
        pane.clear()
        assert not pane.backfilling and len(pane.store) == 0
        pane.end_backfill()  # nothing to swap in
        assert len(pane.store) == 0


# -- on a real Ray head -----------------------------------------------------------------------

BIG_JOB = r"""
import sys, time
n = int(sys.argv[1])
for i in range(n):
    print(f"body {i:06d} " + "y" * 100)
sys.stdout.flush()
for k in range(40):
    print(f"FOLLOW {k:03d}", flush=True)
    time.sleep(0.1)
print("THE END")
"""
N_BODY = 200_000  # ~23 MB: the older part takes a while to load, so the tail shows first


@pytest.fixture(scope="module")
def ray1(ray_shared1):
    return ray_shared1


def _body_and_follow(text: str) -> tuple[list[int], list[int]]:
    body = [int(m.group(1)) for m in re.finditer(r"^body (\d{6}) y+$", text, re.M)]
    follow = [int(m.group(1)) for m in re.finditer(r"^FOLLOW (\d{3})$", text, re.M)]
    return body, follow


def _submit(env, path, sid: str) -> None:
    from test_jobs import cli

    sub = cli(env, "submit", str(path), "--submission-id", sid, "--", "python", "-c", BIG_JOB,
              str(N_BODY))  # fmt: skip
    assert sub.returncode == 0, sub.stdout + sub.stderr


def test_cli_logs_follow_streams_the_file_to_the_end(ray1):
    from test_jobs import cli, wait_status

    _, path, env = ray1
    _submit(env, path, "big-cli-1")
    wait_status(env, path, "big-cli-1", {"RUNNING", "SUCCEEDED"})
    follow = cli(env, "logs", str(path), "big-cli-1", "--follow", timeout=120)
    assert follow.returncode == 0, follow.stderr
    body, fol = _body_and_follow(follow.stdout)
    assert body == list(range(N_BODY)) and fol == list(range(40)), (len(body), fol)
    assert follow.stdout.rstrip().endswith("THE END") and "SUCCEEDED" in follow.stderr
    whole = cli(env, "logs", str(path), "big-cli-1")
    assert whole.returncode == 0 and whole.stdout == follow.stdout


async def test_screen_tail_first_then_backfill_and_follow(ray1, monkeypatch):
    from test_jobs import wait_status

    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.screens.logs.job_logs import JobLogsScreen
    from tui.transport.fleet import Fleet

    hosts, path, env = ray1
    _submit(env, path, "big-pane-1")
    wait_status(env, path, "big-pane-1", {"RUNNING", "SUCCEEDED"})
    # Open it once the body is written (while the FOLLOW lines still come): a log far bigger
    # than the tail the first screen shows.
    log = "/tmp/ray/session_latest/logs/job-driver-big-pane-1.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        size = hosts.exec_in("node1", ["stat", "-c", "%s", log]).stdout.strip()
        if size.isdigit() and int(size) > N_BODY * 100:
            break
        time.sleep(0.1)
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)

        class A(App):
            def on_mount(self) -> None:
                self.push_screen(JobLogsScreen(cluster, "big-pane-1"))

        app = A()
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                screen = app.screen
                deadline = time.monotonic() + 30
                first: list[str] = []
                while time.monotonic() < deadline and not first:
                    await pilot.pause(0.05)
                    screen = app.screen
                    if isinstance(screen, JobLogsScreen) and len(screen.pane.store):
                        first = _text(screen.pane)
                        assert screen.pane.backfilling  # the older part is still loading
                assert isinstance(screen, JobLogsScreen) and first
                # The first screen is the end of the log, not its start.
                assert not any(ln.startswith("body 000000") for ln in first), first[:3]
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline and screen.status is None:
                    await pilot.pause(0.2)
                assert screen.status == "SUCCEEDED"
                text = "\n".join(_text(screen.pane))
                body, fol = _body_and_follow(text)
                assert body == list(range(N_BODY)) and fol == list(range(40))
                assert text.rstrip().endswith("THE END")
                assert not screen.pane.backfilling
        finally:
            await cluster.close()


async def test_without_the_file_the_jobs_api_serves_the_log(ray1, monkeypatch):
    """A head whose driver log is not where we look (another temp dir, another node): the
    same lines come through Ray's Jobs API."""
    from test_jobs import wait_status

    from tui.cluster.job_logs import JobLogEnd, any_job_log_chunks, open_job_log
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.transport.fleet import Fleet

    _, path, env = ray1
    _submit(env, path, "big-api-1")
    wait_status(env, path, "big-api-1", {"SUCCEEDED"}, timeout=120)
    monkeypatch.setattr(driver_log, "RAY_TEMP", "/nonexistent/ray")
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:
            opened = await open_job_log(cluster, "big-api-1")
            assert opened.file is None and opened.status == "SUCCEEDED"
            ends: list[JobLogEnd] = []
            text = "".join(
                [c async for c in any_job_log_chunks(cluster, "big-api-1", follow=False, ends=ends)]
            )
        finally:
            await cluster.close()
    body, fol = _body_and_follow(text)
    assert body == list(range(N_BODY)) and fol == list(range(40))
    assert ends and ends[-1].status == "SUCCEEDED"
