"""The one sanitizer for text from outside (hosts, files, Ray) before it reaches a terminal.

Everything a host, a file or the dashboard sends may hold terminal control sequences: an OSC that
retitles the terminal or writes the clipboard, a CSI that clears the screen or moves the cursor, a
DCS, C1 controls, bidi overrides that reorder what is shown. A terminal acts on them; we never let
one through. Escape sequences are dropped whole; any other control character is shown escaped
(`\\x07`), so nothing is hidden and nothing acts. `keep_sgr=True` keeps colour/style sequences
(`ESC [ … m`) only, for log panes that show a job's own colours.

Textual markup is a second channel: a `[@click=app.quit]` in a host name would be a live link.
Text shown through markup goes through `markup()` (sanitized, then markup-escaped); text given to
widgets as `rich.text.Text` or `Content` needs only `clean()`/`one_line()`; `styled()` cleans a
styled Text already built, `cell()` makes a DataTable cell (str cells are Rich markup there).

The CLI's text output gets the same treatment in one place: `SafeWriter` wraps stdout/stderr
(installed by the entry point), so every `print` of a headless command is cleaned; a command
that writes its own styling (colours, `\\r` progress) writes that to `raw(stream)` and cleans the
outside parts itself.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.text import Text

# Whole escape sequences, as terminals parse them (ECMA-48): CSI with parameters and
# intermediates; OSC/DCS/SOS/PM/APC strings up to their terminator (BEL or ST), or up to the end of
# the text when unterminated (a terminal would swallow everything after it too); 2-byte escapes;
# and the 8-bit C1 forms of CSI (0x9b) and of the string introducers (0x90, 0x98, 0x9d-0x9f).
_SEQ = (
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI (unfinished: dropped up to where it stops)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC/DCS/…
    r"|\x1b[ -/]*[0-~]?"  # 2-byte escapes (charset selects, RIS `ESC c`, DECSC …) or a lone ESC
)
_SEQ_RE = re.compile(_SEQ)
_SGR_RE = re.compile(r"\x1b\[[0-9;:]*m")
# Controls shown escaped: C0 except TAB/LF, DEL, C1, and Unicode's bidi marks, embeddings,
# overrides and isolates, and line/paragraph separators (they reorder or break what a terminal
# shows).
_UNI = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CTRL_RE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_UNI}]")
_CTRL_NL_RE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_UNI}]")
# Fast paths: text with none of these needs no work (the usual case for telemetry, log lines and
# CLI output). The first keeps newlines, the second folds them.
_NEEDS_RE = _CTRL_RE
_NEEDS_NL_RE = _CTRL_NL_RE


def _only_sgr(s: str, ctrl: re.Pattern[str]) -> bool:
    """Every control character in `s` starts an SGR sequence (coloured log lines, the usual
    case in Ray's logs: kept as they are, no rebuilding)."""
    match = _SGR_RE.match
    return all(m.group() == "\x1b" and match(s, m.start()) for m in ctrl.finditer(s))


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def _drop_sequences(text: str) -> str:
    return _SEQ_RE.sub("", text)


def _keep_sgr(m: re.Match[str]) -> str:
    seq = m.group()
    return seq if _SGR_RE.fullmatch(seq) else ""


def clean(text: object, *, keep_sgr: bool = False, keep_newlines: bool = True) -> str:
    """Text safe to write to a terminal: escape sequences dropped (SGR kept if asked), other
    control characters shown as `\\xNN`. Newlines and tabs stay unless `keep_newlines=False`."""
    s = text if isinstance(text, str) else str(text)
    ctrl = _CTRL_RE if keep_newlines else _CTRL_NL_RE
    if not ctrl.search(s):
        return s
    if not keep_sgr:
        return ctrl.sub(_escaped, _drop_sequences(s))
    if _only_sgr(s, ctrl):
        return s
    # SGR sequences survive; the text between them is cleaned like any other.
    out: list[str] = []
    pos = 0
    for m in _SEQ_RE.finditer(s):
        out.append(ctrl.sub(_escaped, s[pos : m.start()]))
        out.append(_keep_sgr(m))
        pos = m.end()
    out.append(ctrl.sub(_escaped, s[pos:]))
    return "".join(out)


def one_line(text: object, limit: int | None = None) -> str:
    """A label: sanitized, line breaks folded to spaces, optionally cut to `limit` characters."""
    s = text if isinstance(text, str) else str(text)
    if _NEEDS_NL_RE.search(s):
        s = _drop_sequences(s).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
        s = _CTRL_NL_RE.sub(_escaped, s)
    if "\t" in s:
        s = s.replace("\t", " ")
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    return s


def escape_markup(text: str) -> str:
    """Every `[` escaped for Textual's content markup (Static, Label, notify, titles): in
    Textual's parser `\\[` is a literal `[` and nothing else changes, so the text round-trips
    exactly and no tag (`[@click=…]`, `[link=…]`, `[$var]`) can form."""
    return text.replace("[", "\\[")


def markup(text: object, limit: int | None = None) -> str:
    """One line for a Textual markup string (Static, Label, notify): sanitized, then `[`
    escaped. Not for Rich markup (DataTable str cells): give those `cell()`."""
    return escape_markup(one_line(text, limit))


def log_line(text: str) -> str:
    """A job/node log line for a log pane: SGR colours kept, every other control dropped/escaped."""
    return clean(text, keep_sgr=True, keep_newlines=False)


def styled(value: Text) -> Text:
    """A Rich Text whose characters are cleaned, its styles kept: for Text built from outside
    strings (Rich strips only BEL/BS/CR/VT/FF; ESC, C1 and bidi overrides stay otherwise)."""
    plain = value.plain
    if not _CTRL_RE.search(plain):
        return value
    from rich.text import Text

    cuts = sorted({s.start for s in value.spans} | {s.end for s in value.spans})
    out = Text(
        style=value.style,
        justify=value.justify,
        overflow=value.overflow,
        no_wrap=value.no_wrap,
        end=value.end,
    )
    for piece in value.divide(cuts):
        start = len(out.plain)
        out.append(clean(piece.plain))
        # Between two cut points every span covers the whole piece.
        for span in piece.spans:
            out.stylize(span.style, start, len(out.plain))
    return out


def cell(value: object, limit: int | None = None, style: str = "") -> Text:
    """A DataTable cell (str cells are parsed as Rich markup there): one clean line as Text."""
    from rich.text import Text

    return Text(one_line("" if value is None else value, limit), style=style)


class SafeWriter:
    """A text stream that cleans everything written to it (newlines and tabs kept), for a
    headless command's stdout/stderr: nothing printed can act on the terminal. JSON from
    `json.dumps` (ensure_ascii) is printable ASCII and passes unchanged. `buffer` is not
    offered: bytes written there would pass uncleaned."""

    def __init__(self, stream: TextIO) -> None:
        self.raw_stream = stream

    def write(self, s: str) -> int:
        self.raw_stream.write(clean(s))
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.raw_stream.flush()

    def isatty(self) -> bool:
        return self.raw_stream.isatty()

    def fileno(self) -> int:
        return self.raw_stream.fileno()

    def close(self) -> None:
        self.raw_stream.close()

    @property
    def closed(self) -> bool:
        return self.raw_stream.closed

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            raise AttributeError("SafeWriter offers no byte buffer (it would bypass cleaning)")
        return getattr(self.raw_stream, name)


def raw(stream: TextIO) -> TextIO:
    """The stream under a SafeWriter (or the stream itself): for a command's own styling
    (colours, `\\r` progress lines). Whatever outside text goes there must be cleaned first."""
    return stream.raw_stream if isinstance(stream, SafeWriter) else stream


@contextlib.contextmanager
def safe_output() -> Iterator[None]:
    """sys.stdout and sys.stderr wrapped in SafeWriters for the block (nested: no-op)."""
    out, err = sys.stdout, sys.stderr
    if not isinstance(out, SafeWriter):
        sys.stdout = SafeWriter(out)
    if not isinstance(err, SafeWriter):
        sys.stderr = SafeWriter(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
