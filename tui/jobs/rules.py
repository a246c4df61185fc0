"""verl's own config rules, mirrored from verl 0.9.1, plus the ones verl only meets at runtime.

Every Problem names the key the form shows it at and says how to fix it in one line. Sources
(paths inside the installed verl package):

- utils/config.py::validate_config — batch divisibility, ref/rollout log-prob micro-batch,
  KL notice, val_batch_size, val do_sample needs temperature, LoRA rank for vLLM
- workers/config/actor.py — actor micro-batch, loss_agg_mode, mini ≤ train batch, ulysses SP
- workers/config/critic.py — critic micro-batch, mini ≤ train batch
- workers/config/rollout.py::RolloutConfig.__post_init__ — mode, EP, PP, disaggregation
- workers/config/engine.py, optimizer.py — FSDP strategy, LR scheduler
- trainer/ppo/utils.py::need_critic / need_reference_policy — when critic and ref run
- trainer/ppo/core_algos.py — advantage estimators, policy losses, KL estimators
- workers/rollout/base.py::_ROLLOUT_REGISTRY — rollout engines
- workers/engine_workers.py, workers/rollout/replica.py — rollout world size vs GPUs
- trainer/ppo/v1/trainer_base.py, trainer_separate_async.py — resume, pools, async mode
- single_controller/ray/base.py — one STRICT_PACK placement group per node, {CPU: 3, GPU: 1}
- ray/_private/ray_constants.py::DASHBOARD_CLIENT_MAX_SIZE — the jobs API's 100 MiB upload
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
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
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")
# trainer/ppo/core_algos.py::AdvantageEstimator (custom ones can be registered: a warning)
ADV_ESTIMATORS = ("gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
                  "rloo", "opo", "grpo_passk", "gpg", "rloo_vectorized", "grpo_vectorized",
                  "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo")
# trainer/ppo/core_algos.py @register_policy_loss(...)
POLICY_LOSSES = ("vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov",
                 "geo_mean", "dro", "cispo", "bypass_mode")
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
PLACEHOLDERS = {f"{MODEL}.path": "~/models/deepseek-llm-7b-chat",
                "data.train_files": "~/data/rlhf/gsm8k/train.parquet",
                "data.val_files": "~/data/rlhf/gsm8k/test.parquet"}
# The Jobs API's aiohttp body limit (ray/_private/ray_constants.py DASHBOARD_CLIENT_MAX_SIZE).
RAY_UPLOAD_LIMIT = 100 * 1024**2
# verl/single_controller/ray/base.py: ResourcePoolManager.max_colocate_count CPUs per bundle
CPUS_PER_GPU = 3
COMMON_EXCLUDES = (".git", ".venv", "__pycache__", "checkpoints", "outputs", "wandb", "*.parquet",
                   "*.safetensors", "*.pt")
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
            self.problems.append(Problem(key, f"must be {what}, not {self.get(key)!r}"))

    def as_int(self, key: str, default: int | None = None) -> int | None:
        v = self.get(key, default)
        if v is None or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        self._fail(key, "an integer")
        return None

    def as_num(self, key: str, default: float | None = None) -> float | None:
        v = self.get(key, default)
        if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
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
        out.append(Problem(new, f"the {who}'s micro-batch per GPU is required while "
                                "actor.use_dynamic_bsz is off: set it (e.g. 8)"))
    elif a is not None and b is not None:
        out.append(Problem(old, f"both {old.rpartition('.')[2]} and {new.rpartition('.')[2]} are "
                                f"set: remove {old} (deprecated; keep the _per_gpu one)"))


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


# -- verl's static rules -------------------------------------------------------------------


def _batch_rules(c: _Cfg, out: list[Problem], n: int) -> None:
    tbs = c.as_int("data.train_batch_size")
    rollout_n = c.as_int(f"{R}.n", 1) or 1
    dyn = c.as_bool(f"{A}.use_dynamic_bsz")
    strategy = c.as_str(f"{A}.strategy")
    if tbs is None:
        return
    if tbs < 1:
        out.append(Problem("data.train_batch_size", "must be ≥ 1"))
        return
    if not dyn:
        # utils/config.py::validate_config step 1
        if strategy == "megatron":
            tp, pp = c.as_int(f"{A}.megatron.tensor_model_parallel_size", 1) or 1, \
                c.as_int(f"{A}.megatron.pipeline_model_parallel_size", 1) or 1
            cp = c.as_int(f"{A}.megatron.context_parallel_size", 1) or 1
            if n % (tp * pp * cp):
                out.append(Problem(f"{A}.megatron.tensor_model_parallel_size",
                                   f"{n} GPUs are not divisible by TP×PP×CP = {tp * pp * cp}"))
                return
            minimal = n // (tp * pp * cp) * (c.as_int(f"{A}.ppo_micro_batch_size_per_gpu") or 1)
        else:
            minimal = n
        if (tbs * rollout_n) % minimal:
            out.append(Problem("data.train_batch_size",
                               f"train_batch_size × rollout.n = {tbs * rollout_n} must be "
                               f"divisible by {minimal} (nnodes × n_gpus_per_node): e.g. "
                               f"{_next_multiple(tbs, minimal, rollout_n)}"))
        # workers/config/actor.py::ActorConfig.__post_init__ and .validate
        _one_of(c, out, f"{A}.ppo_micro_batch_size", f"{A}.ppo_micro_batch_size_per_gpu", "actor")
        mini = c.as_int(f"{A}.ppo_mini_batch_size")
        if mini is not None and tbs < mini:
            out.append(Problem(f"{A}.ppo_mini_batch_size",
                               f"{mini} is larger than data.train_batch_size ({tbs}): "
                               f"lower it to ≤ {tbs}"))
        micro = c.as_int(f"{A}.ppo_micro_batch_size")
        if micro is not None and mini is not None and micro > 0:
            sp = c.as_int(f"{A}.ulysses_sequence_parallel_size", 1) or 1
            if mini % micro:
                out.append(Problem(f"{A}.ppo_micro_batch_size",
                                   f"ppo_mini_batch_size ({mini}) must be divisible by it "
                                   f"({micro})"))
            if micro * sp < n:
                out.append(Problem(f"{A}.ppo_micro_batch_size",
                                   f"{micro} × ulysses SP {sp} must be ≥ {n} GPUs: use "
                                   f"ppo_micro_batch_size_per_gpu instead"))
        # utils/config.py::validate_config, check_mutually_exclusive
        if need_reference_policy(c.cfg):
            _one_of(c, out, f"{REF}.log_prob_micro_batch_size",
                    f"{REF}.log_prob_micro_batch_size_per_gpu", "ref")
        _one_of(c, out, f"{R}.log_prob_micro_batch_size",
                f"{R}.log_prob_micro_batch_size_per_gpu", "rollout")


def _next_multiple(tbs: int, minimal: int, rollout_n: int) -> int:
    step = tbs + 1
    while (step * rollout_n) % minimal:
        step += 1
    return step


def _actor_rules(c: _Cfg, out: list[Problem]) -> None:
    mode = c.as_str(f"{A}.loss_agg_mode")
    if mode is not None and mode not in LOSS_AGG_MODES:
        out.append(Problem(f"{A}.loss_agg_mode",
                           f"{mode!r} is not one of {', '.join(LOSS_AGG_MODES)}"))
    strategy = c.as_str(f"{A}.strategy")
    if c.has(f"{A}.fsdp_config") and strategy not in FSDP_STRATEGIES:
        out.append(Problem(f"{A}.strategy", f"{strategy!r} is not an FSDP strategy "
                                            f"({', '.join(FSDP_STRATEGIES)}); for Megatron "
                                            "compose with model_engine=megatron"))
    # workers/config/actor.py::FSDPActorConfig: SP > 1 needs remove-padding; the deprecated
    # actor key is copied into fsdp_config, so either one turns SP on.
    sp = max(c.as_int(f"{A}.ulysses_sequence_parallel_size", 1) or 1,
             c.as_int(f"{A}.fsdp_config.ulysses_sequence_parallel_size", 1) or 1)
    if sp > 1 and c.has(f"{A}.fsdp_config") and not c.as_bool(f"{MODEL}.use_remove_padding"):
        out.append(Problem(f"{MODEL}.use_remove_padding",
                           f"Ulysses sequence parallel ({sp}) needs use_remove_padding=true"))
    for which in (A, "critic"):
        sched = c.as_str(f"{which}.optim.lr_scheduler_type")
        if sched is not None and c.has(f"{which}.optim.warmup_style") \
                and sched not in LR_SCHEDULERS:
            out.append(Problem(f"{which}.optim.lr_scheduler_type",
                               f"{sched!r} is not one of {', '.join(LR_SCHEDULERS)}"))
        warm = c.get(f"{which}.optim.warmup_style")
        if warm is not None:
            out.append(Problem(f"{which}.optim.warmup_style",
                               "deprecated: set optim.lr_scheduler_type instead"
                               if warm in LR_SCHEDULERS else
                               f"{warm!r} is not constant or cosine; use optim.lr_scheduler_type",
                               "warn" if warm in LR_SCHEDULERS else "error"))
    loss = c.as_str(f"{A}.policy_loss.loss_mode")
    if loss is not None and loss not in POLICY_LOSSES:
        out.append(Problem(f"{A}.policy_loss.loss_mode",
                           f"{loss!r} is not one of verl's policy losses; fine only if your code "
                           "registers it", "warn"))
    if loss == "dro" and not c.get(f"{A}.policy_loss.dro_beta"):
        out.append(Problem(f"{A}.policy_loss.dro_beta", "loss_mode dro needs a positive dro_beta"))
    if c.as_bool(f"{A}.use_kl_loss"):
        _kl_type(c, out, f"{A}.kl_loss_type")
    if c.as_bool("algorithm.use_kl_in_reward"):
        _kl_type(c, out, "algorithm.kl_penalty")
        if c.as_bool(f"{A}.use_kl_loss"):
            out.append(Problem("algorithm.use_kl_in_reward",
                               "both in-reward KL and the actor's KL loss are on: usually you "
                               "want one (GRPO: KL loss)", "warn"))


def _kl_type(c: _Cfg, out: list[Problem], key: str) -> None:
    kind = c.as_str(key)
    if kind is not None and kind.removesuffix("+") not in KL_ESTIMATORS:
        hint = " ('full' is not implemented in verl)" if kind.startswith("full") else ""
        out.append(Problem(key, f"{kind!r} is not one of {', '.join(KL_ESTIMATORS)}{hint}"))


def _critic_rules(c: _Cfg, out: list[Problem]) -> None:
    if not need_critic(c.cfg):
        if c.get("critic.enable") is False and c.get("algorithm.adv_estimator") == "gae":
            out.append(Problem("critic.enable", "gae needs the critic's values: enable it or "
                                                "pick a critic-free estimator (grpo)", "warn"))
        return
    # workers/config/critic.py::CriticConfig.__post_init__ and .validate
    if not c.as_bool("critic.use_dynamic_bsz"):
        _one_of(c, out, "critic.ppo_micro_batch_size", "critic.ppo_micro_batch_size_per_gpu",
                "critic")
        mini = c.as_int("critic.ppo_mini_batch_size")
        micro = c.as_int("critic.ppo_micro_batch_size")
        if micro and mini is not None and mini % micro:
            out.append(Problem("critic.ppo_micro_batch_size",
                               f"critic.ppo_mini_batch_size ({mini}) must be divisible by it"))
        tbs = c.as_int("data.train_batch_size")
        if tbs is not None and mini is not None and tbs < mini:
            out.append(Problem("critic.ppo_mini_batch_size",
                               f"{mini} is larger than data.train_batch_size ({tbs})"))
    if c.get("critic.model.path") == PLACEHOLDERS[f"{MODEL}.path"]:
        out.append(Problem("critic.model.path", "still verl's placeholder: set the critic's "
                                                "model (usually the actor's)", "warn"))


def _rollout_rules(c: _Cfg, out: list[Problem], n: int) -> None:
    name = c.as_str(f"{R}.name")
    if name is None or name == "???":
        out.append(Problem(f"{R}.name", f"required: set it to {' or '.join(ROLLOUT_NAMES)}"))
    elif name == "hf":
        out.append(Problem(f"{R}.name", "the hf rollout is gone from verl: use vllm or sglang"))
    elif name not in ROLLOUT_NAMES:
        out.append(Problem(f"{R}.name", f"{name!r} is not one of {', '.join(ROLLOUT_NAMES)}"))
    mode = c.as_str(f"{R}.mode")
    if mode == "sync":
        out.append(Problem(f"{R}.mode", "sync rollout was removed: set it to async or drop it"))
    elif mode not in (None, "async"):
        out.append(Problem(f"{R}.mode", f"{mode!r}: only async is supported", "warn"))
    tp = c.as_int(f"{R}.tensor_model_parallel_size", 1) or 1
    dp = c.as_int(f"{R}.data_parallel_size", 1) or 1
    pp = c.as_int(f"{R}.pipeline_model_parallel_size", 1) or 1
    ep = c.as_int(f"{R}.expert_parallel_size", 1) or 1
    if pp > 1:
        out.append(Problem(f"{R}.pipeline_model_parallel_size",
                           f"{name} rollout does not implement pipeline parallel > 1: set it to 1"))
    if name != "trtllm" and ep > 1 and ep != tp * dp:
        out.append(Problem(f"{R}.expert_parallel_size",
                           f"must equal tensor_model_parallel_size × data_parallel_size "
                           f"({tp * dp})"))
    if c.as_bool(f"{R}.disaggregation.enabled") and name not in ("sglang", "vllm"):
        out.append(Problem(f"{R}.disaggregation.enabled", "needs rollout.name sglang or vllm"))
    # workers/engine_workers.py: the training world must split into whole rollout replicas
    replica = tp * dp * pp
    if replica < 1:
        out.append(Problem(f"{R}.tensor_model_parallel_size", "must be ≥ 1"))
        return
    if n % replica:
        out.append(Problem(f"{R}.tensor_model_parallel_size",
                           f"{n} GPUs (nnodes × n_gpus_per_node) are not divisible by rollout "
                           f"TP×DP×PP = {replica}: pick a divisor of {n}"))
    per_node = c.as_int(f"{R}.n_gpus_per_node") or c.as_int("trainer.n_gpus_per_node") or 1
    if replica % min(per_node, replica):  # workers/rollout/replica.py
        out.append(Problem(f"{R}.tensor_model_parallel_size",
                           f"a rollout replica of {replica} GPUs spans nodes: it must be a "
                           f"multiple of {per_node} GPUs per node"))
    # utils/config.py::validate_config checks the training temperature here, not val_kwargs'
    if c.as_bool(f"{R}.val_kwargs.do_sample"):
        temp = c.as_num(f"{R}.temperature")
        if temp is not None and temp <= 0:
            out.append(Problem(f"{R}.temperature",
                               "must be > 0 when val_kwargs.do_sample is true"))
        vtemp = c.as_num(f"{R}.val_kwargs.temperature")
        if vtemp is not None and vtemp <= 0:
            out.append(Problem(f"{R}.val_kwargs.temperature",
                               "0 samples greedily although val_kwargs.do_sample is true: set "
                               "it > 0 (e.g. 0.6)", "warn"))
    lora = c.get(f"{MODEL}.lora.rank", 0) or 0
    if isinstance(lora, int) and lora <= 0:
        lora = c.get(f"{MODEL}.lora_rank", 0) or 0
    if isinstance(lora, int) and lora > 512 and name == "vllm" \
            and not c.as_bool(f"{MODEL}.lora.merge"):
        out.append(Problem(f"{MODEL}.lora_rank", f"vLLM serves LoRA ranks up to 512, not {lora}"))


def _algorithm_rules(c: _Cfg, out: list[Problem]) -> None:
    est = c.as_str("algorithm.adv_estimator")
    if est is not None and est not in ADV_ESTIMATORS:
        out.append(Problem("algorithm.adv_estimator",
                           f"{est!r} is not one of verl's estimators; fine only if your code "
                           "registers it", "warn"))
    if c.as_bool("algorithm.filter_groups.enable") and not c.get("algorithm.filter_groups.metric"):
        out.append(Problem("algorithm.filter_groups.metric",
                           "group filtering is on: name the metric (e.g. acc)"))


def _trainer_rules(c: _Cfg, out: list[Problem]) -> None:
    mode = c.as_str("trainer.resume_mode")
    if mode is not None and mode not in RESUME_MODES:
        out.append(Problem("trainer.resume_mode", f"{mode!r} is not one of "
                                                  f"{', '.join(RESUME_MODES)}"))
    if mode == "resume_path":
        path = c.get("trainer.resume_from_path")
        if not isinstance(path, str) or "global_step_" not in path:
            out.append(Problem("trainer.resume_from_path",
                               "resume_path needs a …/global_step_N checkpoint folder here"))
    if c.get("data.val_batch_size") is not None:
        out.append(Problem("data.val_batch_size", "deprecated and ignored: validation goes to "
                                                  "the engine as one batch", "warn"))
    for key, value in PLACEHOLDERS.items():
        if c.get(key) == value:
            out.append(Problem(key, "still verl's placeholder default: set your own", "warn"))
    if c.as_str("trainer.v1.trainer_mode") == "separate_async":
        tbs, mini = c.as_int("data.train_batch_size"), c.as_int(f"{A}.ppo_mini_batch_size")
        step = c.as_int("trainer.v1.separate_async.parameter_sync_step")
        if tbs is not None and mini is not None and step is not None and tbs != step * mini:
            out.append(Problem("trainer.v1.separate_async.parameter_sync_step",
                               f"separate_async needs train_batch_size = parameter_sync_step × "
                               f"ppo_mini_batch_size ({step} × {mini} ≠ {tbs})"))
        if not (c.as_int(f"{R}.nnodes") or 0) > 0:
            out.append(Problem(f"{R}.nnodes", "separate_async needs a standalone rollout pool: "
                                              "set rollout.nnodes > 0"))
        if c.get(f"{R}.checkpoint_engine.backend") == "naive":
            out.append(Problem(f"{R}.checkpoint_engine.backend",
                               "separate_async needs nccl, nixl or another non-naive backend"))
    for pool in ("reward.reward_model", "distillation"):
        if pool == "reward.reward_model" and not c.as_bool(f"{pool}.enable_resource_pool"):
            continue
        if pool == "distillation" and not c.as_bool(f"{pool}.enabled"):
            continue
        for k in ("nnodes", "n_gpus_per_node"):
            if not (c.as_int(f"{pool}.{k}") or 0) > 0:
                out.append(Problem(f"{pool}.{k}", "its own resource pool needs this > 0"))
    legacy = [k for k in ("custom_reward_function", "reward_model", "sandbox_fusion")
              if _any_set(c.get(k))]
    for k in legacy:
        out.append(Problem(k, f"legacy block: main_ppo in verl 0.9.1 ignores it; set "
                              f"reward.{'reward_model' if k == 'reward_model' else k} instead",
                           "warn"))


def _any_set(node: Any) -> bool:
    if isinstance(node, Mapping):
        return any(_any_set(v) for v in node.values())
    return node is not None


def _extra_pool_gpus(c: _Cfg) -> int:
    total = 0
    if c.as_bool("reward.reward_model.enable_resource_pool"):
        total += (c.as_int("reward.reward_model.nnodes") or 0) * \
            (c.as_int("reward.reward_model.n_gpus_per_node") or 0)
    if c.as_bool("distillation.enabled"):
        total += (c.as_int("distillation.nnodes") or 0) * \
            (c.as_int("distillation.n_gpus_per_node") or 0)
    return total


# -- runtime rules -------------------------------------------------------------------------


def _cluster_rules(c: _Cfg, out: list[Problem], cluster: ClusterResources, nnodes: int,
                   per_node: int) -> None:
    need = nnodes * per_node + _extra_pool_gpus(c)
    have = cluster.total_gpus
    if have < need:
        out.append(Problem("trainer.nnodes",
                           f"needs {need} GPUs but Ray sees {have:g} on "
                           f"{_n(len(cluster.nodes), 'node')}: lower trainer.nnodes / "
                           "n_gpus_per_node or bring nodes up"))
        return
    # One STRICT_PACK placement group per node: n_gpus_per_node bundles of {CPU: 3, GPU: 1}.
    fits = 0
    short: list[str] = []
    for node in cluster.nodes:
        groups = min(int(node.gpus // per_node), int(node.cpus // (CPUS_PER_GPU * per_node)))
        fits += groups
        if groups == 0 and node.gpus > 0:
            why = f"{node.gpus:g} GPUs" if node.gpus < per_node else f"{node.cpus:g} CPUs"
            short.append(f"{node.host} ({why})")
    if fits < nnodes:
        need_cpu = CPUS_PER_GPU * per_node
        out.append(Problem("trainer.n_gpus_per_node",
                           f"needs {_n(nnodes, 'node')} with ≥ {per_node} GPUs and ≥ {need_cpu} "
                           f"CPUs each (verl packs {CPUS_PER_GPU} CPUs per GPU), {fits} "
                           f"{'has' if fits == 1 else 'have'} them"
                           + (f"; short: {', '.join(short)}" if short else "")))


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


# Where a job's relative paths resolve: Ray runs the entrypoint and every worker in the
# working_dir package it unpacked on that node, else in the directory Ray was started in.
RAY_WORKING_DIR_COPY = "/tmp/ray/session_*/runtime_resources/working_dir_files/_ray_pkg_*"


def checkpoint_location(path: str, working_dir: str | None) -> tuple[str, bool]:
    """(where a relative trainer.default_local_dir lands for this submission, whether that
    place disappears). verl passes the path to the driver and every worker unchanged (no ~
    expansion), and each resolves it against its own working directory."""
    if working_dir:
        return f"{RAY_WORKING_DIR_COPY}/{path}", True
    return f"<where `ray start` ran>/{path} (for `verl-tui up`: ~/{path})", False


def _dir_rules(c: _Cfg, out: list[Problem], working_dir: str | None) -> None:
    path = c.as_str("trainer.default_local_dir")
    if path is None or os.path.isabs(path):
        return
    saves = (c.as_int("trainer.save_freq") or -1) > 0
    where, vanishes = checkpoint_location(path, working_dir)
    tilde = "; ~ is not expanded by verl: it is a folder named '~'" if path.startswith("~") \
        else ""
    if vanishes:
        # The working_dir copy is Ray's: deleted with the package, so saved steps are lost and
        # a later run cannot resume from them.
        out.append(Problem("trainer.default_local_dir",
                           f"relative: with a working_dir it lands in Ray's copy on each node "
                           f"({where}), deleted with it{tilde}; use an absolute path (e.g. "
                           "/data/checkpoints/…)" + ("" if saves else
                                                     " (nothing is saved while save_freq ≤ 0)"),
                           "error" if saves else "warn"))
        return
    out.append(Problem("trainer.default_local_dir",
                       f"relative: lands in the job's working directory on each node, {where}"
                       f"{tilde}; each node keeps its own ranks' shards there", "warn"))


def _working_dir_rules(out: list[Problem], size: int, excludes: Sequence[str]) -> None:
    mib = size / 1024**2
    missing = [e for e in COMMON_EXCLUDES if e not in excludes]
    hint = f": add excludes such as {', '.join(missing[:5])}" if missing else \
        ": exclude the large folders it holds"
    if size >= RAY_UPLOAD_LIMIT:
        out.append(Problem("runtime_env.working_dir",
                           f"{mib:.0f} MiB is over Ray's 100 MiB upload limit{hint}"))
    elif size >= RAY_UPLOAD_LIMIT // 2:
        out.append(Problem("runtime_env.working_dir",
                           f"{mib:.0f} MiB is close to Ray's 100 MiB upload limit{hint}", "warn"))


def check_rules(cfg: Mapping[str, Any], cluster: ClusterResources | None = None, *,
                working_dir_bytes: int | None = None, post_mortem: bool = False,
                excludes: Sequence[str] = (), working_dir: str | None = None) -> list[Problem]:
    """verl's rules on a composed config (plain dicts), and the runtime ones against the
    cluster when given. Errors first, then warnings; each names its key."""
    out: list[Problem] = []
    c = _Cfg(cfg, out)
    nnodes, per_node = c.as_int("trainer.nnodes"), c.as_int("trainer.n_gpus_per_node")
    if nnodes is not None and nnodes < 1:
        out.append(Problem("trainer.nnodes", "must be ≥ 1"))
    if per_node is not None and per_node < 1:
        out.append(Problem("trainer.n_gpus_per_node", "must be ≥ 1"))
    n = (nnodes or 0) * (per_node or 0)
    if n >= 1:
        _batch_rules(c, out, n)
        _rollout_rules(c, out, n)
        if cluster is not None and nnodes and per_node:
            _cluster_rules(c, out, cluster, nnodes, per_node)
    _actor_rules(c, out)
    _critic_rules(c, out)
    _algorithm_rules(c, out)
    _trainer_rules(c, out)
    _dir_rules(c, out, working_dir)
    if working_dir_bytes is not None:
        _working_dir_rules(out, working_dir_bytes, excludes)
    if post_mortem and cluster is not None and cluster.hosts_without_debugpy:
        hosts = ", ".join(cluster.hosts_without_debugpy)
        out.append(Problem(POST_MORTEM_KEY, f"post-mortem debugging needs debugpy>=1.8 on every "
                                            f"host; missing on {hosts}: pip install debugpy there"))
    return sorted(out, key=lambda p: p.level != "error")


_VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def check_runtime_env(env_vars: Mapping[str, str], cfg: Mapping[str, Any] | None = None
                      ) -> list[Problem]:
    """The job's env_vars against what verl's workers accept
    (single_controller/base/worker.py::_setup_env_cuda_visible_devices)."""
    out: list[Problem] = []
    key = "runtime_env.env_vars"
    if env_vars.get("ROCR_VISIBLE_DEVICES") and any(env_vars.get(v) for v in _VISIBLE):
        out.append(Problem(f"{key}.ROCR_VISIBLE_DEVICES",
                           "verl refuses ROCR_VISIBLE_DEVICES together with HIP/CUDA_VISIBLE_"
                           "DEVICES: keep only HIP_VISIBLE_DEVICES"))
    hip, cuda = env_vars.get("HIP_VISIBLE_DEVICES"), env_vars.get("CUDA_VISIBLE_DEVICES")
    if hip and cuda and hip != cuda:
        out.append(Problem(f"{key}.HIP_VISIBLE_DEVICES",
                           "differs from CUDA_VISIBLE_DEVICES: verl requires the same value"))
    if cfg is not None:
        logger = _Cfg(cfg, []).get("trainer.logger")
        loggers = [logger] if isinstance(logger, str) else list(logger or [])
        if "wandb" in loggers and not env_vars.get("WANDB_API_KEY") \
                and not env_vars.get("WANDB_MODE"):
            out.append(Problem("trainer.logger",
                               "wandb needs WANDB_API_KEY in runtime_env.env_vars (or `wandb "
                               "login` on every host), or drop wandb from the loggers", "warn"))
    return out


def is_truthy(value: str | None) -> bool:
    if not value:
        return False
    return re.fullmatch(r"(?i)0|false|no|off|", value.strip()) is None
