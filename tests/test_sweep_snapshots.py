"""SVG snapshot of the job form's sweep builder (two keys, 3 × 2 values: 6 runs)."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"


def test_sweep_builder(snap_compare):
    async def ready(pilot):
        await pilot.pause()

    assert snap_compare(APPS / "sweep_builder_replay.py", terminal_size=(150, 48), run_before=ready)
