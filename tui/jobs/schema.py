"""verl's own trainer config, read without importing verl (which imports torch).

Which verl: the cluster's, when a service selected it (`use_source`; jobs/verl_source.py reads
the head's verl over SSH into a cache folder laid out like verl's package), else this Python's,
found with ``importlib.util.find_spec("verl")``. Either is composed with Hydra exactly as
``python -m verl.trainer.main_ppo`` does. hydra-core/omegaconf are verl-tui's own dependencies,
imported inside functions: the cockpit's cold start must not pay for them.

Composition is cached: the unoverridden base is composed once; a later call deep-copies it and
applies the overrides with Hydra's own override code (same parser, same struct-mode errors),
falling back to a full Hydra compose when an override names a config group (``model_engine=…``).
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_NAME = "ppo_trainer"
MISSING = "???"  # OmegaConf's marker for a value that must be set

# Keys verl moved; an override of the old name fails composition ("Could not override").
# Each is proven by verl 0.9.1's own files (the third field says where).
RENAMED: tuple[tuple[str, str, str], ...] = (
    ("critic.model.fsdp_config", "critic.fsdp",
     "critic/dp_critic.yaml mounts the FSDP engine config at critic.fsdp"),
    # main_ppo reads only reward.*; the top-level blocks are legacy (legacy_reward_impl.yaml,
    # migrated by verl/experimental/reward_loop/reward_loop.py::migrate_legacy_reward_impl).
    ("reward_model", "reward.reward_model", "the reward model config lives in reward.reward_model"),
    ("custom_reward_function", "reward.custom_reward_function",
     "main_ppo reads reward.custom_reward_function"),
    ("sandbox_fusion", "reward.sandbox_fusion", "main_ppo reads reward.sandbox_fusion"),
)

_lock = threading.RLock()  # Hydra keeps global state; one composition at a time


class SchemaError(Exception):
    """verl's config cannot be read (verl missing, or its files do not compose)."""


class ComposeError(SchemaError):
    """One override does not compose; ``key`` names it (None when it cannot be told)."""

    def __init__(self, key: str | None, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


@dataclass(frozen=True)
class KeyInfo:
    key: str  # dotted path in the composed config
    type: str  # "int", "float", "bool", "str", "list", "dict", "int | None", "any"
    default: Any  # composed default, interpolations resolved
    help: str = ""  # the comment above the key in verl's YAML (and a trailing one)
    required: bool = False  # "???" in verl: must be set
    follows: str | None = None  # the raw "${…}" default when it follows another key
    choices: tuple[str, ...] = ()  # the values verl accepts, where its code has a fixed set


@dataclass
class Composed:
    config: dict[str, Any]
    unresolved: list[str]  # dotted keys whose interpolation failed (kept as the raw string)


# -- locating verl -------------------------------------------------------------------------


@dataclass(frozen=True)
class VerlSource:
    """A verl package folder the config is read from (its trainer/config/*.yaml and the
    dataclass sources), and where it came from."""

    root: Path  # laid out like verl's package: root/trainer/config/ppo_trainer.yaml
    version: str | None
    origin: str  # the host it was read from, or "this Python"
    python: str  # the interpreter whose verl it is (on that host)
    host: str | None = None  # None: this Python's own verl
    cached: bool = False  # the files came from the local cache (nothing read over SSH)
    files_read: int = 0  # files read over SSH for this selection
    note: str | None = None  # why the cluster's verl is not the one used, when it is not

    @property
    def label(self) -> str:
        return f"verl {self.version or '(unknown version)'} from {self.origin}"

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "from": self.origin, "host": self.host,
                "python": self.python, "cached": self.cached, "files_read": self.files_read,
                "note": self.note}


_active: VerlSource | None = None  # selected by a service (the cluster's verl)
_cluster_failure: str | None = None  # why the cluster was asked and had none (for messages)
_hydra_ok = False


def use_source(source: VerlSource | None, *, cluster_failure: str | None = None) -> None:
    """Compose from `source` from now on (None: this Python's verl). `cluster_failure` says
    which host was asked and why it gave no verl, for the error when there is none here."""
    global _active, _cluster_failure
    with _lock:
        same = (_active is not None and source is not None and _active.root == source.root
                and _active.version == source.version)
        _active, _cluster_failure = source, cluster_failure
        if not same:
            _clear_caches()


