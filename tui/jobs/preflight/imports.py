"""Which modules verl's own code path imports for one config, read from verl's source.

Each entry of NEEDS is (condition on the config → top-level module) and cites the verl file and
the scope (``Class.method``, a function, or "" for module level) where verl imports it. The
cited import is looked for with ``ast`` in the verl the job runs (the folder verl_source.py
reads from the head, cached): an entry whose import is no longer there is reported, not
silently used, and tests/test_preflight_static.py fails on a verl upgrade that moves one.

Two tables are read from verl rather than written here:
- the loggers: verl/utils/tracking.py's ``if "wandb" in default_backend: import wandb`` blocks;
- the rollout engines: verl/workers/rollout/replica.py's ``RolloutReplicaRegistry.register(name,
  loader)`` calls, followed to the server module each loader imports (an engine verl
  registers that ROLLOUT_ENGINES does not know is reported); on verl 0.4–0.5, which has no
  replica.py, the ``if rollout_name == "vllm":`` branches of the worker's ``_build_rollout``
  and the rollout module each imports.

Older verl cites other places for the same module (LEGACY_NEEDS: 0.4–0.5 load the actor
with ``attn_implementation="flash_attention_2"`` written in the worker, whatever the config
says): of the entries for one module, the ones whose citation this verl has are used.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.jobs.verl_imports import CodePath, module_file, path_for, reached

ROLLOUT_KEY = "actor_rollout_ref.rollout.name"
LOGGER_KEY = "trainer.logger"
ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
TRACKING_FILE = "utils/tracking.py"
REPLICA_FILE = "workers/rollout/replica.py"
# rollout name → the engine package its server module imports (checked against that module).
ROLLOUT_ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}
# verl 0.4–0.5's own names: hf generates with transformers (no engine), sglang_async is sglang.
LEGACY_ROLLOUT_ENGINES: dict[str, str | None] = {"hf": None, "sglang_async": "sglang"}
WORKER_FILE = "workers/fsdp_workers.py"


def _get(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("1", "true", "yes", "on")


def _attn(cfg: Mapping[str, Any]) -> str:
    # verl/workers/config/model.py: override_config.get("attn_implementation", "flash_attention_2")
    return str(_get(cfg, ATTN_KEY) or "flash_attention_2")


@dataclass(frozen=True)
class Need:
    module: str  # top-level module the host's interpreter must find
    key: str  # the config key that asks for it (named in the finding)
    when: Callable[[Mapping[str, Any]], bool]
    verl_file: str  # relative to verl's package folder
    scope: str  # "Class.method", "function", "" (module level), "*" (anywhere in the file)
    why: str
    literal: str | None = None  # witness is this string constant (not an import statement)
    keyword: str | None = None  # …given as this keyword argument of a call (hard-coded)


NEEDS: tuple[Need, ...] = (
    Need(
        "transfer_queue",
        "trainer.use_v1",
        lambda c: _truthy(_get(c, "trainer.use_v1")),
        "trainer/main_ppo.py",
        "TaskRunnerV1.run",
        "verl's v1 TaskRunner imports TransferQueue (pip install transferqueue)",
    ),
    Need(
        "flash_attn",
        ATTN_KEY,
        lambda c: _attn(c) == "flash_attention_2",
        "workers/config/model.py",
        "HFModelConfig.__post_init__",
        "transformers loads the model with attn_implementation=flash_attention_2 "
        "(verl's default): it needs flash-attn",
        literal="flash_attention_2",
    ),
    Need(
        "megatron",
        "actor_rollout_ref.actor.strategy",
        lambda c: _get(c, "actor_rollout_ref.actor.strategy") == "megatron",
        "workers/engine/megatron/transformer_impl.py",
        "",
        "the megatron strategy imports megatron.core",
    ),
)


# verl 0.4–0.5: the FSDP worker loads the actor with flash_attention_2 written in its source.
LEGACY_NEEDS: tuple[Need, ...] = (
    Need(
        "flash_attn",
        "actor_rollout_ref.model.path",
        lambda c: True,
        WORKER_FILE,
        "ActorRolloutRefWorker._build_model_optimizer",
        "this verl loads the actor with attn_implementation=flash_attention_2 written in its "
        "worker (no config key changes it): it needs flash-attn",
        literal="flash_attention_2",
        keyword="attn_implementation",
    ),
)


# ---- reading verl's source ------------------------------------------------------------------


@functools.cache
def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _scope_nodes(tree: ast.Module, scope: str) -> list[ast.AST]:
    """The nodes to search: the module's own statements ("" — not inside defs), the named
    function/method ("Class.method"), or the whole file ("*")."""
    if scope == "*":
        return [tree]
    if not scope:
        return [
            n
            for n in tree.body
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
    body: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in scope.split("."):
        found = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ),
            None,
        )
        if found is None:
            return []
        body = found.body
    return [found] if found is not None else []


def imported_modules(nodes: list[ast.AST]) -> set[str]:
    """Absolute module names imported anywhere inside `nodes` (`import a.b`, `from a import`)."""
    out: set[str] = set()
    for top in nodes:
        for n in ast.walk(top):
            if isinstance(n, ast.Import):
                out.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                out.add(n.module)
    return out


def _imports(names: set[str], module: str) -> bool:
    return any(m == module or m.startswith(module + ".") for m in names)


def _has_literal(nodes: list[ast.AST], text: str, keyword: str | None = None) -> bool:
    if keyword is not None:
        return any(
            isinstance(n, ast.keyword)
            and n.arg == keyword
            and isinstance(n.value, ast.Constant)
            and n.value.value == text
            for top in nodes
            for n in ast.walk(top)
        )
    return any(
        isinstance(n, ast.Constant) and n.value == text for top in nodes for n in ast.walk(top)
    )


def witness(root: Path, need: Need) -> str | None:
    """None when verl at `root` still has the cited import; else why not (one line)."""
    tree = _tree(root / need.verl_file)
    if tree is None:
        return f"verl/{need.verl_file} is not readable"
    nodes = _scope_nodes(tree, need.scope)
    where = f"verl/{need.verl_file}" + (f" ({need.scope})" if need.scope else "")
    if not nodes:
        return f"{where}: scope not found"
    if need.literal is not None:
        ok = _has_literal(nodes, need.literal, need.keyword)
        return None if ok else f"{where} no longer mentions {need.literal!r}"
    return (
        None
        if _imports(imported_modules(nodes), need.module)
        else (f"{where} no longer imports {need.module}")
    )


def logger_modules(root: Path) -> dict[str, list[str]]:
    """trainer.logger backend → modules verl/utils/tracking.py imports for it (its
    ``if "name" in default_backend:`` blocks)."""
    tree = _tree(root / TRACKING_FILE)
    out: dict[str, list[str]] = {}
    if tree is None:
        return out
    for n in ast.walk(tree):
        if not isinstance(n, ast.If) or not isinstance(n.test, (ast.Compare, ast.BoolOp)):
            continue
        tests = n.test.values if isinstance(n.test, ast.BoolOp) else [n.test]
        names = [
            t.left.value
            for t in tests
            if isinstance(t, ast.Compare)
            and isinstance(t.left, ast.Constant)
            and isinstance(t.left.value, str)
            and len(t.ops) == 1
            and isinstance(t.ops[0], ast.In)
            and isinstance(t.comparators[0], ast.Name)
            and t.comparators[0].id == "default_backend"
        ]
        if not names:
            continue
        mods = sorted(
            {
                m.split(".")[0]
                for m in imported_modules(list(n.body))
                if not m.startswith("verl") and m.split(".")[0] not in sys.stdlib_module_names
            }
        )
        for name in names:
            if mods:
                out.setdefault(name, [])
                out[name] = sorted({*out[name], *mods})
    return out


def rollout_modules(root: Path) -> dict[str, str]:
    """rollout name → verl module file its registered loader imports (replica.py), or on a
    verl without replica.py the module its worker's ``_build_rollout`` branch imports."""
    tree = _tree(root / REPLICA_FILE)
    if tree is None:
        return _built_rollouts(root)
    loaders: dict[str, str] = {}
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "register"
            and len(n.args) == 2
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[1], ast.Name)
        ):
            loaders[str(n.args[0].value)] = n.args[1].id
    out = {}
    for name, fn in loaders.items():
        mods = [
            m
            for m in imported_modules(_scope_nodes(tree, fn))
            if m.startswith("verl.workers.rollout.")
        ]
        if mods:
            out[name] = mods[-1].removeprefix("verl.").replace(".", "/") + ".py"
    return out


