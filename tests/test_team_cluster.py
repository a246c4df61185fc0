"""Issue 30 on real parts: two OS users (root and a `useradd` user, separate homes and SSH keys)
on one shared Ray (the session's ray_shared1 on namespace hosts). Both users' queued jobs start
in queue order from one supervisor (the second user's `watch --once`), each user sees the
other's jobs with their owner, stopping or cancelling the other's is refused without --force
(exit 3, one line), and a read-only cockpit on the same cluster refuses the stop key."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from harness.cli import run_cli
from harness.raycluster import wait_job
from team_users import second_user

from tui.config.hosts import load_inventory
from tui.jobs.owner import me

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def cli(env, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_cli(args, env=env, timeout=timeout)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, f"{res.args}: {res.stdout}{res.stderr}"
    return res


def refused(res: subprocess.CompletedProcess) -> str:
    """Exit 3 with one line naming --force."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 3 and len(lines) == 1 and "--force" in lines[0], res
    return lines[0]


def test_two_users_share_the_queue_see_owners_and_ask_before_touching(ray_shared1):
    cluster, hosts, env = ray_shared1
    a = me()
    with second_user(cluster, hosts) as b:
        try:
            ok(
                cli(
                    env, "submit", str(hosts), "--queue", "--submission-id", "team-a1", "--", *SLEEP
                )
            )
            ok(b.cli("submit", str(b.hosts), "--queue", "--submission-id", "team-b1", "--", *SLEEP))
            ok(
                cli(
                    env, "submit", str(hosts), "--queue", "--submission-id", "team-a2", "--", *SLEEP
                )
            )

            # One queue on the head: every user's entries, in FIFO order, each with its owner.
            queue = json.loads(ok(b.cli("queue", str(b.hosts), "--json")).stdout)["queue"]
            assert [(e["submission_id"], e["owner"]) for e in queue] == [
                ("team-a1", a),
                ("team-b1", b.owner),
                ("team-a2", a),
            ]
            # Moving or cancelling another user's entry: refused without --force.
            line = refused(cli(env, "queue", str(hosts), "--cancel", "team-b1"))
            assert b.owner in line
            refused(b.cli("queue", str(b.hosts), "--move", "team-a2", "--to", "1"))
            ok(cli(env, "queue", str(hosts), "--cancel", "team-a2"))

            # The second user's supervisor starts both users' entries, in order.
            watch = ok(b.cli("watch", str(b.hosts), "--once", "--gpus", "0", "--json"))
            starts = [
                json.loads(ln)["submission_id"]
                for ln in watch.stdout.splitlines()
                if ln.startswith("{") and json.loads(ln).get("kind") == "queue-start"
            ]
            assert starts == ["team-a1", "team-b1"], watch.stdout
            for sid in starts:
                wait_job(env, hosts, sid, {"RUNNING"}, timeout=120)
            assert json.loads(ok(cli(env, "queue", str(hosts), "--json")).stdout)["queue"] == []

            # Each sees the other's job with its owner; --mine / --owner filter.
            jobs = json.loads(ok(cli(env, "jobs", str(hosts), "--json")).stdout)["jobs"]
            owners = {j["submission_id"]: j["owner"] for j in jobs}
            assert owners["team-a1"] == a and owners["team-b1"] == b.owner
            theirs = json.loads(ok(b.cli("jobs", str(b.hosts), "--json", "--owner", a)).stdout)[
                "jobs"
            ]
            assert {j["submission_id"] for j in theirs} >= {"team-a1"}
            assert all(j["owner"] == a for j in theirs)
            mine = json.loads(ok(b.cli("jobs", str(b.hosts), "--json", "--mine")).stdout)["jobs"]
            assert [j["submission_id"] for j in mine] == ["team-b1"]

            # The cockpit: read-only, the stop key is refused in one line; else it asks, naming
            # the other user.
            refusals, detail = asyncio.run(_stop_in_the_cockpit(hosts, "team-b1"))
            assert refusals and refusals[0].startswith("read-only cockpit: Stop (s)")
            assert f"submitted by {b.owner}, not you" in detail

            # Stopping the other's job: refused without --force (the job runs on), then done.
            line = refused(cli(env, "stop", str(hosts), "team-b1"))
            assert b.owner in line and "team-b1" in line
            refused(b.cli("stop", str(b.hosts), "team-a1"))
            wait_job(env, hosts, "team-b1", {"RUNNING"}, timeout=30)
            ok(cli(env, "stop", str(hosts), "team-b1", "--force"))
            # down with another user's job running: refused without --force, Ray untouched.
            line = refused(b.cli("down", str(b.hosts)))
            assert a in line
        finally:
            for sid in ("team-a1", "team-b1"):
                cli(env, "stop", str(hosts), sid, "--force")
            cli(env, "queue", str(hosts), "--cancel", "team-a2", "--force")


async def _stop_in_the_cockpit(hosts, sid: str) -> tuple[list[str], str]:
    """Open the cockpit read-only, select `sid` on the Jobs screen, press s (the refusals);
    then, no longer read-only, s again: the confirmation's detail (answered no)."""
    from textual.widgets import DataTable

    from tui.app import VerlTuiApp
    from tui.screens.confirm import ConfirmScreen

    app = VerlTuiApp(load_inventory(hosts), read_only=True)  # no supervisor runs in it
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        for _ in range(600):  # the Jobs screen's first list from Ray
            if sid in [r.submission_id for r in getattr(app.screen, "rows", [])]:
                break
            await pilot.pause(0.1)
        screen = app.screen
        table = screen.query_one(DataTable)

        def shown() -> list[str]:
            return [str(k.value) for k in table.rows]

        # Other users' jobs are there: mine by default, w shows everyone's (a view: allowed).
        assert screen.mine_only() and sid not in shown()
        await pilot.press("w")
        assert sid in shown()
        table.move_cursor(row=table.get_row_index(sid))
        await pilot.press("s")
        await pilot.pause(0.2)
        assert app.screen is screen  # no confirmation was opened
        refusals = [str(n.message) for n in app._notifications if "read-only" in str(n.message)]
        app.read_only = False
        await pilot.press("s")
        for _ in range(50):
            if isinstance(app.screen, ConfirmScreen):
                break
            await pilot.pause(0.1)
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        await pilot.press("n")
        return refusals, confirm.detail
