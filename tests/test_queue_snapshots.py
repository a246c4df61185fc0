"""SVG snapshot of the Jobs screen with queued jobs (position, needs, why they wait; a sweep's
runs grouped), over the recorded run (tests/snapshot_apps)."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"
SIZE = (160, 46)


def test_jobs_screen_with_queued_jobs(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))

    assert snap_compare(APPS / "jobs_queue_replay.py", terminal_size=SIZE, run_before=ready)


async def test_keys_reorder_and_cancel_queued_jobs():
    """[ and ] move the selected queued job, Del (confirmed) cancels it: the queue file
    changes, the rows follow; a job on the head is not touched by these keys."""
    from snapshot_apps.jobs_queue_replay import CLOCK, ScreenApp, make
    from snapshot_apps.replay import wait_for
    from textual.widgets import DataTable

    from tui.jobs.queue import JobQueue

    app = ScreenApp(make, patches=[("tui.screens.jobs.queue", "time", CLOCK)])
    async with app.run_test(size=(160, 46)) as pilot:
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))
        screen = pilot.app.screen

        def order() -> list[str]:
            return [e.submission_id for e in JobQueue("grpo-demo").entries()]

        def rows() -> list[str]:
            table = screen.query_one(DataTable)
            return [str(k.value) for k in table.rows]

        assert order() == ["grpo-long-ctx", "lr-sweep-lr1e-6", "lr-sweep-lr2e-6", "grpo-32b-2x8"]
        assert rows()[:4] == [f"queued:{sid}" for sid in order()]
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: order()[1] == "grpo-long-ctx")
        await wait_for(pilot, lambda: rows()[1] == "queued:grpo-long-ctx")
        assert screen.current_queued()[0].submission_id == "grpo-long-ctx"  # cursor followed
        await pilot.press("left_square_bracket", "left_square_bracket")  # the 2nd is a no-op
        await wait_for(pilot, lambda: order()[0] == "grpo-long-ctx")
        await pilot.press("delete")
        await pilot.pause(0.2)
        await pilot.press("y")
        await wait_for(pilot, lambda: "grpo-long-ctx" not in order())
        assert order() == ["lr-sweep-lr1e-6", "lr-sweep-lr2e-6", "grpo-32b-2x8"]
        await wait_for(pilot, lambda: "queued:grpo-long-ctx" not in rows())
        # On a job of the head the queue keys say so and change nothing.
        table = screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index("grpo-gsm8k-1122"))
        await pilot.press("delete", "right_square_bracket")
        await pilot.pause(0.2)
        assert order() == ["lr-sweep-lr1e-6", "lr-sweep-lr2e-6", "grpo-32b-2x8"]


def test_sweep_runs_are_kept_together_and_labelled():
    from tui.jobs.history import JobRecord
    from tui.jobs.service import JobRow
    from tui.screens.jobs.queue import grouped, profile_label

    def row(sid, start, sweep=None):
        rec = JobRecord(sid, "c", start, "python -m verl.trainer.main_ppo", profile="p")
        if sweep:
            rec.tags = {"sweep": sweep, "grid": "lr=1"}
        return JobRow(sid, "SUCCEEDED", rec.entrypoint, start, None, None, None, rec)

    rows = [row("s-b", 9, "s"), row("other", 8), row("t-a", 7, "t"), row("s-a", 6, "s"),
            row("old", 5)]  # fmt: skip
    assert [r.submission_id for r in grouped(rows)] == ["s-b", "s-a", "other", "t-a", "old"]
    assert profile_label(rows[0]) == "⊞ s: p" and profile_label(rows[1]) == "p"
