"""What the config rules share: verl's key prefixes and choice sets, the Problem a rule
reports, the cluster's shape, and _Cfg (typed reads of a composed config). See jobs/rules.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Level = Literal["error", "warn"]

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
MODEL = "actor_rollout_ref.model"

# workers/rollout/base.py::_ROLLOUT_REGISTRY (only "async" mode is registered)
ROLLOUT_NAMES = ("vllm", "sglang", "trtllm")
# workers/config/actor.py::ActorConfig.__post_init__ valid_loss_agg_modes
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
# trainer/ppo/core_algos.py::AdvantageEstimator (custom ones can be registered: a warning)
ADV_ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "gdpo",
)
# trainer/ppo/core_algos.py @register_policy_loss(...)
POLICY_LOSSES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
)
# trainer/ppo/core_algos.py::kl_penalty_forward ("full" raises NotImplementedError); a trailing
# "+" adds the straight-through k2 gradient (kl_penalty)
KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
# workers/config/engine.py::FSDPEngineConfig.__post_init__
FSDP_STRATEGIES = ("fsdp", "fsdp2", "fsdp_turbo")
# workers/config/optimizer.py::FSDPOptimizerConfig.__post_init__
LR_SCHEDULERS = ("constant", "cosine")
# trainer/ppo/v1/trainer_base.py::_load_checkpoint
RESUME_MODES = ("auto", "disable", "resume_path")
# hf_model.yaml / legacy_data.yaml placeholders that exist on nobody's disk
PLACEHOLDERS = {
    f"{MODEL}.path": "~/models/deepseek-llm-7b-chat",
    "data.train_files": "~/data/rlhf/gsm8k/train.parquet",
    "data.val_files": "~/data/rlhf/gsm8k/test.parquet",
}
# The Jobs API's aiohttp body limit (ray/_private/ray_constants.py DASHBOARD_CLIENT_MAX_SIZE).
RAY_UPLOAD_LIMIT = 100 * 1024**2
# verl/single_controller/ray/base.py: ResourcePoolManager.max_colocate_count CPUs per bundle
CPUS_PER_GPU = 3
COMMON_EXCLUDES = (
    ".git",
    ".venv",
    "__pycache__",
    "checkpoints",
    "outputs",
    "wandb",
    "*.parquet",
    "*.safetensors",
    "*.pt",
)
POST_MORTEM_KEY = "runtime_env.env_vars.RAY_DEBUG_POST_MORTEM"

CHOICES: dict[str, tuple[str, ...]] = {
    f"{R}.name": ROLLOUT_NAMES,
    f"{A}.loss_agg_mode": LOSS_AGG_MODES,
    "algorithm.adv_estimator": ADV_ESTIMATORS,
    f"{A}.policy_loss.loss_mode": POLICY_LOSSES,
    f"{A}.kl_loss_type": KL_ESTIMATORS,
    "algorithm.kl_penalty": KL_ESTIMATORS,
    "trainer.resume_mode": RESUME_MODES,
    f"{A}.strategy": FSDP_STRATEGIES,
}


@dataclass(frozen=True)
class Problem:
    key: str | None  # the dotted key the form shows it at; None: the profile as a whole
    message: str  # what is wrong and how to fix it, one line
    level: Level = "error"

    def __str__(self) -> str:
        return f"{self.key or '-'}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "level": self.level, "message": self.message}


@dataclass(frozen=True)
class NodeResources:
    host: str
    gpus: float
    cpus: float


@dataclass
class ClusterResources:
    nodes: list[NodeResources]
    hosts_without_debugpy: list[str] = field(default_factory=list)

    @property
    def total_gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)


_UNSET = object()
# No verl setting counts past this (GPUs, steps, tokens, bytes of a batch): a larger integer is
# refused naming its key, so no rule computes with it (a product of two 20-digit counts, or
# str() of a 5,000-digit one, which Python refuses).
MAX_INT = 10**15


def int_text(v: int) -> str:
    """An integer as a message shows it: its digits, or how many there are when too many."""
    if abs(v) < 10**30:
        return str(v)
    return f"a number of about {int(v.bit_length() * 0.30103) + 1} digits"


class _Cfg:
    """Reads dotted keys of a composed config; a wrong type becomes a Problem, not a crash."""

    def __init__(self, cfg: Mapping[str, Any], problems: list[Problem]):
        self.cfg = cfg
        self.problems = problems
        self._bad: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        node: Any = self.cfg
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def has(self, key: str) -> bool:
        return self.get(key, _UNSET) is not _UNSET

    def _fail(self, key: str, what: str) -> None:
        if key not in self._bad:
            self._bad.add(key)
            v = self.get(key)
            shown = int_text(v) if isinstance(v, int) else repr(v)
            if len(shown) > 80:
                shown = shown[:79] + "…"
            self.problems.append(Problem(key, f"must be {what}, not {shown}"))

    def as_int(self, key: str, default: int | None = None) -> int | None:
        v = self.get(key, default)
        if v is None:
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            if -MAX_INT <= v <= MAX_INT:
                return v
            self._fail(key, "an integer between -10^15 and 10^15")
            return None
        self._fail(key, "an integer")
        return None

    def as_num(self, key: str, default: float | None = None) -> float | None:
        v = self.get(key, default)
        if v is None:
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(v, int) and not -MAX_INT <= v <= MAX_INT:
                self._fail(key, "a number between -10^15 and 10^15")
                return None
            return v
        self._fail(key, "a number")
        return None

    def as_bool(self, key: str, default: bool = False) -> bool:
        v = self.get(key, default)
        if isinstance(v, bool):
            return v
        if v is None:
            return default
        self._fail(key, "true or false")
        return default

    def as_str(self, key: str, default: str | None = None) -> str | None:
        v = self.get(key, default)
        return v if v is None or isinstance(v, str) else str(v)


def _one_of(c: _Cfg, out: list[Problem], old: str, new: str, who: str) -> None:
    """Exactly one of a deprecated global micro-batch key and its per-GPU successor."""
    a, b = c.get(old), c.get(new)
    if a is None and b is None:
        out.append(
            Problem(
                new,
                f"the {who}'s micro-batch per GPU is required while "
                "actor.use_dynamic_bsz is off: set it (e.g. 8)",
            )
        )
    elif a is not None and b is not None:
        out.append(
            Problem(
                old,
                f"both {old.rpartition('.')[2]} and {new.rpartition('.')[2]} are "
                f"set: remove {old} (deprecated; keep the _per_gpu one)",
            )
        )


def need_critic(cfg: Mapping[str, Any]) -> bool:
    """trainer/ppo/utils.py::need_critic: critic.enable, or null with adv_estimator gae."""
    c = _Cfg(cfg, [])
    enable = c.get("critic.enable")
    if enable is not None:
        return bool(enable)
    return c.get("algorithm.adv_estimator") == "gae"


def need_reference_policy(cfg: Mapping[str, Any]) -> bool:
    """trainer/ppo/utils.py::need_reference_policy: KL in the reward or as a loss."""
    c = _Cfg(cfg, [])
    return bool(c.get("algorithm.use_kl_in_reward")) or bool(c.get(f"{A}.use_kl_loss"))
