"""The job log view: a line-API view over a LogStore, with search, filter, follow and wrap.

Ingest: `append` only adds to the store. A 16 Hz timer moves the view (virtual size, follow,
repaint), so a firehose of chunks costs one frame per tick, not one per chunk.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message

from tui.logs.store import LogStore, Query
from tui.widgets.logview.render import MAX_RENDER, LogRender
from tui.widgets.logview.rows import HINT, LINE

TICK_S = 1 / 16  # how often appended lines reach the screen
SCAN_LINES = 50_000  # lines a tick scans for matches (a few MB: keeps each tick short)
CONTEXT = 3  # rows kept above a line jumped to


def _next_in(seq: Sequence[int], ref: int, direction: int) -> int | None:
    """The first item > ref (direction 1) or the last item < ref (direction -1)."""
    if direction > 0:
        i = bisect_right(seq, ref)
        return seq[i] if i < len(seq) else None
    i = bisect_left(seq, ref) - 1
    return seq[i] if i >= 0 else None


class LogView(LogRender, can_focus=True):
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

    def replace_store(self, store: LogStore, shift: int) -> None:
        """Show `store` instead, which holds `shift` older lines and then this view's lines (a
        backfill finished): the same lines stay on screen, or the end if following; a search
        is scanned again over the larger store."""
        anchor = self.top_line() + shift
        current = None if self.current is None else self.current + shift
        old, owned = self.store, self._owns_store
        self.store, self._owns_store = store, True
        if owned:
            old.close()
        self._reset_rows()
        self.current = current
        self._tick(force=True)
        self._keep_line_after_remap(anchor)

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
        scanning = self.search_query is not None and self._scanned < n
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
        self.search_query = query
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

    def _match_column(self, line: int) -> int | None:
        if self.search_query is None:
            return None
        m = self.search_query.text_re.search(self.store.plain(line))
        return None if m is None else m.start()

    def _ref_line(self, direction: int) -> int:
        """Where n / e / h start from: the current line if on screen, else the top line."""
        if self.current is not None and self._on_screen(self.current):
            return self.current
        top = self.top_line()
        return top - 1 if direction > 0 else top

    def action_next_match(self, direction: int = 1) -> None:
        q = self.search_query
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
                target = self.store.find(
                    q, 0 if direction > 0 else self._n - 1, backwards=direction < 0
                )
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
        if self.search_query is None:
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
        if self.search_query is None:
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
        return (
            self._n,
            bool(self._pend),
            self.match_info(),
            self.follow,
            self.wrap,
            self.filter_on,
            self.ended,
            self.message,
            self.search_query.pattern if self.search_query else None,
        )

    def _post_status(self) -> None:
        key = self.status_key()
        if key != self._last_status:
            self._last_status = key
            self.post_message(self.StatusChanged())
