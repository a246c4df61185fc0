"""The one loader for our YAML files (hosts.yaml, profiles) and the one safe reader for every
config/state file (drafts too): data plus the line every value came from, so errors name
file:line.

Every file is untrusted. The reader takes regular files only (a FIFO or a device would block or
never end: the file is opened non-blocking and checked with fstat), at most MAX_BYTES, UTF-8,
and no control characters. The YAML composer is our own, over the parser's events (libyaml's when
present): it is iterative, so nesting cannot overflow Python's stack; it refuses nesting deeper
than MAX_DEPTH, aliases that expand to more than MAX_ALIAS_VALUES values (a "billion laughs" is
refused before anything is expanded), and an alias inside its own anchor (a cycle). Every hostile
file ends in a ConfigError naming file:line, in milliseconds.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
import yaml.resolver

from tui.errors import VerlTuiError
from tui.sanitize import one_line

Loc = tuple[str | int | float, ...]

MAX_BYTES = 1 << 20  # 1 MiB: a hosts file for thousands of hosts is ~100 KiB
MAX_DEPTH = 100  # our files nest 4 levels; verl's deepest config path is ~8
MAX_ALIAS_VALUES = 10_000  # values that aliases (*name) may add when expanded
# Values in all (aliases expanded): sized for a hosts file of 4,096 hosts of up to 16 values each
# (name, address, user, port … : a plain entry has 8). Bounds the time a 1 MiB file of
# `[1,1,1,…]` takes (~4 µs a value) as the byte cap alone does not.
MAX_VALUES = 16 * 4096

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: 5x faster
# Not allowed anywhere in a file: C0 controls except TAB/LF/CR, DEL, C1 controls, the Unicode line
# and paragraph separators and bidi embeddings/overrides/isolates (they reorder what is shown).
_BAD_CHAR_RE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffe\uffff]"
)
# Values are held to the same rule after YAML's escapes ("\e", "\0", "\x1b" …) are decoded; CR,
# LF and TAB may stay (a multi-line description; display sanitizes them).
_BAD_VALUE_RE = _BAD_CHAR_RE
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class ConfigError(VerlTuiError, title="bad input", kind="bad_input"):
    """A user-facing, one-line problem with a config file (or a CLI value)."""

    def __init__(
        self,
        message: str,
        path: Path | str | None = None,
        line: int | None = None,
        *,
        hint: str | None = None,
    ):
        self.message = message
        self.path = Path(path) if path is not None else None
        self.line = line
        super().__init__(str(self), hint=hint)

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        # File names and quoted values come from outside: one sanitized line, always.
        return one_line(f"{where}{self.message}")


@dataclass
class LocatedDoc:
    """Plain Python data plus the 1-based line of every mapping key and sequence item."""

    data: Any
    path: Path
    lines: dict[Loc, int] = field(default_factory=dict)
    # Where the file has an unquoted (plain) scalar that YAML read as a string: a caller may
    # want YAML 1.2's reading of some of them (profiles: `1e-6` is a float there).
    plain_strings: set[Loc] = field(default_factory=set)

    def line_of(self, loc: Loc) -> int | None:
        # Walk up until a located ancestor: a missing key is reported at its parent mapping.
        while True:
            if loc in self.lines:
                return self.lines[loc]
            if not loc:
                return None
            loc = loc[:-1]


# -- reading ---------------------------------------------------------------------------------


def _line_at(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _char_name(c: str) -> str:
    return f"U+{ord(c):04X}"


def unsafe_char(text: str) -> str | None:
    """The first character our files may not hold (see _BAD_CHAR_RE), or None."""
    m = _BAD_CHAR_RE.search(text)
    return m.group() if m else None


def check_text(text: str, path: Path | str) -> str:
    """`text` without a leading BOM; ConfigError at the first character not allowed."""
    text = text.removeprefix("\ufeff")
    m = _BAD_CHAR_RE.search(text)
    if m:
        raise ConfigError(
            f"control character {_char_name(m.group())} not allowed",
            path,
            _line_at(text, m.start()),
        )
    return text


def read_bytes(path: Path | str, *, max_bytes: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, at most `max_bytes`; ConfigError (one line) otherwise. Never
    blocks: opened with O_NONBLOCK, then checked with fstat on the open descriptor (no race
    between a check and the open)."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        parent = path.parent
        if str(parent) not in ("", ".") and not parent.is_dir():
            raise ConfigError(f"file not found (no folder {parent})", path) from None
        raise ConfigError("file not found", path) from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise ConfigError("file not found (a part of the path is not a folder)", path) from None
        try:  # a socket cannot be opened (ENXIO): say what it is
            kind = _kind(os.stat(path).st_mode)
        except OSError:
            kind = None
        if kind:
            raise ConfigError(f"is {kind}, expected a regular file", path) from None
        raise ConfigError(f"cannot open: {exc.strerror or exc}", path) from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind:
            raise ConfigError(f"is {kind}, expected a regular file", path)
        if st.st_size > max_bytes:
            raise ConfigError(
                f"file is {st.st_size} bytes, over the {_size(max_bytes)} limit for config files",
                path,
            )
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:  # the file may grow after fstat: read at most one byte more
            chunk = os.read(fd, min(1 << 16, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise ConfigError(f"file is over the {_size(max_bytes)} limit for config files", path)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str | None:
    """None for a regular file, else what it is."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def decode(data: bytes, path: Path | str) -> str:
    """UTF-8 text with no control characters, or ConfigError naming the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", path, line) from None
    return check_text(text, path)


def read_text(path: Path | str, *, max_bytes: int = MAX_BYTES) -> str:
    """The safe read of any config or state file we parse: regular file, size cap, UTF-8,
    no control characters. ConfigError names the file (and line) otherwise."""
    return decode(read_bytes(path, max_bytes=max_bytes), path)


# -- composing: parser events → nodes, bounded --------------------------------------------------


def _mark_line(mark: Any) -> int | None:
    return mark.line + 1 if mark is not None else None


def _compose(text: str, path: Path) -> yaml.Node | None:
    """One document's node graph, built without recursion and within the limits."""
    resolver = yaml.resolver.Resolver()
    # anchor → (node, values it expands to, height); set when the anchored node is complete.
    anchors: dict[str, tuple[yaml.Node, int, int]] = {}
    open_anchors: set[str] = set()
    # Open collections: [node, anchor, values so far, height of the tallest child].
    stack: list[list[Any]] = []
    root: yaml.Node | None = None
    documents = 0
    alias_values = 0
    values = 0  # scalars so far, aliases expanded (collections counted when they close)

    def fail(msg: str, mark: Any) -> ConfigError:
        return ConfigError(msg, path, _mark_line(mark))

    def add(node: yaml.Node, size: int, height: int, new: int) -> None:
        # new: values not counted before (a closing collection's children already were)
        nonlocal root, values
        values += new
        if values > MAX_VALUES:
            raise fail(f"more than {MAX_VALUES} values in one file", node.start_mark)
        if not stack:
            root = node
            return
        top = stack[-1]
        top[2] += size
        if height > top[3]:
            top[3] = height
        parent = top[0]
        if isinstance(parent, yaml.MappingNode):
            items = parent.value
            if items and items[-1][1] is None:
                items[-1] = (items[-1][0], node)
            else:
                items.append((node, None))
        else:
            parent.value.append(node)

    def check_tag(tag: str | None, default: str, mark: Any) -> str:
        if tag in (None, "!", default):
            return default
        short = tag.replace("tag:yaml.org,2002:", "!!")
        raise fail(f"tag {short} is not supported here", mark)

    node: yaml.Node
    # types-PyYAML: nodes take only yaml.error.Mark, events carry libyaml's Mark as well (same
    # fields), hence the arg-type ignores below.
    for ev in yaml.parse(text, Loader=_LOADER):
        if isinstance(ev, yaml.ScalarEvent):
            tag = ev.tag
            if tag is None or tag == "!":
                tag = resolver.resolve(yaml.ScalarNode, ev.value, ev.implicit)
            node = yaml.ScalarNode(
                tag,
                ev.value,
                ev.start_mark,  # type: ignore[arg-type]
                ev.end_mark,  # type: ignore[arg-type]
                style=ev.style,
            )
            if ev.anchor is not None:
                anchors[ev.anchor] = (node, 1, 1)
            add(node, 1, 1, 1)
        elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_DEPTH:
                raise fail(f"nested deeper than {MAX_DEPTH} levels", ev.start_mark)
            if isinstance(ev, yaml.SequenceStartEvent):
                tag = check_tag(
                    ev.tag, yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, ev.start_mark
                )
                node = yaml.SequenceNode(
                    tag,
                    [],
                    ev.start_mark,  # type: ignore[arg-type]
                    None,
                    flow_style=ev.flow_style,
                )
            else:
                tag = check_tag(
                    ev.tag, yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, ev.start_mark
                )
                node = yaml.MappingNode(
                    tag,
                    [],
                    ev.start_mark,  # type: ignore[arg-type]
                    None,
                    flow_style=ev.flow_style,
                )
            if ev.anchor is not None:
                open_anchors.add(ev.anchor)
            stack.append([node, ev.anchor, 1, 0])
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            node, anchor, size, height = stack.pop()
            node.end_mark = ev.end_mark
            if anchor is not None:
                open_anchors.discard(anchor)
                anchors[anchor] = (node, size, height + 1)
            add(node, size, height + 1, 1)
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor in open_anchors:
                raise fail(
                    f"alias *{ev.anchor} is inside its own anchor &{ev.anchor} "
                    "(a recursive structure)",
                    ev.start_mark,
                )
            if ev.anchor not in anchors:
                raise fail(
                    f"alias *{ev.anchor} has no anchor &{ev.anchor} before it", ev.start_mark
                )
            target, size, height = anchors[ev.anchor]
            alias_values += size
            if alias_values > MAX_ALIAS_VALUES:
                raise fail(
                    f"aliases expand to more than {MAX_ALIAS_VALUES} values (at *{ev.anchor})",
                    ev.start_mark,
                )
            if len(stack) + height > MAX_DEPTH:
                raise fail(
                    f"alias *{ev.anchor} nests deeper than {MAX_DEPTH} levels", ev.start_mark
                )
            add(target, size, height, size)
        elif isinstance(ev, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise fail("expected one YAML document, found a second one (---)", ev.start_mark)
    return root


# -- building: nodes → plain data with lines -------------------------------------------------


class _Builder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[Loc, int] = {}
        self.plain: set[Loc] = set()
        self.constructor = yaml.constructor.SafeConstructor()

    def fail(self, msg: str, node: yaml.Node) -> ConfigError:
        return ConfigError(msg, self.path, _mark_line(node.start_mark))

    def build(self, node: yaml.Node, loc: Loc, record: bool = True) -> Any:
        # Depth is bounded by the composer (MAX_DEPTH, aliases included): recursion is safe.
        if record:
            self.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.build(key_node, (*loc, "<key>"), record=False)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise self.fail("mapping keys must be plain scalars", key_node)
                if key in out:
                    raise self.fail(f"duplicate key {key!r}", key_node)
                key_loc = (*loc, key)  # not inline: mypy takes d[(*a, b)] for 3.11's d[*a, b]
                if record:
                    self.lines[key_loc] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, key_loc, record)
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                item_loc = (*loc, i)
                if record:
                    self.lines[item_loc] = item.start_mark.line + 1
                items.append(self.build(item, item_loc, record))
            return items
        # The composer makes only these three kinds of node.
        return self.scalar(cast(yaml.ScalarNode, node), loc, record)

    def scalar(self, node: yaml.ScalarNode, loc: Loc, record: bool) -> Any:
        if node.tag == "tag:yaml.org,2002:merge":
            raise self.fail("merge keys (<<) are not supported: write the keys out", node)
        # PyYAML's safe constructor resolves the value (int, bool, null, …); a few of its
        # conversions raise plain Python errors (a 5000-digit int, a 13th month): catch them.
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise self.fail(f"invalid value: {exc.problem}", node) from None
        except (ValueError, OverflowError, TypeError, ArithmeticError) as exc:
            reason = str(exc).split(":")[0].split(";")[0]  # not Python's advice on limits
            raise self.fail(f"invalid value {one_line(node.value, 40)!r}: {reason}", node) from None
        finally:
            self.constructor.constructed_objects.clear()
        if isinstance(value, str):
            m = _BAD_VALUE_RE.search(value)
            if m:
                raise self.fail(f"control character {_char_name(m.group())} not allowed", node)
            if record and not node.style:
                self.plain.add(loc)
        elif isinstance(value, (bytes, bytearray)):
            raise self.fail("binary values are not supported", node)
        return value


