"""The third-party modules one verl code path imports, read from verl's source with ``ast``.

verl's ``main`` (verl/trainer/main_ppo.py) hands ``run_ppo`` a TaskRunner class, chosen by a
config switch (``if config.trainer.use_v1: … TaskRunnerV1 … else: from verl.trainer.main_ppo_v0
import TaskRunner``). That TaskRunner runs on some node and imports, through verl's own modules,
the packages the job dies without (verl 0.9.1's legacy path reaches
verl/workers/rollout/router.py, which imports cachetools at module level).

Followed here, for the branch a config takes: the runner's file at module level, the imports in
the runner's methods (and its base classes' in that file), and every verl module they import,
transitively, at module level. Only imports that always run are followed: a module-level
``if`` (``TYPE_CHECKING``, a device check) or a ``try`` that catches ImportError makes an
import optional. What is reported is a third-party top-level module with the chain of verl
modules that reaches it.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAIN_FILE = "trainer/main_ppo.py"
SOURCE_TREES = ("",)  # verl_source.py ships every .py of verl's package (read here)
MAIN_FUNCTION = "main"
_OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class CodePath:
    """One TaskRunner verl's main() may run: picked by `key` being `value` (None: always)."""

    key: str | None
    value: bool | None
    module: str  # "verl.trainer.main_ppo_v0"
    runner: str  # the class name

    @property
    def label(self) -> str:
        where = f"{self.module}.{self.runner}"
        return where if self.key is None else f"{where} ({self.key}={str(self.value).lower()})"


@dataclass(frozen=True)
class Reached:
    """A third-party module and how the code path reaches it."""

    module: str
    importer: str  # the verl module whose import statement names it
    chain: tuple[str, ...]  # verl modules from the runner's module to `importer`

    @property
    def cite(self) -> str:
        return "verl/" + "/".join(self.importer.split(".")[1:]) + ".py"

    def via(self) -> str:
        """The chain, short: first, …, last two."""
        names = [m.removeprefix("verl.") for m in self.chain]
        if len(names) > 4:
            names = [names[0], "…", *names[-2:]]
        return " → ".join(names)


@functools.cache
def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _file(root: Path, module: str) -> Path | None:
    """verl's file for a dotted module name (package → its __init__.py), or None."""
    parts = module.split(".")
    if parts[0] != "verl":
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def module_file(root: Path, module: str) -> Path | None:
    """verl's file for a dotted module name under `root` (package → its __init__.py)."""
    return _file(root, module)


def _optional(node: ast.Try) -> bool:
    def names(t: ast.expr | None) -> list[str]:
        if t is None:
            return ["BaseException"]
        if isinstance(t, ast.Tuple):
            return [n for e in t.elts for n in names(e)]
        return (
            [t.id] if isinstance(t, ast.Name) else [t.attr] if isinstance(t, ast.Attribute) else []
        )

    return any(set(names(h.type)) & _OPTIONAL for h in node.handlers)


