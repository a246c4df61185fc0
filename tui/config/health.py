"""A profile's `health:` block: the training-health rules the supervisor checks on every new step
of a running job (tui/metrics/health.py), each with its bound and what an alert does. Defaults
fit verl's GRPO and PPO presets; a profile names only what it changes:

    health:
      kl: {max: 0.5, on_alert: stop}     # KL (actor/kl_loss, actor/ppo_kl, critic/kl) above max
      entropy: {min_ratio: 0.05}         # actor/entropy below this × its early level
      reward: {drop_ratio: 0.5}          # score mean fell this share below the run's best
      grad_norm: {factor: 10}            # × the rolling median of the last `window` steps
      clip_ratio: {max: 0.2}             # response_length/clip_ratio: answers cut at the max
      throughput: {drop_ratio: 0.3}      # perf/throughput below this × its rolling median
      nonfinite: {on_alert: notify}      # any NaN/Inf value
      enabled: false                     # no health checks for this profile's jobs
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OnAlert = Literal["notify", "stop"]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    on_alert: OnAlert = "notify"  # stop: the supervisor stops the job when the rule fires


class NonFiniteRule(_Rule):
    pass


class BoundRule(_Rule):
    max: float = Field(gt=0, le=1e12)


class KlRule(BoundRule):
    max: float = Field(default=1.0, gt=0, le=1e12)


class ClipRule(BoundRule):
    max: float = Field(default=0.2, gt=0, le=1.0)


class EntropyRule(_Rule):
    min_ratio: float = Field(default=0.1, gt=0, lt=1.0, description="× the early level")
    baseline_steps: int = Field(default=5, ge=1, le=10_000)


class RewardRule(_Rule):
    drop_ratio: float = Field(default=0.5, gt=0, le=1.0, description="share below the best")
    smooth: int = Field(default=3, ge=1, le=1000, description="steps averaged")
    min_steps: int = Field(default=5, ge=1, le=100_000)


class SpikeRule(_Rule):
    factor: float = Field(default=10.0, gt=1.0, le=1e6, description="× the rolling median")
    window: int = Field(default=20, ge=3, le=10_000)
    min_points: int = Field(default=5, ge=2, le=10_000)


class DropRule(_Rule):
    drop_ratio: float = Field(default=0.3, gt=0, lt=1.0, description="× the rolling median")
    window: int = Field(default=10, ge=3, le=10_000)
    min_points: int = Field(default=5, ge=2, le=10_000)


class HealthOptions(BaseModel):
    """Every rule with its defaults resolved (a profile's `health:` block parsed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    nonfinite: NonFiniteRule = NonFiniteRule()
    kl: KlRule = KlRule()
    entropy: EntropyRule = EntropyRule()
    reward: RewardRule = RewardRule()
    grad_norm: SpikeRule = SpikeRule()
    clip_ratio: ClipRule = ClipRule()
    throughput: DropRule = DropRule()

    def stop_on(self, rule: str) -> bool:
        r = getattr(self, rule, None)
        return isinstance(r, _Rule) and r.on_alert == "stop"


RULES = ("nonfinite", "kl", "entropy", "reward", "grad_norm", "clip_ratio", "throughput")
