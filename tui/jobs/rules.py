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

Which verl each rule holds for (docs/verl-versions.md): the choice sets (rollout engines and
modes, loss aggregation, FSDP strategies, LR schedulers, KL estimators, policy losses,
estimators), the refused rollout modes and the legacy reward blocks are read from the verl the
job runs (jobs/verl_facts.py) and their messages name it ("verl 0.5.0 on node1"); a set that
verl does not state is not checked, and a verl of unknown version only warns. The batch, micro-
batch and parallelism rules are verl's own since 0.4 (ray_trainer.py::_validate_config, then
utils/config.py::validate_config) and hold for every verl from 0.4 to 0.9.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tui.jobs.rules_base import (
    ADV_ESTIMATORS as ADV_ESTIMATORS,
)
from tui.jobs.rules_base import (
    CHOICES as CHOICES,
)
from tui.jobs.rules_base import (
    COMMON_EXCLUDES as COMMON_EXCLUDES,
)
from tui.jobs.rules_base import (
    CPUS_PER_GPU as CPUS_PER_GPU,
)
from tui.jobs.rules_base import (
    FSDP_STRATEGIES as FSDP_STRATEGIES,
)
from tui.jobs.rules_base import (
    KL_ESTIMATORS as KL_ESTIMATORS,
)
from tui.jobs.rules_base import (
    LOSS_AGG_MODES as LOSS_AGG_MODES,
)
from tui.jobs.rules_base import (
    LR_SCHEDULERS as LR_SCHEDULERS,
)
from tui.jobs.rules_base import (
    MODEL as MODEL,
)
from tui.jobs.rules_base import (
    PLACEHOLDERS as PLACEHOLDERS,
)
from tui.jobs.rules_base import (
    POLICY_LOSSES as POLICY_LOSSES,
)
from tui.jobs.rules_base import (
    POST_MORTEM_KEY as POST_MORTEM_KEY,
)
from tui.jobs.rules_base import (
    RAY_UPLOAD_LIMIT as RAY_UPLOAD_LIMIT,
)
from tui.jobs.rules_base import (
    REF as REF,
)
from tui.jobs.rules_base import (
    RESUME_MODES as RESUME_MODES,
)
from tui.jobs.rules_base import (
    ROLLOUT_NAMES as ROLLOUT_NAMES,
)
from tui.jobs.rules_base import (
    A as A,
)
from tui.jobs.rules_base import (
    ClusterResources as ClusterResources,
)
from tui.jobs.rules_base import (
    Level as Level,
)
from tui.jobs.rules_base import (
    NodeResources as NodeResources,
)
from tui.jobs.rules_base import (
    Problem as Problem,
)
from tui.jobs.rules_base import (
    R as R,
)
from tui.jobs.rules_base import (
    _Cfg as _Cfg,
)
from tui.jobs.rules_base import (
    _one_of as _one_of,
)
from tui.jobs.rules_base import (
    need_critic as need_critic,
)
from tui.jobs.rules_base import (
    need_reference_policy as need_reference_policy,
)
from tui.jobs.rules_metrics import metrics_logger_rules
from tui.jobs.rules_runtime import (
    RAY_WORKING_DIR_COPY as RAY_WORKING_DIR_COPY,
)
from tui.jobs.rules_runtime import (
    _cluster_rules as _cluster_rules,
)
from tui.jobs.rules_runtime import (
    _dir_rules as _dir_rules,
)
from tui.jobs.rules_runtime import (
    _working_dir_rules as _working_dir_rules,
)
from tui.jobs.rules_runtime import (
    check_runtime_env as check_runtime_env,
)
from tui.jobs.rules_runtime import (
    checkpoint_location as checkpoint_location,
)
from tui.jobs.rules_runtime import (
    is_truthy as is_truthy,
)
from tui.jobs.verl_facts import VerlFacts, current_facts

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
            tp, pp = (
                c.as_int(f"{A}.megatron.tensor_model_parallel_size", 1) or 1,
                c.as_int(f"{A}.megatron.pipeline_model_parallel_size", 1) or 1,
            )
            cp = c.as_int(f"{A}.megatron.context_parallel_size", 1) or 1
            if n % (tp * pp * cp):
                out.append(
                    Problem(
                        f"{A}.megatron.tensor_model_parallel_size",
                        f"{n} GPUs are not divisible by TP×PP×CP = {tp * pp * cp}",
                    )
                )
                return
            minimal = n // (tp * pp * cp) * (c.as_int(f"{A}.ppo_micro_batch_size_per_gpu") or 1)
        else:
            minimal = n
        if (tbs * rollout_n) % minimal:
            out.append(
                Problem(
                    "data.train_batch_size",
                    f"train_batch_size × rollout.n = {tbs * rollout_n} must be "
                    f"divisible by {minimal} (nnodes × n_gpus_per_node): e.g. "
                    f"{_next_multiple(tbs, minimal, rollout_n)}",
                )
            )
        # workers/config/actor.py::ActorConfig.__post_init__ and .validate
        _one_of(c, out, f"{A}.ppo_micro_batch_size", f"{A}.ppo_micro_batch_size_per_gpu", "actor")
        mini = c.as_int(f"{A}.ppo_mini_batch_size")
        if mini is not None and tbs < mini:
            out.append(
                Problem(
                    f"{A}.ppo_mini_batch_size",
                    f"{mini} is larger than data.train_batch_size ({tbs}): lower it to ≤ {tbs}",
                )
            )
        micro = c.as_int(f"{A}.ppo_micro_batch_size")
        if micro is not None and mini is not None and micro > 0:
            sp = c.as_int(f"{A}.ulysses_sequence_parallel_size", 1) or 1
            if mini % micro:
                out.append(
                    Problem(
                        f"{A}.ppo_micro_batch_size",
                        f"ppo_mini_batch_size ({mini}) must be divisible by it ({micro})",
                    )
                )
            if micro * sp < n:
                out.append(
                    Problem(
                        f"{A}.ppo_micro_batch_size",
                        f"{micro} × ulysses SP {sp} must be ≥ {n} GPUs: use "
                        f"ppo_micro_batch_size_per_gpu instead",
                    )
                )
        # utils/config.py::validate_config, check_mutually_exclusive
        if need_reference_policy(c.cfg):
            _one_of(
                c,
                out,
                f"{REF}.log_prob_micro_batch_size",
                f"{REF}.log_prob_micro_batch_size_per_gpu",
                "ref",
            )
        _one_of(
            c,
            out,
            f"{R}.log_prob_micro_batch_size",
            f"{R}.log_prob_micro_batch_size_per_gpu",
            "rollout",
        )


