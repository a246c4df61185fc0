"""Resume a job from a chosen checkpoint, as verl 0.9 reads it (trainer/ppo/ray_trainer.py,
``RayPPOTrainer._load_checkpoint``):

* ``trainer.resume_mode=resume_path`` makes verl take ``trainer.resume_from_path`` instead of
  ``latest_checkpointed_iteration.txt``;
* ``resume_from_path`` is the ``global_step_N`` folder itself — verl asserts it contains
  "global_step_", sets the step to ``int(path.split("global_step_")[-1])`` (so nothing may
  follow the number, not even a slash), and loads ``PATH/actor``, ``PATH/critic`` and
  ``PATH/data.pt``; a relative path is joined to the driver's working directory.
* each FSDP rank loads ``{model,optim,extra_state}_world_size_W_rank_R.pt`` with *its own* W and R
  (fsdp_checkpoint_manager.py ``load_checkpoint``): a checkpoint saved by another world size
  has no such files and the job fails.
"""

from __future__ import annotations

import posixpath
import re

from tui.jobs.profiles import hydra_value, override_text

_STEP_DIR_RE = re.compile(r"^global_step_(\d+)\Z")


def check_resume_path(path: str) -> str:
    """The normalized ``/…/global_step_N`` folder; ValueError (one line) for anything else."""
    if not path or "\n" in path or "\0" in path:
        raise ValueError("the checkpoint path must be one line")
    if not path.startswith("/"):
        raise ValueError(
            f"{path!r} is relative: verl would resolve it against the job's "
            "working directory; give the absolute global_step_N folder"
        )
    path = posixpath.normpath(path)
    if not _STEP_DIR_RE.match(posixpath.basename(path)):
        raise ValueError(
            f"{path}: verl resumes from a global_step_N folder itself "
            "(not its actor/ or the checkpoint root)"
        )
    return path


def resume_values(path: str) -> dict[str, str]:
    """The two trainer keys for a profile's or job form's overrides mapping."""
    return {
        "trainer.resume_mode": "resume_path",
        "trainer.resume_from_path": check_resume_path(path),
    }


def resume_overrides(path: str) -> list[str]:
    """Hydra overrides (verl's command line) that resume from ``path`` (a global_step_N folder).

    >>> resume_overrides("/ckpt/run1/global_step_40")
    ['trainer.resume_mode=resume_path', "trainer.resume_from_path='/ckpt/run1/global_step_40'"]
    """
    return [
        f"{key}={hydra_value(value)}" if key.endswith("_path") else f"{key}={value}"
        for key, value in resume_values(path).items()
    ]


def world_size_warning(
    step_world_size: int | None, nnodes: int, gpus_per_node: int, *, backend: str = "fsdp"
) -> str | None:
    """One line when the checkpoint's world size differs from the job's
    (``trainer.nnodes × trainer.n_gpus_per_node``, the actor's world size); None when they match.
    """
    job = nnodes * gpus_per_node
    if step_world_size is None:
        return (
            "the checkpoint's world size is unknown (an incomplete save?): "
            f"this job runs {nnodes}×{gpus_per_node} = {job} ranks"
        )
    if step_world_size == job:
        return None
    if backend == "megatron":
        return (
            f"saved by {step_world_size} ranks, this job runs {nnodes}×{gpus_per_node} = "
            f"{job}: Megatron dist checkpoints can reshard the model, but the optimizer only "
            "with dist_ckpt_optim_fully_reshardable — check before resuming"
        )
    return (
        f"saved by {step_world_size} ranks, this job runs {nnodes}×{gpus_per_node} = {job}: "
        f"each rank loads model_world_size_{job}_rank_R.pt, which this checkpoint lacks — "
        "verl will fail to resume (use the same trainer.nnodes × n_gpus_per_node)"
    )


ROOT_KEYS = (
    "trainer.default_local_dir",
    "+trainer.default_local_dir",
    "++trainer.default_local_dir",
)


def profile_root(overrides: dict) -> object | None:
    """A profile's trainer.default_local_dir as written (under any +/++ form), or None."""
    return next((overrides[k] for k in ROOT_KEYS if k in overrides), None)


def default_local_dir_of(record: object) -> str | None:
    """A job's checkpoint root from what it was submitted with: its recorded overrides, else
    its profile file's value. None when neither names an absolute path."""
    value = override_text(getattr(record, "overrides", None) or [], "trainer.default_local_dir")
    if value and value.startswith("/"):
        return value
    path = getattr(record, "profile_path", None)
    if path:
        from pathlib import Path

        from tui.config.yamlfile import ConfigError
        from tui.jobs.profiles import load_profile

        try:
            profile = load_profile(Path(path))
        except (ConfigError, OSError):  # a profile that no longer loads names no root
            return None
        value = str(profile_root(profile.overrides or {}) or "").strip()
        return value if value.startswith("/") else None
    return None
