"""The keys users edit most, grouped for the profile form, each with a short label.

Only key names live here; type, default and help come from verl's own config (`schema`), so a
verl upgrade that drops a key shows up in the test that composes every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.jobs.schema import KeyInfo, key_catalog

GROUPS = ("data", "actor", "rollout", "ref", "critic", "algorithm", "trainer")

_A = "actor_rollout_ref.actor"
_R = "actor_rollout_ref.rollout"

# (group, dotted key, label)
_ENTRIES: tuple[tuple[str, str, str], ...] = (
    ("data", "data.train_files", "train files"),
    ("data", "data.val_files", "validation files"),
    ("data", "data.train_batch_size", "train batch size (prompts)"),
    ("data", "data.max_prompt_length", "max prompt length"),
    ("data", "data.max_response_length", "max response length"),
    ("actor", "actor_rollout_ref.model.path", "model (HF id or path)"),
    ("actor", f"{_A}.optim.lr", "learning rate"),
    ("actor", f"{_A}.ppo_mini_batch_size", "PPO mini-batch size"),
    ("actor", f"{_A}.ppo_micro_batch_size_per_gpu", "micro-batch per GPU"),
    ("actor", f"{_A}.use_kl_loss", "KL loss (GRPO)"),
    ("actor", f"{_A}.kl_loss_coef", "KL loss coefficient"),
    ("actor", f"{_A}.kl_loss_type", "KL loss type"),
    ("actor", f"{_A}.entropy_coeff", "entropy coefficient"),
    ("actor", f"{_A}.loss_agg_mode", "loss aggregation"),
    ("actor", f"{_A}.ulysses_sequence_parallel_size", "Ulysses sequence parallel"),
    ("actor", "actor_rollout_ref.model.use_remove_padding", "remove padding"),
    ("actor", "actor_rollout_ref.model.enable_gradient_checkpointing", "gradient checkpointing"),
    ("actor", f"{_A}.fsdp_config.param_offload", "offload params"),
    ("actor", f"{_A}.fsdp_config.optimizer_offload", "offload optimizer"),
    ("rollout", f"{_R}.name", "engine (vllm, sglang, trtllm)"),
    ("rollout", f"{_R}.n", "samples per prompt (n)"),
    ("rollout", f"{_R}.tensor_model_parallel_size", "tensor parallel"),
    ("rollout", f"{_R}.gpu_memory_utilization", "GPU memory fraction"),
    ("rollout", f"{_R}.log_prob_micro_batch_size_per_gpu", "log-prob micro-batch per GPU"),
    ("rollout", f"{_R}.temperature", "temperature"),
    ("rollout", f"{_R}.val_kwargs.do_sample", "sample in validation"),
    (
        "ref",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "log-prob micro-batch per GPU",
    ),
    ("ref", "actor_rollout_ref.ref.fsdp_config.param_offload", "offload params"),
    ("critic", "critic.enable", "critic on (null: with gae)"),
    ("critic", "critic.model.path", "critic model"),
    ("critic", "critic.optim.lr", "learning rate"),
    ("critic", "critic.ppo_micro_batch_size_per_gpu", "micro-batch per GPU"),
    ("algorithm", "algorithm.adv_estimator", "advantage estimator"),
    ("algorithm", "algorithm.use_kl_in_reward", "KL in reward"),
    ("algorithm", "algorithm.kl_ctrl.kl_coef", "KL reward coefficient"),
    ("trainer", "trainer.nnodes", "nodes"),
    ("trainer", "trainer.n_gpus_per_node", "GPUs per node"),
    ("trainer", "trainer.total_epochs", "epochs"),
    ("trainer", "trainer.total_training_steps", "total steps (null: from epochs)"),
    ("trainer", "trainer.save_freq", "save every N steps (-1: never)"),
    ("trainer", "trainer.test_freq", "validate every N steps (-1: never)"),
    ("trainer", "trainer.val_before_train", "validate before training"),
    ("trainer", "trainer.default_local_dir", "checkpoint dir (absolute)"),
    ("trainer", "trainer.project_name", "project"),
    ("trainer", "trainer.experiment_name", "experiment"),
    ("trainer", "trainer.logger", "loggers"),
    ("trainer", "trainer.resume_mode", "resume (auto, disable, resume_path)"),
)

CATALOG_KEYS: tuple[str, ...] = tuple(k for _, k, _ in _ENTRIES)


@dataclass(frozen=True)
class CatalogItem:
    group: str
    key: str
    label: str
    info: KeyInfo | None  # None only if verl dropped the key (a test guards against it)


def catalog() -> list[CatalogItem]:
    """The common keys in form order, each with verl's KeyInfo (composes verl's config once)."""
    infos = key_catalog()
    return [CatalogItem(g, k, label, infos.get(k)) for g, k, label in _ENTRIES]


def by_group() -> dict[str, list[CatalogItem]]:
    out: dict[str, list[CatalogItem]] = {g: [] for g in GROUPS}
    for item in catalog():
        out[item.group].append(item)
    return out


def label(key: str) -> str | None:
    return next((lb for _, k, lb in _ENTRIES if k == key), None)
