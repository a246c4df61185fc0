"""SVG snapshot of the Jobs screen with a retry chain (issue 14): ↻n/N before each retry's id,
the chain and the supervisor's decisions in the details, who supervises in the title."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"


def test_jobs_screen_with_a_retry_chain(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: len(getattr(pilot.app.screen, "rows", [])) == 3)
        await pilot.press("down")  # the middle attempt: retry of the first, retried as the third
        await pilot.pause()

    assert snap_compare(APPS / "jobs_heal_replay.py", terminal_size=(160, 46), run_before=ready)
