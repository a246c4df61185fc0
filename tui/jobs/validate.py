"""A profile checked end to end: composed with verl's config, then verl's rules and the
runtime ones against the live cluster. What the form re-runs after every change (the base
config is composed once per process; a re-check composes only the current overrides)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.jobs.profiles import Profile, check_set, override_key, to_hydra_overrides
from tui.jobs.rules import (
    POST_MORTEM_KEY,
    ClusterResources,
    Problem,
    check_rules,
    check_runtime_env,
    is_truthy,
)
from tui.jobs.schema import ComposeError, compose_detailed, custom_searchpath, resolve_config
from tui.jobs.unknown_values import shell_references, unknown_keys
from tui.jobs.verl_compose import entry_config

# Bad keys are dropped one by one and composed again, so every refused key is reported; past
# this many (a compose is ~0.3 s) the rest are counted ("N more … not checked"), never
# dropped silently.
MAX_COMPOSE_RETRIES = 100


@dataclass
class Report:
    problems: list[Problem]
    config: dict[str, Any] | None  # the composed config; None when it did not compose
    overrides: list[str] = field(default_factory=list)  # what was composed, in Hydra syntax
    from_cluster: dict[str, int] = field(default_factory=dict)  # keys defaulted from the cluster

    @property
    def ok(self) -> bool:
        return self.config is not None and not any(p.level == "error" for p in self.problems)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "warn"]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": [p.to_json() for p in self.problems]}


def cluster_shape(cluster: ClusterResources) -> tuple[int, int]:
    """(nnodes, n_gpus_per_node) the cluster offers: its GPU nodes, the smallest GPU count."""
    gpus = [int(n.gpus) for n in cluster.nodes if n.gpus >= 1]
    return (len(gpus), min(gpus)) if gpus else (0, 0)


def _compose(
    overrides: list[str],
    config_name: str | None = None,
    config_path: str | None = None,
    unknown: dict[str, str] | None = None,
) -> tuple[dict[str, Any] | None, list[str], list[Problem], set[str]]:
    """Compose, dropping an override that fails and retrying, so every bad key is reported.
    A key in `unknown` (its value is shell text known only when the script runs) whose value
    fails is a warning naming what it waits for, not an error; a key that verl's config does
    not have is an error whatever its value (returned last: those keys' values are moot)."""
    unknown = unknown or {}
    problems: list[Problem] = []
    wrong_keys: set[str] = set()
    current = list(overrides)
    for _ in range(MAX_COMPOSE_RETRIES):
        try:
            result = compose_detailed(current, config_name, config_path)
        except ComposeError as exc:
            key = (exc.key or "").lstrip("+~")
            if key in unknown and not exc.about_key:
                problems.append(unknown_problem(key, unknown[key]))
            else:
                problems.append(Problem(exc.key, exc.message))
                wrong_keys.add(key)
            if exc.key in ("config_name", "config_path"):
                return None, current, problems, wrong_keys
            drop = [o for o in current if exc.key and override_key(o) == exc.key.lstrip("+~")]
            if not drop:  # the failing key is inside a value (a mapping): find its override
                drop = [o for o in current if exc.key and exc.key.startswith(override_key(o) + ".")]
            if not drop:
                return None, current, problems, wrong_keys
            current = [o for o in current if o not in drop[:1]]
            continue
        for key in result.unresolved:
            if key not in unknown:
                problems.append(
                    Problem(key, "its ${…} interpolation does not resolve: kept as text", "warn")
                )
        return result.config, current, problems, wrong_keys
    problems.append(
        Problem(
            None,
            f"and {len(current)} more overrides not checked: the check stopped after "
            f"{MAX_COMPOSE_RETRIES} refused keys (fix the keys above and check again)",
        )
    )
    return None, current, problems, wrong_keys


def unknown_problem(key: str, refs: str) -> Problem:
    """The one finding about a key whose value the script computes when it runs."""
    return Problem(
        key,
        f"unknown until the script runs (depends on {refs}): not checked here; set the "
        "value in the profile to check it",
        "warn",
    )


def _unknown_findings(problems: list[Problem], unknown: dict[str, str]) -> list[Problem]:
    """Findings about keys known only when the script runs become warnings naming what they
    wait for: on the key itself, one line; a finding that names such a key (`nnodes ×
    n_gpus_per_node`), its message kept after what it depends on."""
    if not unknown:
        return problems
    out: list[Problem] = []
    said: set[str] = set()
    words = {key.rsplit(".", 1)[-1]: key for key in unknown}
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b")
    for p in problems:
        key = (p.key or "").lstrip("+~")
        if key in unknown:
            if key not in said:
                said.add(key)
                out.append(unknown_problem(key, unknown[key]))
            continue
        m = pattern.search(p.message) if p.level == "error" else None
        if m is not None:
            refs = unknown[words[m.group(1)]]
            p = Problem(
                p.key,
                f"depends on {refs} (unknown until the script runs): {p.message}",
                "warn",
            )
        out.append(p)
    for key, refs in unknown.items():
        if key not in said:
            out.append(unknown_problem(key, refs))
    return out


def check_profile(
    profile: Profile,
    *,
    sets: Sequence[str] = (),
    cluster: ClusterResources | None = None,
    working_dir_bytes: int | None = None,
    post_mortem: bool | None = None,
) -> Report:
    """Compose `profile` (+ `sets`, Hydra override strings as on verl's command line) and check
    it. trainer.nnodes / n_gpus_per_node follow the live cluster unless the profile or a --set
    pins them. ConfigError for a malformed --set; SchemaError when verl is not installed."""
    for line in sets:
        check_set(line)
    problems: list[Problem] = []
    try:
        overrides = to_hydra_overrides(profile.overrides)
    except ValueError as exc:  # the model validates values; this is belt and braces
        return Report([Problem(None, str(exc))], None)
    pinned = {override_key(o) for o in [*overrides, *sets]}
    from_cluster: dict[str, int] = {}
    if cluster is not None:
        nnodes, per_node = cluster_shape(cluster)
        for key, value in (("trainer.nnodes", nnodes), ("trainer.n_gpus_per_node", per_node)):
            if key not in pinned and value:
                from_cluster[key] = value
    all_overrides = [*overrides, *sets, *(f"{k}={v}" for k, v in from_cluster.items())]
    unknown = unknown_keys(profile.overrides)
    config_name, config_path = profile.config_name, profile.config_path
    unknown_config = shell_references(config_path or "") or shell_references(config_name or "")
    if unknown_config:
        # The config the script names is known only when it runs: verl's own is checked.
        problems.append(
            Problem(
                "config_path" if shell_references(config_path or "") else "config_name",
                f"unknown until the script runs (depends on {', '.join(unknown_config)}): "
                "checked against verl's own ppo_trainer instead",
                "warn",
            )
        )
        config_name = config_path = None
    try:  # the entry point's own config when the profile names none (verl_compose.py)
        config_name, config_path = entry_config(profile.entrypoint, config_name, config_path)
    except ComposeError as exc:
        return Report([Problem(exc.key, exc.message)], None)
    config, used, compose_problems, wrong_keys = _compose(  # SchemaError: verl missing
        all_overrides, config_name, config_path, unknown
    )
    unknown = {k: v for k, v in unknown.items() if k not in wrong_keys}
    if unknown_config:  # keys of the unknown config may be missing from verl's own
        compose_problems = [Problem(p.key, p.message, "warn") for p in compose_problems]
    notes = [] if unknown_config else _config_notes(profile, config_name, config_path)
    problems += compose_problems + notes
    env = profile.runtime_env.env_vars
    if post_mortem is None:
        post_mortem = is_truthy(env.get("RAY_DEBUG_POST_MORTEM"))
    if config is not None:
        problems += check_rules(
            config,
            cluster,
            working_dir_bytes=working_dir_bytes,
            post_mortem=post_mortem,
            excludes=profile.runtime_env.excludes,
            working_dir=profile.runtime_env.working_dir,
        )
        problems += check_runtime_env(env, config)
    elif post_mortem and cluster is not None and cluster.hosts_without_debugpy:
        problems.append(
            Problem(
                POST_MORTEM_KEY,
                "debugpy>=1.8 missing on " + ", ".join(cluster.hosts_without_debugpy),
            )
        )
    problems = _unknown_findings(problems, unknown)
    problems.sort(key=lambda p: p.level != "error")
    # main_ppo's --config-path/--config-name lead the command line: what is submitted.
    return Report(problems, config, [*profile.hydra_args(), *used], from_cluster)


def _config_notes(
    profile: Profile, config_name: str | None, config_path: str | None
) -> list[Problem]:
    """A config (the profile's custom one, or its entry point's own) whose Hydra search path is
    relative: it is read from the job's working directory when the job runs, not from where
    the check ran (verl 0.9.1's one_step_off_policy config searches file://verl/trainer/config)."""
    if not config_path:
        return []
    try:
        name, custom = resolve_config(config_name, config_path)
    except ComposeError:
        return []  # _compose reported it
    out = []
    for written, _ in custom_searchpath(custom, name) if custom else ():
        rel = written.removeprefix("file://")
        if written.startswith("file://") and not rel.startswith("/"):
            whose = "" if profile.config_path else f"{profile.entrypoint}'s own "
            out.append(
                Problem(
                    "config_path" if profile.config_path else "entrypoint",
                    f"{whose}{name}.yaml searches {written}, relative to the "
                    "job's working directory: the job must run from a "
                    "verl checkout (runtime_env.working_dir)"
                    + (", or write pkg://verl.trainer.config there" if not whose else ""),
                    "warn",
                )
            )
    return out
