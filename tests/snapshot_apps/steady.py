"""What a snapshot app does so that a picture does not depend on the machine's speed."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


def steady_input_cursor(event: events.DescendantFocus) -> None:
    """A focused Input's cursor blinks every 0.5 s: a snapshot taken on a loaded machine, more
    than 0.5 s after the last key, caught it off. Steady on, as a fast machine sees it."""
    if isinstance(event.widget, Input):
        event.widget.cursor_blink = False
