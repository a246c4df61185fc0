"""Training metrics: charts of the metrics users watch, a step progress bar with ETA.

Charts are textual-plotext ``PlotextPlot`` widgets. The panel is fed raw job-log text; the
tracker parses it cheaply and charts redraw on a timer, at most twice a second, and only when
something new arrived.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Input, OptionList, ProgressBar, Static
from textual.widgets.option_list import Option
from textual_plotext import PlotextPlot

from tui.config.health import HealthOptions
from tui.fmt import duration
from tui.metrics import MetricsTracker
from tui.metrics.health import Alert, HealthWatch
from tui.metrics.series import chart_points
from tui.sanitize import markup, one_line, pad, width

REDRAW_EVERY_S = 0.5  # at most 2 Hz: plotext rebuilds every chart's whole canvas
# More points than this many per column of the chart are thinned: the terminal cannot show
# them, and plotext's cost grows with the points.
POINTS_PER_CELL = 2
MAX_MARKS = 50  # health-alert lines drawn per chart (the newest)


@dataclass(frozen=True)
class ChartSpec:
    """One chart: a title, its keys, and whether only the first key with data is plotted."""

    title: str
    keys: tuple[str, ...]
    short: str = ""  # the label in the latest-values line
    first_only: bool = False
    phases: bool = False  # the stacked timing_s/* phases of each step (tui/widgets/phases.py)


DEFAULT_CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("score / reward mean", ("critic/score/mean", "critic/rewards/mean"), "score"),
    # GRPO with use_kl_loss logs actor/kl_loss; PPO without it only the policy's actor/ppo_kl.
    ChartSpec("KL", ("actor/kl_loss", "actor/ppo_kl"), "KL", first_only=True),
    ChartSpec("entropy", ("actor/entropy",), "entropy"),
    ChartSpec("response length mean", ("response_length/mean",), "resp len"),
    ChartSpec("throughput (tokens/s/GPU)", ("perf/throughput",), "tok/s/GPU"),
    ChartSpec("step time (s)", ("timing_s/step",), "s/step"),
)
STEP_TIME_TITLE = "step time (s)"
PHASES_CHART = ChartSpec("where the step's time goes (s)", ("timing_s/step",), phases=True)


def fmt_value(v: float) -> str:
    """A metric value in a few characters: 0.6231, 0.0012, 512, 12.3k, 1.8e+308, nan."""
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a >= 1e12:  # its true magnitude, never hundreds of digits
        return f"{v:.3g}"
    if a >= 1e9:
        return f"{v / 1e9:.1f}G"
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e5:
        return f"{v / 1e3:.0f}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.4g}" if a >= 1e-3 else f"{v:.1e}"


def progress_text(tracker: MetricsTracker, ended: str | None = None) -> str:
    """``step 37/200 · ETA 1h12m · 45.2 s/step``. `ended`: the job's final status, once its
    log is all in (a job that ended with no step lines is not waiting for any)."""
    last, total = tracker.last_step, tracker.total_steps
    if last is None and ended:
        return f"the job ended ({ended}) with no step lines: its log says why (t: Log)"
    if last is None:
        return "waiting for verl's step lines" + (f" · {total} steps" if total else "")
    parts = [f"step {last}/{total}" if total else f"step {last} (total unknown)"]
    if total and last >= total:
        parts.append("done")
    elif total:
        eta = tracker.eta_seconds()
        parts.append("ETA –" if eta is None else f"ETA {duration(round(eta))}")
    per_step = tracker.step_seconds()
    if per_step is not None:
        parts.append(f"{per_step:.1f} s/step")  # bounded: MAX_STEP_SECONDS
    return " · ".join(parts)


def chart_keys(spec: ChartSpec, tracker: MetricsTracker) -> list[str]:
    """The keys of a chart that have data (the first one only for a first_only chart)."""
    seen = [k for k in spec.keys if tracker.latest_step(k) is not None]
    return seen[:1] if spec.first_only else seen


def short_labels(keys: Sequence[str]) -> list[str]:
    """Keys without the path segments they all share: critic/score/mean and
    critic/rewards/mean become score and rewards."""
    if len(keys) < 2:
        return list(keys)
    parts = [k.split("/") for k in keys]
    head = 0
    while all(len(p) > head + 1 and p[head] == parts[0][head] for p in parts):
        head += 1
    tail = 0
    while all(len(p) > head + tail + 1 and p[-1 - tail] == parts[0][-1 - tail] for p in parts):
        tail += 1
    return ["/".join(p[head : len(p) - tail]) for p in parts]


def thin(points: Sequence[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    """At most about `limit` points, evenly spread, always keeping the newest."""
    if limit <= 0 or len(points) <= limit:
        return list(points)
    stride = math.ceil(len(points) / limit)
    kept = list(points[::stride])
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


class SafePlot(PlotextPlot):
    """A plotext chart whose drawing cannot take the app down: chart_points keeps the values
    in plotext's range, and anything plotext still fails on becomes a line in the chart."""

    def render(self) -> RenderResult:
        try:
            return super().render()
        except (ArithmeticError, ValueError, IndexError) as exc:
            return Text(one_line(f"chart not drawn: {exc}", 200), style="dim")


