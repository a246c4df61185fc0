"""What verl-tui knows about verl's config keys: the catalog (type, default, help, choices of
every key, read from verl's YAML comments and dataclass sources, not by importing verl). The
keys verl renamed and the "did you mean" message live with composition (verl_compose.py), whose
errors they word.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tui.jobs.verl_compose import base_cfg, base_plain, flat_keys
from tui.jobs.verl_select import CONFIG_NAME, HYDRA_LOCK, on_source_change, verl_config_dir

MISSING = "???"  # OmegaConf's marker for a value that must be set


@dataclass(frozen=True)
class KeyInfo:
    key: str  # dotted path in the composed config
    type: str  # "int", "float", "bool", "str", "list", "dict", "int | None", "any"
    default: Any  # composed default, interpolations resolved
    help: str = ""  # the comment above the key in verl's YAML (and a trailing one)
    required: bool = False  # "???" in verl: must be set
    follows: str | None = None  # the raw "${…}" default when it follows another key
    choices: tuple[str, ...] = ()  # the values verl accepts, where its code has a fixed set


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
