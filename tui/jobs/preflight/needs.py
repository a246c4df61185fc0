"""What one verl config needs of every host, read from the composed config with no host
asked: its data and model paths, the HF models it would download, the modules verl's code path
imports for it (imports.py), and the host limits it meets; and the helpers that turn findings
into a submission's verdict."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.cluster.doctor.findings import Finding, Status
from tui.config.hosts import Inventory
from tui.errors import VerlTuiError
from tui.jobs.preflight.imports import Alternative, Required, alternatives, required_modules
from tui.jobs.rules_base import need_critic

DEFAULT_TIMEOUT = 30.0
NOFILE_MIN = 65536  # Ray raises its soft limit to the hard one: the hard limit is what counts
SHM_MIN = 1 << 30  # NCCL's shared-memory transport and vLLM want more than Docker's 64 MiB
RAY_TMP_MIN = 10 << 30  # Ray's logs, spilled objects and working_dir copies
CKPT_MIN = 20 << 30  # checkpoint room when the model's size is unknown here
# One FSDP checkpoint of a bf16 model of W weight bytes: fp32 params (2W) + Adam moments (4W).
CKPT_FACTOR = 6
OBJECT_STORE_FRACTION = 0.3  # Ray's default object store: 30 % of available memory
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_SHELL_VAR = re.compile(r"\$(?!\{oc\.env:)\{?([A-Za-z_][A-Za-z0-9_]*)")
_SHELL_VAR_FULL = re.compile(
    r"\$\{(?!oc\.env:)([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)
_OC_ENV = "${oc.env:"

DATA_KEYS = ("data.train_files", "data.val_files")
FILE_KEYS = (
    "data.custom_cls.path",
    "custom_reward_function.path",
    "reward.custom_reward_function.path",
)
ACTOR_MODEL_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "actor_rollout_ref.model.hf_config_path",
)
CRITIC_MODEL_KEYS = ("critic.model.path", "critic.model.tokenizer_path")
CKPT_KEY = "trainer.default_local_dir"

# What the job imports when it starts, besides its entry point: verl's dataset module, which
# brings the data stack (datasets → pyarrow → numpy, pandas) the TaskRunner loads first.
DATA_MODULE = "verl.utils.dataset.rl_dataset"
# The host waits this much less than the preflight's own deadline for the start-up imports
# (tui/remote/startup_imports.py); past it the answer is cached there for the next check.
STARTUP_MARGIN = 10.0

# Where transformers falls back without flash-attn (its `kernels` hub package).
FALLBACKS = {"flash_attn": ("kernels",)}


class PreflightFailed(VerlTuiError, title="preflight failed"):
    """A submission the preflight refused; `findings` holds every row (failures first)."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        bad = [f for f in findings if f.status == "fail"]
        first = bad[0] if bad else None
        where = f"{first.host}: " if first and first.host else ""
        super().__init__(
            f"preflight: {len(bad)} problem(s)"
            + (f"; first: {first.title}: {where}{first.finding}" if first else "")
        )


# ---- what the job needs (from the composed config, no host needed) -------------------------


@dataclass(frozen=True)
class PathNeed:
    key: str
    value: str  # the config's raw text (${oc.env:…} unresolved: each host resolves it)
    model: bool = False


