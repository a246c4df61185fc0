"""SVG snapshot of the compare screen over three fixed runs, and its keys (Pilot)."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"
SIZE = (160, 46)


def test_compare_screen(snap_compare):
    assert snap_compare(APPS / "compare_replay.py", terminal_size=SIZE)


async def test_compare_screen_charts_and_picker():
    from snapshot_apps.compare_replay import RUNS, app

    from tui.screens.compare import CompareScreen
    from tui.widgets.metrics import MetricPicker

    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        # Every chart: one series per run, aligned by step (the runs' own steps).
        assert screen.chart_keys()[0] == "critic/score/mean"
        for chart in screen.charts:
            assert list(chart.plotted) == [r.submission_id for r in RUNS]
        assert [s for s, _ in screen.charts[0].plotted["grpo-lr1e-6-b128"]] == list(range(1, 25))
        # The diff: exactly the two keys that differ; batch size from verl's default in two.
        assert set(screen.diff) == {"actor_rollout_ref.actor.optim.lr", "data.train_batch_size"}
        assert screen.diff["data.train_batch_size"] == {
            "grpo-lr1e-6": 1024,
            "grpo-lr3e-6": 1024,
            "grpo-lr1e-6-b128": 128,
        }
        # Which run learned fastest: the fewest steps to 90 % of the way to the best score.
        note = screen.note_text()
        assert "grpo-lr3e-6 reached the best score" in note
        assert "grpo-lr3e-6 step 12, grpo-lr1e-6-b128 step 16, grpo-lr1e-6 step 24" in note
        # m on the first chart: pick another shared key.
        await pilot.press("m")
        assert isinstance(app.screen, MetricPicker)
        for ch in "entropy":
            await pilot.press(ch)
        await pilot.press("enter")
        await pilot.pause()
        assert screen.chart_keys()[0] == "actor/entropy"
        assert list(screen.charts[0].plotted) == [r.submission_id for r in RUNS]
        await pilot.press("0")
        assert screen.chart_keys()[0] == "critic/score/mean"
