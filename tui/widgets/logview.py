"""The job log pane: a line-API view over a LogStore, with search, filter, follow and wrap.

Only visible rows are rendered. Rows are the store's lines, plus a virtual "hint" row under each
hinted line and the partial last line at the end; a row maps to its line by bisecting the
sorted hinted lines, never through a table rebuilt per frame. In filter mode the rows are the
matching lines (an array of line numbers, extended as lines arrive).

Ingest: `append` only adds to the store. A 16 Hz timer moves the view (virtual size, follow,
repaint), so a firehose of chunks costs one frame per tick, not one per chunk.

Wrap: a wrapped line's height is only known once it is read, and reading a million lines to
size a scrollbar is what this widget must never do. So in wrap mode the scroll offset names the
row shown at the top (like `less`), the scrollbar counts rows rather than screen lines, and
only the rows on screen are wrapped. At the very end the screen is filled bottom-up so the last
line is always whole.
"""

from __future__ import annotations

import asyncio
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path

from rich.ansi import AnsiDecoder
from rich.style import Style
from rich.text import Span, Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from tui.logs.signatures import ERROR, TRACEBACK, WARNING
from tui.logs.store import LogStore, Query
from tui.sanitize import log_line, one_line, styled

TICK_S = 1 / 16  # how often appended lines reach the screen
SCAN_LINES = 50_000  # lines a tick scans for matches (a few MB: keeps each tick short)
MAX_RENDER = 10_000  # characters of a line that are drawn (the rest of a huge line is cut)
CONTEXT = 3  # rows kept above a line jumped to
LOAD_SLICE = 256 << 10  # characters per step when loading a whole log at once

SGR_RE = re.compile(r"\x1b\[([0-9;]*)m")

LINE, HINT, PENDING, NONE = range(4)
PROMPT_LABELS = {"search": "/", "filter": "filter /", "save": "save to"}

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


def _next_in(seq: Sequence[int], ref: int, direction: int) -> int | None:
    """The first item > ref (direction 1) or the last item < ref (direction -1)."""
    if direction > 0:
        i = bisect_right(seq, ref)
        return seq[i] if i < len(seq) else None
    i = bisect_left(seq, ref) - 1
    return seq[i] if i >= 0 else None


