"""One value of a Hydra override (`key=TEXT`), read and written in one place.

`parse_value(text)` is what verl gets for `key=text`, as a profile holds it (typed; strings as
literal text, OmegaConf's `\\${` escapes undone). `format_value(value)` writes the text Hydra
reads back as exactly that value. `NOT_A_VALUE` is returned where Hydra refuses, sweeps or
interpolates.

Hydra costs ~0.2 s to import and ~1 ms a parse, so the common texts (numbers, booleans, null,
plain names and paths) are read here without it, exactly as Hydra's grammar reads them; the
rest go to Hydra's own parser, imported on first need. Callers on the UI loop warm it in a
thread first (`warm_up`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any, Final


class _NotAValue:
    """The sentinel type: no value a profile could hold (never equal to one)."""

    _instance: _NotAValue | None = None

    def __new__(cls) -> _NotAValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_A_VALUE"

    def __bool__(self) -> bool:
        return False


NOT_A_VALUE: Final = _NotAValue()

_DICT_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")

# Hydra's OverrideLexer (hydra/grammar/OverrideLexer.g4), the tokens a plain text can hold.
_DIGITS = r"[0-9](?:_?[0-9])*"
_UINT = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT = rf"(?:{_UINT}?\.{_DIGITS}|{_UINT}\.)"
_INT_RE = re.compile(rf"[+-]?{_UINT}")
_FLOAT_RE = re.compile(
    rf"[+-]?(?:{_POINT}|(?:{_UINT}|{_POINT})[eE][+-]?{_DIGITS}"
    r"|[Ii][Nn][Ff]|[Nn][Aa][Nn])"
)
# Texts made only of these characters are one ID/number token or several tokens that Hydra
# joins back into the text as written (no quotes, escapes, whitespace, interpolation, lists).
_PLAIN_RE = re.compile(r"[A-Za-z0-9_./+-]+")


_PLAIN_LIST_RE = re.compile(r"\[(?:[A-Za-z0-9_./+-]+(?:,[A-Za-z0-9_./+-]+)*)?\]")


def _fast(text: str) -> Any:
    """The value Hydra gives `text` when that needs no parser, else NOT_A_VALUE."""
    if _PLAIN_LIST_RE.fullmatch(text):
        return [_fast(t) for t in text[1:-1].split(",")] if len(text) > 2 else []
    if not _PLAIN_RE.fullmatch(text):
        return NOT_A_VALUE
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    if _INT_RE.fullmatch(text):
        return int(text.replace("_", ""))
    if _FLOAT_RE.fullmatch(text):
        return float(text.replace("_", ""))
    return text


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    # Imported on first use, never at start-up (and warmed in a thread by the form).
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return None
    return OverridesParser.create()


def hydra_available() -> bool:
    return _parser() is not None


def warm_up() -> None:
    """Import Hydra's parser now (call it from a worker thread, not the UI loop)."""
    _parser()


_INTERP = re.compile(r"(\\*)\$\{")
# The one interpolation a profile may hold: the job's environment where verl resolves its config
# (`${oc.env:HOME}/data/x.parquet`, on the node that runs the TaskRunner). Any other `${…}`
# stays literal text.
ENV_INTERP = re.compile(r"\$\{oc\.env:[A-Za-z_][A-Za-z0-9_]*(?:,[^${}\\']*)?\}")


def _literal(value: Any, found: list[str]) -> Any:
    """Undo OmegaConf's escapes (`\\${` is a literal `${`); note real interpolations."""
    if isinstance(value, str):

        def fix(m: re.Match[str]) -> str:
            n = len(m.group(1))
            if n % 2 == 0:  # a real interpolation: kept as written, reported unless oc.env
                if ENV_INTERP.match(value, m.end() - 2):
                    return m.group(0)
                end = value.find("}", m.end())
                found.append(value[m.end() - 2 : end + 1] if end >= 0 else "${")
                return m.group(0)
            return "\\" * (n // 2) + "${"

        return _INTERP.sub(fix, value)
    if isinstance(value, list):
        return [_literal(v, found) for v in value]
    if isinstance(value, dict):
        return {k: _literal(v, found) for k, v in value.items()}
    return value


def parse_value(text: str, *, shell_text: bool = False) -> tuple[Any, str | None]:
    """(value, problem) for `key=text`. value is NOT_A_VALUE when the text cannot be a value
    at all (a sweep); with a problem and another value, the text is kept as literal text.
    `shell_text`: the text holds unresolved shell expansions (the importer), kept as written.
    Without Hydra installed, what the fast path cannot read is kept as written."""
    quick = _fast(text)
    if quick is not NOT_A_VALUE:
        return quick, None
    parser = _parser()
    if parser is None:  # no Hydra here: keep the text as written
        return text, None
    try:
        override = parser.parse_override(f"k={text}")
    except Exception:  # Hydra's parse errors have no common public base class
        if shell_text:  # an unresolved `$(…)` kept as written: reported as unresolved
            return text, None
        return text, (
            "Hydra cannot parse this value (verl would refuse it): imported as literal text"
        )
    if override.is_sweep_override():
        return NOT_A_VALUE, (
            "comma-separated value is a Hydra sweep: verl refuses it without "
            "--multirun; write [a,b] for a list or quote it for a string"
        )
    found: list[str] = []
    value = _literal(override.value(), found)
    if found and not shell_text:
        return value, (
            f"OmegaConf interpolation {found[0]}: a profile holds literal values, "
            "so this text reaches verl unresolved; write the value itself"
        )
    return value, None


def read_value(text: str) -> Any:
    """The literal value a profile would hold for `key=text`, or NOT_A_VALUE when Hydra
    refuses it, sweeps it or interpolates."""
    value, problem = parse_value(text)
    return NOT_A_VALUE if problem else value


def _quote(text: str) -> str:
    # OmegaConf first: `${` starts an interpolation; escape it (and the backslashes before it)
    # so the value stays literal text.
    # ${oc.env:NAME} alone passes (ENV_INTERP), unescaped and not preceded by a backslash.
    def esc(m: re.Match[str]) -> str:
        if not m.group(1) and ENV_INTERP.match(text, m.end() - 2):
            return m.group(0)
        return m.group(1) * 2 + "\\${"

    text = re.sub(r"(\\*)\$\{", esc, text)
    # Hydra's quoted string: backslashes are literal except before a quote or at the end.
    text = re.sub(r"(\\+)(?='|\Z)", lambda m: m.group(1) * 2, text)
    return "'" + text.replace("'", "\\'") + "'"


def format_value(value: Any) -> str:
    """One value in Hydra's override grammar (strings always quoted); ValueError for what it
    cannot express."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        parts = []
        for k, v in value.items():
            if not isinstance(k, str) or not _DICT_KEY_RE.match(k):
                raise ValueError(f"mapping key {k!r} must be a plain name")
            parts.append(f"{k}:{format_value(v)}")
        return "{" + ",".join(parts) + "}"
    raise ValueError(f"{type(value).__name__} values cannot be written as a Hydra override")


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True are not the same)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def short_text(value: Any) -> str:
    """A text `parse_value` reads back as exactly `value`: plain where Hydra reads the plain
    text the same (decided without Hydra, so the same everywhere), else Hydra's quoted form."""
    if isinstance(value, str):
        return value if _same(_fast(value), value) else format_value(value)
    if isinstance(value, list):
        plain = "[" + ",".join(short_text(v) for v in value) + "]"
        if _same(_fast(plain), value):
            return plain
    return format_value(value)
