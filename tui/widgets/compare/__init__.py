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

LABEL_WIDTH = 24  # a run's name in a chart's legend and a diff column's header


def _middle(name: str, width: int, keep_from: int) -> str:
    """`name` in `width` characters with "…" where it was cut, keeping `name[keep_from]` (where
    it starts to differ from the others) and what follows as far as it fits, and its start."""
    if len(name) <= width:
        return name
    head = max((width - 2) // 3, 1)
    if len(name) - keep_from <= width - 1 - head:  # the differing part is near the end
        tail = max(len(name) - keep_from, (width - 1) // 2)
        return name[: width - 1 - tail] + "…" + name[len(name) - tail :]
    # It differs in the middle: the start, then a window from just before that point.
    span = width - 2 - head
    start = min(max(head, keep_from - span // 3), len(name) - span)
    return (
        name[:head] + "…" + name[start : start + span] + ("…" if start + span < len(name) else "")
    )


def run_labels(ids: Sequence[str], width: int = LABEL_WIDTH) -> list[str]:
    """Short, distinct labels for runs: a long id is cut in the middle, not at its end, so
    runs named alike (grpo-gsm8k-qwen2.5-0.5b-20261127-1 / -2) keep the suffix that tells them
    apart. Where cutting still makes two equal, they are numbered."""
    names = [one_line(i, 400) for i in ids]
    labels = []
    for name in names:
        # Where this name starts to differ from the most similar other one.
        common = max(
            (len(_shared_prefix(name, other)) for other in names if other != name), default=0
        )
        labels.append(_middle(name, width, common))
    if len(set(labels)) < len(labels):  # differ only inside the cut: number them
        tag = [f"#{n} " for n in range(1, len(labels) + 1)]
        labels = [t + _middle(n, width - len(t), len(n)) for t, n in zip(tag, names, strict=True)]
    return labels


def _shared_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


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
        labels = run_labels([r.submission_id for r in runs])
        latest = []
        for r, label in zip(runs, labels, strict=True):
            pts = r.series.get(key) or []
            latest.append(f"{label} {fmt_value(pts[-1][1])}" if pts else "")
        note = self.plot_series({r.submission_id: r.series.get(key, []) for r in runs}, labels)
        self.border_subtitle = markup("  ".join(x for x in latest if x) + note)


def fill_summary(table: DataTable[Any], runs: Sequence[Run]) -> None:
    table.clear(columns=True)
    table.add_columns(*SUMMARY_COLUMNS)
    for r in runs:
        # Ids and statuses come from Ray and the archive: Text cells, cleaned.
        table.add_row(*(cell(c, 40) for c in summary_cells(r)), key=r.submission_id)


def fill_diff(table: DataTable[Any], runs: Sequence[Run], diff: dict[str, dict[str, Any]]) -> None:
    table.clear(columns=True)
    table.add_columns("config key", *run_labels([r.submission_id for r in runs]))
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


__all__ = ["CompareChart", "chart_key", "common_keys", "fill_diff", "fill_summary", "run_labels"]
