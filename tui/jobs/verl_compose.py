"""verl's trainer config composed with Hydra exactly as ``python -m verl.trainer.main_ppo`` does
(`--config-name` / `--config-path` included), from the verl verl_select.py selected; another
Hydra entry point of verl with its own config (entry_config).

Composition is cached: the unoverridden base is composed once; a later call deep-copies it and
applies the overrides with Hydra's own override code (same parser, same struct-mode errors),
falling back to a full Hydra compose when an override names a config group (``model_engine=…``).
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tui.jobs.verl_select import (
    CONFIG_NAME,
    HYDRA_LOCK,
    SchemaError,
    on_source_change,
    verl_config_dir,
)


class ComposeError(SchemaError, title="override does not compose"):
    """One override does not compose; ``key`` names it (None when it cannot be told).
    ``about_key``: the key itself is wrong (not in verl's config, a '+' on a key that exists),
    whatever its value: a profile check says so even where the value is known only when the
    launch script runs."""

    def __init__(self, key: str | None, message: str, about_key: bool = False):
        self.key = key
        self.message = message
        self.about_key = about_key
        super().__init__(f"{key}: {message}" if key else message)


@dataclass
class Composed:
    config: dict[str, Any]
    unresolved: list[str]  # dotted keys whose interpolation failed (kept as the raw string)


# -- composition ---------------------------------------------------------------------------


def _hydra_compose(overrides: list[str], name: str = CONFIG_NAME, custom_dir: str = "") -> Any:
    config_dir = verl_config_dir()  # first: SchemaError, not ImportError, without Hydra
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    where = custom_dir or str(config_dir)
    extra = _searchpath_override(custom_dir) if custom_dir else []
    with HYDRA_LOCK, initialize_config_dir(config_dir=where, version_base=None):
        return hydra_compose(name, overrides=[*extra, *overrides])


@functools.cache
def base_cfg(name: str, custom_dir: str, groups: tuple[str, ...]) -> Any:
    """verl's composed base config (cached: always call with all three arguments, which are
    the cache key)."""
    try:
        return _hydra_compose(list(groups), name, custom_dir)
    except Exception as exc:  # a broken verl install or custom config: one line
        if custom_dir:
            raise ComposeError(
                "config_name", f"{name} in {custom_dir} does not compose: {_first_line(exc)}"
            ) from None
        raise SchemaError(f"verl's {name}.yaml does not compose: {_first_line(exc)}") from None


def _is_group(override: Any, custom_dir: str = "") -> bool:
    """A plain config-group choice (`model_engine=megatron`), nothing else Hydra-special."""
    key = override.key_or_group
    return (
        override.package is None
        and not override.is_sweep_override()
        and key.split(".")[0] != "hydra"
        and "." not in key
        and _config_group(key, custom_dir)
    )


def _config_group(key: str, custom_dir: str = "") -> bool:
    """`key` names a config-group folder of verl's config (or the custom one). The one place
    a key becomes a path: a key no folder name can be (too long, a NUL) is none."""
    folders = [verl_config_dir()] + ([Path(custom_dir)] if custom_dir else [])
    for folder in folders:
        try:
            if (folder / key).is_dir():
                return True
        except (OSError, ValueError):  # ENAMETOOLONG, a NUL: not a folder of ours
            continue
    return False


def _needs_full_compose(override: Any, custom_dir: str = "") -> bool:
    # Config-group overrides change the defaults list; only a full Hydra compose applies them.
    key = override.key_or_group
    return (
        override.package is not None
        or override.is_sweep_override()
        or key.split(".")[0] == "hydra"
        or _config_group(key, custom_dir)
    )


# -- which config: --config-name / --config-path as main_ppo takes them ----------------------

_VERL_CONFIG_TAIL = ("verl", "trainer", "config")


def resolve_config(
    config_name: str | None = None, config_path: str | None = None
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
            raise ComposeError(
                "config_name",
                f"verl has no config {name!r} (its own: {', '.join(builtin_configs())})",
            )
        return name, ""
    if not folder.is_dir():
        raise ComposeError(
            "config_path",
            f"{config_path}: no such folder on this machine, so "
            "the custom config cannot be checked",
        )
    if not (folder / f"{name}.yaml").is_file():
        raise ComposeError("config_name", f"no {name}.yaml in {folder}")
    return name, str(folder)


def entry_config(
    entrypoint: str, config_name: str | None = None, config_path: str | None = None
) -> tuple[str | None, str | None]:
    """(config name, config folder) as `python -m ENTRYPOINT` composes it with this machine's
    verl, for resolve_config: an entry other than main_ppo has its own @hydra.main config
    (tui/jobs/verl_entries.py), and a relative --config-path is relative to its module's
    folder. The profile keeps only what the script set, so the cluster's verl finds the
    entry's own config wherever it lives. ComposeError (key entrypoint) when this verl has no
    such Hydra entry point."""
    from tui.jobs.verl_entries import MAIN_PPO, verl_entries

    if entrypoint == MAIN_PPO:
        return config_name, config_path
    entries = verl_entries()
    entry = entries.get(entrypoint)
    if entry is None or entry.root is None:
        known = ", ".join(sorted(entries))
        raise ComposeError(
            "entrypoint",
            f"{entrypoint}: the selected verl has no such entry point composing a Hydra "
            f"config (it has: {known})",
        )
    name = config_name or entry.config_name
    if config_path:
        path = str(Path(config_path).expanduser())
        return name, entry.resolve(path)
    own = entry.config_dir
    return name, str(own) if own is not None else None


@functools.cache
def builtin_configs() -> tuple[str, ...]:
    """verl's own top-level configs main_ppo can be pointed at (generated ones left out)."""
    return tuple(
        sorted(p.stem for p in verl_config_dir().glob("*.yaml") if not p.stem.startswith("_"))
    )


