"""verl's rules and the runtime ones: every rule has a failing and a passing case, on configs
composed from the installed verl 0.9.1 (no mocks)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tui.jobs import rules, schema
from tui.jobs.profiles import load_profile, to_hydra_overrides
from tui.jobs.rules import ClusterResources, NodeResources, check_rules, check_runtime_env

REPO = Path(__file__).resolve().parent.parent
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
M = "actor_rollout_ref.model"
MIB = 1024**2

# The one-node GRPO preset on 1 × 8 GPUs: passes every rule; each case changes a few keys.
BASE = [
    *to_hydra_overrides(load_profile(REPO / "profiles/grpo-gsm8k-qwen2.5-0.5b.yaml").overrides),
    "trainer.n_gpus_per_node=8",
]
GOOD_CLUSTER = ClusterResources([NodeResources("h1", 8, 64), NodeResources("h2", 8, 64)])


@dataclass
class Case:
    name: str
    key: str
    fail: list[str]
    ok: list[str]
    level: str = "error"
    kwargs_fail: dict[str, Any] = field(default_factory=dict)
    kwargs_ok: dict[str, Any] = field(default_factory=dict)


def small(nodes: int, gpus: float, cpus: float) -> ClusterResources:
    return ClusterResources([NodeResources(f"h{i}", gpus, cpus) for i in range(nodes)])


CASES = [
    # utils/config.py::validate_config — (train_batch_size × rollout.n) % world == 0
    Case(
        "batch divisible by GPUs",
        "data.train_batch_size",
        ["data.train_batch_size=100", f"{R}.n=1"],
        ["data.train_batch_size=104", f"{R}.n=1"],
    ),
    Case(
        "rollout.n counts in the batch",
        "data.train_batch_size",
        ["data.train_batch_size=100", f"{R}.n=1"],
        ["data.train_batch_size=100", f"{R}.n=2"],
    ),
    Case(
        "dynamic bsz skips the batch rule",
        "data.train_batch_size",
        ["data.train_batch_size=100", f"{R}.n=1"],
        ["data.train_batch_size=100", f"{R}.n=1", f"{A}.use_dynamic_bsz=true"],
    ),
    # workers/config/actor.py
    Case(
        "actor mini ≤ train batch",
        f"{A}.ppo_mini_batch_size",
        [f"{A}.ppo_mini_batch_size=512"],
        [f"{A}.ppo_mini_batch_size=256"],
    ),
    Case(
        "actor micro-batch required",
        f"{A}.ppo_micro_batch_size_per_gpu",
        [f"{A}.ppo_micro_batch_size_per_gpu=null"],
        [f"{A}.ppo_micro_batch_size_per_gpu=4"],
    ),
    Case(
        "actor micro-batch not both",
        f"{A}.ppo_micro_batch_size",
        [f"{A}.ppo_micro_batch_size=16"],
        [f"{A}.ppo_micro_batch_size=16", f"{A}.ppo_micro_batch_size_per_gpu=null"],
    ),
    Case(
        "actor global micro divides mini",
        f"{A}.ppo_micro_batch_size",
        [f"{A}.ppo_micro_batch_size=24", f"{A}.ppo_micro_batch_size_per_gpu=null"],
        [f"{A}.ppo_micro_batch_size=32", f"{A}.ppo_micro_batch_size_per_gpu=null"],
    ),
    Case(
        "actor global micro × SP ≥ GPUs",
        f"{A}.ppo_micro_batch_size",
        [f"{A}.ppo_micro_batch_size=4", f"{A}.ppo_micro_batch_size_per_gpu=null"],
        [f"{A}.ppo_micro_batch_size=8", f"{A}.ppo_micro_batch_size_per_gpu=null"],
    ),
    Case(
        "loss_agg_mode in its set",
        f"{A}.loss_agg_mode",
        [f"{A}.loss_agg_mode=mean"],
        [f"{A}.loss_agg_mode=seq-mean-token-mean"],
    ),
    Case(
        "ulysses SP needs remove padding",
        f"{M}.use_remove_padding",
        [f"{A}.ulysses_sequence_parallel_size=2", f"{M}.use_remove_padding=false"],
        [f"{A}.ulysses_sequence_parallel_size=2", f"{M}.use_remove_padding=true"],
    ),
    Case(
        "fsdp_config SP needs remove padding too",
        f"{M}.use_remove_padding",
        [f"{A}.fsdp_config.ulysses_sequence_parallel_size=2", f"{M}.use_remove_padding=false"],
        [f"{A}.fsdp_config.ulysses_sequence_parallel_size=1", f"{M}.use_remove_padding=false"],
    ),
    Case("FSDP strategy", f"{A}.strategy", [f"{A}.strategy=deepspeed"], [f"{A}.strategy=fsdp2"]),
    Case(
        "LR scheduler",
        f"{A}.optim.lr_scheduler_type",
        [f"{A}.optim.lr_scheduler_type=linear"],
        [f"{A}.optim.lr_scheduler_type=cosine"],
    ),
    Case(
        "warmup_style deprecated",
        f"{A}.optim.warmup_style",
        [f"{A}.optim.warmup_style=cosine"],
        [f"{A}.optim.warmup_style=null"],
        "warn",
    ),
    Case(
        "KL loss estimator",
        f"{A}.kl_loss_type",
        [f"{A}.kl_loss_type=full"],
        [f"{A}.kl_loss_type=k3+"],
    ),
    Case(
        "policy loss known",
        f"{A}.policy_loss.loss_mode",
        [f"{A}.policy_loss.loss_mode=mine"],
        [f"{A}.policy_loss.loss_mode=gspo"],
        "warn",
    ),
    Case(
        "dro needs beta",
        f"{A}.policy_loss.dro_beta",
        [f"{A}.policy_loss.loss_mode=dro"],
        [f"{A}.policy_loss.loss_mode=dro", f"{A}.policy_loss.dro_beta=0.1"],
    ),
    # utils/config.py::validate_config — ref only when KL needs it
    Case(
        "ref micro-batch with KL loss",
        f"{REF}.log_prob_micro_batch_size_per_gpu",
        [f"{REF}.log_prob_micro_batch_size_per_gpu=null"],
        [f"{REF}.log_prob_micro_batch_size_per_gpu=null", f"{A}.use_kl_loss=false"],
    ),
    Case(
        "ref micro-batch with KL in reward",
        f"{REF}.log_prob_micro_batch_size_per_gpu",
        [
            f"{REF}.log_prob_micro_batch_size_per_gpu=null",
            f"{A}.use_kl_loss=false",
            "algorithm.use_kl_in_reward=true",
        ],
        [
            f"{REF}.log_prob_micro_batch_size_per_gpu=8",
            f"{A}.use_kl_loss=false",
            "algorithm.use_kl_in_reward=true",
        ],
    ),
    Case(
        "KL in reward and KL loss",
        "algorithm.use_kl_in_reward",
        ["algorithm.use_kl_in_reward=true"],
        ["algorithm.use_kl_in_reward=false"],
        "warn",
    ),
    Case(
        "in-reward KL estimator",
        "algorithm.kl_penalty",
        ["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=nope"],
        ["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=low_var_kl"],
    ),
    Case(
        "rollout log-prob micro-batch",
        f"{R}.log_prob_micro_batch_size_per_gpu",
        [f"{R}.log_prob_micro_batch_size_per_gpu=null"],
        [f"{R}.log_prob_micro_batch_size_per_gpu=null", f"{R}.log_prob_micro_batch_size=64"],
    ),
    Case(
        "val do_sample needs temperature > 0",
        f"{R}.temperature",
        [f"{R}.val_kwargs.do_sample=true", f"{R}.temperature=0"],
        [f"{R}.val_kwargs.do_sample=true", f"{R}.temperature=0.7"],
    ),
    Case(
        "val do_sample with val temperature 0",
        f"{R}.val_kwargs.temperature",
        [f"{R}.val_kwargs.do_sample=true"],
        [f"{R}.val_kwargs.do_sample=true", f"{R}.val_kwargs.temperature=0.6"],
        "warn",
    ),
    Case("LoRA rank for vLLM", f"{M}.lora_rank", [f"{M}.lora_rank=1024"], [f"{M}.lora_rank=64"]),
    # trainer/ppo/utils.py::need_critic and workers/config/critic.py
    Case(
        "critic on: micro-batch",
        "critic.ppo_micro_batch_size_per_gpu",
        ["critic.enable=true", f"critic.model.path={'Qwen/Qwen2.5-0.5B-Instruct'}"],
        ["critic.enable=true", "critic.ppo_micro_batch_size_per_gpu=8"],
    ),
    Case(
        "critic on by gae",
        "critic.ppo_micro_batch_size_per_gpu",
        ["algorithm.adv_estimator=gae"],
        ["algorithm.adv_estimator=grpo"],
    ),
    Case(
        "critic mini ≤ train batch",
        "critic.ppo_mini_batch_size",
        [
            "critic.enable=true",
            "critic.ppo_micro_batch_size_per_gpu=8",
            "critic.ppo_mini_batch_size=512",
        ],
        [
            "critic.enable=true",
            "critic.ppo_micro_batch_size_per_gpu=8",
            "critic.ppo_mini_batch_size=128",
        ],
    ),
    # critic.yaml: ppo_micro_batch_size_per_gpu defaults to ${.ppo_micro_batch_size}, so setting
    # the deprecated key alone sets both — verl itself then refuses the config.
    Case(
        "critic deprecated micro sets both",
        "critic.ppo_micro_batch_size",
        ["critic.enable=true", "critic.ppo_micro_batch_size=16"],
        [
            "critic.enable=true",
            "critic.ppo_micro_batch_size=16",
            "critic.ppo_micro_batch_size_per_gpu=null",
        ],
    ),
    Case(
        "gae without critic",
        "critic.enable",
        ["algorithm.adv_estimator=gae", "critic.enable=false"],
        [
            "algorithm.adv_estimator=gae",
            "critic.enable=true",
            "critic.ppo_micro_batch_size_per_gpu=8",
        ],
        "warn",
    ),
    Case(
        "critic placeholder model",
        "critic.model.path",
        ["critic.enable=true", "critic.ppo_micro_batch_size_per_gpu=8"],
        [
            "critic.enable=true",
            "critic.ppo_micro_batch_size_per_gpu=8",
            "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        ],
        "warn",
    ),
    # rollout config (workers/config/rollout.py, workers/rollout/base.py)
    Case("rollout name required", f"{R}.name", [f"{R}.name=???"], [f"{R}.name=sglang"]),
    Case("hf rollout is gone", f"{R}.name", [f"{R}.name=hf"], [f"{R}.name=trtllm"]),
    Case("rollout name known", f"{R}.name", [f"{R}.name=tgi"], [f"{R}.name=vllm"]),
    Case("sync rollout removed", f"{R}.mode", [f"{R}.mode=sync"], [f"{R}.mode=async"]),
    Case(
        "rollout TP divides the world",
        f"{R}.tensor_model_parallel_size",
        [f"{R}.tensor_model_parallel_size=3"],
        [f"{R}.tensor_model_parallel_size=4"],
    ),
    Case(
        "rollout TP×DP divides the world",
        f"{R}.tensor_model_parallel_size",
        [f"{R}.tensor_model_parallel_size=2", f"{R}.data_parallel_size=3"],
        [f"{R}.tensor_model_parallel_size=2", f"{R}.data_parallel_size=2"],
    ),
    Case(
        "rollout replica over nodes whole",
        f"{R}.tensor_model_parallel_size",
        ["trainer.nnodes=3", f"{R}.tensor_model_parallel_size=12", "data.train_batch_size=264"],
        ["trainer.nnodes=3", f"{R}.tensor_model_parallel_size=8", "data.train_batch_size=264"],
    ),
    Case(
        "rollout EP = TP × DP",
        f"{R}.expert_parallel_size",
        [f"{R}.expert_parallel_size=4", f"{R}.tensor_model_parallel_size=2"],
        [f"{R}.expert_parallel_size=2", f"{R}.tensor_model_parallel_size=2"],
    ),
    Case(
        "rollout PP not implemented",
        f"{R}.pipeline_model_parallel_size",
        [f"{R}.pipeline_model_parallel_size=2"],
        [f"{R}.pipeline_model_parallel_size=1"],
    ),
    Case(
        "disaggregation engines",
        f"{R}.disaggregation.enabled",
        [f"{R}.name=trtllm", f"{R}.disaggregation.enabled=true"],
        [f"{R}.name=sglang", f"{R}.disaggregation.enabled=true"],
    ),
    # algorithm / trainer
    Case(
        "adv estimator known",
        "algorithm.adv_estimator",
        ["algorithm.adv_estimator=my_est"],
        ["algorithm.adv_estimator=rloo"],
        "warn",
    ),
    Case(
        "filter groups metric",
        "algorithm.filter_groups.metric",
        ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=null"],
        ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"],
    ),
    Case(
        "resume mode",
        "trainer.resume_mode",
        ["trainer.resume_mode=latest"],
        ["trainer.resume_mode=disable"],
    ),
    Case(
        "resume path names a step",
        "trainer.resume_from_path",
        ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt/run"],
        ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt/run/global_step_40"],
    ),
    Case(
        "val_batch_size deprecated",
        "data.val_batch_size",
        ["data.val_batch_size=64"],
        ["data.val_batch_size=null"],
        "warn",
    ),
    Case(
        "placeholder model path",
        f"{M}.path",
        [f"{M}.path='~/models/deepseek-llm-7b-chat'"],
        [f"{M}.path=Qwen/Qwen2.5-7B"],
        "warn",
    ),
    Case(  # an imported script's ${MODEL_PATH:-} with the variable unset
        "empty model path",
        f"{M}.path",
        [f"{M}.path=''"],
        [f"{M}.path=Qwen/Qwen2.5-7B"],
    ),
    Case("empty training files", "data.train_files", ["data.train_files=' '"], []),
    Case("empty validation files", "data.val_files", ["data.val_files=''"], [], "warn"),
    Case(
        "legacy reward block ignored",
        "custom_reward_function",
        ["custom_reward_function.path=/r.py"],
        ["reward.custom_reward_function.path=/r.py"],
        "warn",
    ),
    Case(
        "separate async batch",
        "trainer.v1.separate_async.parameter_sync_step",
        [
            "trainer.v1.trainer_mode=separate_async",
            f"{R}.nnodes=1",
            f"{R}.checkpoint_engine.backend=nccl",
            "trainer.v1.separate_async.parameter_sync_step=2",
        ],
        [
            "trainer.v1.trainer_mode=separate_async",
            f"{R}.nnodes=1",
            f"{R}.checkpoint_engine.backend=nccl",
            "trainer.v1.separate_async.parameter_sync_step=4",
        ],
    ),
    Case(
        "separate async backend",
        f"{R}.checkpoint_engine.backend",
        ["trainer.v1.trainer_mode=separate_async", f"{R}.nnodes=1"],
        [
            "trainer.v1.trainer_mode=separate_async",
            f"{R}.nnodes=1",
            f"{R}.checkpoint_engine.backend=nixl",
        ],
    ),
    Case(
        "reward pool size",
        "reward.reward_model.nnodes",
        ["reward.reward_model.enable_resource_pool=true"],
        ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1"],
    ),
    Case("nnodes ≥ 1", "trainer.nnodes", ["trainer.nnodes=0"], ["trainer.nnodes=1"]),
    Case(
        "types are checked",
        "data.train_batch_size",
        ["data.train_batch_size=lots"],
        ["data.train_batch_size=64"],
    ),
    # runtime rules
    # A relative checkpoint dir is an error only where it lands in Ray's working_dir copy
    # (deleted with it) and checkpoints are saved; elsewhere a warning saying where it lands.
    Case(
        "checkpoint dir in the working_dir copy",
        "trainer.default_local_dir",
        ["trainer.default_local_dir=checkpoints/run", "trainer.save_freq=10"],
        ["trainer.default_local_dir=/data/ckpt/run", "trainer.save_freq=10"],
        kwargs_fail={"working_dir": "~/proj"},
        kwargs_ok={"working_dir": "~/proj"},
    ),
    Case(
        "checkpoint dir ~ is relative to verl",
        "trainer.default_local_dir",
        ["trainer.default_local_dir='~/ckpt/run'", "trainer.save_freq=10"],
        ["trainer.default_local_dir=/root/ckpt/run", "trainer.save_freq=10"],
        kwargs_fail={"working_dir": "~/proj"},
        kwargs_ok={"working_dir": "~/proj"},
    ),
    Case(
        "checkpoint dir relative without working_dir",
        "trainer.default_local_dir",
        ["trainer.default_local_dir=checkpoints/run", "trainer.save_freq=10"],
        ["trainer.default_local_dir=/data/ckpt/run", "trainer.save_freq=10"],
        "warn",
    ),
    Case(
        "Ray-visible GPUs",
        "trainer.nnodes",
        ["trainer.nnodes=3"],
        ["trainer.nnodes=2"],
        kwargs_fail={"cluster": GOOD_CLUSTER},
        kwargs_ok={"cluster": GOOD_CLUSTER},
    ),
    Case(
        "reward pool GPUs count too",
        "trainer.nnodes",
        [
            "trainer.nnodes=2",
            "reward.reward_model.enable_resource_pool=true",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
        ],
        [
            "trainer.nnodes=1",
            "reward.reward_model.enable_resource_pool=true",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
        ],
        kwargs_fail={"cluster": GOOD_CLUSTER},
        kwargs_ok={"cluster": GOOD_CLUSTER},
    ),
    Case(
        "per-node GPUs",
        "trainer.n_gpus_per_node",
        ["trainer.nnodes=2"],
        ["trainer.nnodes=2"],
        kwargs_fail={
            "cluster": ClusterResources(
                [NodeResources("a", 8, 64), NodeResources("b", 4, 64), NodeResources("c", 4, 64)]
            )
        },
        kwargs_ok={"cluster": ClusterResources([NodeResources("a", 16, 64)])},
    ),
    Case(
        "3 CPUs per GPU",
        "trainer.n_gpus_per_node",
        ["trainer.nnodes=2"],
        ["trainer.nnodes=2"],
        kwargs_fail={"cluster": small(2, 8, 16)},
        kwargs_ok={"cluster": small(2, 8, 24)},
    ),
    Case(
        "working_dir over the upload limit",
        "runtime_env.working_dir",
        [],
        [],
        kwargs_fail={"working_dir_bytes": 150 * MIB},
        kwargs_ok={"working_dir_bytes": 10 * MIB},
    ),
    Case(
        "working_dir near the upload limit",
        "runtime_env.working_dir",
        [],
        [],
        "warn",
        kwargs_fail={"working_dir_bytes": 70 * MIB},
        kwargs_ok={"working_dir_bytes": 30 * MIB},
    ),
    Case(
        "debugpy for post-mortem",
        rules.POST_MORTEM_KEY,
        [],
        [],
        kwargs_fail={
            "post_mortem": True,
            "cluster": ClusterResources(GOOD_CLUSTER.nodes, hosts_without_debugpy=["h2"]),
        },
        kwargs_ok={
            "post_mortem": False,
            "cluster": ClusterResources(GOOD_CLUSTER.nodes, hosts_without_debugpy=["h2"]),
        },
    ),
]


def _problems(overrides: list[str], kwargs: dict[str, Any]) -> list[rules.Problem]:
    return check_rules(schema.compose([*BASE, *overrides]), **kwargs)


def test_base_passes_every_rule() -> None:
    assert _problems([], {"cluster": GOOD_CLUSTER, "working_dir_bytes": MIB}) == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_fails(case: Case) -> None:
    found = [p for p in _problems(case.fail, case.kwargs_fail) if p.key == case.key]
    assert found, f"no problem at {case.key}"
    assert any(p.level == case.level for p in found), found
    for p in found:
        assert p.message and "\n" not in p.message


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_passes(case: Case) -> None:
    found = [
        p for p in _problems(case.ok, case.kwargs_ok) if p.key == case.key and p.level == case.level
    ]
    assert found == []


def test_messages_say_how_to_fix() -> None:
    probs = _problems(["data.train_batch_size=100", f"{R}.n=1"], {})
    msg = next(p.message for p in probs if p.key == "data.train_batch_size")
    assert "divisible by 8" in msg and "e.g. 104" in msg
    big = _problems([], {"working_dir_bytes": 150 * MIB, "excludes": [".git"]})
    msg = next(p.message for p in big if p.key == "runtime_env.working_dir")
    assert "150 MiB" in msg and ".venv" in msg and ".git," not in msg


def test_relative_checkpoint_dir_says_where_it_lands() -> None:
    rel = ["trainer.default_local_dir=checkpoints/run", "trainer.save_freq=10"]
    (home,) = [p for p in _problems(rel, {}) if p.key == "trainer.default_local_dir"]
    assert home.level == "warn" and "~/checkpoints/run" in home.message
    (copy,) = [
        p for p in _problems(rel, {"working_dir": "/src"}) if p.key == "trainer.default_local_dir"
    ]
    assert (
        copy.level == "error"
        and f"{rules.RAY_WORKING_DIR_COPY}/checkpoints/run" in copy.message
        and "deleted" in copy.message
    )
    # verl's own default (relative) with no saving: a 4-key profile is not refused
    (default,) = [
        p
        for p in _problems(
            ["trainer.default_local_dir=checkpoints/p/e", "trainer.save_freq=-1"],
            {"working_dir": "/src"},
        )
        if p.key == "trainer.default_local_dir"
    ]
    assert default.level == "warn"


def test_errors_come_before_warnings() -> None:
    probs = _problems(["data.val_batch_size=64", f"{R}.name=hf"], {})
    levels = [p.level for p in probs]
    assert levels == sorted(levels, key=lambda lv: lv != "error")


@pytest.mark.parametrize(
    ("env", "key", "bad"),
    [
        (
            {"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1"},
            "runtime_env.env_vars.ROCR_VISIBLE_DEVICES",
            True,
        ),
        ({"HIP_VISIBLE_DEVICES": "0,1"}, "runtime_env.env_vars.ROCR_VISIBLE_DEVICES", False),
        (
            {"HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "1,0"},
            "runtime_env.env_vars.HIP_VISIBLE_DEVICES",
            True,
        ),
        (
            {"HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"},
            "runtime_env.env_vars.HIP_VISIBLE_DEVICES",
            False,
        ),
    ],
)
def test_runtime_env_visible_devices(env: dict[str, str], key: str, bad: bool) -> None:
    assert any(p.key == key for p in check_runtime_env(env)) is bad


def test_wandb_logger_needs_a_key() -> None:
    cfg = schema.compose([*BASE, "trainer.logger=[console,wandb]"])
    assert [p.level for p in check_runtime_env({}, cfg) if p.key == "trainer.logger"] == ["warn"]
    assert check_runtime_env({"WANDB_API_KEY": "x"}, cfg) == []


# -- the constants mirror verl's source (a verl upgrade that changes them fails here) -------


def _verl(rel: str) -> str:
    return (schema.verl_config_dir().parent.parent / rel).read_text()


def test_constants_match_verls_source() -> None:
    base = ast.parse(_verl("workers/rollout/base.py"))
    registry = next(
        n.value
        for n in ast.walk(base)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_ROLLOUT_REGISTRY"
    )
    assert {k.elts[0].value for k in registry.keys} == set(rules.ROLLOUT_NAMES)
    actor = _verl("workers/config/actor.py")
    modes = re.search(r"valid_loss_agg_modes = \[(.*?)\]", actor, re.S).group(1)
    assert re.findall(r'"([^"]+)"', modes) == list(rules.LOSS_AGG_MODES)
    core = _verl("trainer/ppo/core_algos.py")
    enum = re.search(r"class AdvantageEstimator\(str, Enum\):(.*?)\n\n\n", core, re.S).group(1)
    assert re.findall(r'= "([^"]+)"', enum) == list(rules.ADV_ESTIMATORS)
    assert re.findall(r'@register_policy_loss\("([^"]+)"\)', core) == list(rules.POLICY_LOSSES)
    engine = _verl("workers/config/engine.py")
    assert 'self.strategy in ["fsdp", "fsdp2", "fsdp_turbo"]' in engine
    ray_constants = (Path(ray_file()) / "_private/ray_constants.py").read_text()
    assert "DASHBOARD_CLIENT_MAX_SIZE = 100 * 1024**2" in ray_constants
    assert 'bundle = {"CPU": self.max_colocate_count}' in _verl("single_controller/ray/base.py")
    assert "max_colocate_count: int = 3" in _verl("single_controller/ray/base.py")


def ray_file() -> str:
    import importlib.util

    spec = importlib.util.find_spec("ray")
    assert spec and spec.submodule_search_locations
    return next(iter(spec.submodule_search_locations))
