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

Invisible characters are a third channel: a zero-width space, a tag character (U+E0000 block),
a variation selector or a bidi control between the letters of "H100" draws as "H100" and can
spoof a name. They are shown escaped too (`\\u200b`, `\\U000e0041`): `clean()` escapes the known
invisible set; `one_line()` (every label and table cell) escapes every character Python does not
call printable (Unicode Cc, Cf, Cs, Co, Cn, Zl, Zp, and spaces other than ' ') plus combining
marks with no letter under them or stacked more than MAX_MARKS deep.

Width is measured in terminal cells, never characters: `width()` is the one measure (Rich's
`cell_len`: CJK and emoji take two cells), `fit()` cuts to a number of cells with an ellipsis,
`pad()` makes a fixed-width column cell. `one_line(text, limit)` and `cell(value, limit)` take
their limit in cells.

The CLI's text output gets the same treatment in one place: `SafeWriter` wraps stdout/stderr
(installed by the entry point), so every `print` of a headless command is cleaned; a command
that writes its own styling (colours, `\\r` progress) writes that to `raw(stream)` and cleans the
outside parts itself.
"""

from __future__ import annotations

import contextlib
import functools
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
# Invisible characters that can hide inside a name: soft hyphen, combining grapheme joiner,
# Hangul fillers, Mongolian selectors, zero-width space/joiners, word joiner and invisible
# operators, deprecated format controls, variation selectors, BOM, interlinear annotations,
# private use, lone surrogates (from undecodable bytes); past the BMP: musical format
# controls, tag characters, variation selectors supplement, private use planes.
_UNI += (
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2060-\u2065"
    "\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ue000-\uf8ff\ud800-\udfff"
)
_ASTRAL = "\U0001d173-\U0001d17a\U000e0000-\U000e007f\U000e0100-\U000e01ef\U000f0000-\U0010ffff"
_C0, _C0_NL = "\x00-\x08\x0b-\x1f\x7f", "\x00-\x08\x0a-\x1f\x7f"  # TAB (and LF) kept
# By the widest character of the text (0: ASCII, 1: the BMP, 2: beyond): re tests a class of
# BMP ranges with one table lookup a character but walks a list once astral ranges are in it
# (4x slower on every log line), so the narrowest class that can hold the text's characters is
# used. [keep_newlines][width]
_CTRL_BY_WIDTH = {
    keep: tuple(
        re.compile(f"[{c0}{extra}]")
        for extra in ("", f"\x80-\x9f{_UNI}", f"\x80-\x9f{_UNI}{_ASTRAL}")
    )
    for keep, c0 in ((True, _C0), (False, _C0_NL))
}
_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")
_CTRL_RE = _CTRL_BY_WIDTH[True][2]
_CTRL_NL_RE = _CTRL_BY_WIDTH[False][2]


def _ctrl_re(s: str, keep_newlines: bool = True) -> re.Pattern[str]:
    """The control/invisible class for `s` (see _CTRL_BY_WIDTH): same matches, less work."""
    table = _CTRL_BY_WIDTH[keep_newlines]
    if s.isascii():
        return table[0]
    return table[2] if _BEYOND_BMP.search(s) else table[1]


def _only_sgr(s: str, ctrl: re.Pattern[str]) -> bool:
    """Every control character in `s` starts an SGR sequence (coloured log lines, the usual
    case in Ray's logs: kept as they are, no rebuilding)."""
    match = _SGR_RE.match
    return all(m.group() == "\x1b" and match(s, m.start()) for m in ctrl.finditer(s))


def escape_char(c: str) -> str:
    """How a character that must not reach the terminal as itself is shown."""
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _escaped(m: re.Match[str]) -> str:
    return escape_char(m.group())


def _drop_sequences(text: str) -> str:
    return _SEQ_RE.sub("", text)


def _keep_sgr(m: re.Match[str]) -> str:
    seq = m.group()
    return seq if _SGR_RE.fullmatch(seq) else ""


def clean(text: object, *, keep_sgr: bool = False, keep_newlines: bool = True) -> str:
    """Text safe to write to a terminal: escape sequences dropped (SGR kept if asked), other
    control characters shown as `\\xNN`. Newlines and tabs stay unless `keep_newlines=False`."""
    s = text if isinstance(text, str) else str(text)
    ctrl = _ctrl_re(s, keep_newlines)
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


# Combining marks one letter may carry (Indic and Thai syllables stack two or three); more are
# shown escaped, as is a mark with no letter under it.
MAX_MARKS = 3
ELLIPSIS = "…"


@functools.lru_cache(maxsize=4096)
def _visible(s: str) -> str:
    """Every character a terminal would not show as itself, escaped (see the module's text).
    Cached: a table redraws the same cells (bars, names) many times a second."""
    if s.isprintable() and not _has_marks(s):
        return s
    from unicodedata import category

    out: list[str] = []
    marks = 0
    base = False  # the character before can carry a combining mark
    for c in s:
        if c == " " or c.isprintable():
            if category(c)[0] == "M":
                marks += 1
                if base and marks <= MAX_MARKS:
                    out.append(c)
                    continue
                out.append(escape_char(c))
                continue
            out.append(c)
            marks, base = 0, c != " "
            continue
        out.append(escape_char(c))
        marks, base = 0, False
    return "".join(out)


def _has_marks(s: str) -> bool:
    """Any combining mark at all (the slow check runs only then): a non-ASCII text's marks."""
    if s.isascii():
        return False
    from unicodedata import category

    return any(category(c)[0] == "M" for c in s if ord(c) >= 0x300)


def width(text: str) -> int:
    """Cells `text` takes on a terminal: the one width measure of every table and label."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def fit(text: str, cells: int) -> str:
    """`text` cut to at most `cells` terminal cells, an ellipsis marking the cut (a wide
    character that would straddle the edge is left out whole)."""
    if cells <= 0:
        return ""
    if width(text) <= cells:
        return text
    if text.isascii():
        return text[: cells - 1] + ELLIPSIS
    from rich.cells import get_character_cell_size

    out: list[str] = []
    used = 0
    for c in text:
        w = get_character_cell_size(c)
        if used + w > cells - 1:
            break
        out.append(c)
        used += w
    return "".join(out) + ELLIPSIS


def pad(value: object, cells: int, *, right: bool = False) -> str:
    """A fixed-width column: `value` as one clean line, cut to `cells` terminal cells with an
    ellipsis and padded with spaces to exactly `cells` (right-aligned with `right`)."""
    s = one_line("" if value is None else value, cells)
    gap = " " * max(0, cells - width(s))
    return gap + s if right else s + gap


def one_line(text: object, limit: int | None = None) -> str:
    """A label: sanitized, line breaks folded to spaces, invisible characters escaped,
    optionally cut to `limit` terminal cells (an ellipsis marks the cut)."""
    s = text if isinstance(text, str) else str(text)
    ctrl = _ctrl_re(s, keep_newlines=False)
    if ctrl.search(s):
        s = _drop_sequences(s).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
        s = _ctrl_re(s, keep_newlines=False).sub(_escaped, s)
    if "\t" in s:
        s = s.replace("\t", " ")
    if not s.isascii():
        s = _visible(s)
    if limit is not None:
        s = fit(s, limit)
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
    if not _ctrl_re(plain).search(plain):
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
    """A DataTable cell (str cells are parsed as Rich markup there): one clean line as Text,
    invisible characters escaped, cut to `limit` terminal cells."""
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
