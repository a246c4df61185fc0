"""Everything decoded from outside is bounded (issue 23, item 3), through the real CLI in a
subprocess with a generous wall bound (a hang or minutes of CPU fails the run, not a timed
assertion): shell import (recursion, nesting, integer size, expanded size), `profile check`
on absurd integers and keys, `explain` on hostile long lines; and the signature table holds
no pattern that can backtrack over a whole line. Metric values before a chart are tested in
tests/test_metrics_panel.py's app (here: test_metrics_* below) under Textual's Pilot."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from harness.cli import run_cli
from test_metrics_panel import PanelApp, chart, step_line, text_of

from tui.archive.compare import Run, fastest_learner, summary_cells
from tui.logs.signatures import SIGNATURES
from tui.widgets.compare import CompareChart
from tui.widgets.metrics import DEFAULT_CHARTS, SafePlot

ROOT = Path(__file__).resolve().parent.parent
VERL = "python3 -m verl.trainer.main_ppo"
WALL_S = 120  # generous: every case here ends in a second or two; before, some never did


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # A process of its own, forked from the warm interpreter (harness/cli.py).
    return run_cli(list(args), timeout=WALL_S, cwd=cwd)


def one_line_error(p: subprocess.CompletedProcess[str]) -> str:
    """The single line a refused input gets: exit 2, nothing on stdout, no traceback."""
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr[-2000:]
    return lines[0]


# -- shell import -----------------------------------------------------------------------------

HOSTILE_SCRIPTS = {
    # 3,000 nested defaults: RecursionError before
    "nested_defaults": (
        "X=" + "${Y:-" * 3000 + "a" + "}" * 3000 + f"\n{VERL} trainer.nnodes=$X\n",
        1,
        "expansions nested deeper than 64",
    ),
    # the same nesting inside a double-quoted word, on line 3
    "nested_quoted": (
        "set -e\n\n" + 'X="' + "${Y:-" * 2000 + "a" + "}" * 2000 + f'"\n{VERL} a.b=$X\n',
        3,
        "expansions nested deeper than 64",
    ),
    # int() of 5,000 digits raised ValueError
    "many_digits": (f"X=$(({'9' * 5000}+1))\n{VERL} trainer.nnodes=$X\n", 1, "5000-digit number"),
    # a variable holding the digits
    "digits_in_variable": (
        f"N={'7' * 800}\nX=$((N*2))\n{VERL} trainer.nnodes=$X\n",
        2,
        "800-digit number",
    ),
    "deep_parentheses": (
        "X=$((" + "(" * 3000 + "1" + ")" * 3000 + f"))\n{VERL} trainer.nnodes=$X\n",
        1,
        "$(( … )) nested deeper than 64",
    ),
    # doubling a variable: 16 characters × 2^17 pass a MiB at line 18
    "doubling_variable": (
        "A=xxxxxxxxxxxxxxxx\n" + "A=$A$A\n" * 40 + f"{VERL} trainer.x=$A\n",
        18,
        "expands to more than 1,048,576 characters",
    ),
    "doubling_append": (
        "A=xxxxxxxxxxxxxxxx\n" + "A+=$A\n" * 40 + f"{VERL} trainer.x=$A\n",
        18,
        "expands to more than 1,048,576 characters",
    ),
    "doubling_array": (
        "A=(x y)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 40 + f'{VERL} "${{A[@]}}"\n',
        14,
        "an array of more than 10,000 elements",
    ),
}


# Shapes whose cost grew with the square of the script (each command scanned every note, each
# newline of an array the whole array, a `ray job submit` scan started at every word) or whose
# memory grew without bound (20,000 variables of 1 MiB, 40,000 copies of a 9,000-element array).
# Each script is under the 1 MiB a script may have; a quadratic step would pass the wall bound.
BIG_SCRIPTS = {
    "notes_per_command": ("echo a \\ \nb\n" * 60000 + f"{VERL} a.b=1\n", 0, ""),
    "ray_submit_words": ("ray job submit -- " + "x " * 200000 + f"\n{VERL} a.b=1\n", 0, ""),
    "array_lines": (
        "A=(\n" + "x\n" * 200000 + f")\n{VERL} a.b=1\n",
        2,
        "1: an array of more than 10,000 elements",
    ),
    "many_variables": (
        "A=" + "x" * 500000 + "\n" + "".join(f"B{i}=$A$A\n" for i in range(20000)) + VERL,
        2,
        "68: the script's expansions pass 67,108,864 characters in total",
    ),
    "many_arrays": (
        "A=(" + " x" * 9000 + ")\n" + "".join(f'B{i}=("${{A[@]}}")\n' for i in range(40000)),
        2,
        "112: the script's arrays copy more than 1,000,000 elements in total",
    ),
}


@pytest.mark.parametrize("case", sorted(BIG_SCRIPTS))
def test_big_scripts_cost_linear_time_and_bounded_memory(case: str, tmp_path: Path) -> None:
    text, code, reason = BIG_SCRIPTS[case]
    assert len(text.encode()) < 1 << 20
    script = tmp_path / "run.sh"
    script.write_text(text)
    p = cli("profile", "import", str(script), "-o", str(tmp_path / "out.yaml"))
    if code:
        assert one_line_error(p) == f"{script}:{reason}: not imported"
    else:
        assert p.returncode == 0, p.stderr[-2000:]
        assert "Traceback" not in p.stderr


@pytest.mark.parametrize("case", sorted(HOSTILE_SCRIPTS))
def test_hostile_script_is_one_line_naming_file_and_line(case: str, tmp_path: Path) -> None:
    text, line, reason = HOSTILE_SCRIPTS[case]
    script = tmp_path / "run.sh"
    script.write_text(text)
    out = tmp_path / "out.yaml"
    msg = one_line_error(cli("profile", "import", str(script), "-o", str(out)))
    assert msg.startswith(f"{script}:{line}: "), msg
    assert reason in msg, msg
    assert not out.exists()  # nothing written


def test_array_that_appends_to_itself_imports(tmp_path: Path) -> None:
    """`ARGS=("${ARGS[@]}" x)`, the common idiom, appends (RecursionError before); an array
    the script never set is empty, and the report says so."""
    script = tmp_path / "run.sh"
    script.write_text(
        'EXTRA=("${EXTRA[@]}" trainer.val_before_train=false)\n'
        "ARGS=(data.train_batch_size=8)\n"
        'ARGS=("${ARGS[@]}" trainer.nnodes=1)\n'
        "ARGS+=(trainer.n_gpus_per_node=2)\n"
        'ARGS=("${ARGS[@]}" "${EXTRA[@]}" "${ARGS[0]}")\n'
        'ARGS=("${ARGS[@]}")\n'
        f'{VERL} "${{ARGS[@]}}" trainer.total_epochs=$((9223372036854775807 + 2))\n'
    )
    out = tmp_path / "p.yaml"
    p = cli("profile", "import", str(script), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert f"{script}:1: ${{EXTRA[@]}} →  — an array the script does not set: empty" in p.stdout
    overrides = yaml.safe_load(out.read_text())["overrides"]
    assert overrides["data.train_batch_size"] == 8
    assert overrides["trainer.nnodes"] == 1
    assert overrides["trainer.n_gpus_per_node"] == 2
    assert overrides["trainer.val_before_train"] is False
    assert len(overrides) == 5
    assert f"{script}:2: data.train_batch_size=… — set again at line 5" in p.stdout
    # bash's 64-bit integers wrap: 2^63 - 1 + 2
    assert overrides["trainer.total_epochs"] == -9223372036854775807


def test_arithmetic_of_large_products_is_bash_answer_at_once(tmp_path: Path) -> None:
    """20,000 18-digit factors: bash's wrapping 64-bit product (minutes of CPU before)."""
    factors = "*".join(["999999999999999999"] * 20000)
    script = tmp_path / "run.sh"
    script.write_text(f"X=$(({factors}))\nY=$(({'- ' * 5000}7))\n{VERL} a.x=$X a.y=$Y\n")
    out = tmp_path / "p.yaml"
    p = cli("profile", "import", str(script), "-o", str(out))
    assert p.returncode == 0, p.stderr
    expect = 1
    for _ in range(20000):
        expect = (expect * 999999999999999999 + (1 << 63)) % (1 << 64) - (1 << 63)
    overrides = yaml.safe_load(out.read_text())["overrides"]
    assert overrides == {"a.x": expect, "a.y": -7 if 5000 % 2 else 7}


