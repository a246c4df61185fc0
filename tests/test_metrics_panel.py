"""MetricsPanel in a real app (Pilot): charts get the right series, the progress line, the
"no data yet" state, the metric picker (m) and layout reset (0), coalesced redraws."""

from __future__ import annotations

import asyncio
import math
import time

from textual.app import App, ComposeResult
from textual.widgets import OptionList, ProgressBar, Static
from textual_plotext import PlotextPlot

from tui.fmt import duration
from tui.widgets.metrics import (
    DEFAULT_CHARTS,
    MetricChart,
    MetricPicker,
    MetricsPanel,
    progress_text,
)

PREFIX = "\x1b[36m(TaskRunner pid=4242, ip=10.0.0.2)\x1b[0m "


def step_line(s: int, kl_key: str = "actor/kl_loss", **extra: float) -> str:
    # The shape of verl's console logger (concat_dict_to_str; see test_metrics_parse.py).
    fields = {
        "actor/entropy": f"np.float64({1.0 / s})",
        kl_key: f"np.float64({s / 1000})",
        "critic/score/mean": str(s / 10),
        "critic/rewards/mean": str(s / 20),
        "response_length/mean": str(100.0 + s),
        "perf/throughput": str(1000.0 + s),
        "timing_s/step": "30.0",
        "training/global_step": str(s),
        **{k: str(v) for k, v in extra.items()},
    }
    return PREFIX + f"step:{s} - " + " - ".join(f"{k}:{v}" for k, v in fields.items()) + "\n"


class PanelApp(App):
    def __init__(self, panel: MetricsPanel | None = None) -> None:
        super().__init__()
        self.panel = panel or MetricsPanel(id="metrics")

    def compose(self) -> ComposeResult:
        yield self.panel


def chart(panel: MetricsPanel, title: str) -> MetricChart:
    return next(c for c in panel.charts if c.spec.title == title)


def plotext_data(c: MetricChart) -> tuple[list, list, list]:
    """What plotext itself holds: x lists, y lists and labels of the plotted lines."""
    monitor = c.query_one(PlotextPlot).plt._active.monitor
    return monitor.x, monitor.y, monitor.label


async def drawn(pilot, panel: MetricsPanel) -> None:
    """Until the panel has drawn everything it was fed (its redraws are throttled to 2 Hz, so
    a fixed pause had to be longer than one throttle period)."""
    deadline = time.monotonic() + 5
    while panel._pending or panel._drawn_version != panel.tracker.version:
        assert time.monotonic() < deadline, "the panel was fed but never redrew"
        await pilot.pause(0.02)
    await pilot.pause()


def text_of(panel: MetricsPanel, selector: str) -> str:
    return str(panel.query_one(selector, Static).content)


async def test_charts_show_the_fed_series():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        panel.feed_text("(TaskRunner pid=4242) Total training steps: 200\n")
        panel.feed_text("".join(step_line(s) for s in range(1, 6)))
        await drawn(pilot, panel)
        score = chart(panel, "score / reward mean")
        assert score.plotted == {
            "critic/score/mean": [(s, s / 10) for s in range(1, 6)],
            "critic/rewards/mean": [(s, s / 20) for s in range(1, 6)],
        }
        xs, ys, labels = plotext_data(score)
        assert xs == [[1, 2, 3, 4, 5]] * 2
        assert ys[0] == [0.1, 0.2, 0.3, 0.4, 0.5] and labels == ["score", "rewards"]
        assert score.border_subtitle == "score 0.5  rewards 0.25"
        assert chart(panel, "entropy").plotted["actor/entropy"][-1] == (5, 0.2)
        assert list(chart(panel, "KL").plotted) == ["actor/kl_loss"]
        assert chart(panel, "step time (s)").plotted["timing_s/step"] == [
            (s, 30.0) for s in range(1, 6)
        ]
        assert all(c.has_class("has-data") for c in panel.charts)
        assert "score 0.5" in text_of(panel, "#metrics-latest")


