"""Training-health rules (issue 29, item 2) on scripted series: they fire on NaN, a KL spike,
entropy collapse, clipped lengths, a grad-norm spike, a reward collapse and a throughput drop,
at the step where it happens, and stay quiet on a healthy GRPO-like run; a profile's `health:`
block changes the bounds (and is checked at its file:line); step after step, the watch gives
the same alerts as one look at the whole run."""

from __future__ import annotations

import math
import random

import pytest

from tui.config.health import HealthOptions
from tui.config.yamlfile import ConfigError
from tui.jobs.profiles import load_profile
from tui.metrics import MetricsTracker
from tui.metrics.health import Alert, HealthWatch, check_steps

STEPS = 60


def healthy(step: int, rng: random.Random) -> dict[str, float]:
    """One step of a run that learns: reward up, entropy slowly down, small KL, steady
    gradients and throughput, few clipped answers (with noise)."""
    return {
        "critic/score/mean": min(0.9, 0.2 + 0.012 * step) + rng.uniform(-0.03, 0.03),
        "val-core/openai/gsm8k/reward/mean@1": min(0.85, 0.15 + 0.012 * step),
        "actor/entropy": 0.6 - 0.004 * step + rng.uniform(-0.02, 0.02),
        "actor/kl_loss": 0.001 * step + rng.uniform(0, 0.002),
        "actor/ppo_kl": rng.uniform(-0.001, 0.001),
        "actor/grad_norm": 1.0 + rng.uniform(-0.3, 0.3),
        "response_length/clip_ratio": rng.uniform(0.0, 0.05),
        "perf/throughput": 1000 * (1 + rng.uniform(-0.05, 0.05)),
        "timing_s/step": 30 + rng.uniform(-2, 2),
    }


def run(changes: dict[int, dict[str, float]] | None = None, seed: int = 1) -> MetricsTracker:
    rng = random.Random(seed)
    tracker = MetricsTracker()
    rows = []
    for step in range(1, STEPS + 1):
        row = healthy(step, rng)
        row.update((changes or {}).get(step, {}))
        rows.append((step, row))
    tracker.add_rows(rows)
    return tracker


def alerts(tracker: MetricsTracker, opts: HealthOptions | None = None) -> list[Alert]:
    return check_steps(tracker, opts or HealthOptions(), set(tracker.steps()))


@pytest.mark.parametrize("seed", range(5))
def test_a_healthy_run_raises_nothing(seed: int) -> None:
    assert alerts(run(seed=seed)) == []


def test_each_rule_fires_where_the_run_goes_wrong() -> None:
    collapse = {s: {"actor/entropy": 0.01} for s in range(40, 61)}
    reward_down = {s: {"critic/score/mean": 0.05} for s in range(50, 61)}
    changes: dict[int, dict[str, float]] = {}
    for extra in (collapse, reward_down):
        for s, row in extra.items():
            changes.setdefault(s, {}).update(row)
    changes.setdefault(10, {})["actor/pg_loss"] = math.nan
    changes.setdefault(20, {})["actor/kl_loss"] = 5.0
    changes.setdefault(25, {})["actor/grad_norm"] = 80.0
    changes.setdefault(30, {})["response_length/clip_ratio"] = 0.6
    changes.setdefault(35, {})["perf/throughput"] = 100.0
    got = alerts(run(changes))
    first = {}
    for a in got:
        first.setdefault(a.rule, a)
    assert first["nonfinite"].step == 10 and first["nonfinite"].key == "actor/pg_loss"
    assert first["kl"].step == 20 and first["kl"].value == 5.0
    assert first["grad_norm"].step == 25 and "× its median" in first["grad_norm"].message
    assert first["clip_ratio"].step == 30 and "60 % of responses" in first["clip_ratio"].message
    assert first["throughput"].step == 35
    assert first["entropy"].step == 40 and first["entropy"].key == "actor/entropy"
    # The reward is judged on a 3-step mean: it trips within the smoothing window.
    assert 50 <= first["reward"].step <= 52 and first["reward"].key == "critic/score/mean"
    assert set(first) == {
        "nonfinite",
        "kl",
        "grad_norm",
        "clip_ratio",
        "throughput",
        "entropy",
        "reward",
    }
    # JSON: the alert's fields; a non-finite value is null.
    doc = first["nonfinite"].to_json()
    assert doc == {**doc, "rule": "nonfinite", "step": 10, "value": None}
    assert Alert.from_json(doc) is not None and Alert.from_json({"rule": 1}) is None


