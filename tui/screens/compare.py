"""Compare screen: 2–8 archived runs side by side — the metrics screen's charts with one series
per run aligned by step (any key all runs logged can take a chart's place), a summary table, and
the config keys that differ (verl's default, dimmed, where a run did not set one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tui.archive.compare import Run, common_keys, fastest_learner
from tui.archive.gpu_use import gpu_use_text
from tui.sanitize import markup, one_line
from tui.screens.error import ReportsWorkerFailures
from tui.widgets.compare import CompareChart, chart_key, fill_diff, fill_summary
from tui.widgets.footer import KeysFooter
from tui.widgets.metrics import DEFAULT_CHARTS, ChartSpec, MetricPicker


class CompareScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("m", "pick_metric", "Chart metric"),
        Binding("0", "reset_layout", "Reset charts"),
        Binding("escape,b", "back", "Back"),
    ]

    DEFAULT_CSS = """
    CompareScreen #compare-title { height: 1; background: $panel; text-style: bold; }
    CompareScreen #compare-note { height: auto; max-height: 3; color: $text-muted; }
    CompareScreen #compare-charts { grid-size: 3 2; grid-gutter: 0 1; height: 1fr; }
    CompareScreen #compare-tables { height: auto; max-height: 20; }
    CompareScreen #compare-summary { height: auto; max-height: 10; }
    CompareScreen #compare-diff {
        height: auto; max-height: 9; border-top: solid $primary 50%;
    }
    """

    def __init__(
        self, runs: Sequence[Run], diff: dict[str, dict[str, Any]], *, note: str = ""
    ) -> None:
        super().__init__()
        self.runs = list(runs)
        self.diff = diff
        self.note = note
        self.shared = common_keys(self.runs)
        self.specs: list[ChartSpec] = list(DEFAULT_CHARTS)

    def compose(self) -> ComposeResult:
        ids = ", ".join(one_line(r.submission_id, 40) for r in self.runs)
        yield Static(markup(f" Compare {len(self.runs)} runs: {ids}"), id="compare-title")
        yield Static(markup(self.note_text()), id="compare-note")
        with Grid(id="compare-charts"):
            for i, spec in enumerate(self.specs):
                yield CompareChart(spec, id=f"compare-chart-{i}")
        with Vertical(id="compare-tables"):
            yield DataTable(id="compare-summary", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="compare-diff", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def note_text(self) -> str:
        lines = []
        best = fastest_learner(self.runs)
        if best:
            lines.append(best)
        busiest = max(
            (r for r in self.runs if isinstance(r.meta.get("gpu_use"), dict)),
            key=lambda r: r.summary().get("gpu_util_mean") or 0.0,
            default=None,
        )
        if busiest is not None:
            use = gpu_use_text(busiest.meta.get("gpu_use"))
            if use:
                lines.append(f"{busiest.submission_id} {use}")
        if self.note:
            lines.append(self.note)
        return " · ".join(lines) or "no metrics archived for these runs yet"

    def on_mount(self) -> None:
        fill_summary(self.query_one("#compare-summary", DataTable), self.runs)
        fill_diff(self.query_one("#compare-diff", DataTable), self.runs, self.diff)
        self.draw()
        self.charts[0].focus()

    @property
    def charts(self) -> list[CompareChart]:
        return list(self.query(CompareChart))

    def draw(self) -> None:
        for chart, spec in zip(self.charts, self.specs, strict=True):
            chart.spec = spec
            chart.draw_runs(self.runs, self.shared)

    def chart_keys(self) -> list[str | None]:
        """The key each chart shows (None: not logged by every run)."""
        return [chart_key(spec, self.shared) for spec in self.specs]

    def action_pick_metric(self) -> None:
        if not self.shared:
            self.notify("no metric key is logged by every run", severity="warning")
            return
        focused, charts = self.app.focused, self.charts
        index = charts.index(focused) if focused in charts else 0
        latest = {
            k: pts[-1][1] for k in self.shared if (pts := self.runs[0].series.get(k)) is not None
        }

        def picked(key: str | None) -> None:
            if key is not None:
                self.specs[index] = ChartSpec(key, (key,), key.rsplit("/", 1)[-1])
                self.draw()

        current = chart_key(self.specs[index], self.shared)
        self.app.push_screen(
            MetricPicker(self.shared, latest, self.specs[index].title, current), picked
        )

    def action_reset_layout(self) -> None:
        self.specs = list(DEFAULT_CHARTS)
        self.draw()

    def action_back(self) -> None:
        self.app.pop_screen()