async def test_progress_bar_step_total_and_eta():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        panel.set_total_steps(200)
        panel.feed_text("".join(step_line(s) for s in range(1, 38)))
        await drawn(pilot, panel)
        bar = panel.query_one(ProgressBar)
        assert (bar.progress, bar.total) == (37, 200) and not bar.has_class("-hidden")
        # 163 steps left at timing_s/step 30 s.
        assert text_of(panel, "#metrics-step") == "step 37/200 · ETA 1h21m · 30.0 s/step"
        assert duration(163 * 30) == "1h21m" and duration(3 * 86400 + 4 * 3600) == "3d04h"
        # verl's own count replaces the config's.
        panel.feed_text("(TaskRunner pid=4242) Total training steps: 74\n")
        await drawn(pilot, panel)
        assert bar.total == 74 and text_of(panel, "#metrics-step").startswith("step 37/74 · ETA")


async def test_unknown_total_hides_the_bar():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        assert text_of(panel, "#metrics-step") == "waiting for verl's step lines"
        panel.feed_text(step_line(3))
        await drawn(pilot, panel)
        assert panel.query_one(ProgressBar).has_class("-hidden")
        assert text_of(panel, "#metrics-step") == "step 3 (total unknown) · 30.0 s/step"


async def test_no_data_yet_names_the_keys():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        await pilot.pause()
        for c in panel.charts:
            assert not c.has_class("has-data") and c.plotted == {}
            note = str(c.query_one(".empty", Static).content)
            assert note == f"no data yet ({', '.join(c.spec.keys)})"
        # Some keys only: their charts draw, the others keep the note.
        panel.feed_text(PREFIX + "step:1 - actor/entropy:0.5 - timing_s/step:inf\n")
        await drawn(pilot, panel)
        assert chart(panel, "entropy").has_class("has-data")
        assert not chart(panel, "KL").has_class("has-data")
        # An inf (or nan) is a gap: plotext cannot draw it, and the chart survives.
        step_time = chart(panel, "step time (s)")
        assert step_time.plotted == {"timing_s/step": []}
        assert step_time.border_subtitle == "inf · 1 nan/inf not drawn"


async def test_kl_chart_uses_whichever_kl_exists():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        panel.feed_text("".join(step_line(s, kl_key="actor/ppo_kl") for s in (1, 2)))
        await drawn(pilot, panel)
        assert chart(panel, "KL").plotted == {"actor/ppo_kl": [(1, 0.001), (2, 0.002)]}


async def test_fed_before_mount():
    panel = MetricsPanel(id="metrics")
    panel.feed_text("Total training steps: 10\n" + step_line(4))
    panel.set_total_steps(99)
    app = PanelApp(panel)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert text_of(panel, "#metrics-step").startswith("step 4/10 · ETA 3m00s")
        assert chart(panel, "entropy").plotted == {"actor/entropy": [(4, 0.25)]}


async def test_m_picks_any_key_for_the_focused_chart_and_0_resets():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        panel.feed_text("".join(step_line(s) for s in range(1, 11)))
        panel.feed_text(step_line(11, **{"val-core/openai/gsm8k/reward/mean@4": 0.75}))
        await drawn(pilot, panel)
        panel.charts[2].focus()  # entropy, top right
        await pilot.press("m")
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, MetricPicker)
        options = picker.query_one(OptionList)
        assert options.option_count == len(panel.tracker.keys())
        # The picker starts on what the chart shows.
        assert options.get_option_at_index(options.highlighted).id == "actor/entropy"
        await pilot.press(*"val gsm")
        await pilot.pause()
        assert options.option_count == 1
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is not picker
        picked = panel.charts[2]
        assert picked.spec.keys == ("val-core/openai/gsm8k/reward/mean@4",)
        assert picked.plotted == {"val-core/openai/gsm8k/reward/mean@4": [(11, 0.75)]}
        assert picked.border_title == "val-core/openai/gsm8k/reward/mean@4"
        assert "mean@4 0.75" in text_of(panel, "#metrics-latest")

        # Arrow keys move through the filtered list; escape changes nothing.
        await pilot.press("m")
        await pilot.pause()
        await pilot.press(*"critic", "down", "escape")
        await pilot.pause()
        assert panel.charts[2].spec.keys == ("val-core/openai/gsm8k/reward/mean@4",)

        await pilot.press("m")
        await pilot.pause()
        await pilot.press(*"critic", "down", "enter")  # critic/rewards/mean, critic/score/mean
        await pilot.pause()
        assert panel.charts[2].spec.keys == ("critic/score/mean",)

        await pilot.press("0")
        await pilot.pause()
        assert [c.spec for c in panel.charts] == list(DEFAULT_CHARTS)
        assert list(panel.charts[2].plotted) == ["actor/entropy"]


