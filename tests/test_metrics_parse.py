"""verl console-logger lines → metric series: real formatting, Ray prefixes, ANSI, split
chunks, repeated steps, the total step count, ETA."""

from __future__ import annotations

import ast
import importlib.util
import math
import numbers
import pprint
from pathlib import Path

import numpy as np
import pytest

from tui.metrics import MetricsTracker, parse_metrics_line, parse_total_steps, parse_value

# --- verl's own formatter -------------------------------------------------------------------
# verl/utils/logger/aggregate_logger.py imports torch at the top, so the function is taken out
# of the installed file's source and compiled alone; without verl, a copy of it is used.


def _copied_concat_dict_to_str(dict: dict, step):  # verl 0.9.1, aggregate_logger.py:26
    output = [f"step:{step}"]
    for k, v in dict.items():
        if isinstance(v, numbers.Number):
            output.append(f"{k}:{pprint.pformat(v)}")
    output_str = " - ".join(output)
    return output_str


def _verl_concat_dict_to_str():
    spec = importlib.util.find_spec("verl")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "utils/logger/aggregate_logger.py"
    if not path.exists():
        return None
    tree = ast.parse(path.read_text())
    fn = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "concat_dict_to_str"),
        None,
    )
    if fn is None:
        return None
    scope: dict = {"numbers": numbers, "pprint": pprint}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    return scope["concat_dict_to_str"]


concat_dict_to_str = _verl_concat_dict_to_str() or _copied_concat_dict_to_str

# A verl 0.9.1 PPO/GRPO step (ray_trainer.fit): python floats from .item(), numpy scalars from
# reduce_metrics (np.mean/np.max over the actor's micro-batches), ints for the step counters.
STEP_METRICS = {
    "actor/entropy": 0.4213,
    "actor/pg_loss": np.float64(-0.0123),
    "actor/kl_loss": np.float64(0.00123),
    "actor/ppo_kl": np.float64(1.5e-05),
    "actor/pg_clipfrac": np.float32(0.0625),
    "actor/grad_norm": np.float64(float("nan")),
    "actor/lr": 1e-06,
    "critic/score/mean": 0.625,
    "critic/rewards/mean": 0.625,
    "critic/values/mean": float("nan"),
    "response_length/mean": 512.25,
    "response_length/clip_ratio": 0.0,
    "timing_s/step": 42.5,
    "timing_s/gen": 20.0,
    "perf/throughput": 1234.5,
    "perf/max_memory_allocated_gb": np.float64(float("inf")),
    "training/global_step": 3,
    "training/epoch": np.int64(0),
    "val-core/openai/gsm8k/reward/mean@4": np.float64(0.71),
    "val-aux/openai/gsm8k/reward/best@4/mean": 0.9,
    "flag/used": True,
    "text/not_a_number": "skipped by verl",
}


def verl_line(step: int, metrics: dict | None = None) -> str:
    return concat_dict_to_str(STEP_METRICS if metrics is None else metrics, step=step)


def test_the_formatter_is_verls():
    assert concat_dict_to_str is not _copied_concat_dict_to_str, "verl not installed?"
    sample = {"a": 1, "b": np.float64(0.5), "c": float("nan"), "d": "x"}
    assert concat_dict_to_str(sample, 7) == _copied_concat_dict_to_str(sample, 7)
    # numpy >= 2 writes its scalars with their type: the parser must unwrap them.
    assert concat_dict_to_str(sample, 7) == "step:7 - a:1 - b:np.float64(0.5) - c:nan"


def test_parse_real_verl_line():
    parsed = parse_metrics_line(verl_line(3))
    assert parsed is not None
    step, m = parsed
    assert step == 3
    assert m["actor/entropy"] == 0.4213
    assert m["actor/pg_loss"] == -0.0123
    assert m["actor/kl_loss"] == 0.00123 and m["actor/ppo_kl"] == 1.5e-05
    assert m["actor/pg_clipfrac"] == 0.0625
    assert math.isnan(m["actor/grad_norm"]) and math.isnan(m["critic/values/mean"])
    assert m["perf/max_memory_allocated_gb"] == math.inf
    assert m["actor/lr"] == 1e-06
    assert m["training/global_step"] == 3.0 and m["training/epoch"] == 0.0
    assert m["val-core/openai/gsm8k/reward/mean@4"] == 0.71
    assert m["val-aux/openai/gsm8k/reward/best@4/mean"] == 0.9
    assert m["flag/used"] == 1.0
    assert "text/not_a_number" not in m  # verl drops non-numbers itself
    assert len(m) == len(STEP_METRICS) - 1


@pytest.mark.parametrize(
    "prefix",
    [
        "(TaskRunner pid=1234) ",
        "(TaskRunner pid=1234, ip=10.0.0.2) ",
        "\x1b[36m(TaskRunner pid=1234, ip=10.0.0.2)\x1b[0m ",
        "\x1b[2m\x1b[36m(TaskRunner pid=98)\x1b[0m ",
        "",
        "   ",
    ],
)
def test_ray_prefix_and_ansi(prefix):
    line = prefix + verl_line(12, {"critic/score/mean": 0.5, "timing_s/step": 3.0}) + "\r"
    assert parse_metrics_line(line) == (12, {"critic/score/mean": 0.5, "timing_s/step": 3.0})


