"""YAML loading that remembers where every value came from, so errors can name file:line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Loc = tuple[str | int, ...]
_SCALARS = yaml.constructor.SafeConstructor()


class ConfigError(Exception):
    """A user-facing, one-line problem with a config file (or a CLI value)."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None):
        self.message = message
        self.path = Path(path) if path is not None else None
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        return f"{where}{self.message}"


@dataclass
class LocatedDoc:
    """Plain Python data plus the 1-based line of every mapping key and sequence item."""

    data: Any
    path: Path
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int | None:
        # Walk up until a located ancestor: a missing key is reported at its parent mapping.
        while True:
            if loc in self.lines:
                return self.lines[loc]
            if not loc:
                return None
            loc = loc[:-1]


def _build(node: yaml.Node, loc: Loc, lines: dict[Loc, int], path: Path) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _build(key_node, (*loc, "<key>"), {}, path)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise ConfigError("mapping keys must be plain scalars", path,
                                  key_node.start_mark.line + 1)
            if key in out:
                raise ConfigError(f"duplicate key {key!r}", path, key_node.start_mark.line + 1)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            out[key] = _build(value_node, (*loc, key), lines, path)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines[(*loc, i)] = item.start_mark.line + 1
            items.append(_build(item, (*loc, i), lines, path))
        return items
    # Scalars: let PyYAML's safe constructor resolve the tag (int, bool, null, …).
    return _SCALARS.construct_object(node, deep=True)


def load_yaml(path: Path) -> LocatedDoc:
    """Parse a YAML file into data with line numbers; raise ConfigError (never a traceback)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path) from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path) -> LocatedDoc:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # An unclosed bracket is found at end of file; where it opened is more useful.
        if mark is exc.problem_mark and exc.context_mark is not None and (
                mark.line >= len(text.splitlines())):
            mark = exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"invalid YAML: {problem}", path, line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", path) from None
    if node is None:
        return LocatedDoc(None, path, {(): 1})
    lines: dict[Loc, int] = {}
    try:
        data = _build(node, (), lines, path)
    except yaml.constructor.ConstructorError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise ConfigError(f"invalid value: {exc.problem}", path, line) from None
    return LocatedDoc(data, path, lines)
