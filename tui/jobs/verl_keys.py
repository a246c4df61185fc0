"""What verl-tui knows about verl's config keys: the catalog (type, default, help, choices of
every key, read from verl's YAML comments and dataclass sources, not by importing verl), the
keys verl renamed, and the "did you mean" message for a key that does not exist.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tui.jobs.verl_compose import base_cfg, base_plain, flat_keys
from tui.jobs.verl_select import CONFIG_NAME, HYDRA_LOCK, on_source_change, verl_config_dir

MISSING = "???"  # OmegaConf's marker for a value that must be set

# Keys verl moved; an override of the old name fails composition ("Could not override").
# Each is proven by verl 0.9.1's own files (the third field says where).
RENAMED: tuple[tuple[str, str, str], ...] = (
    (
        "critic.model.fsdp_config",
        "critic.fsdp",
        "critic/dp_critic.yaml mounts the FSDP engine config at critic.fsdp",
    ),
    # main_ppo reads only reward.*; the top-level blocks are legacy (legacy_reward_impl.yaml,
    # migrated by verl/experimental/reward_loop/reward_loop.py::migrate_legacy_reward_impl).
    ("reward_model", "reward.reward_model", "the reward model config lives in reward.reward_model"),
    (
        "custom_reward_function",
        "reward.custom_reward_function",
        "main_ppo reads reward.custom_reward_function",
    ),
    ("sandbox_fusion", "reward.sandbox_fusion", "main_ppo reads reward.sandbox_fusion"),
)


@dataclass(frozen=True)
class KeyInfo:
    key: str  # dotted path in the composed config
    type: str  # "int", "float", "bool", "str", "list", "dict", "int | None", "any"
    default: Any  # composed default, interpolations resolved
    help: str = ""  # the comment above the key in verl's YAML (and a trailing one)
    required: bool = False  # "???" in verl: must be set
    follows: str | None = None  # the raw "${…}" default when it follows another key
    choices: tuple[str, ...] = ()  # the values verl accepts, where its code has a fixed set


def renamed_to(key: str) -> tuple[str, str] | None:
    """(new key, why) when verl renamed `key` (or a parent of it)."""
    key = key.lstrip("+~")
    for old, new, why in RENAMED:
        if key == old or key.startswith(old + "."):
            return new + key[len(old) :], why
    return None


def closest_key(key: str, keys: Iterable[str] | None = None) -> str | None:
    """The real key the user most likely meant: a sibling first, then the same leaf name
    elsewhere, then anything close."""
    key = key.lstrip("+~")
    pool = list(keys) if keys is not None else list(key_catalog())
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in pool if k.rpartition(".")[0] == parent}
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)
    if close:
        return siblings[close[0]]
    same_leaf = [k for k in pool if k.rpartition(".")[2] == leaf]
    if same_leaf:
        return max(same_leaf, key=lambda k: difflib.SequenceMatcher(None, key, k).ratio())
    close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
    return close[0] if close else None


def unknown_key_message(key: str, keys: Iterable[str] | None = None) -> str:
    """Why `key` is not in the config, and the nearest real key (from `keys`, the composed
    config's keys when it is not ppo_trainer; verl's ppo_trainer catalog otherwise)."""
    catalog = key_catalog()
    moved = renamed_to(key)
    if moved:
        new, why = moved
        if new in catalog or any(k.startswith(new + ".") for k in catalog):
            return f"verl renamed this key: use {new} ({why})"
        return f"verl moved this key ({why}); it has no direct equivalent"
    parent = key.lstrip("+~").rpartition(".")[0]
    if parent in catalog and catalog[parent].type == "dict" and catalog[parent].default == {}:
        return f"not a key in verl's config: {parent} is an open mapping, add to it with +{key}"
    near = closest_key(key, keys if keys is not None else catalog)
    return "not a key in verl's config" + (f" (did you mean {near}?)" if near else "")


_BASIC = {"int", "float", "bool", "str", "list", "dict", "any"}
# Python files holding the dataclasses that verl's `_target_`s name: their annotations type the
# keys whose YAML default is null.
DATACLASS_FILES = ("workers/config", "trainer/config", "utils/profiler/config.py", "utils/qat")


# Null defaults no dataclass annotates (the trainer/data sections have no `_target_`; ref's
# class lacks its log-prob fields): typed from verl's own use of them.
_NULL_TYPES = {
    "trainer.total_training_steps": "int | None",
    "trainer.resume_from_path": "str | None",
    "data.val_batch_size": "int | None",
    "data.gen_batch_size": "int | None",
    "data.seed": "int | None",
    "actor_rollout_ref.ref.log_prob_micro_batch_size": "int | None",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "int | None",
}


def _annotation_type(text: str) -> str:
    text = text.replace("typing.", "").replace(" ", "")
    optional = False
    m = re.fullmatch(r"Optional\[(.*)\]", text)
    if m:
        text, optional = m.group(1), True
    if text.endswith("|None"):
        text, optional = text[: -len("|None")], True
    base = re.sub(r"\[.*", "", text).lower()
    base = {"tuple": "list", "sequence": "list", "mapping": "dict"}.get(base, base)
    if base not in _BASIC:
        return "any"
    return f"{base} | None" if optional and base != "any" else base


@functools.cache
def _dataclass_fields() -> dict[str, dict[str, str]]:
    """Class name → field → annotation text, inherited fields included (parsed, not imported)."""
    import ast

    root = verl_config_dir().parent.parent
    files: list[Path] = []
    for rel in DATACLASS_FILES:
        p = root / rel
        files.extend(sorted(p.glob("*.py")) if p.is_dir() else [p] if p.is_file() else [])
    own: dict[str, tuple[list[str], dict[str, str]]] = {}
    for f in files:
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                fields = {
                    st.target.id: ast.unparse(st.annotation)
                    for st in node.body
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                }
                bases = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                ]
                own.setdefault(node.name, (bases, fields))

    def resolved(name: str, depth: int = 0) -> dict[str, str]:
        if name not in own or depth > 10:
            return {}
        bases, fields = own[name]
        out: dict[str, str] = {}
        for b in bases:
            out.update(resolved(b, depth + 1))
        out.update(fields)
        return out

    return {name: resolved(name) for name in own}


def _type_name(value: Any) -> str:
    if value is None or value == MISSING:
        return "any"
    for t, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "str"),
        (list, "list"),
        (dict, "dict"),
    ):
        if isinstance(value, t):
            return name
    return type(value).__name__


def _raw_flat() -> dict[str, Any]:
    verl_config_dir()  # first: SchemaError, not ImportError, without OmegaConf
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(base_cfg(CONFIG_NAME, "", ()), resolve=False)
    return flat_keys(cast("dict[str, Any]", raw))  # a DictConfig: a dict


def _defaults_list() -> list[tuple[str, str]]:
    """(config file relative to the config dir, package) in Hydra's merge order."""
    config_dir = verl_config_dir()  # first: SchemaError, not ImportError, without Hydra
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    with HYDRA_LOCK, initialize_config_dir(config_dir=str(config_dir), version_base=None):
        loader = GlobalHydra.instance().hydra.config_loader  # type: ignore[union-attr]
        dl = loader.compute_defaults_list(CONFIG_NAME, [], RunMode.RUN)
    out = []
    for d in dl.defaults:
        if (
            d.config_path is None
            or d.config_path.startswith("hydra/")
            or (d.package or "").startswith("hydra")
        ):
            continue
        out.append((d.config_path, d.package or ""))
    return out


