"""Row gauges: bars with eighth-cell resolution, sparklines that squeeze long history."""

from __future__ import annotations

from tui.widgets.gauges import bar, sparkline


def test_bar_resolution_and_bounds():
    assert bar(0.0, 4) == "    "
    assert bar(1.0, 4) == "████"
    assert bar(0.5, 4) == "██  "
    assert bar(1 / 32, 4) == "▏   "  # one eighth of one cell
    assert bar(2.0, 3) == "███" and bar(-1, 3) == "   "
    assert bar(None, 3) == "···"


def test_sparkline_newest_right_and_scaled():
    assert sparkline([0, 50, 100], 5) == "  ▁▅█"
    assert sparkline(range(20), 3, top=19) == "▇██"


def test_sparkline_buckets_keep_their_boundaries_as_history_rolls():
    history: list[float] = []
    frames = []
    for i in range(30):
        history.append(100.0 if i < 10 else 0.0)
        frames.append(sparkline(history[-20:], 4, per_cell=5, newest=len(history) % 5))
    # Cells are 5-sample buckets aligned to the sample count: a complete cell keeps its value
    # while it scrolls left; only the newest, filling cell changes.
    assert frames[14] == " ██▁"  # 15 samples: 10 busy then 5 idle
    assert frames[19] == "██▁▁"
    # Samples 5..9 stay one busy cell while newer samples arrive, until it scrolls off;
    # buckets aligned to the oldest kept sample would smear it across two cells instead.
    assert frames[20] == frames[21] == frames[24] == "█▁▁▁"
    assert frames[25] == "▁▁▁▁"