def _next_multiple(tbs: int, minimal: int, rollout_n: int) -> int:
    """The smallest train batch above `tbs` whose product with rollout.n divides by
    `minimal`: the next multiple of minimal / gcd(minimal, rollout.n), found at once (a loop
    counting up to it took 19 s at nnodes 1e8 and never ended at 1e20)."""
    unit = minimal // math.gcd(minimal, rollout_n)
    return (tbs // unit + 1) * unit


def _not_in(value: str, allowed: tuple[str, ...], facts: VerlFacts) -> str:
    return f"{value!r} is not one of {', '.join(allowed)} ({facts.where})"


def _actor_rules(c: _Cfg, out: list[Problem], facts: VerlFacts) -> None:
    mode = c.as_str(f"{A}.loss_agg_mode")
    modes = facts.loss_agg_modes
    if mode is not None and modes and mode not in modes:
        out.append(Problem(f"{A}.loss_agg_mode", _not_in(mode, modes, facts), facts.level()))
    strategy = c.as_str(f"{A}.strategy")
    strategies = facts.fsdp_strategies
    if c.has(f"{A}.fsdp_config") and strategies and strategy not in strategies:
        out.append(
            Problem(
                f"{A}.strategy",
                f"{strategy!r} is not an FSDP strategy of {facts.where} "
                f"({', '.join(strategies)}); for Megatron "
                "compose with model_engine=megatron",
                facts.level(),
            )
        )
    # workers/config/actor.py::FSDPActorConfig: SP > 1 needs remove-padding; the deprecated
    # actor key is copied into fsdp_config, so either one turns SP on.
    sp = max(
        c.as_int(f"{A}.ulysses_sequence_parallel_size", 1) or 1,
        c.as_int(f"{A}.fsdp_config.ulysses_sequence_parallel_size", 1) or 1,
    )
    if sp > 1 and c.has(f"{A}.fsdp_config") and not c.as_bool(f"{MODEL}.use_remove_padding"):
        out.append(
            Problem(
                f"{MODEL}.use_remove_padding",
                f"Ulysses sequence parallel ({sp}) needs use_remove_padding=true",
            )
        )
    scheds = facts.lr_schedulers
    for which in (A, "critic"):
        # Only a verl whose optim has lr_scheduler_type (its config's own default, ≥ 0.6)
        # deprecates warmup_style; before it warmup_style is the key itself.
        if not c.has(f"{which}.optim.lr_scheduler_type"):
            continue
        sched = c.as_str(f"{which}.optim.lr_scheduler_type")
        warm_set = c.has(f"{which}.optim.warmup_style")
        if sched is not None and warm_set and scheds and sched not in scheds:
            out.append(
                Problem(
                    f"{which}.optim.lr_scheduler_type",
                    _not_in(sched, scheds, facts),
                    facts.level(),
                )
            )
        warm = c.get(f"{which}.optim.warmup_style")
        if warm is not None:
            known = not scheds or warm in scheds
            out.append(
                Problem(
                    f"{which}.optim.warmup_style",
                    f"deprecated in {facts.where}: set optim.lr_scheduler_type instead"
                    if known
                    else f"{warm!r} is not {' or '.join(scheds or ())} ({facts.where}); "
                    "use optim.lr_scheduler_type",
                    "warn" if known else facts.level(),
                )
            )
    loss = c.as_str(f"{A}.policy_loss.loss_mode")
    losses = facts.policy_losses
    if loss is not None and losses and loss not in losses:
        out.append(
            Problem(
                f"{A}.policy_loss.loss_mode",
                f"{loss!r} is not one of the policy losses of {facts.where}; fine only if "
                "your code registers it",
                "warn",
            )
        )
    if loss == "dro" and not c.get(f"{A}.policy_loss.dro_beta"):
        out.append(Problem(f"{A}.policy_loss.dro_beta", "loss_mode dro needs a positive dro_beta"))
    if c.as_bool(f"{A}.use_kl_loss"):
        _kl_type(c, out, f"{A}.kl_loss_type", facts)
    if c.as_bool("algorithm.use_kl_in_reward"):
        _kl_type(c, out, "algorithm.kl_penalty", facts)
        if c.as_bool(f"{A}.use_kl_loss"):
            out.append(
                Problem(
                    "algorithm.use_kl_in_reward",
                    "both in-reward KL and the actor's KL loss are on: usually you "
                    "want one (GRPO: KL loss)",
                    "warn",
                )
            )


def _kl_type(c: _Cfg, out: list[Problem], key: str, facts: VerlFacts) -> None:
    kind = c.as_str(key)
    kinds = facts.kl_estimators
    if kind is not None and kinds and kind.removesuffix("+") not in kinds:
        hint = " ('full' is not implemented in verl)" if kind.startswith("full") else ""
        out.append(Problem(key, _not_in(kind, kinds, facts) + hint, facts.level()))


def _critic_rules(c: _Cfg, out: list[Problem]) -> None:
    if not need_critic(c.cfg):
        if c.get("critic.enable") is False and c.get("algorithm.adv_estimator") == "gae":
            out.append(
                Problem(
                    "critic.enable",
                    "gae needs the critic's values: enable it or "
                    "pick a critic-free estimator (grpo)",
                    "warn",
                )
            )
        return
    # workers/config/critic.py::CriticConfig.__post_init__ and .validate
    if not c.as_bool("critic.use_dynamic_bsz"):
        _one_of(
            c, out, "critic.ppo_micro_batch_size", "critic.ppo_micro_batch_size_per_gpu", "critic"
        )
        mini = c.as_int("critic.ppo_mini_batch_size")
        micro = c.as_int("critic.ppo_micro_batch_size")
        if micro and mini is not None and mini % micro:
            out.append(
                Problem(
                    "critic.ppo_micro_batch_size",
                    f"critic.ppo_mini_batch_size ({mini}) must be divisible by it",
                )
            )
        tbs = c.as_int("data.train_batch_size")
        if tbs is not None and mini is not None and tbs < mini:
            out.append(
                Problem(
                    "critic.ppo_mini_batch_size",
                    f"{mini} is larger than data.train_batch_size ({tbs})",
                )
            )
    if c.get("critic.model.path") == PLACEHOLDERS[f"{MODEL}.path"]:
        out.append(
            Problem(
                "critic.model.path",
                "still verl's placeholder: set the critic's model (usually the actor's)",
                "warn",
            )
        )


def _rollout_rules(c: _Cfg, out: list[Problem], n: int, facts: VerlFacts) -> None:
    name = c.as_str(f"{R}.name")
    names = tuple(facts.rollouts) if facts.rollouts is not None else ROLLOUT_NAMES
    if name is None or name == "???":
        out.append(Problem(f"{R}.name", f"required: set it to {' or '.join(names)}"))
    elif facts.rollouts is not None and name not in facts.rollouts:
        out.append(
            Problem(
                f"{R}.name",
                f"{name!r} is not a rollout of {facts.where} ({facts.rollout_cite}): use "
                f"{' or '.join(names)}",
                facts.level(),
            )
        )
    mode = c.as_str(f"{R}.mode")
    modes = (facts.rollouts or {}).get(name or "", ())
    if mode is not None and mode in facts.refused_modes:
        # workers/config/rollout.py::RolloutConfig.__post_init__ raises: its words
        out.append(
            Problem(
                f"{R}.mode",
                f"{facts.where} refuses {mode!r}: {facts.refused_modes[mode][:200]}",
                facts.level(),
            )
        )
    elif mode is not None and modes and mode not in modes:
        out.append(
            Problem(
                f"{R}.mode",
                f"{mode!r}: {facts.where} registers {name} only as {', '.join(modes)}",
                "warn",
            )
        )
    tp = c.as_int(f"{R}.tensor_model_parallel_size", 1) or 1
    dp = c.as_int(f"{R}.data_parallel_size", 1) or 1
    pp = c.as_int(f"{R}.pipeline_model_parallel_size", 1) or 1
    ep = c.as_int(f"{R}.expert_parallel_size", 1) or 1
    if pp > 1:
        out.append(
            Problem(
                f"{R}.pipeline_model_parallel_size",
                f"{name} rollout does not implement pipeline parallel > 1: set it to 1",
            )
        )
    if name != "trtllm" and ep > 1 and ep != tp * dp:
        out.append(
            Problem(
                f"{R}.expert_parallel_size",
                f"must equal tensor_model_parallel_size × data_parallel_size ({tp * dp})",
            )
        )
    if c.as_bool(f"{R}.disaggregation.enabled") and name not in ("sglang", "vllm"):
        out.append(Problem(f"{R}.disaggregation.enabled", "needs rollout.name sglang or vllm"))
    # workers/engine_workers.py: the training world must split into whole rollout replicas
    replica = tp * dp * pp
    if replica < 1:
        out.append(Problem(f"{R}.tensor_model_parallel_size", "must be ≥ 1"))
        return
    if n % replica:
        out.append(
            Problem(
                f"{R}.tensor_model_parallel_size",
                f"{n} GPUs (nnodes × n_gpus_per_node) are not divisible by rollout "
                f"TP×DP×PP = {replica}: pick a divisor of {n}",
            )
        )
    per_node = c.as_int(f"{R}.n_gpus_per_node") or c.as_int("trainer.n_gpus_per_node") or 1
    if replica % min(per_node, replica):  # workers/rollout/replica.py
        out.append(
            Problem(
                f"{R}.tensor_model_parallel_size",
                f"a rollout replica of {replica} GPUs spans nodes: it must be a "
                f"multiple of {per_node} GPUs per node",
            )
        )
    # utils/config.py::validate_config checks the training temperature here, not val_kwargs'
    if c.as_bool(f"{R}.val_kwargs.do_sample"):
        temp = c.as_num(f"{R}.temperature")
        if temp is not None and temp <= 0:
            out.append(Problem(f"{R}.temperature", "must be > 0 when val_kwargs.do_sample is true"))
        vtemp = c.as_num(f"{R}.val_kwargs.temperature")
        if vtemp is not None and vtemp <= 0:
            out.append(
                Problem(
                    f"{R}.val_kwargs.temperature",
                    "0 samples greedily although val_kwargs.do_sample is true: set "
                    "it > 0 (e.g. 0.6)",
                    "warn",
                )
            )
    lora = c.get(f"{MODEL}.lora.rank", 0) or 0
    if isinstance(lora, int) and lora <= 0:
        lora = c.get(f"{MODEL}.lora_rank", 0) or 0
    if (
        isinstance(lora, int)
        and lora > 512
        and name == "vllm"
        and not c.as_bool(f"{MODEL}.lora.merge")
    ):
        out.append(Problem(f"{MODEL}.lora_rank", f"vLLM serves LoRA ranks up to 512, not {lora}"))


def _algorithm_rules(c: _Cfg, out: list[Problem], facts: VerlFacts) -> None:
    est = c.as_str("algorithm.adv_estimator")
    ests = facts.adv_estimators
    if est is not None and ests and est not in ests:
        out.append(
            Problem(
                "algorithm.adv_estimator",
                f"{est!r} is not one of the estimators of {facts.where}; fine only if your "
                "code registers it",
                "warn",
            )
        )
    if c.as_bool("algorithm.filter_groups.enable") and not c.get("algorithm.filter_groups.metric"):
        out.append(
            Problem(
                "algorithm.filter_groups.metric",
                "group filtering is on: name the metric (e.g. acc)",
            )
        )


def _trainer_rules(c: _Cfg, out: list[Problem], facts: VerlFacts) -> None:
    mode = c.as_str("trainer.resume_mode")
    if mode is not None and mode not in RESUME_MODES:
        out.append(
            Problem("trainer.resume_mode", f"{mode!r} is not one of {', '.join(RESUME_MODES)}")
        )
    if mode == "resume_path":
        path = c.get("trainer.resume_from_path")
        if not isinstance(path, str) or "global_step_" not in path:
            out.append(
                Problem(
                    "trainer.resume_from_path",
                    "resume_path needs a …/global_step_N checkpoint folder here",
                )
            )
    if c.get("data.val_batch_size") is not None:
        out.append(
            Problem(
                "data.val_batch_size",
                "deprecated and ignored: validation goes to the engine as one batch",
                "warn",
            )
        )
    for key, placeholder in PLACEHOLDERS.items():
        value = c.get(key)
        if value == placeholder:
            out.append(Problem(key, "still verl's placeholder default: set your own", "warn"))
        elif isinstance(value, str) and not value.strip():
            # An imported script's `${MODEL_PATH:-}` with the variable unset, a blank field.
            what = "the model (a Hugging Face id or a folder)" if "model" in key else "the files"
            level: Level = "warn" if key == "data.val_files" else "error"
            out.append(Problem(key, f"empty: set {what}", level))
    if c.as_str("trainer.v1.trainer_mode") == "separate_async":
        tbs, mini = c.as_int("data.train_batch_size"), c.as_int(f"{A}.ppo_mini_batch_size")
        step = c.as_int("trainer.v1.separate_async.parameter_sync_step")
        if tbs is not None and mini is not None and step is not None and tbs != step * mini:
            out.append(
                Problem(
                    "trainer.v1.separate_async.parameter_sync_step",
                    f"separate_async needs train_batch_size = parameter_sync_step × "
                    f"ppo_mini_batch_size ({step} × {mini} ≠ {tbs})",
                )
            )
        if not (c.as_int(f"{R}.nnodes") or 0) > 0:
            out.append(
                Problem(
                    f"{R}.nnodes",
                    "separate_async needs a standalone rollout pool: set rollout.nnodes > 0",
                )
            )
        if c.get(f"{R}.checkpoint_engine.backend") == "naive":
            out.append(
                Problem(
                    f"{R}.checkpoint_engine.backend",
                    "separate_async needs nccl, nixl or another non-naive backend",
                )
            )
    for pool in ("reward.reward_model", "distillation"):
        if pool == "reward.reward_model" and not c.as_bool(f"{pool}.enable_resource_pool"):
            continue
        if pool == "distillation" and not c.as_bool(f"{pool}.enabled"):
            continue
        for k in ("nnodes", "n_gpus_per_node"):
            if not (c.as_int(f"{pool}.{k}") or 0) > 0:
                out.append(Problem(f"{pool}.{k}", "its own resource pool needs this > 0"))
    _legacy_reward_rules(c, out, facts)


def _legacy_reward_rules(c: _Cfg, out: list[Problem], facts: VerlFacts) -> None:
    """The top-level reward blocks, where this verl's config has a `reward` section holding
    their successors (≥ 0.7): 0.7–0.8's main_ppo migrates them, 0.9 ignores them. Before
    the section existed they are the keys themselves."""
    for k in ("custom_reward_function", "reward_model", "sandbox_fusion"):
        target = f"reward.{k}"
        if not _any_set(c.get(k)) or not c.has(target):
            continue
        how = (
            f"{facts.where} moves it to {target} (main_ppo's migrate_legacy_reward_impl)"
            if facts.migrates_legacy_reward
            else f"main_ppo in {facts.where} ignores it"
        )
        out.append(Problem(k, f"legacy block: {how}; set {target} instead", "warn"))


def _any_set(node: Any) -> bool:
    if isinstance(node, Mapping):
        return any(_any_set(v) for v in node.values())
    return node is not None


def check_rules(
    cfg: Mapping[str, Any],
    cluster: ClusterResources | None = None,
    *,
    working_dir_bytes: int | None = None,
    post_mortem: bool = False,
    excludes: Sequence[str] = (),
    working_dir: str | None = None,
    verl: VerlFacts | None = None,
) -> list[Problem]:
    """verl's rules on a composed config (plain dicts), and the runtime ones against the
    cluster when given. Errors first, then warnings; each names its key. `verl`: the facts of
    the verl the config was composed with (default: the selected one, jobs/verl_facts.py)."""
    facts = verl if verl is not None else current_facts()
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
        _rollout_rules(c, out, n, facts)
        if cluster is not None and nnodes and per_node:
            _cluster_rules(c, out, cluster, nnodes, per_node)
    _actor_rules(c, out, facts)
    _critic_rules(c, out)
    _algorithm_rules(c, out, facts)
    _trainer_rules(c, out, facts)
    metrics_logger_rules(c, out)
    _dir_rules(c, out, working_dir)
    if working_dir_bytes is not None:
        _working_dir_rules(out, working_dir_bytes, excludes)
    if post_mortem and cluster is not None and cluster.hosts_without_debugpy:
        hosts = ", ".join(cluster.hosts_without_debugpy)
        out.append(
            Problem(
                POST_MORTEM_KEY,
                f"post-mortem debugging needs debugpy>=1.8 on every "
                f"host; missing on {hosts}: pip install debugpy there",
            )
        )
    return sorted(out, key=lambda p: p.level != "error")
