"""The one sanitizer for text from outside (hosts, files, Ray) before it reaches a terminal.

Everything a host, a file or the dashboard sends may hold terminal control sequences: an OSC that
retitles the terminal or writes the clipboard, a CSI that clears the screen or moves the cursor, a
DCS, C1 controls, bidi overrides that reorder what is shown. A terminal acts on them; we never let
one through. Escape sequences are dropped whole; any other control character is shown escaped
(`\\x07`), so nothing is hidden and nothing acts. `keep_sgr=True` keeps colour/style sequences
(`ESC [ … m`) only, for log panes that show a job's own colours.

Textual markup is a second channel: a `[@click=app.quit]` in a host name would be a live link.
Text shown through markup goes through `markup()` (sanitized, then markup-escaped); text given to
widgets as `rich.text.Text` or `Content` needs only `clean()`/`one_line()`.
"""

from __future__ import annotations

import re

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
# Controls shown escaped: C0 except TAB/LF, DEL, C1, and Unicode's bidi embeddings/overrides/
# isolates and line/paragraph separators (they reorder or break what a terminal shows).
_CTRL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CTRL_NL_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Fast path: text with none of these needs no work (the usual case for telemetry and log lines).
_NEEDS_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


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
    if not _NEEDS_RE.search(s):
        return s
    ctrl = _CTRL_RE if keep_newlines else _CTRL_NL_RE
    if not keep_sgr:
        return ctrl.sub(_escaped, _drop_sequences(s))
    # SGR sequences survive; the text between them is cleaned like any other.
    out: list[str] = []
    pos = 0
    for m in _SEQ_RE.finditer(s):
        out.append(ctrl.sub(_escaped, s[pos:m.start()]))
        out.append(_keep_sgr(m))
        pos = m.end()
    out.append(ctrl.sub(_escaped, s[pos:]))
    return "".join(out)


def one_line(text: object, limit: int | None = None) -> str:
    """A label: sanitized, line breaks folded to spaces, optionally cut to `limit` characters."""
    s = text if isinstance(text, str) else str(text)
    if _NEEDS_RE.search(s):
        s = _drop_sequences(s).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
        s = _CTRL_NL_RE.sub(_escaped, s)
    if "\t" in s:
        s = s.replace("\t", " ")
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    return s


def markup(text: object, limit: int | None = None) -> str:
    """One line for a Textual/Rich markup string: sanitized, then `[` escaped."""
    from rich.markup import escape  # Rich comes with Textual; the CLI text path never needs it

    return escape(one_line(text, limit))


def log_line(text: str) -> str:
    """A job/node log line for a log pane: SGR colours kept, every other control dropped/escaped."""
    return clean(text, keep_sgr=True, keep_newlines=False)
