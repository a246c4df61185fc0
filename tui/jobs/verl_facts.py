"""What the selected verl itself says about the values it accepts, read from its source with
``ast`` (verl is never imported), so the config rules (jobs/rules.py) hold for the verl the job
runs rather than for the one they were written against.

Each fact cites where it is read from; a fact the source does not state (an older layout, a
file moved) is None, and the rule that needs it says nothing rather than guess. A verl whose
version is unknown makes its version-bound refusals warnings (`VerlFacts.level`).

- rollout engines and modes: workers/rollout/base.py ``_ROLLOUT_REGISTRY`` keys
  ``(name, mode)`` (verl ≥ 0.6); before it, the names ``ActorRolloutRefWorker._build_rollout``
  compares ``rollout_name`` with (workers/fsdp_workers.py: 0.4–0.5 build hf/vllm/sglang there)
- refused rollout modes: workers/config/rollout.py ``RolloutConfig.__post_init__``'s
  ``if self.mode == "X": raise …`` (verl ≥ 0.7 refuses sync; 0.4–0.6 default to it)
- loss_agg_mode: workers/config/actor.py ``valid_loss_agg_modes``
- FSDP strategies: workers/config/engine.py, the FSDP engine config's ``assert self.strategy in``
- LR schedulers: workers/config/optimizer.py ``assert self.lr_scheduler_type in``
- KL estimators: trainer/ppo/core_algos.py, what ``kl_penalty`` is compared with (a branch that
  only raises, "full", is not one)
- policy losses: ``@register_policy_loss("name")`` and what workers/actor/dp_actor.py tests
  ``loss_mode`` for itself (0.4–0.5: vanilla); advantage estimators: ``AdvantageEstimator``
- legacy reward blocks: whether trainer/main_ppo.py migrates them (``migrate_legacy_reward…``)
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

from tui.jobs.rules_base import CHOICES, RESUME_MODES, A, Level, R
from tui.jobs.verl_select import SchemaError, VerlSource, current_source

REGISTRY_FILE = "workers/rollout/base.py"
WORKER_FILE = "workers/fsdp_workers.py"
ROLLOUT_CONFIG_FILE = "workers/config/rollout.py"
ACTOR_CONFIG_FILE = "workers/config/actor.py"
ENGINE_CONFIG_FILE = "workers/config/engine.py"
OPTIM_CONFIG_FILE = "workers/config/optimizer.py"
CORE_ALGOS_FILE = "trainer/ppo/core_algos.py"
DP_ACTOR_FILE = "workers/actor/dp_actor.py"
MAIN_FILE = "trainer/main_ppo.py"
# Every file read here: verl_source.py ships them from the head with the config.
SOURCE_FILES = (
    REGISTRY_FILE,
    WORKER_FILE,
    ROLLOUT_CONFIG_FILE,
    ACTOR_CONFIG_FILE,
    ENGINE_CONFIG_FILE,
    OPTIM_CONFIG_FILE,
    CORE_ALGOS_FILE,
    DP_ACTOR_FILE,
    MAIN_FILE,
)


@dataclass(frozen=True)
class VerlFacts:
    version: str | None
    where: str  # "verl 0.5.0 on node1", as messages name it
    # rollout name → the modes verl registers for it (() : any mode; not stated by that verl)
    rollouts: dict[str, tuple[str, ...]] | None = None
    rollout_cite: str = ""
    refused_modes: dict[str, str] = field(default_factory=dict)  # mode → verl's own message
    loss_agg_modes: tuple[str, ...] | None = None
    fsdp_strategies: tuple[str, ...] | None = None
    lr_schedulers: tuple[str, ...] | None = None
    kl_estimators: tuple[str, ...] | None = None
    policy_losses: tuple[str, ...] | None = None
    adv_estimators: tuple[str, ...] | None = None
    migrates_legacy_reward: bool = False

    @property
    def known(self) -> bool:
        return self.version is not None

    def level(self, level: Level = "error") -> Level:
        """A version-bound refusal blocks only when the version it reasons about is known."""
        return level if self.known else "warn"


NO_VERL = VerlFacts(None, "verl (not read)")


def where(source: VerlSource) -> str:
    version = source.version or "(unknown version)"
    return f"verl {version} on {source.host}" if source.host else f"verl {version} in this Python"


def current_facts() -> VerlFacts:
    """The facts of the selected verl (jobs/verl_select.py); NO_VERL when there is none."""
    try:
        source = current_source()
    except SchemaError:
        return NO_VERL
    return facts_for(source.root, source.version, where(source))


@functools.cache
def facts_for(root: Path, version: str | None, label: str) -> VerlFacts:
    rollouts, cite = _rollouts(root)
    return VerlFacts(
        version=version,
        where=label,
        rollouts=rollouts,
        rollout_cite=cite,
        refused_modes=_refused_modes(root),
        loss_agg_modes=_assigned_list(root / ACTOR_CONFIG_FILE, "valid_loss_agg_modes"),
        fsdp_strategies=_asserted_in(root / ENGINE_CONFIG_FILE, "strategy", "FSDP"),
        lr_schedulers=_asserted_in(root / OPTIM_CONFIG_FILE, "lr_scheduler_type", ""),
        kl_estimators=_kl_estimators(root),
        policy_losses=_policy_losses(root),
        adv_estimators=_enum_values(root / CORE_ALGOS_FILE, "AdvantageEstimator"),
        migrates_legacy_reward=_mentions(root / MAIN_FILE, "migrate_legacy_reward"),
    )


# ---- reading verl's source -----------------------------------------------------------------


@functools.cache
def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _strings(node: ast.AST | None) -> tuple[str, ...]:
    """The string constants of a literal list/tuple/set (or one string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return tuple(
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        )
    return ()


def _attr_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _rollouts(root: Path) -> tuple[dict[str, tuple[str, ...]] | None, str]:
    tree = _tree(root / REGISTRY_FILE)
    for n in ast.walk(tree) if tree else ():
        if (
            isinstance(n, ast.Assign)
            and any(_attr_name(t) == "_ROLLOUT_REGISTRY" for t in n.targets)
            and isinstance(n.value, ast.Dict)
        ):
            out: dict[str, tuple[str, ...]] = {}
            for k in n.value.keys:
                pair = _strings(k)
                if len(pair) == 2:
                    out[pair[0]] = (*out.get(pair[0], ()), pair[1])
            if out:
                return out, f"verl/{REGISTRY_FILE} _ROLLOUT_REGISTRY"
    tree = _tree(root / WORKER_FILE)
    build = (
        next(
            (
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.name == "_build_rollout"
            ),
            None,
        )
        if tree
        else None
    )
    names: dict[str, tuple[str, ...]] = {}
    for n in ast.walk(build) if build else ():
        if isinstance(n, ast.Compare) and _attr_name(n.left) in ("rollout_name", "name"):
            for op, right in zip(n.ops, n.comparators, strict=False):
                if isinstance(op, (ast.Eq, ast.In)):
                    for s in _strings(right):
                        names.setdefault(s, ())
    if names:
        return names, f"verl/{WORKER_FILE} _build_rollout"
    return None, ""


def _raise_text(body: list[ast.stmt]) -> str | None:
    """The message of a block that raises (its string constants joined), else None."""
    for s in body:
        if isinstance(s, ast.Raise):
            parts = [
                n.value
                for n in ast.walk(s)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            return " ".join("".join(parts).split()) or "refused"
    return None


def _refused_modes(root: Path) -> dict[str, str]:
    tree = _tree(root / ROLLOUT_CONFIG_FILE)
    out: dict[str, str] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)) if tree else ():
        if cls.name != "RolloutConfig":
            continue
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "__post_init__"):
                continue
            for n in ast.walk(fn):
                if (
                    isinstance(n, ast.If)
                    and isinstance(n.test, ast.Compare)
                    and _attr_name(n.test.left) == "mode"
                    and len(n.test.ops) == 1
                    and isinstance(n.test.ops[0], ast.Eq)
                ):
                    text = _raise_text(n.body)
                    for mode in _strings(n.test.comparators[0]):
                        if text:
                            out[mode] = text
    return out


