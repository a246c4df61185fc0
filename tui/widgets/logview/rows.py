"""The log view's rows: which line (or hint, or partial last line) each row shows.

Rows are the store's lines, plus a virtual "hint" row under each hinted line and the partial
last line at the end; a row maps to its line by bisecting the sorted hinted lines, never through
a table rebuilt per frame. In filter mode the rows are the matching lines (an array of line
numbers, extended as lines arrive).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

from rich.style import Style
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.logs.store import LogStore, Query

LINE, HINT, PENDING, NONE = range(4)


class LogRows(ScrollView):
    """The state of a log view and its row map (LogView adds keys, search and rendering)."""

    def __init__(
        self, store: LogStore | None = None, *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._owns_store = store is None
        self.store = store if store is not None else LogStore()
        self.follow = True
        self.wrap = False
        self.filter_on = False
        self.search_query: Query | None = None
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

    def _scan(self, budget: int) -> None:
        """Extend the match list over up to `budget` more lines."""
        q = self.search_query
        if q is None:
            return
        start, end = self._scanned, min(self._n, self._scanned + budget)
        if start >= end:
            return
        new = self.store.matching(q, start, end)
        if new:
            base = len(self._matches)
            hinted = self.store.hint_lines()
            for h in hinted[bisect_left(hinted, start) : bisect_left(hinted, end)]:
                k = bisect_left(new, h)
                if k < len(new) and new[k] == h:
                    self._fh_pos.append(base + k)
                    self._fh_rows.append(base + k + len(self._fh_pos))
            self._matches.extend(new)
        self._scanned = end
