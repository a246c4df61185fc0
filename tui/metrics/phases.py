"""Where a step's time goes: verl's ``timing_s/*`` phases per step, their shares of the step,
throughput and MFU, and (given the job's GPU utilization samples) how busy the GPUs were during
each phase. Plain Python over metric series ({key: [(step, value)]}).

verl 0.9.1's trainer (trainer/ppo/ray_trainer.py::fit) times, inside ``step``, in this order:
gen, reward, old_log_prob, ref, values, adv, update_critic, update_actor, save_checkpoint,
update_weights, testing (and dump_rollout_generations when it dumps); ``timing_s/step`` is the
whole step, so what the phases leave of it is "other" (data loading, metrics, the driver).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TIMING = "timing_s/"
STEP = "step"
ORDER = (
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "dump_rollout_generations",
    "save_checkpoint",
    "update_weights",
    "testing",
)
NOT_PHASES = frozenset({STEP, "start_profile", "stop_profile"})
OTHER = "other"
THROUGHPUT_KEY = "perf/throughput"
MFU_PREFIX = "perf/mfu/"
SHOWN = 3  # phases named in the reading line

Series = Mapping[str, Sequence[tuple[int, float]]]


def phase_names(keys: Sequence[str]) -> list[str]:
    """The phases among the keys, in the order verl runs them (unknown ones after, A-Z)."""
    names = {k[len(TIMING) :] for k in keys if k.startswith(TIMING)} - NOT_PHASES
    known = [p for p in ORDER if p in names]
    return known + sorted(names - set(known))


@dataclass
class StepPhases:
    """One step: its seconds per phase, the whole step, and what the phases leave of it."""

    step: int
    total: float
    phases: dict[str, float]

    @property
    def other(self) -> float:
        return max(self.total - sum(self.phases.values()), 0.0)


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v >= 0


def per_step(series: Series) -> list[StepPhases]:
    """Each step that logged timing_s/step, with its phases (non-finite or negative times are
    left out: a gap, not a number)."""
    names = phase_names(list(series))
    totals = {s: v for s, v in series.get(TIMING + STEP, ()) if _finite(v)}
    by_phase = {p: dict(series.get(TIMING + p, ())) for p in names}
    out = []
    for step in sorted(totals):
        phases = {p: by_phase[p][step] for p in names if _finite(by_phase[p].get(step))}
        out.append(StepPhases(step, totals[step], phases))
    return out


@dataclass
class Breakdown:
    """A run's time per phase over its steps (sums, seconds), throughput and MFU means, and
    the GPUs' busy share during each phase where samples were given."""

    steps: int = 0
    total_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # OTHER included
    throughput: float | None = None
    mfu: dict[str, float] = field(default_factory=dict)
    gpu_util: dict[str, float] = field(default_factory=dict)

    def share(self, phase: str) -> float:
        return self.phases.get(phase, 0.0) / self.total_s if self.total_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "total_s": self.total_s,
            "phases": {
                p: {"seconds": s, "share": self.share(p), "gpu_util": self.gpu_util.get(p)}
                for p, s in self.phases.items()
            },
            "throughput": self.throughput,
            "mfu": self.mfu,
            "reading": reading(self),
        }


def _mean(points: Sequence[tuple[int, float]]) -> float | None:
    values = [v for _s, v in points if math.isfinite(v)]
    return sum(values) / len(values) if values else None


def breakdown(series: Series, gpu_util: Mapping[str, float] | None = None) -> Breakdown:
    """The run's breakdown: every step's phases summed (so each share is of the summed step
    time: the shares and OTHER add up to the steps' timing_s/step sum)."""
    b = Breakdown(gpu_util=dict(gpu_util or {}))
    for sp in per_step(series):
        b.steps += 1
        b.total_s += sp.total
        for p, s in sp.phases.items():
            b.phases[p] = b.phases.get(p, 0.0) + s
        b.phases[OTHER] = b.phases.get(OTHER, 0.0) + sp.other
    if not b.phases.get(OTHER):
        b.phases.pop(OTHER, None)
    b.throughput = _mean(series.get(THROUGHPUT_KEY, ()))
    for key, points in series.items():
        if key.startswith(MFU_PREFIX):
            m = _mean(points)
            if m is not None:
                b.mfu[key[len(MFU_PREFIX) :]] = m
    return b