class MetricChart(Vertical, can_focus=True):
    """A bordered chart of one ChartSpec, or a dim note while its keys have no data."""

    DEFAULT_CSS = """
    MetricChart {
        border: round $panel; height: 1fr; width: 1fr; padding: 0;
        border-title-color: $text; border-subtitle-color: $text;
    }
    MetricChart:focus { border: round $accent; }
    MetricChart > .empty {
        color: $text-muted; width: 1fr; height: 1fr; content-align: center middle;
        text-align: center;
    }
    MetricChart PlotextPlot { display: none; }
    MetricChart.has-data PlotextPlot { display: block; }
    MetricChart.has-data > .empty { display: none; }
    """

    def __init__(self, spec: ChartSpec, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec
        # What was handed to plotext last, per key: for tests and the picker, not pixels.
        self.plotted: dict[str, list[tuple[int, float]]] = {}
        self.marked: list[int] = []  # steps marked with a health alert

    def compose(self) -> ComposeResult:
        yield Static(classes="empty")
        yield SafePlot()

    @property
    def plot(self) -> PlotextPlot:
        return self.query_one(SafePlot)

    def draw(self, tracker: MetricsTracker, alerts: Sequence[Alert] = ()) -> None:
        spec = self.spec
        self.border_title = markup(spec.title)
        if spec.phases:
            from tui.widgets.phases import draw_phases

            said, plotted = draw_phases(self.plot, tracker)
            self.border_subtitle = markup(said)
            if not said:
                self.query_one(".empty", Static).update("no step timings (timing_s/step) yet")
                self.remove_class("has-data")
                return
            self.plotted = plotted
            self.add_class("has-data")
            return
        keys = chart_keys(spec, tracker)
        if not keys:
            self.plotted = {}
            self.border_subtitle = ""
            self.query_one(".empty", Static).update(markup(f"no data yet ({', '.join(spec.keys)})"))
            self.remove_class("has-data")
            return
        latest = tracker.latest()
        labels = short_labels(keys)
        # Metric keys come from the job's log lines: markup-escaped (titles are markup).
        values = "  ".join(
            (f"{label} " if len(keys) > 1 else "") + fmt_value(latest[key])
            for key, label in zip(keys, labels, strict=True)
        )
        note = self.plot_series(
            {key: tracker.series(key) for key in keys}, labels if len(keys) > 1 else None
        )
        # A non-finite value is already a gap with its own note ("nan/inf not drawn").
        note += self.mark_alerts([a for a in alerts if a.key in keys and a.rule != "nonfinite"])
        self.border_subtitle = markup(values + note)

    def mark_alerts(self, alerts: Sequence[Alert]) -> str:
        """A vertical line at each step where a training-health rule fired on one of this
        chart's keys (tui/metrics/health.py); the subtitle names the newest."""
        self.marked = sorted({a.step for a in alerts})
        for step in self.marked[-MAX_MARKS:]:
            self.plot.plt.vline(step, "red")
        if not alerts:
            return ""
        last = alerts[-1]
        return f" · ⚠ {last.rule} @{last.step}" + (
            f" (+{len(alerts) - 1})" if len(alerts) > 1 else ""
        )

    def plot_series(
        self, series: dict[str, list[tuple[int, float]]], labels: Sequence[str] | None
    ) -> str:
        """Draw each series (by step) over the others; `labels` name them in the legend. The
        one place a chart is drawn: the job's metrics and the compare screen's runs. Returns
        a note for the subtitle on points not drawn as they are (empty when all were)."""
        limit = max(self.size.width, 40) * POINTS_PER_CELL
        plotted: dict[str, list[tuple[int, float]]] = {}
        gaps = moved = 0
        for key, raw in series.items():
            points, g, m = chart_points(raw)  # nan/inf: a gap; past plotext's range: clamped
            gaps, moved = gaps + g, moved + m
            plotted[key] = thin(points, limit)
        plt = self.plot.plt
        plt.clear_data()
        for i, points in enumerate(plotted.values()):
            if points:
                xs, ys = zip(*points, strict=True)
                plt.plot(
                    list(xs),
                    list(ys),
                    marker="braille",
                    label=labels[i] if labels else None,
                )
        plt.xaxes(True, False)  # left and bottom axes only: the border already frames it
        plt.yaxes(True, False)
        self.plotted = plotted
        self.add_class("has-data")
        self.plot.refresh()
        note = f" · {gaps} nan/inf not drawn" if gaps else ""
        return note + (f" · {moved} beyond the chart's range" if moved else "")


class MetricPicker(ModalScreen[str | None]):
    """Pick any metric key seen so far for one chart: type to filter, enter picks."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "move(1)", "Next", show=False),
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
    ]

    DEFAULT_CSS = """
    MetricPicker { align: center middle; }
    MetricPicker > Vertical {
        width: 90; max-width: 95%; height: auto; max-height: 80%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    MetricPicker #picker-title { text-style: bold; height: 1; }
    MetricPicker OptionList { height: auto; max-height: 24; border: none; }
    """

    def __init__(
        self, keys: Sequence[str], latest: dict[str, float], chart: str, current: str | None = None
    ) -> None:
        super().__init__()
        self.all_keys = sorted(keys)
        self.latest = latest
        self.chart = chart
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"Chart “{markup(self.chart)}” shows…  [dim](type to filter, enter picks, "
                "esc cancels)[/dim]",
                id="picker-title",
            )
            yield Input(placeholder="filter, e.g. val-core or actor kl", id="picker-filter")
            yield OptionList(id="picker-keys")

    def on_mount(self) -> None:
        self._fill("")
        self.query_one(Input).focus()

    def matches(self, text: str) -> list[str]:
        """Keys holding every space-separated word of `text`, case-insensitively."""
        words = text.lower().split()
        return [k for k in self.all_keys if all(w in k.lower() for w in words)]

    def _fill(self, text: str) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        keys = self.matches(text)
        cells = min(max((width(one_line(k)) for k in keys), default=0), 60)  # one value column
        for key in keys:
            label = Text(pad(key, cells))
            value = self.latest.get(key)
            if value is not None:
                label.append(f"  {one_line(fmt_value(value))}", "dim")
            options.add_option(Option(label, id=key))
        if keys:
            options.highlighted = keys.index(self.current) if self.current in keys else 0
        else:
            options.add_option(Option(f"no key matches “{markup(text)}”", disabled=True))

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None:
            option = options.get_option_at_index(options.highlighted)
            if option.id is not None:
                self.dismiss(option.id)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(event.option.id)

    def action_move(self, delta: int) -> None:
        options = self.query_one(OptionList)
        count = options.option_count
        if count:
            at = options.highlighted if options.highlighted is not None else 0
            options.highlighted = min(max(at + delta, 0), count - 1)

    def action_cancel(self) -> None:
        self.dismiss(None)


class MetricsPanel(Widget, can_focus=True):
    """Progress bar with ETA, the latest values, and a grid of metric charts.

    Call ``feed_text`` with every chunk of the job log, from the app's thread."""

    BINDINGS = [
        Binding("m", "pick_metric", "Chart metric"),
        Binding("0", "reset_layout", "Reset charts"),
        Binding("p", "toggle_phases", "Step phases", show=False),
    ]

    DEFAULT_CSS = """
    MetricsPanel { height: 1fr; layout: vertical; }
    MetricsPanel #metrics-progress { height: 1; }
    MetricsPanel #metrics-progress ProgressBar { width: auto; margin-right: 2; }
    MetricsPanel #metrics-progress ProgressBar.-hidden { display: none; }
    MetricsPanel #metrics-step { width: 1fr; }
    MetricsPanel #metrics-latest { height: 1; color: $text-muted; }
    MetricsPanel #metrics-charts { grid-size: 3 2; grid-gutter: 0 1; height: 1fr; }
    MetricsPanel #metrics-charts.narrow { grid-size: 2 3; }
    """

    def __init__(
        self,
        *,
        tracker: MetricsTracker | None = None,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.tracker = tracker if tracker is not None else MetricsTracker()
        self.specs: list[ChartSpec] = list(DEFAULT_CHARTS)
        self.redraws = 0  # how many times the charts were rebuilt (tests watch the coalescing)
        self._drawn_version = -1
        self._drawn_at = 0.0
        self._pending = False
        self.ended: str | None = None  # the job's final status once its log is all in
        # Training-health alerts on the charts (tui/metrics/health.py; the defaults' bounds).
        self.health_options = HealthOptions()
        self.health = HealthWatch()
        self._health_source = self.tracker.source

    def compose(self) -> ComposeResult:
        with Horizontal(id="metrics-progress"):
            yield ProgressBar(total=None, show_eta=False, id="metrics-bar", classes="-hidden")
            yield Static(id="metrics-step")
        yield Static(id="metrics-latest")
        with Grid(id="metrics-charts"):
            for i, spec in enumerate(self.specs):
                yield MetricChart(spec, id=f"metrics-chart-{i}")

    def on_mount(self) -> None:
        self._redraw(force=True)

    def on_resize(self) -> None:
        self.query_one("#metrics-charts").set_class(self.size.width < 120, "narrow")

    @property
    def charts(self) -> list[MetricChart]:
        return list(self.query(MetricChart))

    # --- feeding ---------------------------------------------------------------------------

    def feed_text(self, text: str) -> None:
        """Take the next chunk of the job log (cheap: a chart redraw is only scheduled)."""
        if self.tracker.feed_text(text):
            self._schedule()

    def rows_arrived(self) -> None:
        """Rows were added to the tracker directly (verl's file logger): redraw soon."""
        self._schedule()

    def set_total_steps(self, n: int | None) -> None:
        """The total from the job's config; verl's own "Total training steps" line wins."""
        self.tracker.total_steps = n
        self._schedule()

    def clear(self) -> None:
        """Forget the metrics (another job is about to be shown)."""
        self.tracker.clear()
        self.health = HealthWatch()
        self.ended = None
        self._schedule()

    def finish(self, status: str) -> None:
        """The job ended with `status` and its whole log was fed."""
        self.ended = status
        if self.is_mounted:
            self._draw_progress()

    def _schedule(self) -> None:
        if self._pending or not self.is_mounted:  # not mounted: on_mount draws
            return
        self._pending = True
        # Trailing, never dropped: the last chunk's data is drawn at most 0.5 s later.
        wait = self._drawn_at + REDRAW_EVERY_S - time.monotonic()
        self.set_timer(max(wait, 0.01), self._redraw)  # Textual divides by the delay

    def _redraw(self, force: bool = False) -> None:
        self._pending = False
        tracker = self.tracker
        if not force and tracker.version == self._drawn_version:
            return
        self._drawn_version = tracker.version
        self._drawn_at = time.monotonic()
        self.redraws += 1
        self._draw_progress()
        if tracker.source != self._health_source:  # cleared, or the file logger took over
            self.health, self._health_source = HealthWatch(), tracker.source
        self.health.check(tracker, self.health_options)
        for chart in self.charts:
            chart.draw(tracker, self.health.alerts)

    def _draw_progress(self) -> None:
        tracker = self.tracker
        bar = self.query_one(ProgressBar)
        total, last = tracker.total_steps, tracker.last_step
        bar.set_class(not total, "-hidden")
        if total:
            bar.update(total=total, progress=min(max(last or 0, 0), total))
        self.query_one("#metrics-step", Static).update(markup(progress_text(tracker, self.ended)))
        # Keys (val-core/…) come from the job's log: markup-escaped.
        self.query_one("#metrics-latest", Static).update(markup(self.latest_text()))

    def latest_text(self) -> str:
        """The charts' newest values, then the newest validation scores, on one line."""
        tracker = self.tracker
        latest = tracker.latest()
        parts = []
        for spec in self.specs:
            keys = chart_keys(spec, tracker)
            if keys:
                parts.append(f"{spec.short or spec.title} {fmt_value(latest[keys[0]])}")
        for key, value in latest.items():
            if key.startswith("val-core/"):
                parts.append(
                    f"{key.removeprefix('val-core/')} {fmt_value(value)}"
                    f" @{tracker.latest_step(key)}"
                )
        return " · ".join(parts)

    # --- keys ------------------------------------------------------------------------------

    def _target_chart(self) -> int:
        focused, charts = self.app.focused, self.charts
        return charts.index(focused) if focused in charts else 0

    def action_pick_metric(self) -> None:
        keys = self.tracker.keys()
        if not keys:
            self.notify("no metrics in the log yet", severity="warning")
            return
        index = self._target_chart()
        spec = self.specs[index]
        shown = chart_keys(spec, self.tracker)

        def picked(key: str | None) -> None:
            if key is not None:
                self.set_chart(index, ChartSpec(key, (key,), key.rsplit("/", 1)[-1]))

        self.app.push_screen(
            MetricPicker(keys, self.tracker.latest(), spec.title, shown[0] if shown else None),
            picked,
        )

    def action_toggle_phases(self) -> None:
        """The focused chart (else the step-time chart) shows where each step's time goes;
        again: back to the default layout's chart there."""
        titles = [spec.title for spec in DEFAULT_CHARTS]
        index = (
            self._target_chart()
            if self.app.focused in self.charts
            else titles.index(STEP_TIME_TITLE)
        )
        if self.specs[index].phases:
            self.set_chart(index, DEFAULT_CHARTS[index])
        else:
            self.set_chart(index, PHASES_CHART)

    def set_chart(self, index: int, spec: ChartSpec) -> None:
        """Show `spec` in chart `index` (0 is top left, row by row)."""
        self.specs[index] = spec
        chart = self.charts[index]
        chart.spec = spec
        chart.draw(self.tracker)
        self._draw_progress()

    def action_reset_layout(self) -> None:
        self.specs = list(DEFAULT_CHARTS)
        for chart, spec in zip(self.charts, self.specs, strict=True):
            chart.spec = spec
        self._redraw(force=True)