def test_ansi_inside_and_ray_dedup_suffix():
    line = (
        "\x1b[36m(TaskRunner pid=1)\x1b[0m step:\x1b[1m4\x1b[0m - a/b:0.5 - c:1"
        " [repeated 2x across cluster]"
    )
    assert parse_metrics_line(line) == (4, {"a/b": 0.5, "c": 1.0})


@pytest.mark.parametrize(
    "line",
    [
        "Total training steps: 200",
        "(TaskRunner pid=1) Setting global step to 40",
        "(TaskRunner pid=1) step: 5 - a:1",  # not verl's format (space after the colon)
        "(TaskRunner pid=1) step:5",  # a step with nothing logged
        "(TaskRunner pid=1) step:5 - ",
        "step:5 - the loss went up, retrying",
        "step:5 - reason: out of memory",  # key with a space, value not a number
        "step:x - a:1",
        "(WorkerDict pid=7) global_step:5 - lr:0.1",  # the line does not start with step:
        "INFO 12:00:01 worker.py:88] step:5 - a:1",
        "(TaskRunner pid=1) Training Progress:   2%|▏         | 4/200 [01:10<57:10, 17.5s/it]",
        "(TaskRunner pid=1) \"Initial validation metrics: {'val-core/x/reward/mean@1': np.float64(0.5)}\"",
        "step:3 - a:one - b:two",
        "",
    ],
)
def test_non_metric_lines(line):
    assert parse_metrics_line(line) is None


def test_odd_keys_and_values():
    line = (
        "step:9 - val-core/lighteval/MATH/acc/maj@16/mean:np.float64(0.25) - k-with-dash:2"
        " - hf:gsm8k/reward:0.5 - big:1e+20 - neg:-inf - half:np.float16(0.5)"
        " - ld:np.longdouble('0.125') - bad:(1+2j) - n:np.int64(-3)"
    )
    step, m = parse_metrics_line(line)
    assert step == 9
    assert m == {
        "val-core/lighteval/MATH/acc/maj@16/mean": 0.25,
        "k-with-dash": 2.0,
        "hf:gsm8k/reward": 0.5,
        "big": 1e20,
        "neg": -math.inf,
        "half": 0.5,
        "ld": 0.125,
        "n": -3.0,
    }


def test_parse_value():
    assert parse_value("np.float64(nan)") != parse_value("np.float64(nan)")  # nan
    assert parse_value("np.int64(3)") == 3.0
    assert parse_value("False") == 0.0
    assert parse_value("tensor(0.5)") is None and parse_value("") is None
    assert parse_value("np.float64(oops)") is None


def test_parse_total_steps():
    assert parse_total_steps("(TaskRunner pid=5) Total training steps: 435") == 435
    assert parse_total_steps("Total training steps: 12,") == 12  # sft_trainer.py
    assert parse_total_steps("INFO:verl.trainer:Total training steps: 7") == 7
    assert parse_total_steps("Total training steps: unknown") is None


# --- the tracker ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def log(*steps: int, prefix: str = "(TaskRunner pid=1234, ip=10.0.0.2) ", **fixed) -> str:
    out = []
    for s in steps:
        metrics = {
            "critic/score/mean": s / 10,
            "timing_s/step": 10.0,
            **fixed,
            "training/global_step": s,
        }
        out.append(prefix + verl_line(s, metrics))
        out.append(f"{prefix}(WorkerDict) vllm: processed {s} prompts")
    return "\n".join(out) + "\n"


def test_tracker_series_keys_latest():
    t = MetricsTracker()
    v0 = t.version
    assert t.feed_text("(TaskRunner pid=1) Total training steps: 100\n" + log(1, 2, 3))
    assert t.version > v0
    assert t.total_steps == 100 and t.last_step == 3
    assert t.series("critic/score/mean") == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert t.keys() == ["critic/score/mean", "timing_s/step", "training/global_step"]
    assert t.latest()["training/global_step"] == 3.0
    assert t.series("nope") == []
    assert t.progress() == pytest.approx(0.03)


def test_chunks_without_metrics_change_nothing():
    t = MetricsTracker()
    v = t.version
    assert not t.feed_text("(WorkerDict pid=2) loading weights\n" * 1000)
    assert not t.feed_text("")
    assert not t.feed_text("no newline yet")
    assert t.version == v and t.keys() == []


def test_line_split_across_chunks():
    text = log(1, 2, 3, 4)
    for size in (1, 7, 50, 333):
        t = MetricsTracker()
        for i in range(0, len(text), size):
            t.feed_text(text[i : i + size])
        assert t.series("critic/score/mean") == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)], size


def test_last_line_without_newline_needs_flush():
    t = MetricsTracker()
    assert not t.feed_text(verl_line(1, {"a": 1.0}))
    assert t.flush()
    assert t.series("a") == [(1, 1.0)]