def reading(b: Breakdown) -> str:
    """One line on what dominates: "gen 38 % of the step at 41 % busy; update_actor 44 % at
    93 %; …" (the largest phases first)."""
    if not b.steps or b.total_s <= 0:
        return "no step timings (timing_s/step) logged yet"
    top = sorted(b.phases, key=lambda p: b.phases[p], reverse=True)[:SHOWN]
    parts = []
    for i, p in enumerate(top):
        text = f"{p} {b.share(p) * 100:.0f} %" + (" of the step" if i == 0 else "")
        util = b.gpu_util.get(p)
        if util is not None:
            text += f" at {util:.0f} % busy"
        parts.append(text)
    line = "; ".join(parts)
    line += f" (mean step {b.total_s / b.steps:.3g} s over {b.steps} steps"
    if b.throughput is not None:
        line += f", {b.throughput:.4g} tokens/s/GPU"
    if b.mfu:
        line += ", MFU " + ", ".join(f"{k} {v * 100:.0f} %" for k, v in sorted(b.mfu.items()))
    return line + ")"


def phase_windows(
    steps: Sequence[StepPhases], ended_at: Mapping[int, float]
) -> list[tuple[str, float, float]]:
    """(phase, start, end) wall-clock windows of the steps whose end time is known (when its
    row was written), laid out back from the end in verl's order, OTHER first (the loader)."""
    out = []
    for sp in steps:
        end = ended_at.get(sp.step)
        if end is None:
            continue
        t = end - sp.total
        if sp.other > 0:
            out.append((OTHER, t, t + sp.other))
        t += sp.other
        for p, s in sp.phases.items():
            out.append((p, t, t + s))
            t += s
    return out


def gpu_util_by_phase(
    windows: Sequence[tuple[str, float, float]], samples: Sequence[tuple[float, float]]
) -> dict[str, float]:
    """Mean GPU utilization (%) of the samples (time, util) that fall in each phase's windows;
    a phase without a sample in any of its windows is left out."""
    ordered = sorted((t, u) for t, u in samples if math.isfinite(u))
    times = [t for t, _u in ordered]
    sums: dict[str, tuple[float, int]] = {}
    for phase, start, end in windows:
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        if hi > lo:
            s, n = sums.get(phase, (0.0, 0))
            sums[phase] = (s + sum(u for _t, u in ordered[lo:hi]), n + hi - lo)
    return {p: s / n for p, (s, n) in sums.items()}


class PhaseClock:
    """What a follower of a running job learns over time for gpu_util_by_phase: when each
    step's row first arrived (its end, to the follower's polling), and the job's GPU busy share
    at times. Steps already logged when it first looked have no known end and are left out."""

    def __init__(self, max_samples: int = 20_000) -> None:
        self.ended_at: dict[int, float] = {}
        self._known: set[int] = set()
        self.samples: deque[tuple[float, float]] = deque(maxlen=max_samples)
        self._first = True

    def note_steps(self, steps: Sequence[int], now: float) -> None:
        new = [s for s in steps if s not in self._known]
        self._known.update(new)
        if not self._first:
            for s in new:
                self.ended_at[s] = now
        self._first = False

    def note_util(self, now: float, util: float | None) -> None:
        if util is not None and math.isfinite(util):
            self.samples.append((now, util))

    def gpu_util(self, series: Series) -> dict[str, float]:
        """Mean GPU busy share per phase over the steps whose end is known."""
        if not self.samples or not self.ended_at:
            return {}
        return gpu_util_by_phase(phase_windows(per_step(series), self.ended_at), self.samples)