# -- profile check ----------------------------------------------------------------------------


def test_profile_check_refuses_absurd_integers_naming_the_key(tmp_path: Path) -> None:
    prof = tmp_path / "big.yaml"
    prof.write_text(
        "name: big\noverrides:\n  trainer.nnodes: 99999999999999999999\n"
        "  trainer.n_gpus_per_node: 8\n  data.train_batch_size: 7\n"
    )
    p = cli("profile", "check", str(prof))
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert p.returncode != 0
    lines = [x for x in p.stdout.splitlines() if x.startswith("trainer.nnodes:")]
    assert lines == [
        "trainer.nnodes: must be an integer between -10^15 and 10^15, not 99999999999999999999"
    ], p.stdout


def test_profile_check_suggests_a_batch_at_once_for_huge_clusters(tmp_path: Path) -> None:
    """nnodes 1e8 (legal) took 19 s: the next divisible batch is computed, not counted to."""
    prof = tmp_path / "wide.yaml"
    prof.write_text(
        "name: wide\noverrides:\n  trainer.nnodes: 100000000\n"
        "  trainer.n_gpus_per_node: 8\n  data.train_batch_size: 7\n"
    )
    p = cli("profile", "check", str(prof))
    assert "Traceback" not in p.stderr, p.stderr
    assert "must be divisible by 800000000 (nnodes × n_gpus_per_node): e.g. 800000000" in (
        p.stdout
    ), p.stdout


