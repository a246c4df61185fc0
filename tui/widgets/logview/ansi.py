"""Log text with its SGR colours, without Rich's decoder for every line."""

from __future__ import annotations

import re

from rich.ansi import AnsiDecoder
from rich.style import Style
from rich.text import Span, Text

SGR_RE = re.compile(r"\x1b\[([0-9;]*)m")

_sgr_steps: dict[tuple[Style, str], Style] = {}


def _sgr_step(style: Style, params: str) -> Style:
    """The style after an SGR sequence; learnt once per (style, sequence) from Rich's decoder."""
    key = (style, params)
    after = _sgr_steps.get(key)
    if after is None:
        decoder = AnsiDecoder()
        decoder.style = style
        decoder.decode_line(f"\x1b[{params}mx")
        after = decoder.style
        if len(_sgr_steps) > 4096:
            _sgr_steps.clear()
        _sgr_steps[key] = after
    return after


def ansi_text(raw: str, style: Style) -> Text:
    """Text with the colours of `raw`'s SGR sequences. Logs use only a handful of sequences,
    so this is a split and a few cached look-ups instead of Rich's decoder per line."""
    parts = SGR_RE.split(raw)
    if any("\x1b" in parts[i] for i in range(0, len(parts), 2)):
        text = Text.from_ansi(raw)  # cursor moves, OSC links …: the general decoder
        text.style = style
        return text
    plain: list[str] = []
    spans: list[Span] = []
    pos, current = 0, Style()
    for i, part in enumerate(parts):
        if i % 2:
            current = _sgr_step(current, part)
        elif part:
            if current:
                spans.append(Span(pos, pos + len(part), current))
            plain.append(part)
            pos += len(part)
    return Text("".join(plain), style=style, spans=spans)
