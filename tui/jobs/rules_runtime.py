"""The rules verl only meets at runtime: the cluster's GPUs and CPUs per node, where a
relative checkpoint dir lands, the working_dir upload size, the job's env (see jobs/rules.py)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tui.fmt import plural
from tui.jobs.rules_base import (
    COMMON_EXCLUDES,
    CPUS_PER_GPU,
    RAY_UPLOAD_LIMIT,
    ClusterResources,
    Problem,
    _Cfg,
)


def _extra_pool_gpus(c: _Cfg) -> int:
    total = 0
    if c.as_bool("reward.reward_model.enable_resource_pool"):
        total += (c.as_int("reward.reward_model.nnodes") or 0) * (
            c.as_int("reward.reward_model.n_gpus_per_node") or 0
        )
    if c.as_bool("distillation.enabled"):
        total += (c.as_int("distillation.nnodes") or 0) * (
            c.as_int("distillation.n_gpus_per_node") or 0
        )
    return total


# -- runtime rules -------------------------------------------------------------------------


RESTART = (
    "then restart Ray (verl-tui up HOSTS --restart; in the cockpit: ctrl+r reloads hosts.yaml, "
    "R restarts Ray on the Cluster screen, 1)"
)


def _names(hosts: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(hosts[:most])
    return shown + (f" and {len(hosts) - most} more" if len(hosts) > most else "")


def _cluster_rules(
    c: _Cfg, out: list[Problem], cluster: ClusterResources, nnodes: int, per_node: int
) -> None:
    """The job's GPUs and CPUs against Ray's nodes; a refusal names the config keys that ask
    less and the hosts.yaml keys that tell Ray more (`num_gpus:` under a host, `ray:
    num_cpus:`), with the hosts they are short on."""
    need = nnodes * per_node + _extra_pool_gpus(c)
    have = cluster.total_gpus
    if have < need:
        few = [n.host for n in cluster.nodes if n.gpus < per_node] or [
            n.host for n in cluster.nodes
        ]
        # verl packs CPUS_PER_GPU CPUs with each GPU: a host with fewer CPUs than that needs
        # ray: num_cpus: too, said now rather than in the refusal after the restart.
        few_cpus = [f"{n.host} {n.cpus:g}" for n in cluster.nodes if n.cpus < CPUS_PER_GPU]
        cpus_fix = (
            f" and ray: num_cpus: {CPUS_PER_GPU} per GPU declared (CPUs now: {_names(few_cpus)})"
            if few_cpus
            else ""
        )
        hosts_fix = (
            f", or declare each host's GPUs (hosts.yaml num_gpus: under {_names(few)}"
            f"{cpus_fix}), {RESTART}"
            if few
            else ""
        )
        out.append(
            Problem(
                "trainer.nnodes",
                f"needs {need} GPUs but Ray sees {have:g} on "
                f"{plural(len(cluster.nodes), 'node')}: lower trainer.nnodes / "
                f"trainer.n_gpus_per_node, or bring nodes up{hosts_fix}",
            )
        )
        return
    # One STRICT_PACK placement group per node: n_gpus_per_node bundles of {CPU: 3, GPU: 1}.
    need_cpu = CPUS_PER_GPU * per_node
    fits = 0
    short: list[str] = []
    fix_gpus: list[str] = []
    fix_cpus = False
    for node in cluster.nodes:
        groups = min(int(node.gpus // per_node), int(node.cpus // need_cpu))
        fits += groups
        if groups == 0 and node.gpus > 0:
            if node.gpus < per_node:
                short.append(f"{node.host} ({node.gpus:g} GPUs)")
                fix_gpus.append(node.host)
            else:
                short.append(f"{node.host} ({node.cpus:g} CPUs)")
                fix_cpus = True
    if fits < nnodes:
        fixes = []
        if fix_cpus:
            fixes.append(f"hosts.yaml ray: num_cpus: {need_cpu} (or more)")
        if fix_gpus:
            fixes.append(f"hosts.yaml num_gpus: {per_node} under {_names(fix_gpus)}")
        out.append(
            Problem(
                "trainer.n_gpus_per_node",
                f"needs {plural(nnodes, 'node')} with ≥ {per_node} GPUs and ≥ {need_cpu} "
                f"CPUs each (verl packs {CPUS_PER_GPU} CPUs per GPU), {fits} "
                f"{'has' if fits == 1 else 'have'} them"
                + (f"; short: {', '.join(short)}" if short else "")
                + (f"; fix: {' and '.join(fixes)}, {RESTART}" if fixes else ""),
            )
        )


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
    tilde = "; ~ is not expanded by verl: it is a folder named '~'" if path.startswith("~") else ""
    if vanishes:
        # The working_dir copy is Ray's: deleted with the package, so saved steps are lost and
        # a later run cannot resume from them.
        out.append(
            Problem(
                "trainer.default_local_dir",
                f"relative: with a working_dir it lands in Ray's copy on each node "
                f"({where}), deleted with it{tilde}; use an absolute path (e.g. "
                "/data/checkpoints/…)"
                + ("" if saves else " (nothing is saved while save_freq ≤ 0)"),
                "error" if saves else "warn",
            )
        )
        return
    out.append(
        Problem(
            "trainer.default_local_dir",
            f"relative: lands in the job's working directory on each node, {where}"
            f"{tilde}; each node keeps its own ranks' shards there",
            "warn",
        )
    )


def _working_dir_rules(out: list[Problem], size: int, excludes: Sequence[str]) -> None:
    mib = size / 1024**2
    missing = [e for e in COMMON_EXCLUDES if e not in excludes]
    hint = (
        f": add excludes such as {', '.join(missing[:5])}"
        if missing
        else ": exclude the large folders it holds"
    )
    if size >= RAY_UPLOAD_LIMIT:
        out.append(
            Problem(
                "runtime_env.working_dir", f"{mib:.0f} MiB is over Ray's 100 MiB upload limit{hint}"
            )
        )
    elif size >= RAY_UPLOAD_LIMIT // 2:
        out.append(
            Problem(
                "runtime_env.working_dir",
                f"{mib:.0f} MiB is close to Ray's 100 MiB upload limit{hint}",
                "warn",
            )
        )


_VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def check_runtime_env(
    env_vars: Mapping[str, str], cfg: Mapping[str, Any] | None = None
) -> list[Problem]:
    """The job's env_vars against what verl's workers accept
    (single_controller/base/worker.py::_setup_env_cuda_visible_devices)."""
    out: list[Problem] = []
    key = "runtime_env.env_vars"
    if env_vars.get("ROCR_VISIBLE_DEVICES") and any(env_vars.get(v) for v in _VISIBLE):
        out.append(
            Problem(
                f"{key}.ROCR_VISIBLE_DEVICES",
                "verl refuses ROCR_VISIBLE_DEVICES together with HIP/CUDA_VISIBLE_"
                "DEVICES: keep only HIP_VISIBLE_DEVICES",
            )
        )
    hip, cuda = env_vars.get("HIP_VISIBLE_DEVICES"), env_vars.get("CUDA_VISIBLE_DEVICES")
    if hip and cuda and hip != cuda:
        out.append(
            Problem(
                f"{key}.HIP_VISIBLE_DEVICES",
                "differs from CUDA_VISIBLE_DEVICES: verl requires the same value",
            )
        )
    if cfg is not None:
        logger = _Cfg(cfg, []).get("trainer.logger")
        loggers = [logger] if isinstance(logger, str) else list(logger or [])
        if (
            "wandb" in loggers
            and not env_vars.get("WANDB_API_KEY")
            and not env_vars.get("WANDB_MODE")
        ):
            out.append(
                Problem(
                    "trainer.logger",
                    "wandb needs WANDB_API_KEY in runtime_env.env_vars (or `wandb "
                    "login` on every host), or drop wandb from the loggers",
                    "warn",
                )
            )
    return out


def is_truthy(value: str | None) -> bool:
    if not value:
        return False
    return re.fullmatch(r"(?i)0|false|no|off|", value.strip()) is None