def test_profile_check_on_a_key_too_long_for_a_path(tmp_path: Path) -> None:
    """A 3,000-segment key became a config-group path: 'File name too long' internal error."""
    key = ".".join(["a"] * 3000)
    prof = tmp_path / "key.yaml"
    prof.write_text(f"name: longkey\noverrides:\n  ? {key}\n  : 1\n")
    msg = one_line_error(cli("profile", "check", str(prof)))
    assert msg.startswith(f"verl-tui profile check: {prof}:3: overrides: a.a.a"), msg
    assert "(5999 characters) is not a verl key: keys are at most 256 characters" in msg


def test_a_key_as_long_as_allowed_is_no_path_error() -> None:
    """The one place a key becomes a path (verl_compose._config_group) takes any key."""
    from tui.jobs.verl_compose import _config_group

    assert _config_group("a" * 256) is False  # ENAMETOOLONG is "not a config group"
    assert _config_group("x\0y") is False
    assert _config_group("model_engine") is True


# -- explain ----------------------------------------------------------------------------------


def test_explain_on_hostile_long_lines_is_linear(tmp_path: Path) -> None:
    """One 300 KB line per signature literal, anchor and pattern (bench/log_hostile.py builds
    them from the table): 80 s for one such line before; the whole file now in seconds."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from log_hostile import hostile_lines
    finally:
        sys.path.remove(str(ROOT / "bench"))
    lines = hostile_lines(300_000)
    log = tmp_path / "hostile.log"
    log.write_bytes(b"\n".join(lines.values()) + b"\nImportError: cannot import vllm\n")
    p = cli("explain", str(log))
    assert p.returncode in (0, 1), p.stderr
    assert p.stderr == "", p.stderr
    assert f"{log}: {len(lines) + 1} lines, " in p.stdout.splitlines()[-1]
    # the last line is still read and explained (vllm missing: a known cause)
    assert f"{log}:{len(lines) + 1}: error: ImportError: cannot import vllm" in p.stdout


def _unbounded_wildcards(pattern: re.Pattern[str]) -> list[str]:
    """Repeats with no upper bound over a broad class (any character, a negated set, \\S, \\s,
    \\w, \\W): each can run to the end of the line and back from every place it starts.
    Digits (\\d+, [\\d.]+) are narrow: a run of them ends at the first letter."""
    try:
        from re import _constants as c
        from re import _parser as parser
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_constants as c  # type: ignore[no-redef]
        import sre_parse as parser  # type: ignore[no-redef]

    found: list[str] = []

    def broad(items) -> bool:
        for op, av in items:
            if op is c.ANY:
                return True
            if op is c.NOT_LITERAL:
                return True
            if op is c.IN and any(
                o is c.NEGATE or (o is c.CATEGORY and a is not c.CATEGORY_DIGIT) for o, a in av
            ):
                return True  # [^…], \S, \s, \w, \W: nearly any text (digits are narrow)
        return False

    def walk(seq) -> None:
        for op, av in seq:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT) or op is getattr(c, "POSSESSIVE_REPEAT", None):
                _lo, hi, item = av
                if hi == c.MAXREPEAT and broad(item):
                    found.append(str(list(item))[:60])
                walk(item)
            elif op is c.SUBPATTERN:
                walk(av[-1])
            elif op is c.BRANCH:
                for alt in av[1]:
                    walk(alt)
            elif op is getattr(c, "ATOMIC_GROUP", None):
                walk(av)

    walk(parser.parse(pattern.pattern, pattern.flags))
    return found


def test_no_signature_can_backtrack_over_a_line() -> None:
    problems = {s.key: w for s in SIGNATURES if (w := _unbounded_wildcards(s.pattern))}
    assert not problems, problems
    # the check itself finds what it is for
    assert _unbounded_wildcards(re.compile(r"a.*b"))
    assert _unbounded_wildcards(re.compile(r"x(?:[^']+)'"))
    assert _unbounded_wildcards(re.compile(r"at \S*cumem"))
    assert not _unbounded_wildcards(re.compile(r"a.{0,300}?b|[\d.]+"))


# -- metric values before a chart -------------------------------------------------------------

HUGE = 1.7976931348623157e308


async def test_metrics_panel_stays_up_with_huge_nan_and_inf_values() -> None:
    """timing_s/step:1.7976931348623157e308 killed the cockpit when the metrics tab opened
    (plotext's OverflowError); every extreme value now draws, and the true number shows."""
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        panel.feed_text("(TaskRunner pid=1) Total training steps: 100\n")
        extremes = [HUGE, -HUGE, 3.5e306, 1e308, math.inf, -math.inf, math.nan, 5e-324, 1e-320]
        text = "".join(
            step_line(
                s,
                **{
                    "timing_s/step": v,
                    "actor/entropy": -v,
                    "response_length/mean": v if s % 2 else 1.0,
                    "critic/score/mean": 5e-324 * s,
                },
            )
            for s, v in enumerate(extremes, 1)
        )
        panel.feed_text(text)
        await pilot.pause(0.6)
        step_time = chart(panel, "step time (s)")
        assert step_time.border_subtitle is not None
        assert step_time.border_subtitle == (
            "1.0e-320 · 3 nan/inf not drawn · 6 beyond the chart's range"
        )
        drawn = [v for _, v in step_time.plotted["timing_s/step"]]
        assert drawn == [1e15, -1e15, 1e15, 1e15, 0.0, 0.0]  # clamped, gaps for inf/nan
        # every chart really renders (plotext runs in render()), none shows a failure line
        for c in panel.charts:
            plot = c.query_one(SafePlot)
            if c.has_class("has-data"):
                rendered = str(plot.render())
                assert "chart not drawn" not in rendered, (c.spec.title, rendered[:200])
        # the true numbers where numbers are shown
        panel.feed_text(step_line(10, **{"timing_s/step": HUGE, "actor/entropy": math.nan}))
        await pilot.pause(0.6)
        assert chart(panel, "step time (s)").border_subtitle.startswith("1.8e+308")
        assert chart(panel, "entropy").border_subtitle.startswith("nan")
        assert "s/step 1.8e+308" in text_of(panel, "#metrics-latest")
        # the ETA ignores a step time no step takes (round(inf) raised here)
        assert "ETA" in text_of(panel, "#metrics-step")
        await pilot.press("tab")  # the app still takes keys
        assert app.is_running


async def test_a_chart_plotext_still_fails_on_shows_a_line() -> None:
    """The guard at the chart: whatever plotext raises while drawing becomes a line."""
    app = PanelApp()
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.panel
        panel.feed_text(step_line(1) + step_line(2))
        await pilot.pause(0.6)
        c = chart(panel, "entropy")
        # what plotext is given past chart_points' filter (the raw largest float)
        c.plot.plt.plot([1, 2], [HUGE, 1.0])
        c.plot.refresh()
        await pilot.pause(0.1)
        assert "chart not drawn:" in str(c.query_one(SafePlot).render())
        assert app.is_running


async def test_compare_chart_and_summary_with_extreme_values() -> None:
    from textual.app import App, ComposeResult

    runs = [
        Run(
            "raysubmit_a",
            "SUCCEEDED",
            {"critic/score/mean": [(1, -HUGE), (2, HUGE)], "timing_s/step": [(1, HUGE), (2, HUGE)]},
            {},
        ),
        Run(
            "raysubmit_b",
            "FAILED",
            {"critic/score/mean": [(1, math.nan), (2, math.inf)], "timing_s/step": [(1, 5e-324)]},
            {},
        ),
    ]
    assert summary_cells(runs[0])[3:6] == ["1.8e+308", "1.8e+308", "1.8e+308"]
    assert summary_cells(runs[1])[3:6] == ["-", "-", "4.94e-324"]
    assert fastest_learner(runs) is not None

    class CompareApp(App):
        def compose(self) -> ComposeResult:
            yield CompareChart(DEFAULT_CHARTS[0], id="c")

    app = CompareApp()
    async with app.run_test(size=(120, 30)) as pilot:
        c = app.query_one(CompareChart)
        c.draw_runs(runs, ["critic/score/mean", "timing_s/step"])
        await pilot.pause(0.2)
        assert c.plotted["raysubmit_a"] == [(1, -1e15), (2, 1e15)]
        assert c.plotted["raysubmit_b"] == []
        assert "chart not drawn" not in str(c.query_one(SafePlot).render())
        assert "1.8e+308" in str(c.border_subtitle) and "inf" in str(c.border_subtitle)


def test_metric_keys_a_log_makes_up_are_bounded() -> None:
    """A log line may carry any number of made-up keys, or keys a page long: the tracker keeps
    MAX_KEYS of them (known keys keep updating) and counts the rest."""
    from tui.metrics import MetricsTracker
    from tui.metrics.series import MAX_KEY_CHARS, MAX_KEYS

    t = MetricsTracker()
    many = " - ".join(f"made/up{i}:{i}" for i in range(MAX_KEYS + 2000))
    t.feed_text(f"step:1 - {many} - {'k' * (MAX_KEY_CHARS + 1)}:1\n")
    assert len(t.keys()) == MAX_KEYS and t.keys_dropped == 2001
    t.feed_text("step:2 - made/up1:5 - brand/new:1\n")
    assert t.series("made/up1") == [(1, 1.0), (2, 5.0)] and t.series("brand/new") == []
    assert t.keys_dropped == 2002 and t.last_step == 2