_NOISE = re.compile(r"^(oc\.select:|TODO|FIXME|@package)", re.IGNORECASE)


def _comment_lines(lines: list[str], index: int) -> list[str]:
    """The comment block directly above line `index` (no blank line in between)."""
    out: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        out.append(lines[i].strip().lstrip("#").strip())
        i -= 1
    return [ln for ln in reversed(out) if ln and not _NOISE.match(ln)]


def _trailing(line: str, column: int) -> str:
    rest = line[column:].lstrip().lstrip(":").strip()
    return rest.lstrip("#").strip() if rest.startswith("#") else ""


@functools.cache
def _file_help(rel: str) -> dict[str, str]:
    """Relative dotted key → help text for one of verl's YAML files."""
    import yaml

    path = verl_config_dir() / f"{rel}.yaml"
    try:
        text = path.read_text(encoding="utf-8")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        root = yaml.compose(text, Loader=loader)
    except (OSError, yaml.YAMLError):
        return {}
    lines = text.splitlines()
    out: dict[str, str] = {}

    def visit(node: Any, prefix: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for knode, vnode in node.value:
            name = str(knode.value)
            if not prefix and name == "defaults":
                continue
            path = f"{prefix}.{name}" if prefix else name
            parts = _comment_lines(lines, knode.start_mark.line)
            if vnode.start_mark.line != knode.start_mark.line:  # block value: `key:  # …`
                tail = _trailing(lines[knode.end_mark.line], knode.end_mark.column)
            elif vnode.end_mark.line == knode.start_mark.line:  # `key: value  # …`
                tail = _trailing(lines[vnode.end_mark.line], vnode.end_mark.column)
            else:
                tail = ""
            if tail:
                parts.append(tail)
            if parts:
                out[path] = "\n".join(parts)
            visit(vnode, path)

    visit(root, "")
    return out


@functools.cache
def _help_by_key() -> dict[str, str]:
    out: dict[str, str] = {}
    for rel, package in _defaults_list():
        for sub, text in _file_help(rel).items():
            out[f"{package}.{sub}" if package else sub] = text  # later files win, as in Hydra
    return out


@functools.cache
def key_catalog() -> dict[str, KeyInfo]:
    """KeyInfo for every key of the composed config, in config order."""
    with HYDRA_LOCK:
        plain = flat_keys(base_plain().config)
        raw = _raw_flat()
        helps = _help_by_key()
    from tui.jobs.verl_facts import choices, current_facts  # no cycle at import time

    known = choices(current_facts())
    fields = _dataclass_fields()
    out: dict[str, KeyInfo] = {}
    for key, value in plain.items():
        raw_value = raw.get(key)
        follows = raw_value if isinstance(raw_value, str) and "${" in raw_value else None
        kind = _type_name(value)
        parent, _, leaf = key.rpartition(".")
        target = plain.get(f"{parent}._target_") if parent else None
        if isinstance(target, str) and leaf in fields.get(target.rpartition(".")[2], {}):
            typed = _annotation_type(fields[target.rpartition(".")[2]][leaf])
            if kind == "any" or typed.split(" |")[0] == kind:
                kind = typed
        kind = _NULL_TYPES.get(key, kind) if kind == "any" else kind
        out[key] = KeyInfo(
            key=key,
            type=kind,
            default=value,
            help=helps.get(key, ""),
            required=value == MISSING,
            follows=follows,
            choices=known.get(key, ()),
        )
    return out


on_source_change(
    _dataclass_fields.cache_clear,
    _file_help.cache_clear,
    _help_by_key.cache_clear,
    key_catalog.cache_clear,
)