@functools.cache
def custom_searchpath(custom_dir: str, name: str = "") -> tuple[tuple[str, str], ...]:
    """(entry as written, entry as composed here) for a custom config's `hydra.searchpath`.
    A relative `file://…verl/trainer/config` is read from the job's working directory (a verl
    checkout in verl's examples): composed here with the installed verl's config."""
    import yaml

    out = []
    files = [Path(custom_dir) / f"{name}.yaml"] if name else sorted(Path(custom_dir).glob("*.yaml"))
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
            if (
                text.startswith("file://")
                and not os.path.isabs(rel)
                and tuple(Path(os.path.normpath(rel)).parts[-3:]) == _VERL_CONFIG_TAIL
            ):
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


@functools.lru_cache(maxsize=4096)
def _parse_one(line: str) -> Any:
    """One override as Hydra parses it, kept by its text: Hydra's ANTLR grammar costs ~0.6 ms
    an override, and the job form, `check` and a sweep compose the same lines over and over
    (a profile's 30-50 overrides on every edit). Safe to share: nothing changes an Override
    after its parse, and its value() builds fresh lists and dicts on every call. A line that
    does not parse raises each time (lru_cache keeps no exception)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(line)


def _parse(overrides: list[str]) -> list[Any]:
    from hydra.errors import HydraException

    parsed = []
    for line in overrides:
        try:
            parsed.append(_parse_one(line))
        except HydraException as exc:
            key = line.split("=", 1)[0].lstrip("+~") if "=" in line else None
            raise ComposeError(key or None, f"bad override syntax ({_first_line(exc)})") from None
    return parsed


def compose_cfg(
    overrides: list[str], config_name: str | None = None, config_path: str | None = None
) -> Any:
    """The composed OmegaConf DictConfig (struct mode); ComposeError on a bad override.
    config_name / config_path as main_ppo's --config-name / --config-path (None: verl's
    ppo_trainer)."""
    name, custom = resolve_config(config_name, config_path)
    base_cfg(name, custom, ())  # first: verl's own config that does not compose is named
    base_key: tuple[str, str, tuple[str, ...]] = (name, custom, ())
    parsed = _parse(overrides)
    for o in parsed:
        if o.is_sweep_override():
            raise ComposeError(
                o.key_or_group,
                "a comma in an unquoted value makes Hydra sweep: "
                "quote the value ('a,b') or write a list ([a,b])",
            )
    keys = None if (name, custom) == (CONFIG_NAME, "") else config_keys(name, custom)
    full = [k for k, o in enumerate(parsed) if _needs_full_compose(o, custom)]
    if full and all(_is_group(parsed[k], custom) for k in full):
        # Plain group choices (model_engine=megatron): Hydra builds the defaults list from
        # them, then applies the value overrides, so a cached base per choice is exact.
        groups = tuple(overrides[k] for k in full)
        try:
            base_cfg(name, custom, groups)
        except Exception:  # the full compose below names the problem
            pass
        else:
            base_key = (name, custom, groups)
            keys = config_keys(name, custom, groups)
            parsed = [o for k, o in enumerate(parsed) if k not in full]
            full = []
    if full:
        try:
            return _hydra_compose(overrides, name, custom)
        except Exception as exc:  # Hydra, OmegaConf and ValueError alike
            err = _compose_error(exc, None, keys)
        # Hydra names the first missing parent; the override names the key the user wrote.
        longer = [
            o.key_or_group.lstrip("+~")
            for o in parsed
            if err.key and o.key_or_group.lstrip("+~").startswith(err.key + ".")
        ]
        if len(longer) == 1 and err.message.startswith("not a key"):
            err = ComposeError(longer[0], unknown_key_message(longer[0], keys), True)
        raise err
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
    except ImportError:  # a Hydra without it: the slow path is still exact
        return _hydra_compose(overrides, name, custom)
    cfg = _fresh_copy(base_key)
    for o in parsed:  # one at a time, as Hydra does, so a failure names its override
        try:
            ConfigLoaderImpl._apply_overrides_to_config([o], cfg)
        except Exception as exc:  # Hydra, OmegaConf and ValueError alike
            raise _compose_error(exc, o.key_or_group, keys) from None
    return cfg


@functools.cache
def _base_pickle(name: str, custom_dir: str, groups: tuple[str, ...]) -> bytes | None:
    """base_cfg's pickle (None when it does not pickle): loading it makes a copy in ~40 % of
    the CPU of an OmegaConf deepcopy, which every compose makes before its overrides."""
    import pickle

    try:
        return pickle.dumps(base_cfg(name, custom_dir, groups), pickle.HIGHEST_PROTOCOL)
    except Exception:  # a value pickle cannot write: deepcopy it each time
        return None


def _fresh_copy(key: tuple[str, str, tuple[str, ...]]) -> Any:
    """A copy of the cached base config `key` names, the caller's to change."""
    import pickle

    data = _base_pickle(*key)
    return pickle.loads(data) if data is not None else copy.deepcopy(base_cfg(*key))