def test_tqdm_carriage_returns_share_the_line():
    t = MetricsTracker()
    t.feed_text(
        "Training Progress:  0%|  | 0/10\rstep:1 - a:0.5\r\n"
        "step:2 - a:0.75\rTraining Progress: 20%|##| 2/10\n"
    )
    assert t.series("a") == [(1, 0.5), (2, 0.75)]


def test_repeated_step_overwrites():
    t = MetricsTracker()
    t.feed_text(log(1, 2, 3, 4, 5))
    # Resumed from the step-3 checkpoint: steps 4 and 5 are logged again, with new values.
    t.feed_text("(TaskRunner pid=99) " + verl_line(4, {"critic/score/mean": 0.44}) + "\n")
    assert t.last_step == 4  # where the run is now, not the furthest it ever got
    t.feed_text(verl_line(5, {"critic/score/mean": 0.55}) + "\n")
    assert t.series("critic/score/mean") == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.44), (5, 0.55)]
    # Keys the repeated line lacks keep their earlier value for that step.
    assert t.series("timing_s/step")[-1] == (5, 10.0)


def test_steps_arriving_out_of_order_are_sorted():
    t = MetricsTracker()
    t.feed_text(verl_line(5, {"a": 5.0}) + "\n" + verl_line(0, {"a": 0.0}) + "\n")
    assert t.series("a") == [(0, 0.0), (5, 5.0)]


def test_total_steps_log_wins_over_config():
    t = MetricsTracker()
    assert t.total_steps is None and t.progress() is None and t.eta_seconds() is None
    v = t.version
    t.total_steps = 50  # from the job's config
    assert t.total_steps == 50 and t.version > v
    t.feed_text("Total training steps: 435\n")
    assert t.total_steps == 435
    t.total_steps = 60
    assert t.total_steps == 435
    t.total_steps = None
    assert t.total_steps == 435
    # The same total again is not news.
    assert not t.feed_text("(TaskRunner pid=1) Total training steps: 435\n")


def test_eta_from_timing_s_step():
    t = MetricsTracker(clock=Clock())
    t.feed_text("Total training steps: 200\n")
    t.feed_text(log(1, 2, 3))
    for s, secs in ((4, 30.0), (5, 50.0)):
        t.feed_text(verl_line(s, {"timing_s/step": secs}) + "\n")
    # Mean over the recent steps: (10 * 3 + 30 + 50) / 5 = 22 s/step, 195 steps left.
    assert t.step_seconds() == pytest.approx(22.0)
    assert t.eta_seconds() == pytest.approx(195 * 22.0)
    assert t.progress() == pytest.approx(5 / 200)


def test_eta_window_follows_recent_steps():
    t = MetricsTracker(clock=Clock())
    t.total_steps = 1000
    t.feed_text("".join(verl_line(s, {"timing_s/step": 100.0}) + "\n" for s in range(1, 50)))
    t.feed_text("".join(verl_line(s, {"timing_s/step": 10.0}) + "\n" for s in range(50, 80)))
    assert t.step_seconds() == pytest.approx(10.0)


def test_eta_from_wall_clock_without_timing():
    clock = Clock()
    t = MetricsTracker(clock=clock)
    t.total_steps = 10
    t.feed_text(verl_line(1, {"a": 1.0}) + "\n" + verl_line(2, {"a": 1.0}) + "\n")
    assert t.eta_seconds() is None  # a replayed log: both lines came at once
    clock.t += 60
    t.feed_text(verl_line(3, {"a": 1.0}) + "\n")
    clock.t += 120
    t.feed_text(verl_line(5, {"a": 1.0}) + "\n")  # two steps in 120 s
    assert t.step_seconds() == pytest.approx(60.0)
    assert t.eta_seconds() == pytest.approx(5 * 60.0)


def test_eta_done_and_progress_clamped():
    t = MetricsTracker(clock=Clock())
    t.feed_text("Total training steps: 3\n" + log(1, 2, 3))
    assert t.eta_seconds() == 0.0 and t.progress() == 1.0
    t.feed_text(verl_line(4, {"a": 1.0}) + "\n")
    assert t.progress() == 1.0


def test_clear():
    t = MetricsTracker()
    t.feed_text("Total training steps: 3\n" + log(1) + "step:2 - a:")
    v = t.version
    t.clear()
    assert t.keys() == [] and t.last_step is None and t.total_steps is None and t.version > v
    t.feed_text("1\n")  # the half line from before clear() is gone
    assert t.keys() == []


def test_many_chunks_cost_nothing_without_metrics():
    # The prefilter: 200k log lines in 4 kB chunks, no metrics line among them.
    chunk = "(WorkerDict pid=5, ip=10.0.0.3) INFO vllm: Processed prompts 100% 512/512\n" * 55
    t = MetricsTracker()
    for _ in range(200_000 // 55):
        assert not t.feed_text(chunk)
    assert t.metric_lines == 0
