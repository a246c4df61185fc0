"""Training-health rules over a run's metric series (plain Python): is the run still learning?

Checked on every new step (the supervisor's health duty, tui/supervisor/health_duty.py):

- nonfinite: any value of the step is NaN or ±Inf (verl's file logger writes them as null);
- kl: KL (actor/kl_loss, actor/ppo_kl, critic/kl) above a bound;
- entropy: actor/entropy collapsed below a share of its early level;
- reward: the score mean (critic/score/mean, val-core/*/reward|acc/*) fell a share below the
  run's best (means over a few steps, so one noisy step does not count);
- grad_norm: actor/ or critic/grad_norm above a factor × the rolling median before it;
- clip_ratio: response_length/clip_ratio above a bound (answers cut at the maximum length);
- throughput: perf/throughput below a share of its rolling median.

Bounds come from tui/config/health.HealthOptions (a profile's `health:` block).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.config.health import HealthOptions
from tui.metrics.series import MetricsTracker

KL_KEYS = ("actor/kl_loss", "actor/ppo_kl", "critic/kl")
ENTROPY_KEY = "actor/entropy"
SCORE_KEY = "critic/score/mean"
GRAD_KEYS = ("actor/grad_norm", "critic/grad_norm")
CLIP_KEY = "response_length/clip_ratio"
THROUGHPUT_KEY = "perf/throughput"
NAMED = 4  # non-finite keys named in one message
MAX_ALERTS = 200  # kept per job (the newest)

Points = list[tuple[int, float]]


def reward_keys(keys: list[str]) -> list[str]:
    """The score keys a reward collapse is judged on: the training score and validation
    scores (verl: val-core/<data source>/<reward|acc>/mean@N)."""
    out = [SCORE_KEY] if SCORE_KEY in keys else []
    out += [
        k for k in keys if k.startswith("val-core/") and ("/reward/mean" in k or "/acc/mean" in k)
    ]
    return out


def fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else str(v)


@dataclass(frozen=True)
class Alert:
    """One rule that fired at one step on one key."""

    rule: str
    step: int
    key: str
    value: float
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "step": self.step,
            "key": self.key,
            "value": self.value if math.isfinite(self.value) else None,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Alert | None:
        if not isinstance(doc, dict):
            return None
        rule, step, key, msg = doc.get("rule"), doc.get("step"), doc.get("key"), doc.get("message")
        value = doc.get("value")
        if not (isinstance(rule, str) and isinstance(key, str) and isinstance(msg, str)):
            return None
        if isinstance(step, bool) or not isinstance(step, int):
            return None
        v = (
            float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else math.nan
        )
        return cls(rule, step, key, v, msg)


def _finite(points: Points) -> Points:
    return [(s, v) for s, v in points if math.isfinite(v)]


def _median_before(points: Points, i: int, window: int) -> tuple[float, int]:
    prior = [v for _s, v in points[max(0, i - window) : i] if math.isfinite(v)]
    return (statistics.median(prior) if prior else math.nan), len(prior)


def _at(points: Points, steps: set[int]) -> Iterator[tuple[int, int, float]]:
    """(index, step, value) of the points at the given steps."""
    for i, (s, v) in enumerate(points):
        if s in steps:
            yield i, s, v


def check_steps(tracker: MetricsTracker, opts: HealthOptions, steps: set[int]) -> list[Alert]:
    """Every alert at the given steps (each judged on the series up to it), by step."""
    if not opts.enabled or not steps:
        return []
    out: list[Alert] = []
    keys = tracker.keys()
    series: Callable[[str], Points] = tracker.series
    if opts.nonfinite.enabled:
        for step in sorted(steps):
            bad = [k for k, v in tracker.row(step).items() if not math.isfinite(v)]
            if bad:
                named = ", ".join(f"{k}={fmt(tracker.row(step)[k])}" for k in bad[:NAMED])
                more = f" and {len(bad) - NAMED} more" if len(bad) > NAMED else ""
                out.append(
                    Alert(
                        "nonfinite",
                        step,
                        bad[0],
                        tracker.row(step)[bad[0]],
                        f"non-finite at step {step}: {named}{more}",
                    )
                )
    if opts.kl.enabled:
        for key in (k for k in KL_KEYS if k in keys):
            for _i, s, v in _at(series(key), steps):
                if math.isfinite(v) and v > opts.kl.max:
                    out.append(
                        Alert(
                            "kl", s, key, v, f"{key} {fmt(v)} above {fmt(opts.kl.max)} at step {s}"
                        )
                    )
    if opts.clip_ratio.enabled and CLIP_KEY in keys:
        for _i, s, v in _at(series(CLIP_KEY), steps):
            if math.isfinite(v) and v > opts.clip_ratio.max:
                out.append(
                    Alert(
                        "clip_ratio",
                        s,
                        CLIP_KEY,
                        v,
                        f"{fmt(v * 100)} % of responses hit the maximum length at step {s} "
                        f"(bound {fmt(opts.clip_ratio.max * 100)} %)",
                    )
                )
    if opts.entropy.enabled and ENTROPY_KEY in keys:
        out += _entropy(series(ENTROPY_KEY), opts, steps)
    if opts.reward.enabled:
        for key in reward_keys(keys):
            out += _reward(key, series(key), opts, steps)
    if opts.grad_norm.enabled:
        rule = opts.grad_norm
        for key in (k for k in GRAD_KEYS if k in keys):
            pts = series(key)
            for i, s, v in _at(pts, steps):
                med, n = _median_before(pts, i, rule.window)
                if math.isfinite(v) and n >= rule.min_points and med > 0 and v > rule.factor * med:
                    out.append(
                        Alert(
                            "grad_norm",
                            s,
                            key,
                            v,
                            f"{key} {fmt(v)} is {fmt(v / med)}× its median {fmt(med)} "
                            f"of the last {n} steps at step {s}",
                        )
                    )
    if opts.throughput.enabled and THROUGHPUT_KEY in keys:
        rule_t = opts.throughput
        pts = series(THROUGHPUT_KEY)
        for i, s, v in _at(pts, steps):
            med, n = _median_before(pts, i, rule_t.window)
            if (
                math.isfinite(v)
                and n >= rule_t.min_points
                and med > 0
                and v < rule_t.drop_ratio * med
            ):
                out.append(
                    Alert(
                        "throughput",
                        s,
                        THROUGHPUT_KEY,
                        v,
                        f"throughput {fmt(v)} fell below {fmt(rule_t.drop_ratio)}× its "
                        f"median {fmt(med)} at step {s}",
                    )
                )
    return sorted(out, key=lambda a: a.step)


def _entropy(points: Points, opts: HealthOptions, steps: set[int]) -> list[Alert]:
    rule = opts.entropy
    finite = _finite(points)
    if len(finite) <= rule.baseline_steps:
        return []
    early = max(v for _s, v in finite[: rule.baseline_steps])
    if early <= 0:
        return []
    floor = rule.min_ratio * early
    out = []
    for i, s, v in _at(finite, steps):
        if i >= rule.baseline_steps and v < floor:
            out.append(
                Alert(
                    "entropy",
                    s,
                    ENTROPY_KEY,
                    v,
                    f"entropy collapsed: {fmt(v)} below {fmt(rule.min_ratio)}× its "
                    f"early {fmt(early)} at step {s}",
                )
            )
    return out


def _reward(key: str, points: Points, opts: HealthOptions, steps: set[int]) -> list[Alert]:
    rule = opts.reward
    finite = _finite(points)
    if len(finite) < max(rule.min_steps, rule.smooth):
        return []
    values = [v for _s, v in finite]
    k = rule.smooth
    means = [sum(values[j - k + 1 : j + 1]) / k for j in range(k - 1, len(values))]
    out = []
    best = -math.inf
    for j, m in enumerate(means):
        i = j + k - 1
        s = finite[i][0]
        if i + 1 >= rule.min_steps and s in steps and math.isfinite(best):
            scale = max(abs(best), best - min(means[: j + 1]))
            if scale > 0 and best - m >= rule.drop_ratio * scale:
                out.append(
                    Alert(
                        "reward",
                        s,
                        key,
                        finite[i][1],
                        f"{key} collapsed: mean {fmt(m)} of the last {k} steps is "
                        f"{fmt((best - m) / scale * 100)} % below the run's best {fmt(best)} "
                        f"at step {s}",
                    )
                )
        best = max(best, m)
    return out


@dataclass
class HealthWatch:
    """One run's health, step after step: which steps were checked, the alerts so far."""

    checked: set[int] = field(default_factory=set)
    alerts: list[Alert] = field(default_factory=list)

    def check(self, tracker: MetricsTracker, opts: HealthOptions) -> list[Alert]:
        """The alerts of the steps not checked before (a step logged again is checked again
        when its values changed: the tracker's rows are the truth)."""
        steps = set(tracker.steps()) - self.checked
        if not steps:
            return []
        new = check_steps(tracker, opts, steps)
        self.checked |= steps
        self.alerts = (self.alerts + new)[-MAX_ALERTS:]
        return new


def series_alerts(
    series: Mapping[str, Sequence[tuple[int, float]]], opts: HealthOptions | None = None
) -> list[Alert]:
    """Every alert of a whole run given as series (an archived run: compare)."""
    rows: dict[int, dict[str, float]] = {}
    for key, points in series.items():
        for step, value in points:
            rows.setdefault(step, {})[key] = value
    tracker = MetricsTracker()
    tracker.add_rows(sorted(rows.items()))
    return check_steps(tracker, opts or HealthOptions(), set(tracker.steps()))