class LogView(ScrollView, can_focus=True):
    """A job's log: search, filter, follow, wrap; errors, tracebacks and hints marked."""

    HELP_TITLE = "Job log"

    BINDINGS = [
        Binding("n", "next_match(1)", "Next match"),
        Binding("N", "next_match(-1)", "Previous match"),
        Binding("f", "toggle_filter", "Only matching lines (filter)"),
        Binding("F,end", "follow", "Follow the end"),
        Binding("w", "toggle_wrap", "Wrap long lines"),
        Binding("g,home", "top", "Top"),
        Binding("G", "bottom", "Bottom"),
        Binding("e", "next_error(1)", "Next error"),
        Binding("E", "next_error(-1)", "Previous error"),
        Binding("h", "next_hint(1)", "Next hint"),
        Binding("H", "next_hint(-1)", "Previous hint"),
    ]

    COMPONENT_CLASSES = {
        "logview--error",
        "logview--warning",
        "logview--traceback",
        "logview--match",
        "logview--current",
        "logview--hint",
        "logview--hint-label",
    }

    DEFAULT_CSS = """
    LogView { background: $surface; }
    LogView > .logview--error { color: $error; }
    LogView > .logview--warning { color: $warning; }
    LogView > .logview--traceback { color: $error-lighten-2; }
    LogView > .logview--match { text-style: reverse; }
    LogView > .logview--current { background: $primary 40%; }
    LogView > .logview--hint { color: $text-muted; text-style: italic; }
    LogView > .logview--hint-label { color: $accent; text-style: bold; }
    """

    class StatusChanged(Message):
        """Line count, matches, follow/wrap/filter state or the message changed."""

    class SearchRequested(Message):
        """A key needs a search pattern first (f with none); the pane opens its prompt."""

        def __init__(self, filter: bool) -> None:
            self.filter = filter
            super().__init__()

    def __init__(self, store: LogStore | None = None, *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._owns_store = store is None
        self.store = store if store is not None else LogStore()
        self.follow = True
        self.wrap = False
        self.filter_on = False
        self.query: Query | None = None
        self.current: int | None = None  # the line last jumped to (n, e, h …), highlighted
        self.ended: str | None = None  # the job's final status, once known
        self.message = ""  # one transient remark for the status line
        self._auto = False  # True while this widget scrolls itself (not a user scroll)
        self._style_cache: dict[str, Style] | None = None
        self._strips: dict[tuple[int, int], Strip] = {}
        self._layout_key: tuple | None = None
        self._layout: list[tuple[int, int, int, int]] = []
        self._anchor_max = 0
        self._last_status: tuple | None = None
        self._frame: tuple[int, int, int] | None = None
        self._reset_rows()

    def _reset_rows(self) -> None:
        self._n = 0  # lines of the store this view has taken in
        self._pend = ""
        self._hint_rows: list[int] = []  # row of the hint under the j-th hinted line
        self._hint_width = 0
        self._matches = array("I")  # lines matching the query, ascending
        self._scanned = 0  # lines [0, _scanned) have been scanned for matches
        self._fh_pos: list[int] = []  # filter mode: positions in _matches of hinted lines
        self._fh_rows: list[int] = []
        self._strips.clear()
        self._layout_key = None

    # -- feeding -----------------------------------------------------------------------------

    def append(self, text: str) -> None:
        """Add log text. Cheap: the screen catches up on the next tick."""
        if not self.store.closed:  # a pane already removed drops what still arrives
            self.store.append(text)

    def finish(self, status: str | None = None) -> None:
        """The log is complete: its partial last line counts, and `status` is shown."""
        if self.store.closed:
            return
        self.store.flush_pending()
        self.ended = status
        self._tick(force=True)

    def clear(self) -> None:
        if self.store.closed:
            return
        self.store.clear()
        self._reset_rows()
        self.current = None
        self.ended = None
        self.message = ""
        self.follow = True
        self._tick(force=True)

    def on_mount(self) -> None:
        self.set_interval(TICK_S, self._tick)

    def on_unmount(self) -> None:
        if self._owns_store:
            self.store.close()

    def _tick(self, force: bool = False) -> None:
        store = self.store
        if store.closed:
            return
        n, pend = len(store), store.pending
        scanning = self.query is not None and self._scanned < n
        if n == self._n and pend == self._pend and not scanning and not force:
            # Nothing new; but a layout change (a scrollbar appearing) can leave a following
            # view one row short of the end.
            if self.follow and self.scroll_offset.y < self.max_scroll_y:
                self._scroll_bottom()
            return
        if n < self._n:  # the store was cleared under us
            self._reset_rows()
        if n != self._n:
            hinted = store.hint_lines()
            rows = self._hint_rows
            for j in range(len(rows), len(hinted)):
                rows.append(hinted[j] + j + 1)
                hint = store.hint(hinted[j])
                self._hint_width = max(self._hint_width, len(hint.text) + 12 if hint else 0)
            self._n = n
        self._pend = pend
        if scanning:
            self._scan(SCAN_LINES)
        self._update_size()
        if self.follow:
            self._scroll_bottom()
        self._layout_key = None
        self.refresh()
        self._post_status()

    # -- rows --------------------------------------------------------------------------------

    def _rows(self) -> int:
        if self.filter_on:
            return len(self._matches) + len(self._fh_pos)
        return self._n + len(self._hint_rows) + (1 if self._pend else 0)

    def _item(self, row: int) -> tuple[int, int]:
        """(kind, line) shown at `row`: LINE, HINT (under `line`), PENDING or NONE."""
        if row < 0:
            return NONE, -1
        if self.filter_on:
            hr = self._fh_rows
            j = bisect_left(hr, row)
            if j < len(hr) and hr[j] == row:
                return HINT, self._matches[self._fh_pos[j]]
            pos = row - j
            return (LINE, self._matches[pos]) if pos < len(self._matches) else (NONE, -1)
        hr = self._hint_rows
        j = bisect_left(hr, row)
        if j < len(hr) and hr[j] == row:
            return HINT, row - j - 1
        line = row - j
        if line < self._n:
            return LINE, line
        if line == self._n and self._pend:
            return PENDING, line
        return NONE, -1

    def _row_of(self, line: int) -> int | None:
        """The row showing `line`, or None if the filter hides it."""
        if self.filter_on:
            pos = bisect_left(self._matches, line)
            if pos == len(self._matches) or self._matches[pos] != line:
                return None
            return pos + bisect_left(self._fh_pos, pos)
        return line + bisect_left(self.store.hint_lines(), line, 0, len(self._hint_rows))

    def _nearest_row(self, line: int) -> int:
        """The row of `line`, or in filter mode of the first shown line after it."""
        row = self._row_of(line)
        if row is not None:
            return row
        pos = bisect_left(self._matches, line)
        return pos + bisect_left(self._fh_pos, pos)

    def _visible(self, line: int) -> bool:
        return self._row_of(line) is not None

    def top_line(self) -> int:
        """The line at the top of the screen (the line of a hint row there)."""
        if self.wrap:
            layout = self._wrap_layout()
            if layout and layout[0][0] in (LINE, HINT):
                return layout[0][1]
        kind, line = self._item(self.scroll_offset.y)
        if kind in (LINE, HINT):
            return line
        return max(0, self._n - 1)

    def _on_screen(self, line: int) -> bool:
        if self.wrap:
            return any(k == LINE and ln == line for k, ln, _, _ in self._wrap_layout())
        row = self._row_of(line)
        top = self.scroll_offset.y
        return row is not None and top <= row < top + self.scrollable_content_region.height

    # -- scrolling ---------------------------------------------------------------------------

    def _update_size(self) -> None:
        region = self.scrollable_content_region
        width, height = max(1, region.width), max(1, region.height)
        rows = self._rows()
        # Widths never include the viewport's: when the vertical scrollbar appears the viewport
        # narrows, and a virtual width taken from it would conjure a horizontal scrollbar.
        if self.wrap:
            self._anchor_max = self._compute_anchor_max(rows, width, height)
            size = Size(0, self._anchor_max + height)
        else:
            longest = min(max(self.store.max_line_length, self._hint_width), MAX_RENDER)
            size = Size(longest + 1, rows)
        if size != self.virtual_size:
            self.virtual_size = size

    def _move(self, x: int | None = None, y: int | None = None) -> None:
        self._auto = True
        try:
            self.scroll_to(x, y, animate=False, force=True)
        finally:
            self._auto = False

    def _scroll_bottom(self) -> None:
        self._move(y=self.max_scroll_y)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # A user scroll up pauses following. A clamp after the content shrank is not one.
        if self.follow and not self._auto and new_value < old_value <= self.max_scroll_y:
            self.follow = False
            self._post_status()

    def action_page_down(self) -> None:
        if not self.wrap:
            super().action_page_down()
            return
        layout = self._wrap_layout()  # the row at the bottom of the screen goes to the top
        if layout:
            self.scroll_to(y=max(layout[-1][3], self.scroll_offset.y + 1), animate=False)

    def action_page_up(self) -> None:
        if not self.wrap:
            super().action_page_up()
            return
        region = self.scrollable_content_region
        width, height = max(1, region.width), max(1, region.height)
        row, used = self.scroll_offset.y, 0
        if self._wrap_layout():
            row = self._wrap_layout()[0][3]
        while row > 0 and used < height:  # one screenful of wrapped rows back
            row -= 1
            used += self._height(*self._item(row), width)
        self.scroll_to(y=row, animate=False)

    def on_resize(self) -> None:
        self._layout_key = None
        self._update_size()
        if self.follow:
            self._scroll_bottom()

    def _show_line(self, line: int, column: int | None = None) -> None:
        """Bring `line` on screen (a few rows below the top) and mark it current."""
        self.follow = False
        old, self.current = self.current, line
        for ln in {old, line}:
            if ln is not None:
                self._strips.pop((LINE, ln), None)
        self._layout_key = None
        row = self._row_of(line)
        if row is None:
            return
        height = self.scrollable_content_region.height
        if not self._on_screen(line):
            self._move(y=max(0, row - min(CONTEXT, height // 4)))
        if not self.wrap:
            width = self.scrollable_content_region.width
            x = self.scroll_offset.x
            col = column or 0
            if not x <= col < x + width - 1:
                self._move(x=max(0, col - width // 4))
        self.refresh()

    def _keep_line_after_remap(self, line: int) -> None:
        self._layout_key = None
        self._strips.clear()
        self._update_size()
        if self.follow:
            self._scroll_bottom()
        else:
            self._move(x=0, y=self._nearest_row(line))
        self.refresh()
        self._post_status()

    # -- search ------------------------------------------------------------------------------

    def search(self, pattern: str, *, regex: bool = False, filter: bool | None = None) -> None:
        """Search for `pattern` (smart case) and jump to the first match from the top line (to
        the latest match if following the end); `filter` True/False also turns filter mode
        on/off. Raises re.error for a bad regex."""
        query = Query.smart(pattern, regex=regex) if pattern else None
        if query is not None:
            query.text_re  # noqa: B018 -- compiles: a bad regex raises before anything changes
        anchor = self.top_line()
        self.query = query
        self._matches = array("I")
        self._scanned = 0
        self._fh_pos, self._fh_rows = [], []
        self._strips.clear()
        self.message = ""
        if query is not None:
            self._scan(SCAN_LINES)
        was_filtered = self.filter_on
        self.filter_on = (was_filtered if filter is None else filter) and query is not None
        if self.filter_on or was_filtered:
            self._keep_line_after_remap(anchor)
        elif query is not None:
            self.current = None
            if self.follow and self._n:  # watching the end: the latest match is the news
                target = self.store.find(query, self._n - 1, backwards=True)
                if target is None:
                    self._say(f"not found: {query.pattern}")
                else:
                    self._show_line(target, self._match_column(target))
                    self._say("latest match (N: earlier ones)")
            else:  # like less: forward from the top of the screen
                self.action_next_match(1)
        self._post_status()

    def _scan(self, budget: int) -> None:
        """Extend the match list over up to `budget` more lines."""
        q = self.query
        if q is None:
            return
        start, end = self._scanned, min(self._n, self._scanned + budget)
        if start >= end:
            return
        new = self.store.matching(q, start, end)
        if new:
            base = len(self._matches)
            hinted = self.store.hint_lines()
            for h in hinted[bisect_left(hinted, start):bisect_left(hinted, end)]:
                k = bisect_left(new, h)
                if k < len(new) and new[k] == h:
                    self._fh_pos.append(base + k)
                    self._fh_rows.append(base + k + len(self._fh_pos))
            self._matches.extend(new)
        self._scanned = end

    def _match_column(self, line: int) -> int | None:
        if self.query is None:
            return None
        m = self.query.text_re.search(self.store.plain(line))
        return None if m is None else m.start()

    def _ref_line(self, direction: int) -> int:
        """Where n / e / h start from: the current line if on screen, else the top line."""
        if self.current is not None and self._on_screen(self.current):
            return self.current
        top = self.top_line()
        return top - 1 if direction > 0 else top

    def action_next_match(self, direction: int = 1) -> None:
        q = self.query
        if q is None:
            self._say("no search yet: / to search")
            return
        ref = self._ref_line(direction)
        complete = self._scanned >= self._n
        wrapped = False
        if complete:
            target = _next_in(self._matches, ref, direction)
            if target is None and self._matches:
                target, wrapped = self._matches[0 if direction > 0 else -1], True
        else:  # not scanned yet: ask the store directly (stops at the first hit)
            target = self.store.find(q, ref + direction, backwards=direction < 0)
            if target is not None and target >= self._n:  # stored, not yet taken in
                target = None
            if target is None:
                target = self.store.find(q, 0 if direction > 0 else self._n - 1,
                                         backwards=direction < 0)
                wrapped = target is not None
        if target is None or target >= self._n:
            self._say(f"not found: {q.pattern}")
            return
        self._show_line(target, self._match_column(target))
        self._say("search wrapped around" if wrapped else "")

    def _jump(self, candidates: Sequence[int], direction: int, what: str) -> None:
        ref = self._ref_line(direction)
        target = _next_in(candidates, ref, direction)
        tries = 0
        while target is not None and target < self._n and not self._visible(target):
            tries += 1
            if tries > 10_000:  # the filter hides them all; don't search forever
                target = None
                break
            target = _next_in(candidates, target, direction)
        if target is None or target >= self._n:
            self._say(f"no {what} {'below' if direction > 0 else 'above'}")
            return
        self._show_line(target)
        self._say("")

    def action_next_error(self, direction: int = 1) -> None:
        self._jump(self.store.error_lines(), direction, "error")

    def action_next_hint(self, direction: int = 1) -> None:
        self._jump(self.store.hint_lines(), direction, "hint")

    def action_toggle_filter(self) -> None:
        if self.query is None:
            self.post_message(self.SearchRequested(filter=True))
            return
        anchor = self.current if self.current is not None else self.top_line()
        self.filter_on = not self.filter_on
        self._keep_line_after_remap(anchor)

    def action_toggle_wrap(self) -> None:
        anchor = self.top_line()
        self.wrap = not self.wrap
        self._keep_line_after_remap(anchor)

    def action_follow(self) -> None:
        self.follow = True
        self._scroll_bottom()
        self._say("")

    def action_top(self) -> None:
        self.follow = False
        self._move(x=0, y=0)
        self._post_status()

    def action_bottom(self) -> None:
        self._scroll_bottom()
        self._post_status()

    def _say(self, message: str) -> None:
        self.message = message
        self._post_status()

    # -- status ------------------------------------------------------------------------------

    def match_info(self) -> str:
        """'3/120' (the current line is the 3rd match), '-/120', '120+' while scanning."""
        if self.query is None:
            return ""
        total = len(self._matches)
        if self._scanned < self._n:
            return f"{total:,}+"
        cur = self.current
        if cur is not None:
            i = bisect_left(self._matches, cur)
            if i < total and self._matches[i] == cur:
                return f"{i + 1:,}/{total:,}"
        return f"-/{total:,}"

    def status_key(self) -> tuple:
        return (self._n, bool(self._pend), self.match_info(), self.follow, self.wrap,
                self.filter_on, self.ended, self.message,
                self.query.pattern if self.query else None)

    def _post_status(self) -> None:
        key = self.status_key()
        if key != self._last_status:
            self._last_status = key
            self.post_message(self.StatusChanged())

    # -- rendering ---------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        self._style_cache = None
        self._strips.clear()
        super().notify_style_update()

    def _styles(self) -> dict[str, Style]:
        if self._style_cache is None:
            cache = {}
            for name in self.COMPONENT_CLASSES:
                s = self.get_component_rich_style(name)
                key = name.split("--")[1]
                if key == "current":
                    cache[key] = Style(bgcolor=s.bgcolor)
                elif key == "match":
                    cache[key] = Style(reverse=True)
                else:  # foreground only, so the current line's background shows through
                    cache[key] = Style(color=s.color, bold=s.bold, italic=s.italic)
            cache["base"] = self.rich_style  # costly to compute: once per theme, not per line
            self._style_cache = cache
        return self._style_cache

    def _text(self, raw: str, flags: int, current: bool) -> Text:
        if len(raw) > MAX_RENDER:
            raw = raw[:MAX_RENDER] + "…"
        if "\t" in raw:
            raw = raw.expandtabs(8)
        # A job's colours stay; OSC (title, clipboard, links), cursor moves, clears, DCS, C1,
        # CR/BS and bidi controls are dropped or shown escaped (fast path: nothing to do).
        line = log_line(raw)
        st = self._styles()
        text = ansi_text(line, st["base"]) if "\x1b" in line else Text(line, style=st["base"])
        if current:
            text.stylize(st["current"])
        if flags & ERROR:
            text.stylize(st["error"])
        elif flags & TRACEBACK:
            text.stylize(st["traceback"])
        elif flags & WARNING:
            text.stylize(st["warning"])
        if self.query is not None and self.query.pattern:
            for m in self.query.text_re.finditer(text.plain):
                if m.end() > m.start():
                    text.stylize(st["match"], m.start(), m.end())
        return text

    def _strip(self, kind: int, line: int) -> Strip:
        """The whole (uncropped) row, styled; cached while nothing about it changes."""
        key = (kind, line)
        strip = self._strips.get(key)
        if strip is not None:
            return strip
        store = self.store
        if kind == LINE:
            text = self._text(store.line(line), store.flags(line), line == self.current)
        elif kind == HINT:
            hint = store.hint(line)
            st = self._styles()
            text = Text.assemble(("  ↳ hint: ", st["hint-label"]),
                                 (one_line(hint.text) if hint else "", st["hint"]),
                                 style=st["base"])
        elif kind == PENDING:
            text = self._text(store.pending, 0, False)
        else:
            return Strip([])
        strip = Strip(list(text.render(self.app.console)))
        if kind != PENDING:
            if len(self._strips) > 4096:
                self._strips.clear()
            self._strips[key] = strip
        return strip

    def _height(self, kind: int, line: int, width: int) -> int:
        return max(1, -(-self._strip(kind, line).cell_length // width))

    def _compute_anchor_max(self, rows: int, width: int, height: int) -> int:
        """Wrap mode: the top row of the last screenful (walks back one screen, no further)."""
        used, row = 0, rows
        while row > 0 and used < height:
            row -= 1
            used += self._height(*self._item(row), width)
        return row

    def _wrap_layout(self) -> list[tuple[int, int, int, int]]:
        """Wrap mode: (kind, line, piece, row) for every screen line, from the top row down
        (or, at the end, from the last row up)."""
        region = self.scrollable_content_region
        width, height = max(1, region.width), max(1, region.height)
        top, rows = self.scroll_offset.y, self._rows()
        at_end = top >= self._anchor_max
        key = (top, width, height, rows, self._pend, at_end, self.current)
        if key == self._layout_key:
            return self._layout
        out: list[tuple[int, int, int, int]] = []
        if at_end:
            pieces: list[list[tuple[int, int, int, int]]] = []
            used, row = 0, rows
            while row > 0 and used < height:
                row -= 1
                kind, line = self._item(row)
                h = self._height(kind, line, width)
                pieces.append([(kind, line, k, row) for k in range(h)])
                used += h
            for piece in reversed(pieces):
                out.extend(piece)
            out = out[-height:]
        else:
            row = top
            while row < rows and len(out) < height:
                kind, line = self._item(row)
                h = self._height(kind, line, width)
                out.extend((kind, line, k, row) for k in range(h))
                row += 1
            out = out[:height]
        self._layout_key, self._layout = key, out
        return out

    def render_lines(self, crop: Region) -> list[Strip]:
        # What every row of this frame needs, looked up once rather than once per row.
        offset = self.scroll_offset
        self._frame = (self.scrollable_content_region.width, offset.x, offset.y)
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        if self._frame is not None:
            width, x, top = self._frame
        else:
            width, x, top = (self.scrollable_content_region.width, self.scroll_offset.x,
                             self.scroll_offset.y)
        base = self._styles()["base"]
        if self.wrap:
            layout = self._wrap_layout()
            if y >= len(layout):
                return Strip.blank(width, base)
            kind, line, piece, _row = layout[y]
            return self._strip(kind, line).crop_extend(piece * width, (piece + 1) * width, base)
        kind, line = self._item(top + y)
        if kind == NONE:
            return Strip.blank(width, base)
        return self._strip(kind, line).crop_extend(x, x + width, base)


class _Prompt(Input):
    """The pane's one-line prompt (search pattern or save path)."""

    HELP_TITLE = "Log prompt"
    BINDINGS = [Binding("escape", "cancel", "Close the prompt (text kept)")]

    class Cancelled(Message):
        pass

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())


class LogPane(Widget):
    """A LogView with a search / save prompt and a status line."""

    HELP_TITLE = "Job log"

    BINDINGS = [
        Binding("slash", "search", "Search (n / N: next / previous)"),
        Binding("s", "save", "Save the log to a file"),
    ]

    DEFAULT_CSS = """
    LogPane { height: 1fr; layout: vertical; }
    LogPane > .log-title { height: 1; background: $panel; color: $text; text-style: bold;
                           padding: 0 1; }
    LogPane > LogView { height: 1fr; }
    LogPane > .log-prompt-row { height: 1; display: none; background: $panel; }
    LogPane > .log-prompt-row.-open { display: block; }
    LogPane > .log-prompt-row > Label { width: auto; padding: 0 1; color: $accent;
                                       text-style: bold; }
    LogPane > .log-prompt-row > _Prompt { height: 1; border: none; padding: 0; width: 1fr;
                                          background: $panel; }
    LogPane > .log-status { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    """

    class Saved(Message):
        """The log was written to `path`."""

        def __init__(self, path: Path) -> None:
            self.path = path
            super().__init__()

    def __init__(self, title: str = "", save_path: str | Path | None = None, *,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._title = title
        self._title_bar = Static(one_line(title), classes="log-title", markup=False)
        self._title_bar.display = bool(title)
        self.save_path = save_path
        self.log_view = LogView()
        self._prompt = _Prompt(placeholder="")
        self._prompt_label = Label("")
        self._prompt_row = Horizontal(self._prompt_label, self._prompt, classes="log-prompt-row")
        self._status = Static("", classes="log-status", markup=False)
        self._mode = ""  # "search", "filter" or "save" while the prompt is open
        self._search_text = ""
        self._save_text = ""
        self._note = ""  # the pane's own remark (saved to …, save failed …)
        self._status_text = ""

    @property
    def store(self) -> LogStore:
        return self.log_view.store

    @property
    def title(self) -> str:
        return self._title

    @title.setter
    def title(self, value: str) -> None:
        """Shown on the pane's first row; an empty title hides the row."""
        self._title = value
        self._title_bar.update(one_line(value))  # a host's file name, a job id: outside text
        self._title_bar.display = bool(value)

    def compose(self) -> ComposeResult:
        yield self._title_bar
        yield self.log_view
        yield self._prompt_row
        yield self._status

    def on_mount(self) -> None:
        self._render_status()

    # -- the owner's API ---------------------------------------------------------------------

    def append(self, text: str) -> None:
        self.log_view.append(text)

    async def load(self, text: str, status: str | None = None) -> None:
        """A finished job's whole log: appended in slices so keys stay answered meanwhile."""
        for start in range(0, len(text), LOAD_SLICE):
            self.log_view.append(text[start:start + LOAD_SLICE])
            await asyncio.sleep(0)
        self.finish(status)

    def finish(self, status: str | None = None) -> None:
        self.log_view.finish(status)
        self._render_status()

    def clear(self) -> None:
        self.log_view.clear()
        self._note = ""
        self._save_text = ""  # another log: its owner's default path again
        self._render_status()

    # -- prompt ------------------------------------------------------------------------------

    def _open_prompt(self, mode: str) -> None:
        self._mode = mode
        self._prompt_label.update(PROMPT_LABELS[mode])
        if mode == "save":
            default = self._save_text or str(self.save_path or "verl-tui-job.log")
            self._prompt.placeholder = "file path (enter: save, esc: cancel)"
            self._prompt.value = default
        else:
            self._prompt.placeholder = "text (smart case; re:PATTERN for a regex) — esc closes"
            self._prompt.value = self._search_text
        self._prompt_row.add_class("-open")
        self._prompt.focus()
        self._prompt.cursor_position = len(self._prompt.value)

    def _close_prompt(self) -> None:
        if self._mode in ("search", "filter"):
            self._search_text = self._prompt.value
        elif self._mode == "save":
            self._save_text = self._prompt.value
        self._mode = ""
        self._prompt_row.remove_class("-open")
        self.log_view.focus()

    def action_search(self) -> None:
        self._open_prompt("search")

    def action_save(self) -> None:
        self._open_prompt("save")

    def on_log_view_search_requested(self, event: LogView.SearchRequested) -> None:
        event.stop()
        self._open_prompt("filter" if event.filter else "search")

    @on(_Prompt.Cancelled)
    def _prompt_cancelled(self, event: _Prompt.Cancelled) -> None:
        event.stop()
        self._close_prompt()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        mode, value = self._mode, event.value
        self._close_prompt()
        if mode == "save":
            self._save(value)
            return
        regex = value.startswith("re:")
        pattern = value[3:] if regex else value
        try:
            self.log_view.search(pattern, regex=regex, filter=True if mode == "filter" else None)
            self._note = ""
        except re.error as exc:
            self._note = f"bad regex: {exc}"
        self._render_status()

    def _save(self, value: str) -> None:
        if not value.strip():
            self._note = "save cancelled: no path"
        else:
            try:
                path = self.store.save(value.strip())
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self._note = f"save failed: {reason}: {value.strip()}"
            else:
                self._note = f"saved {len(self.store):,} lines to {path}"
                self.post_message(self.Saved(path))
        self._render_status()

    # -- status ------------------------------------------------------------------------------

    def on_log_view_status_changed(self, event: LogView.StatusChanged) -> None:
        event.stop()
        self._render_status()

    @property
    def status_text(self) -> str:
        """The status line as plain text."""
        return self._status_text

    def _render_status(self) -> None:
        view = self.log_view
        parts: list[tuple[str, str]] = [(f"{len(view.store):,} lines", "")]
        if view.query is not None:
            parts.append((f"/{view.query.pattern}  {view.match_info()}", "bold"))
        parts.append(("FOLLOW", "bold green") if view.follow else
                     ("PAUSED (F follows)", "bold yellow"))
        if view.wrap:
            parts.append(("WRAP", "bold"))
        if view.filter_on:
            parts.append(("FILTER", "bold magenta"))
        if view.ended:
            parts.append((view.ended, "bold"))
        note = view.message or self._note
        if note:
            parts.append((note, "italic"))
        text = Text()
        for i, (part, style) in enumerate(parts):
            if i:
                text.append("  ·  ")
            text.append(part, style)
        self._status_text = text.plain
        # (a job's end status and messages come from Ray: cleaned, styles kept)
        self._status.update(styled(text), layout=False)  # one fixed row: no layout pass