def parse_yaml(text: str, path: Path) -> LocatedDoc:
    """Parse YAML text into data with line numbers; raise ConfigError (never a traceback)."""
    path = Path(path)
    if len(text) > MAX_BYTES:
        raise ConfigError(f"text is over the {_size(MAX_BYTES)} limit for config files", path)
    text = check_text(text, path)
    try:
        with _no_gc():
            node = _compose(text, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # An unclosed bracket is found at end of file; where it opened is more useful.
        if (
            mark is exc.problem_mark
            and exc.context_mark is not None
            and mark is not None
            and (mark.line >= len(text.splitlines()))
        ):
            mark = exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"invalid YAML: {problem}", path, _mark_line(mark)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", path) from None
    if node is None:
        return LocatedDoc(None, path, {(): 1})
    builder = _Builder(path)
    with _no_gc():
        data = builder.build(node, ())
    return LocatedDoc(data, path, builder.lines, builder.plain)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    # Composing allocates one object per value and no cycles (aliases are checked): the
    # cyclic collector would only rescan the growing graph, 2-3x the parse time of a big file.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_yaml(path: Path | str) -> LocatedDoc:
    """Read (safely, see read_text) and parse a YAML file; every problem is a ConfigError
    naming file:line."""
    path = Path(path)
    return parse_yaml(read_text(path), path)