def test_infinite_and_huge_values_are_data() -> None:
    got = alerts(run({4: {"actor/kl_loss": 1.7976931348623157e308, "actor/grad_norm": math.inf}}))
    rules = {(a.rule, a.key) for a in got}
    assert ("kl", "actor/kl_loss") in rules and ("nonfinite", "actor/grad_norm") in rules


def test_profile_bounds_and_their_checks(tmp_path) -> None:
    opts = HealthOptions.model_validate({"kl": {"max": 10}, "clip_ratio": {"on_alert": "stop"}})
    tracker = run({20: {"actor/kl_loss": 5.0}, 30: {"response_length/clip_ratio": 0.6}})
    rules = {a.rule for a in alerts(tracker, opts)}
    assert "kl" not in rules and "clip_ratio" in rules
    assert opts.stop_on("clip_ratio") and not opts.stop_on("kl")
    assert alerts(tracker, HealthOptions(enabled=False)) == []
    prof = tmp_path / "p.yaml"
    prof.write_text("name: p\noverrides: {}\nhealth:\n  kl: {max: 0.5, on_alert: stop}\n")
    loaded = load_profile(prof).health
    assert loaded is not None and loaded.kl.max == 0.5 and loaded.stop_on("kl")
    prof.write_text("name: p\noverrides: {}\nhealth:\n  kl:\n    max: -1\n")
    with pytest.raises(ConfigError) as err:
        load_profile(prof)
    assert "p.yaml:5" in str(err.value) and "health.kl.max" in str(err.value)


def test_step_by_step_equals_one_look() -> None:
    changes = {20: {"actor/kl_loss": 5.0}, 10: {"actor/entropy": math.nan}}
    whole = alerts(run(changes))
    full = run(changes)
    watch = HealthWatch()
    grown = MetricsTracker()
    seen: list[Alert] = []
    for step in full.steps():
        grown.add_rows([(step, full.row(step))])
        seen += watch.check(grown, HealthOptions())
    assert sorted(map(str, seen)) == sorted(map(str, whole))
    assert watch.check(grown, HealthOptions()) == []  # nothing new: nothing said again


def test_jobs_screen_marks_and_details_the_alerts() -> None:
    from types import SimpleNamespace

    from tui.screens.jobs.view import health_cell, health_detail, status_text
    from tui.supervisor.events import Decision

    row = SimpleNamespace(status_text="RUNNING")
    said = [
        Alert("kl", 4, "actor/kl_loss", 5.0, "actor/kl_loss 5 above 1 at step 4").to_json(),
        Alert("nonfinite", 3, "a", math.nan, "non-finite at step 3: a=nan\x1b[2J").to_json(),
    ]
    # The HEALTH column names the rules that fired; the status column keeps Ray's status.
    assert health_cell(said) == ("kl,nonfinite", "bold yellow")
    assert health_cell([]) == ("-", "dim")
    assert status_text(row, {"evidence": "x"}, "") == ("RUNNING STALLED", "bold red")
    assert status_text(row, None, "green") == ("RUNNING", "green")
    text = health_detail(said).plain
    assert "health: actor/kl_loss 5 above 1 at step 4" in text and "\x1b" not in text
    assert Decision("job-unhealthy", "sid", "m").kind == "job-unhealthy"  # a known kind


async def test_the_metrics_charts_mark_the_alerts() -> None:
    """The Metrics tab's KL chart gets a line at the step the KL rule fired, and its subtitle
    names it; a chart whose keys are healthy gets none."""
    from test_metrics_panel import PanelApp, chart, drawn

    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        scripted = run({20: {"actor/kl_loss": 5.0}})
        panel.tracker.add_rows((s, scripted.row(s)) for s in range(1, 31))
        panel.rows_arrived()
        await drawn(pilot, panel)
        kl = chart(panel, "KL")
        assert kl.marked == [20] and "⚠ kl @20" in str(kl.border_subtitle)
        assert chart(panel, "entropy").marked == []
        panel.clear()  # another job: its alerts are its own
        await drawn(pilot, panel)
        assert panel.health.alerts == []