async def test_m_without_metrics_only_says_so():
    app = PanelApp()
    said: list[str] = []
    app.panel.notify = lambda message, **kw: said.append(message)
    async with app.run_test(size=(160, 50)) as pilot:
        app.panel.focus()
        await pilot.press("m")
        await pilot.pause()
        assert not isinstance(app.screen, MetricPicker)
        assert said == ["no metrics in the log yet"]


def test_picker_filter_matches_every_word():
    picker = MetricPicker(["actor/kl_loss", "actor/ppo_kl", "critic/score/mean"], {}, "KL")
    assert picker.matches("KL actor") == ["actor/kl_loss", "actor/ppo_kl"]
    assert picker.matches("ppo") == ["actor/ppo_kl"]
    assert picker.matches("") == ["actor/kl_loss", "actor/ppo_kl", "critic/score/mean"]


async def test_redraws_are_coalesced():
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        await pilot.pause()
        before = panel.redraws
        text = "".join(step_line(s) + PREFIX + "vllm: processed prompts\n" for s in range(1, 5001))
        size = len(text) // 1000 + 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(0, len(text), size):
            panel.feed_text(text[i : i + size])
            await asyncio.sleep(0)  # let the panel's timers run between chunks, as live
        elapsed = loop.time() - started
        await pilot.pause(0.6)
        redraws = panel.redraws - before
        assert 1 <= redraws <= elapsed / 0.5 + 2, (redraws, elapsed)
        assert chart(panel, "entropy").plotted["actor/entropy"][-1] == (5000, 1 / 5000)
        # Nothing new, nothing drawn.
        panel.feed_text("(WorkerDict pid=1) still alive\n" * 100)
        await pilot.pause(0.6)
        assert panel.redraws - before == redraws


async def test_long_series_are_thinned_but_keep_the_newest():
    app = PanelApp()
    async with app.run_test(size=(100, 40)) as pilot:
        panel = app.panel
        panel.feed_text("".join(step_line(s) for s in range(1, 3001)))
        await pilot.pause(0.6)
        points = chart(panel, "entropy").plotted["actor/entropy"]
        assert len(points) < 1000 and points[0][0] == 1 and points[-1][0] == 3000
        assert panel.query_one("#metrics-charts").has_class("narrow")


async def test_theme_change_keeps_charts_working():
    # textual-plotext 1.0.1 follows the app theme through theme_changed_signal (textual 8).
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        app.panel.feed_text(step_line(1) + step_line(2))
        await pilot.pause(0.6)
        app.theme = "textual-light"
        await pilot.pause()
        plot = chart(app.panel, "entropy").query_one(PlotextPlot)
        assert "1.0" in str(plot.render())  # the y axis of entropy 1.0 → 0.5


def test_progress_text_without_steps():
    from tui.metrics import MetricsTracker

    t = MetricsTracker()
    t.total_steps = 50
    assert progress_text(t) == "waiting for verl's step lines · 50 steps"
    t.feed_text("step:50 - a:1\n")
    assert progress_text(t) == "step 50/50 · done"
    assert math.isclose(t.progress(), 1.0)


async def test_chunk_long_after_the_last_redraw_is_drawn():
    """A chunk arriving ≥ 0.5 s after the last redraw is due at once: that must not become a
    zero-delay Textual timer (it divides by the delay, crashes, and no redraw ever follows)."""
    import time

    app = PanelApp()
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one(MetricsPanel)
        await pilot.pause(0.2)
        panel._drawn_at = time.monotonic() - 5.0
        before = panel.redraws
        panel.feed_text(step_line(1) + "\n" + step_line(2) + "\n")
        await pilot.pause(0.3)
        assert panel.redraws > before
        assert [s for s, _ in panel.tracker.series("critic/score/mean")] == [1, 2]
        panel.feed_text(step_line(3) + "\n")  # and later chunks still schedule redraws
        await pilot.pause(0.8)
        assert panel.redraws > before + 1
