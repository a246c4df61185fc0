"""verl's entry points that compose a Hydra config: every module of the selected verl that
declares `@hydra.main(config_path=…, config_name=…)`, found by reading its source with ast
(verl is never imported: it imports torch), cached per verl folder. The script importer
recognises `python -m MODULE` / `…/verl/…/FILE.py` for each, with that entry's own config.
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from tui.jobs.verl_select import SchemaError, current_source

MAIN_PPO = "verl.trainer.main_ppo"  # a profile's default entrypoint (tui/jobs/profiles.py)
MAX_SOURCE_BYTES = 1 << 20  # a verl module is ~60 KiB at most; a bigger file is not read
MAX_FILES = 5000  # verl 0.9.1 has ~900 .py files


@dataclass(frozen=True)
class Entry:
    """One Hydra-composing main of verl: `python -m module` composes config_name from
    config_path (relative to the module's folder, as Hydra resolves it)."""

    module: str  # "verl.experimental.one_step_off_policy.main_ppo"
    file: str  # "experimental/one_step_off_policy/main_ppo.py", relative to verl's folder
    config_path: str | None  # as written in @hydra.main
    config_name: str | None
    root: Path | None  # verl's package folder; None: the built-in fallback (no verl here)

    @property
    def config_dir(self) -> Path | None:
        """The folder its config_path names, on this machine (None: not known here)."""
        if self.root is None or self.config_path is None:
            return None
        folder = (self.root / self.file).parent
        return Path(os.path.normpath(folder / self.config_path))

    def resolve(self, path: str) -> str:
        """A --config-path as Hydra reads it for this entry: relative to the module's folder."""
        if os.path.isabs(path) or self.root is None:
            return path
        return os.path.normpath((self.root / self.file).parent / path)


# verl-tui's own submit module, known without any verl (the import still recognises it).
_FALLBACK = Entry(MAIN_PPO, "trainer/main_ppo.py", "config", "ppo_trainer", None)


def verl_entries() -> dict[str, Entry]:
    """Module name → Entry for the selected verl (this Python's when none is selected);
    only main_ppo when there is no verl to read."""
    try:
        root = current_source().root
    except SchemaError:
        return {MAIN_PPO: _FALLBACK}
    found = _scan(str(root))
    return dict(found) if found else {MAIN_PPO: _FALLBACK}


@functools.cache
def _scan(root_text: str) -> tuple[tuple[str, Entry], ...]:
    root = Path(root_text)
    out: list[tuple[str, Entry]] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > MAX_FILES:
                return tuple(out)
            path = Path(folder) / name
            entry = _entry_of(path, root)
            if entry is not None:
                out.append((entry.module, entry))
    return tuple(out)


def _entry_of(path: Path, root: Path) -> Entry | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"hydra" not in data:
        return None
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError):
        return None
    main_names = _hydra_main_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and _dotted(deco.func) in main_names:
                rel = path.relative_to(root).as_posix()
                module = "verl." + rel.removesuffix(".py").replace("/", ".")
                args = {k.arg: k.value for k in deco.keywords if k.arg}
                for pos, name in zip(deco.args, ("config_path", "config_name"), strict=False):
                    args.setdefault(name, pos)
                return Entry(
                    module,
                    rel,
                    _text(args.get("config_path")),
                    _text(args.get("config_name")),
                    root,
                )
    return None


def _hydra_main_names(tree: ast.Module) -> set[str]:
    """How the module spells hydra.main: `hydra.main`, an alias of hydra, `from hydra import
    main [as m]`."""
    names = {"hydra.main"}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "hydra" and a.asname:
                    names.add(f"{a.asname}.main")
        elif isinstance(node, ast.ImportFrom) and node.module == "hydra":
            for a in node.names:
                if a.name == "main":
                    names.add(a.asname or "main")
    return names


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _text(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def entry_for_path(path: str, entries: dict[str, Entry]) -> Entry | None:
    """The entry a script path runs: `…/verl/trainer/main_ppo.py` (any folder before verl/)."""
    norm = path.replace("\\", "/")
    for entry in entries.values():
        tail = "verl/" + entry.file
        if norm == tail or norm.endswith("/" + tail):
            return entry
    return None
