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
