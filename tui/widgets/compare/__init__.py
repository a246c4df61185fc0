"""Compare widgets: charts of one metric key across runs (the metrics screen's chart, one
series per run), the summary table and the config diff table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable, Static

from tui.archive.compare import (
    SUMMARY_COLUMNS,
    Run,
    common_keys,
    set_in,
    summary_cells,
    value_text,
)
from tui.sanitize import cell, markup, one_line
from tui.widgets.metrics import ChartSpec, MetricChart, fmt_value


def chart_key(spec: ChartSpec, shared: Sequence[str]) -> str | None:
    """The first of a chart's keys that every run logged."""
    return next((k for k in spec.keys if k in shared), None)


class CompareChart(MetricChart):
    """One metric key, one series per run, aligned by step."""

    def draw_runs(self, runs: Sequence[Run], shared: Sequence[str]) -> None:
        spec = self.spec
        key = chart_key(spec, shared)
        title = spec.title if key is None or len(spec.keys) < 2 else f"{spec.title}: {key}"
        self.border_title = markup(title)
        if key is None:
            self.plotted = {}
            self.border_subtitle = ""
            self.query_one(".empty", Static).update(
                markup(f"not logged by every run ({', '.join(spec.keys)})")
            )
            self.remove_class("has-data")
            return
        latest = []
        for r in runs:
            pts = r.series.get(key) or []
            latest.append(f"{one_line(r.submission_id, 24)} {fmt_value(pts[-1][1])}" if pts else "")
        note = self.plot_series(
            {r.submission_id: r.series.get(key, []) for r in runs},
            [one_line(r.submission_id, 24) for r in runs],
        )
        self.border_subtitle = markup("  ".join(x for x in latest if x) + note)


def fill_summary(table: DataTable[Any], runs: Sequence[Run]) -> None:
    table.clear(columns=True)
    table.add_columns(*SUMMARY_COLUMNS)
    for r in runs:
        # Ids and statuses come from Ray and the archive: Text cells, cleaned.
        table.add_row(*(cell(c, 40) for c in summary_cells(r)), key=r.submission_id)


def fill_diff(table: DataTable[Any], runs: Sequence[Run], diff: dict[str, dict[str, Any]]) -> None:
    table.clear(columns=True)
    table.add_columns("config key", *(one_line(r.submission_id, 24) for r in runs))
    if not diff:
        table.add_row(Text("no config key differs", "dim"), *("" for _ in runs))
        return
    for key, values in diff.items():
        row: list[Text] = [cell(key, 60)]
        for r in runs:
            text = cell(value_text(values.get(r.submission_id)), 30)
            if not set_in(r, key):
                text.stylize("dim")
                text.append(" (default)", "dim italic")
            row.append(text)
        table.add_row(*row, key=key)


__all__ = ["CompareChart", "chart_key", "common_keys", "fill_diff", "fill_summary"]