def _assigned_list(path: Path, name: str) -> tuple[str, ...] | None:
    tree = _tree(path)
    for n in ast.walk(tree) if tree else ():
        if isinstance(n, ast.Assign) and any(_attr_name(t) == name for t in n.targets):
            found = _strings(n.value)
            if found:
                return found
    return None


def _asserted_in(path: Path, attr: str, class_prefix: str) -> tuple[str, ...] | None:
    """`assert self.<attr> in [...]` in the first class named `class_prefix…` that has one."""
    tree = _tree(path)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)) if tree else ():
        if not cls.name.startswith(class_prefix):
            continue
        for n in ast.walk(cls):
            if (
                isinstance(n, ast.Assert)
                and isinstance(n.test, ast.Compare)
                and _attr_name(n.test.left) == attr
                and isinstance(n.test.left, ast.Attribute)
                and len(n.test.ops) == 1
                and isinstance(n.test.ops[0], ast.In)
            ):
                found = _strings(n.test.comparators[0])
                if found:
                    return found
    return None


def _kl_estimators(root: Path) -> tuple[str, ...] | None:
    tree = _tree(root / CORE_ALGOS_FILE)
    fns = [
        n
        for n in (tree.body if tree else [])
        if isinstance(n, ast.FunctionDef) and n.name in ("kl_penalty_forward", "kl_penalty")
    ]
    out: list[str] = []
    for fn in fns:
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.If)
                and isinstance(n.test, ast.Compare)
                and _attr_name(n.test.left) == "kl_penalty"
                and _raise_text(n.body[:1]) is None  # "full": raises NotImplementedError
            ):
                out += [s for c in n.test.comparators for s in _strings(c) if s not in out]
    return tuple(out) or None


