"""The cockpit's last line of defence: no control character reaches the terminal as text.

Screens clean what they show (tui.sanitize), but a path someone forgets must not be able to
retitle the terminal, write the clipboard or clear the screen either. Every line Textual draws
becomes terminal output in one method, `Strip.render` (full layouts, partial "chops" and inline
updates alike); the guard wraps it so each segment's text loses C0/C1 controls, DEL and bidi
controls before Textual adds its own escape codes. Those characters take no cells, so dropping
them never moves the layout. Textual's own sequences (cursor moves, SGR, OSC 8 links from
styles) are produced after this point and are untouched.

Textual is pinned to 8.x (pyproject); tests/test_escapes_pilot.py fails if the hook stops
working with a future Textual.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.segment import Segment
from textual.strip import Strip

from tui.sanitize import _UNI

_UNSAFE_RE = re.compile(f"[\x00-\x1f\x7f-\x9f{_UNI}]")
_original_render = Strip.render


def _guarded_render(self: Strip, console: Console) -> str:
    if self._render_cache is None:
        segments = self._segments
        if any(_UNSAFE_RE.search(seg.text) for seg in segments):
            safe = Strip(
                [Segment(_UNSAFE_RE.sub("", seg.text), seg.style, seg.control) for seg in segments],
                self.cell_length,
            )
            self._render_cache = _original_render(safe, console)
    return _original_render(self, console)


def install() -> None:
    """Wrap Strip.render once per process (idempotent)."""
    if Strip.render is not _guarded_render:
        Strip.render = _guarded_render  # type: ignore[method-assign]  # Textual's, patched


def installed() -> bool:
    return Strip.render is _guarded_render