@dataclass
class JobNeeds:
    paths: list[PathNeed] = field(default_factory=list)
    hf_ids: list[tuple[str, str]] = field(default_factory=list)  # (key, org/name)
    modules: list[Required] = field(default_factory=list)
    # module → the config switches that do without it, each with what it imports instead
    alternatives: dict[str, list[Alternative]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # import map entries verl no longer has
    local: list[Finding] = field(default_factory=list)  # decided without hosts (~, $VAR)
    env: dict[str, str] = field(default_factory=dict)  # the job's env_vars
    ckpt_dir: str | None = None
    trained_models: list[str] = field(default_factory=list)  # keys whose size a ckpt holds
    object_store: int | None = None
    startup: list[str] = field(default_factory=list)  # modules the job imports at start-up

    def request(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """What the remote part gets on stdin (`timeout`: the preflight's deadline, which
        bounds the host's wait for the start-up imports)."""
        return {
            "startup": {
                "modules": self.startup,
                "wait": max(1.0, timeout - STARTUP_MARGIN),
            },
            "env": self.env,
            "paths": [{"value": p.value, "model": p.model} for p in self.paths],
            "hf_ids": sorted({i for _, i in self.hf_ids}),
            "modules": sorted(self.module_names()),
            "disks": {"ray_tmp": "", **({"ckpt": self.ckpt_dir} if self.ckpt_dir else {})},
        }

    def module_names(self) -> set[str]:
        """Every module a host is asked for: the job's, their fallbacks, and what each
        alternative config would import."""
        mods = {r.module for r in self.modules}
        mods |= {m.module for alts in self.alternatives.values() for a in alts for m in a.modules}
        return mods | {f for m in list(mods) for f in FALLBACKS.get(m, ())}


def _get(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _values(v: Any) -> list[str]:
    if v is None or v == "":
        return []
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v if x not in (None, "")]
    return [str(v)]


def _f(
    check: str, title: str, status: Status, host: str | None, text: str, fix: str = ""
) -> Finding:
    return Finding(check, title, status, host, " ".join(text.split()), " ".join(fix.split()))


def _after_home(value: str) -> str:
    rest = value[1:].lstrip("/")
    return "${oc.env:HOME}/" + rest if rest else "${oc.env:HOME}"


def classify_value(key: str, value: str, *, model: bool, working_dir: str | None) -> str | Finding:
    """'path', 'hf', 'remote' (a URI: not checked), or a Finding decided here (~, $VAR,
    a relative path)."""
    check = f"path:{key}"
    if "://" in value:
        return "remote"
    if value.startswith("~"):
        return _f(
            check,
            key,
            "fail",
            None,
            f"{key}={value}: '~' is not expanded by Hydra or verl (it looks for '<cwd>/{value}')",
            f"{key}={_after_home(value)} (or an absolute path)",
        )
    shell = _SHELL_VAR.search(value)
    if shell:
        fixed = _SHELL_VAR_FULL.sub(lambda m: _OC_ENV + (m.group(1) or m.group(2)) + "}", value)
        return _f(
            check,
            key,
            "fail",
            None,
            f"{key}={value}: ${shell.group(1)} is not expanded by Hydra or verl",
            f"{key}={fixed} (each host resolves it) or an absolute path",
        )
    if value.startswith("/") or value.startswith(_OC_ENV):
        return "path"
    if model and _HF_ID.match(value):
        return "hf"
    status: Status = "warn" if working_dir else "fail"
    return _f(
        check,
        key,
        status,
        None,
        f"{key}={value} is relative: verl opens it in the job's working directory (Ray's copy "
        f"of {'working_dir' if working_dir else 'an empty folder: no working_dir'})",
        f"{key}=/absolute/path (or ${{oc.env:HOME}}/…)",
    )


def raw_config(overrides: Sequence[str]) -> dict[str, Any]:
    """verl's composed config with interpolations NOT resolved (each host resolves oc.env),
    from a submission's overrides (main_ppo's --config-path/--config-name first)."""
    from omegaconf import OmegaConf

    from tui.jobs.verl_compose import compose_cfg

    name = path = None
    rest = []
    for o in overrides:
        if o.startswith("--config-name="):
            name = o.split("=", 1)[1]
        elif o.startswith("--config-path="):
            path = o.split("=", 1)[1]
        elif not o.startswith("--"):
            rest.append(o)
    cfg = compose_cfg(rest, name, path)
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def job_needs(
    raw: Mapping[str, Any],
    resolved: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    verl_root: Path | None,
    working_dir: str | None = None,
    object_store: int | None = None,
    entrypoint: str | None = None,
) -> JobNeeds:
    """What the config needs of the hosts. `raw`: the composed config unresolved (paths keep
    ${oc.env:…}); `resolved`: the same resolved here (for switches and non-env values)."""
    needs = JobNeeds(env=dict(env), object_store=object_store)
    model_keys = list(ACTOR_MODEL_KEYS)
    needs.trained_models.append("actor_rollout_ref.model.path")
    if need_critic(resolved):
        model_keys += CRITIC_MODEL_KEYS
        needs.trained_models.append("critic.model.path")
    if _get(resolved, "reward.reward_model.enable"):
        model_keys.append("reward.reward_model.model_path")
    if _get(resolved, "reward_model.enable"):
        model_keys.append("reward_model.model.path")
    wanted = [(k, False) for k in (*DATA_KEYS, *FILE_KEYS)] + [(k, True) for k in model_keys]
    for key, model in wanted:
        raw_v, res_v = _get(raw, key), _get(resolved, key)
        # Keep ${oc.env:…} for the host; any other interpolation is the config's own.
        use = raw_v if _OC_ENV in str(raw_v) else res_v
        for value in _values(use):
            kind = classify_value(key, value, model=model, working_dir=working_dir)
            if isinstance(kind, Finding):
                needs.local.append(kind)
            elif kind == "path":
                needs.paths.append(PathNeed(key, value, model))
            elif kind == "hf":
                needs.hf_ids.append((key, value))
    ckpt = _get(raw, CKPT_KEY)
    ckpt = ckpt if _OC_ENV in str(ckpt) else _get(resolved, CKPT_KEY)
    save_freq = _get(resolved, "trainer.save_freq")
    absolute = isinstance(ckpt, str) and (ckpt.startswith("/") or ckpt.startswith(_OC_ENV))
    if absolute and isinstance(save_freq, int) and save_freq > 0:
        needs.ckpt_dir = str(ckpt)
    if verl_root is not None:
        needs.modules, needs.notes = required_modules(resolved, verl_root)
        needs.alternatives = alternatives(resolved, verl_root, needs.modules)
    needs.startup = startup_modules(entrypoint, verl_root)
    return needs


def startup_modules(entrypoint: str | None, verl_root: Path | None) -> list[str]:
    """The modules the job imports as it starts: its entry point (verl's trainer module),
    then verl's dataset module where this verl has it (the data stack)."""
    from tui.jobs.verl_entries import MAIN_PPO
    from tui.jobs.verl_imports import module_file

    out = [entrypoint or MAIN_PPO]
    if verl_root is not None and module_file(verl_root, DATA_MODULE) is not None:
        out.append(DATA_MODULE)
    return out


def entrypoint_of(argv: Sequence[str]) -> str | None:
    """The module a submission's command runs (`python -m MODULE …`), else None."""
    for flag, value in itertools.pairwise(argv):
        if flag == "-m":
            return value
    return None


# ---- one submission -----------------------------------------------------------------------


def configs_for(overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(raw, resolved) composed configs of a submission's overrides (blocking: compose)."""
    from tui.jobs.verl_compose import _to_plain

    raw = raw_config(overrides)
    from omegaconf import OmegaConf

    resolved, _ = _to_plain(OmegaConf.create(raw))
    return raw, resolved


def needs_for(
    inv: Inventory,
    overrides: Sequence[str],
    env: Mapping[str, str],
    working_dir: str | None = None,
    entrypoint: str | None = None,
) -> JobNeeds:
    """The needs of a job from its Hydra overrides (main_ppo's --config-path/--config-name
    first) and its env_vars; `entrypoint`: the verl module it runs (default main_ppo).
    Blocking (composes); SchemaError when the config cannot be read."""
    from tui.jobs.verl_select import SchemaError, current_source

    raw, resolved = configs_for(overrides)
    try:
        root: Path | None = current_source().root
    except SchemaError:
        root = None
    needs = job_needs(
        raw,
        resolved,
        env=env,
        verl_root=root,
        working_dir=working_dir,
        object_store=inv.ray.object_store_memory,
        entrypoint=entrypoint,
    )
    if root is None:
        needs.notes.append("verl's source is not readable here: its imports were not checked")
    return needs


def failed(findings: Sequence[Finding]) -> bool:
    return any(f.status == "fail" for f in findings)


# ---- a profile (verl-tui check --profile, the job form) -----------------------------------


def problem_findings(problems: Sequence[Any]) -> list[Finding]:
    """verl's and the runtime rules' Problems (tui.jobs.rules) as Findings, check "profile"."""
    return [
        _f(
            "profile",
            "profile",
            "fail" if p.level == "error" else "warn",
            None,
            f"{p.key or 'profile'}: {p.message}",
        )
        for p in problems
    ]


def needs_for_profile(
    inv: Inventory, profile: Any, sets: Sequence[str] = (), cluster: Any = None
) -> tuple[list[Finding], JobNeeds | None]:
    """(the profile's validation findings, its needs or None when it does not compose).
    Blocking (composes). `profile`: tui.jobs.profiles.Profile; ConfigError for a bad --set."""
    from tui.jobs.submit import merged_env
    from tui.jobs.validate import check_profile

    report = check_profile(profile, sets=sets, cluster=cluster)
    found = problem_findings(report.problems)
    if report.config is None:
        return found, None

    env = merged_env(inv, profile.runtime_env.env_vars)
    return found, needs_for(
        inv, report.overrides, env, profile.runtime_env.working_dir, profile.entrypoint
    )


def needs_preflight(sub: Any) -> bool:
    """A verl job that will open its data and model: built from a profile, and not main_ppo's
    `--cfg job` (it prints the composed config and exits, touching nothing)."""
    argv = list(getattr(sub, "entrypoint_argv", []))
    printing = any(pair == ("--cfg", "job") for pair in itertools.pairwise(argv))
    return sub.profile is not None and not printing


def as_problems(findings: Sequence[Finding]) -> list[Any]:
    """The preflight's failures and warnings as the form's Problems: a path/HF row on its
    config key's field, the rest (imports, limits) in the problems box; host and fix inline."""
    from tui.jobs.rules_base import Problem

    out = []
    for f in findings:
        if f.status == "ok":
            continue
        kind, _, key = f.check.partition(":")
        where = f"{f.host}: " if f.host else ""
        fix = f" — fix: {f.fix}" if f.fix else ""
        field = key if kind in ("path", "hf") else None
        label = "" if field else f"{f.title}: "
        text = f"preflight: {label}{where}{f.finding}{fix}"
        out.append(Problem(field, text, "error" if f.status == "fail" else "warn"))
    return out