def _built_rollouts(root: Path) -> dict[str, str]:
    """verl 0.4–0.5: ``if rollout_name == "vllm": from verl.workers.rollout.vllm_rollout
    import …`` in ActorRolloutRefWorker._build_rollout → the imported module's file."""
    tree = _tree(root / WORKER_FILE)
    scope = _scope_nodes(tree, "ActorRolloutRefWorker._build_rollout") if tree else []
    out: dict[str, str] = {}
    for n in (x for top in scope for x in ast.walk(top)):
        if not (
            isinstance(n, ast.If)
            and isinstance(n.test, ast.Compare)
            and isinstance(n.test.left, ast.Name)
            and n.test.left.id == "rollout_name"
        ):
            continue
        names = [
            e.value
            for c in n.test.comparators
            for e in (c.elts if isinstance(c, (ast.List, ast.Tuple)) else [c])
            if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
        mods = sorted(
            m
            for m in imported_modules(list(n.body))
            if m.startswith("verl.workers.rollout") and module_file(root, m) is not None
        )
        for name in names:
            if mods and name not in out:
                file = module_file(root, max(mods, key=len))
                out[name] = file.relative_to(root).as_posix() if file else ""
    return out


def _requires_distribution(tree: ast.Module, name: str) -> bool:
    """verl 0.4's vllm_rollout/__init__.py: ``vllm_package_name = "vllm"`` … ``raise
    PackageNotFoundError(…)`` at module level — importing it fails without that package."""
    named = _has_literal([tree], name)
    raises = any(
        isinstance(n, ast.Raise)
        and isinstance(n.exc, ast.Call)
        and getattr(n.exc.func, "id", "") == "PackageNotFoundError"
        for n in ast.walk(tree)
    )
    return named and raises


def _engine_imported(root: Path, rel: str, engine: str) -> bool:
    """Whether the rollout module at `rel` imports `engine`: anywhere in its file, or through
    the verl modules it imports at module level (a package's __init__ importing its parts)."""
    tree = _tree(root / rel)
    if tree is not None and _imports(imported_modules([tree]), engine):
        return True
    if tree is not None and _requires_distribution(tree, engine):
        return True
    module = "verl." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return any(r.module == engine for r in reached(root, CodePath(None, None, module, "")))


# ---- what one config needs ------------------------------------------------------------------


@dataclass(frozen=True)
class Required:
    module: str
    key: str
    why: str
    cite: str  # "verl/<file>"
    listed: bool = True  # False: found by following the TaskRunner's imports (verl_imports)


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


def required_modules(cfg: Mapping[str, Any], root: Path) -> tuple[list[Required], list[str]]:
    """(modules this config makes verl import, notes where verl's source no longer matches
    the map — each a one-line warning)."""
    out: list[Required] = []
    notes: list[str] = []
    for module in dict.fromkeys(n.module for n in NEEDS):
        group = [n for n in (*NEEDS, *LEGACY_NEEDS) if n.module == module]
        held = {id(n): witness(root, n) for n in group}
        cited = [n for n in group if held[id(n)] is None]
        used = [n for n in cited if n.when(cfg)]
        if used:
            need = used[0]
            out.append(Required(need.module, need.key, need.why, f"verl/{need.verl_file}"))
        elif not cited and group[0].when(cfg):
            notes.append(f"{module} not checked: {held[id(group[0])]}")
    rollout = _get(cfg, ROLLOUT_KEY)
    if isinstance(rollout, str) and rollout:
        files = rollout_modules(root)
        engines = {**LEGACY_ROLLOUT_ENGINES, **ROLLOUT_ENGINES}
        engine = engines.get(rollout)
        if rollout not in files:
            where = REPLICA_FILE if (root / REPLICA_FILE).is_file() else WORKER_FILE
            notes.append(f"rollout {rollout!r}: no loader found in verl/{where}")
        elif rollout not in engines:
            notes.append(f"rollout {rollout!r}: its engine package is not known to verl-tui")
        elif engine is not None:
            if _engine_imported(root, files[rollout], engine):
                out.append(
                    Required(
                        engine,
                        ROLLOUT_KEY,
                        f"rollout {rollout} runs the {engine} engine",
                        f"verl/{files[rollout]}",
                    )
                )
            else:
                notes.append(f"{engine} not checked: verl/{files[rollout]} does not import it")
    loggers = logger_modules(root)
    for backend in _as_list(_get(cfg, LOGGER_KEY)):
        for mod in loggers.get(backend, []):
            why = f"logger {backend} imports {mod}"
            out.append(Required(mod, LOGGER_KEY, why, f"verl/{TRACKING_FILE}"))
    path, unread = path_for(cfg, root)
    if path is None:
        notes.append(f"the TaskRunner's imports not checked: {unread}")
    else:
        key = path.key or "verl's TaskRunner"
        for hit in reached(root, path):
            how = f"{hit.cite} imports it on {path.label}'s path ({hit.via()})"
            out.append(Required(hit.module, key, how, hit.cite, listed=False))
    unique: dict[str, Required] = {}
    for r in out:
        unique.setdefault(r.module, r)
    return list(unique.values()), notes


# ---- the config ways around a missing module, each checked for its own imports ---------------


@dataclass(frozen=True)
class Switch:
    """A config value that makes verl do without `module` (`key` may start with "+": Hydra's
    append, for a key verl's config does not declare)."""

    module: str
    key: str
    value: Any
    what: str

    @property
    def override(self) -> str:
        text = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"{self.key}={text}"


SWITCHES = (
    Switch("transfer_queue", "trainer.use_v1", False, "verl's legacy TaskRunner"),
    Switch("flash_attn", "+" + ATTN_KEY, "sdpa", "PyTorch's attention"),
    Switch("megatron", "actor_rollout_ref.actor.strategy", "fsdp", "FSDP"),
)


@dataclass(frozen=True)
class Alternative:
    switch: Switch
    modules: tuple[Required, ...]  # everything the config with the switch makes verl import


def _with(cfg: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of `cfg` with the dotted `key` set (the path copied, the rest shared)."""
    out = dict(cfg)
    head, _, rest = key.partition(".")
    if rest:
        inner = out.get(head)
        out[head] = _with(inner if isinstance(inner, Mapping) else {}, rest, value)
    else:
        out[head] = value
    return out


def _switches(module: str, cfg: Mapping[str, Any], root: Path) -> list[Switch]:
    out = [s for s in SWITCHES if s.module == module]
    if module in ROLLOUT_ENGINES.values():  # another rollout verl registers
        now = _get(cfg, ROLLOUT_KEY)
        for name in sorted(rollout_modules(root)):
            engine = ROLLOUT_ENGINES.get(name)
            if name != now and engine and engine != module:
                out.append(Switch(module, ROLLOUT_KEY, name, f"the {engine} engine"))
    return out


def alternatives(
    cfg: Mapping[str, Any], root: Path, required: list[Required]
) -> dict[str, list[Alternative]]:
    """For each required module, the switches that do without it, each with every module the
    switched config imports (its own code path followed: verl_imports). A switch whose config
    still imports the module is not one."""
    out: dict[str, list[Alternative]] = {}
    for r in required:
        for switch in _switches(r.module, cfg, root):
            changed = _with(cfg, switch.key.lstrip("+"), switch.value)
            mods, _notes = required_modules(changed, root)
            if r.module not in {m.module for m in mods}:
                out.setdefault(r.module, []).append(Alternative(switch, tuple(mods)))
    return out


# verl files the map reads: verl_source.py ships them from the head with the config files.
SOURCE_FILES = (
    *sorted({n.verl_file for n in NEEDS}),
    TRACKING_FILE,
    REPLICA_FILE,
    "workers/rollout/vllm_rollout",
    "workers/rollout/sglang_rollout",
    "workers/rollout/trtllm_rollout",
)
