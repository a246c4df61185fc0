"""Where the step's time goes (issue 29, item 3), on scripted verl timings: the breakdown adds
up to the timing_s/step sums (other = what the phases leave), shares, throughput and MFU means,
the one-line reading, and the GPU busy share per phase from (time, util) samples."""

from __future__ import annotations

import math

import pytest

from tui.metrics.phases import (
    OTHER,
    breakdown,
    gpu_util_by_phase,
    per_step,
    phase_names,
    phase_windows,
    reading,
)

GEN, OLD, ACTOR, STEP = 3.8, 1.0, 4.4, 10.0


def series(steps: int = 5) -> dict[str, list[tuple[int, float]]]:
    s = range(1, steps + 1)
    return {
        "timing_s/step": [(i, STEP) for i in s],
        "timing_s/gen": [(i, GEN) for i in s],
        "timing_s/old_log_prob": [(i, OLD) for i in s],
        "timing_s/update_actor": [(i, ACTOR if i != 3 else math.nan) for i in s],
        "timing_s/start_profile": [(i, 0.1) for i in s],
        "perf/throughput": [(i, 1000.0 + i) for i in s],
        "perf/mfu/actor": [(i, 0.4) for i in s],
        "critic/score/mean": [(i, 0.5) for i in s],
    }


def test_the_breakdown_adds_up_to_the_step_sums() -> None:
    data = series()
    assert phase_names(list(data)) == ["gen", "old_log_prob", "update_actor"]
    steps = per_step(data)
    assert [sp.step for sp in steps] == [1, 2, 3, 4, 5]
    assert "update_actor" not in steps[2].phases  # NaN: a gap, not a number
    assert steps[2].other == pytest.approx(STEP - GEN - OLD)
    b = breakdown(data)
    assert b.steps == 5 and b.total_s == pytest.approx(5 * STEP)
    assert sum(b.phases.values()) == pytest.approx(sum(v for _s, v in data["timing_s/step"]))
    assert b.phases["gen"] == pytest.approx(5 * GEN) and b.share("gen") == pytest.approx(0.38)
    assert b.phases["update_actor"] == pytest.approx(4 * ACTOR)
    assert b.phases[OTHER] == pytest.approx(5 * STEP - 5 * GEN - 5 * OLD - 4 * ACTOR)
    assert b.throughput == pytest.approx(1003.0) and b.mfu == {"actor": pytest.approx(0.4)}
    doc = b.to_json()
    assert doc["phases"]["gen"]["share"] == pytest.approx(0.38) and doc["reading"]


def test_the_reading_and_the_gpus_per_phase() -> None:
    data = series(2)
    steps = per_step(data)
    ends = {1: 100.0, 2: 110.0}
    windows = phase_windows(steps, ends)
    # Step 1 ran 90..100: other 0.8 s, gen 3.8 s, old_log_prob 1 s, update_actor 4.4 s.
    assert windows[0] == (OTHER, 90.0, pytest.approx(90.8))
    assert windows[1] == ("gen", pytest.approx(90.8), pytest.approx(94.6))
    samples = [(90.0 + i * 0.1, 41.0) for i in range(9, 46)]  # gen: 41 % busy
    samples += [(96.0 + i * 0.1, 93.0) for i in range(0, 40)]  # update_actor: 93 %
    util = gpu_util_by_phase(windows, [*samples, (95.0, math.nan)])
    assert util["gen"] == pytest.approx(41.0) and util["update_actor"] == pytest.approx(93.0)
    line = reading(breakdown(data, util))
    assert line.startswith("update_actor 44 % of the step at 93 % busy; gen 38 % at 41 % busy")
    assert "mean step 10 s over 2 steps" in line and "MFU actor 40 %" in line
    assert reading(breakdown({})) == "no step timings (timing_s/step) logged yet"


def test_compare_gets_the_breakdown_and_the_health_per_run() -> None:
    from tui.archive.compare import Run, compare_doc
    from tui.commands.compare import run_readings

    spiky = series()
    spiky["actor/kl_loss"] = [(i, 5.0 if i == 4 else 0.01) for i in range(1, 6)]
    runs = [Run("a", "SUCCEEDED", series(), {}), Run("b", "FAILED", spiky, {})]
    doc = compare_doc(runs, [], {})
    a, b = doc["runs"]
    assert a["phases"]["phases"]["gen"]["share"] == pytest.approx(0.38)
    assert [(x["rule"], x["step"]) for x in a["health"]] == [("nonfinite", 3)]  # its NaN
    assert [(x["rule"], x["step"]) for x in b["health"]] == [("nonfinite", 3), ("kl", 4)]
    lines = run_readings(runs)
    assert lines[0].startswith("a: gen 38 % of the step") and "kl, nonfinite" in lines[3]


async def test_the_metrics_tab_stacks_the_phases_with_p() -> None:
    from test_metrics_panel import PanelApp, drawn

    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        rows: dict[int, dict[str, float]] = {}
        for key, points in series().items():
            for step, value in points:
                rows.setdefault(step, {})[key] = value
        panel.tracker.add_rows(sorted(rows.items()))
        panel.rows_arrived()
        await drawn(pilot, panel)
        panel.focus()
        await pilot.press("p")
        await pilot.pause()
        chart = next(c for c in panel.charts if c.spec.phases)
        assert chart is panel.charts[5]  # in the step-time chart's place
        assert chart.plotted["timing_s/gen"] == [(s, GEN) for s in range(1, 6)]
        assert chart.plotted["timing_s/update_actor"][2] == (3, 0.0)  # its NaN: not stacked
        assert str(chart.border_subtitle).startswith("gen 38 % of the step; update_actor 35 %")
        await pilot.press("p")
        await pilot.pause()
        assert panel.charts[5].spec.title == "step time (s)"


def test_the_phase_clock_and_the_supervisors_record(tmp_path) -> None:
    from tui.metrics.phases import PhaseClock
    from tui.supervisor.health_duty import read_phase_util, write_health

    clock = PhaseClock()
    clock.note_steps([1], 50.0)  # logged before the first look: its end is not known
    clock.note_steps([1, 2], 100.0)
    clock.note_steps([1, 2, 3], 110.0)
    assert clock.ended_at == {2: 100.0, 3: 110.0}
    for i in range(9, 46):  # step 2's gen (90.8 .. 94.6 s): 40 % busy
        clock.note_util(90.0 + i * 0.1, 40.0)
    clock.note_util(95.0, math.nan)
    util = clock.gpu_util(series(3))
    assert util == {"gen": pytest.approx(40.0)}
    write_health(tmp_path, "c", {}, {"job-1": util})
    assert read_phase_util(tmp_path, "c", "job-1") == {"gen": pytest.approx(40.0)}
    assert read_phase_util(tmp_path, "c", "other") == {}
