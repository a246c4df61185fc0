"""The job log widgets: LogPane (prompt, status line, save) around LogView (search, filter,
follow, wrap over a LogStore).

view.py holds the keys, search and scrolling; rows.py the row map (lines, hint rows, filter
matches); render.py the styled strips and the wrap layout; ansi.py the SGR colour decoding;
pane.py the pane.
"""

from tui.widgets.logview.ansi import ansi_text
from tui.widgets.logview.pane import LOAD_SLICE, PROMPT_LABELS, LogPane
from tui.widgets.logview.render import MAX_RENDER
from tui.widgets.logview.rows import HINT, LINE, NONE, PENDING
from tui.widgets.logview.view import CONTEXT, SCAN_LINES, TICK_S, LogView

__all__ = [
    "CONTEXT",
    "HINT",
    "LINE",
    "LOAD_SLICE",
    "MAX_RENDER",
    "NONE",
    "PENDING",
    "PROMPT_LABELS",
    "SCAN_LINES",
    "TICK_S",
    "LogPane",
    "LogView",
    "ansi_text",
]