@functools.cache
def config_keys(name: str, custom_dir: str = "", groups: tuple[str, ...] = ()) -> frozenset[str]:
    """Every dotted key of one config as composed (the did-you-mean pool for it)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(base_cfg(name, custom_dir, groups), resolve=False)
    return frozenset(flat_keys(cast("dict[str, Any]", raw)))  # a DictConfig: a dict


def compose_detailed(
    overrides: list[str], config_name: str | None = None, config_path: str | None = None
) -> Composed:
    cfg = compose_cfg(overrides, config_name, config_path)
    return Composed(*_to_plain(cfg))


def compose(
    overrides: list[str], config_name: str | None = None, config_path: str | None = None
) -> dict[str, Any]:
    """verl's composed config with `overrides` as plain dicts/lists; interpolations resolved
    (one that cannot be resolved stays its raw "${…}" string)."""
    if not overrides and not config_name and not config_path:
        return copy.deepcopy(base_plain().config)
    return compose_detailed(overrides, config_name, config_path).config


@functools.cache
def base_plain() -> Composed:
    return Composed(*_to_plain(base_cfg(CONFIG_NAME, "", ())))


# Interpolations up to this long have their parse trees kept (verl's own are all far shorter);
# a longer one, such as a hostile value, is parsed each time as OmegaConf does.
_MEMO_PARSE_MAX_LEN = 200


@functools.cache
def memoize_interpolation_parse() -> None:
    """OmegaConf parses an interpolation ("${trainer.n_gpus_per_node}") with its ANTLR grammar
    every time it resolves one: ~120 of them per compose of verl's config, about half the CPU
    of the compose the job form runs after each edit. A parse tree depends on the string alone
    and is only read afterwards (its tokens keep their own input), so the trees of short
    strings are kept (1024 at most); a string that does not parse raises as before, uncached."""
    from omegaconf import base, grammar_parser

    parse = grammar_parser.parse

    @functools.lru_cache(maxsize=1024)
    def memo(value: str, parser_rule: str, lexer_mode: str) -> Any:
        return parse(value, parser_rule, lexer_mode)

    def parse_once(
        value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE"
    ) -> Any:
        if isinstance(value, str) and len(value) <= _MEMO_PARSE_MAX_LEN:
            return memo(value, parser_rule, lexer_mode)
        return parse(value, parser_rule, lexer_mode)

    if base.parse is parse:  # resolution's own reference (omegaconf/base.py)
        base.parse = parse_once


# verl's interpolations are almost all `${oc.select:a.b.c,DEFAULT}` with a plain default (~100
# of its ~107): OmegaConf resolves each through its grammar's visitor, ~0.4 ms apiece, 40 % of a
# compose. These two forms are resolved here from the unresolved tree, as OmegaConf would;
# any other interpolation asks OmegaConf for its own node, and anything unexpected (a missing
# value, a typed node, a loop) makes the caller resolve the whole tree OmegaConf's way.
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_SELECT = re.compile(r"\$\{oc\.select:(" + _DOTTED + r")(?:,\s*([^,${}\[\]'\"\\]*|\[\])\s*)?\}")
_PLAIN_REF = re.compile(r"\$\{(" + _DOTTED + r")\}")
_INT = re.compile(r"[+-]?[0-9]+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_NOT_WORDS = frozenset({"null", "true", "false", "inf", "nan"})
_NO_DEFAULT = object()


def _select_default(text: str | None) -> Any:
    """oc.select's default as OmegaConf's grammar reads the plain ones; _NO_DEFAULT for
    any other (quoted, a float, an interpolation: OmegaConf reads it)."""
    if text is None:
        return None  # oc.select without a default gives None for a missing key
    text = text.strip()
    low = text.lower()
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    if text == "[]":
        return []
    if _INT.fullmatch(text):
        return int(text)
    if _WORD.fullmatch(text) and low not in _NOT_WORDS:
        return text
    return _NO_DEFAULT


class _Unresolvable(Exception):
    """Something the fast path does not decide: OmegaConf resolves the whole tree."""


def _resolve_selects(cfg: Any, raw: Any) -> dict[str, Any] | None:
    """`raw` (the unresolved container of `cfg`) with every interpolation resolved as
    OmegaConf.to_container(resolve=True) would, or None (resolve OmegaConf's way)."""
    from omegaconf import AnyNode, OmegaConf

    done: dict[tuple[Any, ...], Any] = {}
    busy: set[tuple[Any, ...]] = set()

    def node_type_ok(path: tuple[Any, ...]) -> bool:
        node = cfg
        for k in path:
            node = node._get_node(k)
            if node is None:
                return False
        return type(node) is AnyNode

    def lookup(path: tuple[Any, ...]) -> tuple[bool, Any]:
        """(found, value) of a dotted key in the unresolved tree (dicts only)."""
        node = raw
        for k in path:
            if not isinstance(node, dict) or k not in node:
                return False, None
            node = node[k]
        return True, node

    def value_at(path: tuple[Any, ...]) -> Any:
        _found, value = lookup(path)
        if isinstance(value, (dict, list)):
            return walk(value, path)  # a container: its own resolved copy, as OmegaConf's
        if isinstance(value, str) and "${" in value:
            return resolve(path, value)
        return value

    def resolve(path: tuple[Any, ...], text: str) -> Any:
        if path in done:  # a node also read by another's interpolation: each place its copy
            value = done[path]
            return copy.deepcopy(value) if isinstance(value, (dict, list)) else value
        if path in busy or not node_type_ok(path):
            raise _Unresolvable
        busy.add(path)
        m = _SELECT.fullmatch(text)
        plain = None if m else _PLAIN_REF.fullmatch(text)
        if m:
            default = _select_default(m.group(2))
            if default is _NO_DEFAULT:
                raise _Unresolvable
            target = tuple(m.group(1).split("."))
            found, value = lookup(target)
            value = default if not found or value == "???" else value_at(target)
        elif plain:
            target = tuple(plain.group(1).split("."))
            found, value = lookup(target)
            if not found or value == "???":
                raise _Unresolvable  # OmegaConf raises: the caller names it
            value = value_at(target)
        else:
            try:
                value = OmegaConf.select(cfg, ".".join(map(str, path)), throw_on_missing=True)
            except Exception as exc:
                raise _Unresolvable from exc
            if OmegaConf.is_config(value):
                value = OmegaConf.to_container(value, resolve=True)
        busy.discard(path)
        done[path] = value
        return value

    def walk(node: Any, path: tuple[Any, ...]) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, (*path, k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, (*path, i)) for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            return resolve(path, node)
        return node

    try:
        return cast("dict[str, Any]", walk(raw, ()))
    except _Unresolvable:
        return None


def _to_plain(cfg: Any) -> tuple[dict[str, Any], list[str]]:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    memoize_interpolation_parse()
    raw = OmegaConf.to_container(cfg, resolve=False)
    plain = _resolve_selects(cfg, raw)
    if plain is not None:
        return plain, []
    try:
        return cast("dict[str, Any]", OmegaConf.to_container(cfg, resolve=True)), []
    except Exception:  # some interpolation fails: resolve leaf by leaf
        pass
    failed: list[str] = []

    def walk(node: Any, raw_node: Any, path: str) -> Any:
        if isinstance(node, (DictConfig, ListConfig)):
            keys: Iterable[Any] = node.keys() if isinstance(node, DictConfig) else range(len(node))
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
                    value = walk(
                        child,
                        raw_node[k]
                        if isinstance(raw_node, (dict, list)) and child is not None
                        else child,
                        sub,
                    )
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
    seen: BaseException | None = exc
    while seen is not None:
        m = re.search(r"full_key:\s*(\S+)", str(seen))
        if m:
            return m.group(1)
        seen = seen.__cause__ or seen.__context__
    return None


def _compose_error(
    exc: BaseException, key: str | None, keys: Iterable[str] | None = None
) -> ComposeError:
    text = _chain_text(exc)
    inner = _full_key(exc)
    if inner and key and key.lstrip("+~").startswith(inner + "."):
        inner = key.lstrip("+~")  # the override names the missing key more precisely
    if inner and "not in struct" in text:
        return ComposeError(inner, unknown_key_message(inner, keys), True)
    for pattern, kind in _PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        found = next(g for g in m.groups() if g)
        if kind == "unknown":
            return ComposeError(found, unknown_key_message(found, keys), True)
        if kind == "exists":
            return ComposeError(found, "already a key in verl's config: drop the leading '+'", True)
        if kind == "option":
            return ComposeError(found.split("/")[0], f"no config '{found}' in verl's config groups")
    if key and isinstance(exc, ValueError) and "int()" in text:
        return ComposeError(key, "not a key in verl's config (a list index must be a number)", True)
    return ComposeError(key or inner, _first_line(exc))


def _chain_text(exc: BaseException) -> str:
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


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


@functools.cache
def base_keys() -> dict[str, Any]:
    """ppo_trainer's dotted keys → composed default (an open mapping's default is {})."""
    return flat_keys(base_plain().config)


# ---- keys that are not in the config: what verl renamed, the nearest real key ----------------

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
    pool = list(keys) if keys is not None else list(base_keys())
    parent, _, leaf = key.rpartition(".")
    if not leaf.startswith("_"):  # `_target_` and the like: the config's plumbing, not a guess
        pool = [k for k in pool if not k.rpartition(".")[2].startswith("_")]
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
    config's keys when it is not ppo_trainer; verl's ppo_trainer keys otherwise)."""
    with HYDRA_LOCK:
        base = base_keys()
    moved = renamed_to(key)
    if moved:
        new, why = moved
        if new in base or any(k.startswith(new + ".") for k in base):
            return f"verl renamed this key: use {new} ({why})"
        return f"verl moved this key ({why}); it has no direct equivalent"
    parent = key.lstrip("+~").rpartition(".")[0]
    if base.get(parent, None) == {}:
        return f"not a key in verl's config: {parent} is an open mapping, add to it with +{key}"
    near = closest_key(key, keys if keys is not None else base)
    return "not a key in verl's config" + (f" (did you mean {near}?)" if near else "")


on_source_change(
    base_cfg.cache_clear,
    _base_pickle.cache_clear,
    builtin_configs.cache_clear,
    custom_searchpath.cache_clear,
    config_keys.cache_clear,
    base_plain.cache_clear,
    base_keys.cache_clear,
)