def current_source() -> VerlSource:
    """The verl composition reads; SchemaError (one line) when there is none."""
    if _active is not None:
        return _active
    local = local_source()
    if local is not None:
        return local
    where = sys.executable or "this interpreter"
    if _cluster_failure:
        raise SchemaError(f"verl is not installed on the cluster ({_cluster_failure}) nor in "
                          f"this Python ({where}): pip install verl on the hosts; profiles "
                          "are checked against verl's own config")
    raise SchemaError(f"verl is not installed in this Python ({where}) and no cluster was "
                      "asked: give the hosts file (profile check --hosts HOSTS.yaml) to read "
                      "the cluster's verl, or pip install verl here; profiles are checked "
                      "against verl's own config")


@functools.cache
def local_source() -> VerlSource | None:
    """This Python's verl, found without importing it; None when it has none."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        spec = None
    for loc in list(spec.submodule_search_locations or []) if spec else []:
        root = Path(loc)
        if (root / "trainer" / "config" / f"{CONFIG_NAME}.yaml").is_file():
            return VerlSource(root=root, version=_local_version(root), origin="this Python",
                              python=sys.executable or "python")
    return None


def _local_version(root: Path) -> str | None:
    try:  # verl's own __version__ is this file's text
        text = (root / "version" / "version").read_text(encoding="utf-8").strip()
        if text:
            return text
    except OSError:
        pass
    try:
        import importlib.metadata

        return importlib.metadata.version("verl")
    except Exception:  # no metadata: shown as unknown
        return None


def require_hydra() -> None:
    """SchemaError when Hydra or OmegaConf is missing here (a broken verl-tui install)."""
    global _hydra_ok
    if _hydra_ok:
        return
    lacking = [m for m in ("hydra", "omegaconf") if not _importable(m)]
    _hydra_ok = not lacking
    if lacking:
        raise SchemaError(f"{' and '.join(lacking)} missing in this Python "
                          f"({sys.executable or 'this interpreter'}): they are verl-tui's own "
                          "dependencies (pip install hydra-core omegaconf); profiles are "
                          "composed with them")


def verl_config_dir() -> Path:
    """verl's trainer config folder (the selected source's); SchemaError when there is no
    verl, or no Hydra to compose it with."""
    require_hydra()
    return current_source().root / "trainer" / "config"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _clear_caches() -> None:
    for fn in (_base_cfg, builtin_configs, custom_searchpath, config_keys, _base_plain,
               _dataclass_fields, _file_help, _help_by_key, key_catalog):
        fn.cache_clear()


# -- composition ---------------------------------------------------------------------------


def _hydra_compose(overrides: list[str], name: str = CONFIG_NAME, custom_dir: str = "") -> Any:
    config_dir = verl_config_dir()  # first: SchemaError, not ImportError, without Hydra
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    where = custom_dir or str(config_dir)
    extra = _searchpath_override(custom_dir) if custom_dir else []
    with _lock, initialize_config_dir(config_dir=where, version_base=None):
        return hydra_compose(name, overrides=[*extra, *overrides])


@functools.cache
def _base_cfg(name: str = CONFIG_NAME, custom_dir: str = "", groups: tuple[str, ...] = ()
              ) -> Any:
    try:
        return _hydra_compose(list(groups), name, custom_dir)
    except Exception as exc:  # a broken verl install or custom config: one line
        if custom_dir:
            raise ComposeError("config_name", f"{name} in {custom_dir} does not compose: "
                                              f"{_first_line(exc)}") from None
        raise SchemaError(f"verl's {name}.yaml does not compose: {_first_line(exc)}"
                          ) from None


def _is_group(override: Any, custom_dir: str = "") -> bool:
    """A plain config-group choice (`model_engine=megatron`), nothing else Hydra-special."""
    key = override.key_or_group
    return (override.package is None and not override.is_sweep_override()
            and key.split(".")[0] != "hydra" and "." not in key
            and ((verl_config_dir() / key).is_dir()
                 or (bool(custom_dir) and (Path(custom_dir) / key).is_dir())))


def _needs_full_compose(override: Any, custom_dir: str = "") -> bool:
    # Config-group overrides change the defaults list; only a full Hydra compose applies them.
    key = override.key_or_group
    return (override.package is not None or override.is_sweep_override()
            or key.split(".")[0] == "hydra" or (verl_config_dir() / key).is_dir()
            or (bool(custom_dir) and (Path(custom_dir) / key).is_dir()))


# -- which config: --config-name / --config-path as main_ppo takes them ----------------------

_VERL_CONFIG_TAIL = ("verl", "trainer", "config")


def resolve_config(config_name: str | None = None, config_path: str | None = None
                   ) -> tuple[str, str]:
    """(config name, custom config folder or "" for verl's own), as Hydra resolves main_ppo's
    `--config-name` / `--config-path`: a relative path is relative to verl/trainer (the folder
    of main_ppo.py), so `config` is verl's own. ComposeError (key config_name / config_path)
    when the folder or the file is not on this machine."""
    name = (config_name or CONFIG_NAME).removesuffix(".yaml")
    own = verl_config_dir()
    if not config_path:
        folder = own
    else:
        path = Path(config_path).expanduser()
        folder = Path(os.path.normpath(path if path.is_absolute() else own.parent / path))
    if folder == own:
        if not (own / f"{name}.yaml").is_file():
            raise ComposeError("config_name", f"verl has no config {name!r} (its own: "
                                              f"{', '.join(builtin_configs())})")
        return name, ""
    if not folder.is_dir():
        raise ComposeError("config_path", f"{config_path}: no such folder on this machine, so "
                                          "the custom config cannot be checked")
    if not (folder / f"{name}.yaml").is_file():
        raise ComposeError("config_name", f"no {name}.yaml in {folder}")
    return name, str(folder)


@functools.cache
def builtin_configs() -> tuple[str, ...]:
    """verl's own top-level configs main_ppo can be pointed at (generated ones left out)."""
    return tuple(sorted(p.stem for p in verl_config_dir().glob("*.yaml")
                        if not p.stem.startswith("_")))


@functools.cache
def custom_searchpath(custom_dir: str, name: str = "") -> tuple[tuple[str, str], ...]:
    """(entry as written, entry as composed here) for a custom config's `hydra.searchpath`.
    A relative `file://…verl/trainer/config` is read from the job's working directory (a verl
    checkout in verl's examples): composed here with the installed verl's config."""
    import yaml

    out = []
    files = [Path(custom_dir) / f"{name}.yaml"] if name else sorted(Path(custom_dir).glob(
        "*.yaml"))
    for f in files:
        try:
            data = yaml.safe_load(f.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, ValueError):
            continue
        hydra = data.get("hydra") if isinstance(data, dict) else None
        entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            text = str(entry)
            rel = text.removeprefix("file://")
            if text.startswith("file://") and not os.path.isabs(rel) and tuple(
                    Path(os.path.normpath(rel)).parts[-3:]) == _VERL_CONFIG_TAIL:
                out.append((text, f"file://{verl_config_dir()}"))
            elif text.rstrip("/") == "pkg://verl.trainer.config":
                # Hydra would import verl (and torch) to find it: the same folder, as a file.
                out.append((text, f"file://{verl_config_dir()}"))
            else:
                out.append((text, text))
        if name:
            break
    return tuple(out)


def _searchpath_override(custom_dir: str) -> list[str]:
    entries = [new for _, new in custom_searchpath(custom_dir)]
    if not entries:  # verl's own config is where a custom one's `defaults` find ppo_trainer
        entries = [f"file://{verl_config_dir()}"]
    elif f"file://{verl_config_dir()}" not in entries:
        entries.append(f"file://{verl_config_dir()}")
    return ["hydra.searchpath=[" + ",".join(_quote_entry(e) for e in entries) + "]"]


def _quote_entry(entry: str) -> str:
    return "'" + entry.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _parse(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed = []
    for line in overrides:
        try:
            parsed.append(parser.parse_override(line))
        except HydraException as exc:
            key = line.split("=", 1)[0].lstrip("+~") if "=" in line else None
            raise ComposeError(key or None, f"bad override syntax ({_first_line(exc)})"
                               ) from None
    return parsed


def compose_cfg(overrides: list[str], config_name: str | None = None,
                config_path: str | None = None) -> Any:
    """The composed OmegaConf DictConfig (struct mode); ComposeError on a bad override.
    config_name / config_path as main_ppo's --config-name / --config-path (None: verl's
    ppo_trainer)."""
    name, custom = resolve_config(config_name, config_path)
    base = _base_cfg(name, custom)
    parsed = _parse(overrides)
    for o in parsed:
        if o.is_sweep_override():
            raise ComposeError(o.key_or_group, "a comma in an unquoted value makes Hydra sweep: "
                               "quote the value ('a,b') or write a list ([a,b])")
    keys = None if (name, custom) == (CONFIG_NAME, "") else config_keys(name, custom)
    full = [k for k, o in enumerate(parsed) if _needs_full_compose(o, custom)]
    if full and all(_is_group(parsed[k], custom) for k in full):
        # Plain group choices (model_engine=megatron): Hydra builds the defaults list from
        # them, then applies the value overrides, so a cached base per choice is exact.
        groups = tuple(overrides[k] for k in full)
        try:
            base = _base_cfg(name, custom, groups)
        except Exception:  # the full compose below names the problem
            pass
        else:
            keys = config_keys(name, custom, groups)
            parsed = [o for k, o in enumerate(parsed) if k not in full]
            full = []
    if full:
        try:
            return _hydra_compose(overrides, name, custom)
        except Exception as exc:  # Hydra, OmegaConf and ValueError alike
            err = _compose_error(exc, None, keys)
        # Hydra names the first missing parent; the override names the key the user wrote.
        longer = [o.key_or_group.lstrip("+~") for o in parsed
                  if err.key and o.key_or_group.lstrip("+~").startswith(err.key + ".")]
        if len(longer) == 1 and err.message.startswith("not a key"):
            err = ComposeError(longer[0], unknown_key_message(longer[0], keys))
        raise err
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
    except ImportError:  # a Hydra without it: the slow path is still exact
        return _hydra_compose(overrides, name, custom)
    cfg = copy.deepcopy(base)
    for o in parsed:  # one at a time, as Hydra does, so a failure names its override
        try:
            ConfigLoaderImpl._apply_overrides_to_config([o], cfg)
        except Exception as exc:  # Hydra, OmegaConf and ValueError alike
            raise _compose_error(exc, o.key_or_group, keys) from None
    return cfg


@functools.cache
def config_keys(name: str, custom_dir: str = "", groups: tuple[str, ...] = ()
                ) -> frozenset[str]:
    """Every dotted key of one config as composed (the did-you-mean pool for it)."""
    from omegaconf import OmegaConf

    return frozenset(flat_keys(OmegaConf.to_container(_base_cfg(name, custom_dir, groups),
                                                      resolve=False)))


def compose_detailed(overrides: list[str], config_name: str | None = None,
                     config_path: str | None = None) -> Composed:
    cfg = compose_cfg(overrides, config_name, config_path)
    return Composed(*_to_plain(cfg))


def compose(overrides: list[str], config_name: str | None = None,
            config_path: str | None = None) -> dict[str, Any]:
    """verl's composed config with `overrides` as plain dicts/lists; interpolations resolved
    (one that cannot be resolved stays its raw "${…}" string)."""
    if not overrides and not config_name and not config_path:
        return copy.deepcopy(_base_plain().config)
    return compose_detailed(overrides, config_name, config_path).config


@functools.cache
def _base_plain() -> Composed:
    return Composed(*_to_plain(_base_cfg()))


def _to_plain(cfg: Any) -> tuple[dict[str, Any], list[str]]:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    try:
        return OmegaConf.to_container(cfg, resolve=True), []
    except Exception:  # some interpolation fails: resolve leaf by leaf
        pass
    raw = OmegaConf.to_container(cfg, resolve=False)
    failed: list[str] = []

    def walk(node: Any, raw_node: Any, path: str) -> Any:
        if isinstance(node, (DictConfig, ListConfig)):
            keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
            out: Any = {} if isinstance(node, DictConfig) else []
            for k in keys:
                sub = f"{path}.{k}" if path else str(k)
                try:
                    child = node[k]
                except Exception:  # an interpolation that cannot resolve
                    if not OmegaConf.is_missing(node, k):
                        failed.append(sub)
                    child, value = None, raw_node[k]
                else:
                    value = walk(child, raw_node[k] if isinstance(raw_node, (dict, list))
                                 and child is not None else child, sub)
                if isinstance(out, dict):
                    out[k] = value
                else:
                    out.append(value)
            return out
        return node

    return walk(cfg, raw, ""), failed


# -- errors --------------------------------------------------------------------------------

_PATTERNS = (
    (re.compile(r"Could not override '([^']+)'"), "unknown"),
    (re.compile(r"Could not delete from config\. '([^']+)' does not exist"), "unknown"),
    (re.compile(r"config group '([^']+)' does not exist"), "unknown"),
    (re.compile(r"An item is already at '([^']+)'"), "exists"),
    (re.compile(r"Could not load '([^']+)'|Could not find '([^']+)'"), "option"),
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _full_key(exc: BaseException) -> str | None:
    seen = exc
    while seen is not None:
        m = re.search(r"full_key:\s*(\S+)", str(seen))
        if m:
            return m.group(1)
        seen = seen.__cause__ or seen.__context__
    return None


def _compose_error(exc: BaseException, key: str | None,
                   keys: Iterable[str] | None = None) -> ComposeError:
    text = _chain_text(exc)
    inner = _full_key(exc)
    if inner and key and key.lstrip("+~").startswith(inner + "."):
        inner = key.lstrip("+~")  # the override names the missing key more precisely
    if inner and "not in struct" in text:
        return ComposeError(inner, unknown_key_message(inner, keys))
    for pattern, kind in _PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        found = next(g for g in m.groups() if g)
        if kind == "unknown":
            return ComposeError(found, unknown_key_message(found, keys))
        if kind == "exists":
            return ComposeError(found, "already a key in verl's config: drop the leading '+'")
        if kind == "option":
            return ComposeError(found.split("/")[0], f"no config '{found}' in verl's config groups")
    if key and isinstance(exc, ValueError) and "int()" in text:
        return ComposeError(key, "not a key in verl's config (a list index must be a number)")
    return ComposeError(key or inner, _first_line(exc))


def _chain_text(exc: BaseException) -> str:
    parts, seen = [], exc
    while seen is not None:
        parts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def renamed_to(key: str) -> tuple[str, str] | None:
    """(new key, why) when verl renamed `key` (or a parent of it)."""
    key = key.lstrip("+~")
    for old, new, why in RENAMED:
        if key == old or key.startswith(old + "."):
            return new + key[len(old):], why
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


# -- flat keys and the catalog -------------------------------------------------------------


def flat_keys(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted path → value for every leaf (lists and empty mappings are leaves)."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flat_keys(v, path))
        else:
            out[path] = v
    return out


_BASIC = {"int", "float", "bool", "str", "list", "dict", "any"}
# Python files holding the dataclasses that verl's `_target_`s name: their annotations type the
# keys whose YAML default is null.
_DATACLASS_FILES = ("workers/config", "trainer/config", "utils/profiler/config.py", "utils/qat")


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
    for rel in _DATACLASS_FILES:
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
                fields = {st.target.id: ast.unparse(st.annotation) for st in node.body
                          if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases]
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
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"),
                    (list, "list"), (dict, "dict")):
        if isinstance(value, t):
            return name
    return type(value).__name__


def _raw_flat() -> dict[str, Any]:
    verl_config_dir()  # first: SchemaError, not ImportError, without OmegaConf
    from omegaconf import OmegaConf

    return flat_keys(OmegaConf.to_container(_base_cfg(), resolve=False))


def _defaults_list() -> list[tuple[str, str]]:
    """(config file relative to the config dir, package) in Hydra's merge order."""
    config_dir = verl_config_dir()  # first: SchemaError, not ImportError, without Hydra
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    with _lock, initialize_config_dir(config_dir=str(config_dir), version_base=None):
        loader = GlobalHydra.instance().hydra.config_loader  # type: ignore[union-attr]
        dl = loader.compute_defaults_list(CONFIG_NAME, [], RunMode.RUN)
    out = []
    for d in dl.defaults:
        if d.config_path is None or d.config_path.startswith("hydra/") or (
                d.package or "").startswith("hydra"):
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
    with _lock:
        plain = flat_keys(_base_plain().config)
        raw = _raw_flat()
        helps = _help_by_key()
    from tui.jobs.rules import CHOICES  # plain constants; no cycle at import time

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
        out[key] = KeyInfo(key=key, type=kind, default=value,
                           help=helps.get(key, ""), required=value == MISSING, follows=follows,
                           choices=CHOICES.get(key, ()))
    return out
