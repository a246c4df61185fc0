"""The phase chart: each step's verl timing_s/* phases stacked (tui/metrics/phases.py), with the
one-line reading of what dominates as its subtitle. Shown in a Metrics chart's place with `p`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tui.metrics.phases import OTHER, TIMING, breakdown, per_step, phase_names, reading
from tui.metrics.series import chart_value

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

    from tui.metrics import MetricsTracker

MAX_BARS = 60  # the newest steps drawn (bars need a cell or two each)
MAX_PHASES = 8  # the largest phases stacked; the rest join OTHER


def phase_series(tracker: MetricsTracker) -> dict[str, list[tuple[int, float]]]:
    return {
        k: tracker.series(k)
        for k in tracker.keys()  # noqa: SIM118 (a method, not a dict)
        if k.startswith((TIMING, "perf/"))
    }


def draw_phases(
    plot: PlotextPlot, tracker: MetricsTracker
) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """Stack the newest steps' phases in `plot`; returns the reading (the chart's subtitle; ""
    when no step logged timing_s/step yet, and nothing drawn) and the series drawn, by key."""
    series = phase_series(tracker)
    steps = per_step(series)[-MAX_BARS:]
    if not steps:
        return "", {}
    b = breakdown(series)
    names = [p for p in sorted(b.phases, key=lambda p: -b.phases[p]) if p != OTHER]
    shown = [p for p in phase_names(list(series)) if p in names[:MAX_PHASES]]
    xs = [sp.step for sp in steps]
    stacks = [[chart_value(sp.phases.get(p, 0.0)) or 0.0 for sp in steps] for p in shown]
    rest = [
        chart_value(sp.total - sum(sp.phases.get(p, 0.0) for p in shown)) or 0.0 for sp in steps
    ]
    stacks.append([max(v, 0.0) for v in rest])
    plt = plot.plt
    plt.clear_data()
    plt.stacked_bar(xs, stacks, labels=[*shown, OTHER])  # type: ignore[call-arg]  # plotext's own
    plt.xaxes(True, False)
    plt.yaxes(True, False)
    plotted = {
        TIMING + p: list(zip(xs, ys, strict=True))
        for p, ys in zip([*shown, OTHER], stacks, strict=True)
    }
    plot.refresh()
    return reading(b), plotted