def _registered(path: Path, decorator: str) -> tuple[str, ...] | None:
    tree = _tree(path)
    out: list[str] = []
    for n in ast.walk(tree) if tree else ():
        if isinstance(n, ast.Call) and _attr_name(n.func) == decorator and n.args:
            out += [s for s in _strings(n.args[0]) if s not in out]
    return tuple(out) or None


def _policy_losses(root: Path) -> tuple[str, ...] | None:
    """The registered losses, and the ones the actor tests for itself (0.4–0.5: vanilla)."""
    registered = _registered(root / CORE_ALGOS_FILE, "register_policy_loss")
    tree = _tree(root / DP_ACTOR_FILE)
    own = [
        s
        for n in (ast.walk(tree) if tree else ())
        if isinstance(n, ast.Compare) and _attr_name(n.left) == "loss_mode"
        for c in n.comparators
        for s in _strings(c)
    ]
    if registered is None:
        return None
    return tuple(dict.fromkeys([*own, *registered]))


def _enum_values(path: Path, name: str) -> tuple[str, ...] | None:
    tree = _tree(path)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)) if tree else ():
        if cls.name == name:
            values = [
                s for st in cls.body if isinstance(st, ast.Assign) for s in _strings(st.value)
            ]
            return tuple(values) or None
    return None


def _mentions(path: Path, name_part: str) -> bool:
    tree = _tree(path)
    return any(
        (isinstance(n, ast.Name) and name_part in n.id)
        or (isinstance(n, ast.alias) and name_part in n.name)
        for n in (ast.walk(tree) if tree else ())
    )


def choices(facts: VerlFacts) -> dict[str, tuple[str, ...]]:
    """The form's choice lists for `facts`' verl (a table that verl does not state: none)."""
    if facts is NO_VERL:
        return dict(CHOICES)
    tables: dict[str, tuple[str, ...] | None] = {
        f"{R}.name": tuple(facts.rollouts) if facts.rollouts is not None else None,
        f"{A}.loss_agg_mode": facts.loss_agg_modes,
        "algorithm.adv_estimator": facts.adv_estimators,
        f"{A}.policy_loss.loss_mode": facts.policy_losses,
        f"{A}.kl_loss_type": facts.kl_estimators,
        "algorithm.kl_penalty": facts.kl_estimators,
        "trainer.resume_mode": RESUME_MODES,
        f"{A}.strategy": facts.fsdp_strategies,
    }
    return {k: v for k, v in tables.items() if v}