def _always(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements of `body` that always run, blocks that always run opened (with, a try
    that does not catch ImportError, a class body); if/for/while and function bodies not."""
    for s in body:
        if isinstance(s, (ast.With, ast.AsyncWith)):
            yield from _always(s.body)
        elif isinstance(s, ast.Try) and not _optional(s):
            yield from _always([*s.body, *s.finalbody])
        elif isinstance(s, ast.ClassDef):
            yield from _always(s.body)
        else:
            yield s


def _named(stmts: Iterable[ast.stmt], package: str) -> list[str]:
    """Absolute module names the import statements among `stmts` name (a `from M import x`
    names M and M.x: x may be a submodule)."""
    out: list[str] = []
    for s in stmts:
        if isinstance(s, ast.Import):
            out += [a.name for a in s.names]
        elif isinstance(s, ast.ImportFrom):
            if s.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (s.level - 1)] if s.level > 1 else parts
                base = ".".join([*parts, *([s.module] if s.module else [])])
            else:
                base = s.module or ""
            if base:
                out.append(base)
                out += [f"{base}.{a.name}" for a in s.names if a.name != "*"]
    return out


def _package(root: Path, module: str) -> str:
    path = _file(root, module)
    return module if path is not None and path.name == "__init__.py" else module.rpartition(".")[0]


def _class_bodies(tree: ast.Module, name: str) -> list[ast.stmt]:
    """The always-run statements of every method of class `name` and of its base classes
    defined in the same file."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: list[ast.stmt] = []
    todo, seen = [name], set()
    while todo:
        cls = classes.get(todo.pop())
        if cls is None or cls.name in seen:
            continue
        seen.add(cls.name)
        todo += [b.id for b in cls.bases if isinstance(b, ast.Name)]
        for n in cls.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out += list(_always(n.body))
    return out


@functools.cache
def reached(root: Path, path: CodePath) -> tuple[Reached, ...]:
    """Every third-party top-level module `path` imports (breadth first: the shortest chain)."""
    tree = _tree(_file(root, path.module) or root / "missing")
    if tree is None:
        return ()
    start = _named(_class_bodies(tree, path.runner), _package(root, path.module))
    chains: dict[str, tuple[str, ...]] = {}  # verl module → the chain that ends with it
    found: dict[str, Reached] = {}
    queue: deque[str] = deque()

    def add(name: str, chain: tuple[str, ...]) -> None:
        top = name.split(".")[0]
        if top != "verl":
            if top not in sys.stdlib_module_names and top != "__future__" and top not in found:
                found[top] = Reached(top, chain[-1], chain)
            return
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
            module = ".".join(parts[:i])
            if module not in chains and _file(root, module) is not None:
                chains[module] = (*chain, module)
                queue.append(module)

    add(path.module, ())
    for name in start:  # the runner's methods import these when it runs
        add(name, (path.module,))
    while queue:
        name = queue.popleft()
        file = _file(root, name)
        body = _tree(file) if file is not None else None
        for imported in _named(_always(body.body), _package(root, name)) if body else ():
            add(imported, chains[name])
    return tuple(found.values())


# ---- which TaskRunner a config runs (verl's main()) -----------------------------------------


def _config_key(test: ast.expr) -> str | None:
    """`config.trainer.use_v1` → "trainer.use_v1" (the test of main()'s branch)."""
    parts: list[str] = []
    node = test
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "config" and parts:
        return ".".join(reversed(parts))
    return None


def _runner_in(stmts: list[ast.stmt], here: str) -> tuple[str, str] | None:
    """(module, class) of the `task_runner_class=` a branch hands run_ppo."""
    imported = {
        a.asname or a.name: n.module
        for s in stmts
        for n in ast.walk(s)
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
        for a in n.names
    }
    for s in stmts:
        for n in ast.walk(s):
            if not isinstance(n, ast.Call):
                continue
            for kw in n.keywords:
                if kw.arg == "task_runner_class" and isinstance(kw.value, ast.Name):
                    return imported.get(kw.value.id, here), kw.value.id
    return None


def _runner_class_called(tree: ast.Module, main: ast.FunctionDef) -> str | None:
    """The class of this file that a function main() calls instantiates as a Ray actor
    (``TaskRunner.remote()``, ``ray.remote(...)(TaskRunner)``): verl 0.4–0.8's run_ppo."""
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    called = [
        functions[n.func.id]
        for n in ast.walk(main)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions
    ]
    for fn in called:
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and n.id in classes and "Runner" in n.id:
                return n.id
    return None


def code_paths(root: Path) -> tuple[list[CodePath], str | None]:
    """The TaskRunners verl's main() chooses between, or ([], why) when it no longer reads."""
    here = "verl." + MAIN_FILE.removesuffix(".py").replace("/", ".")
    tree = _tree(root / MAIN_FILE)
    main = (
        next(
            (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == MAIN_FUNCTION),
            None,
        )
        if tree is not None
        else None
    )
    if main is None:
        return [], f"verl/{MAIN_FILE}: no {MAIN_FUNCTION}() found"
    out: list[CodePath] = []
    for n in ast.walk(main):
        key = _config_key(n.test) if isinstance(n, ast.If) else None
        if isinstance(n, ast.If) and key is not None:
            for value, branch in ((True, n.body), (False, n.orelse)):
                runner = _runner_in(branch, here)
                if runner is not None:
                    out.append(CodePath(key, value, *runner))
    if not out:
        runner = _runner_in(main.body, here)
        if runner is not None:
            out.append(CodePath(None, None, *runner))
    if not out:  # verl 0.4–0.8: main() calls run_ppo(config), which makes this file's runner
        runner_class = _runner_class_called(tree, main) if tree is not None else None
        if runner_class is not None:
            out.append(CodePath(None, None, here, runner_class))
    if not out:
        return [], f"verl/{MAIN_FILE}: {MAIN_FUNCTION}() hands run_ppo no TaskRunner it names"
    return out, None


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("1", "true", "yes", "on")


def _get(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def path_for(cfg: Mapping[str, Any], root: Path) -> tuple[CodePath | None, str | None]:
    """The code path `cfg` runs, or (None, why)."""
    paths, why = code_paths(root)
    for p in paths:
        if p.key is None or _truthy(_get(cfg, p.key)) == p.value:
            return p, None
    return None, why or "no TaskRunner of verl's main() matches this config"
