"""Drawing the log view's rows: styles, cached strips, and the wrap-mode layout.

Wrap: a wrapped line's height is only known once it is read, and reading a million lines to
size a scrollbar is what this widget must never do. So in wrap mode the scroll offset names the
row shown at the top (like `less`), the scrollbar counts rows rather than screen lines, and
only the rows on screen are wrapped. At the very end the screen is filled bottom-up so the last
line is always whole.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip

from tui.logs.signatures import ERROR, TRACEBACK, WARNING
from tui.sanitize import log_line, one_line
from tui.widgets.logview.ansi import ansi_text
from tui.widgets.logview.rows import HINT, LINE, NONE, PENDING, LogRows

MAX_RENDER = 10_000  # characters of a line that are drawn (the rest of a huge line is cut)


class LogRender(LogRows):
    """Rows drawn through the line API: only the rows on screen are rendered."""

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
        if self.search_query is not None and self.search_query.pattern:
            for m in self.search_query.text_re.finditer(text.plain):
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
            text = Text.assemble(
                ("  ↳ hint: ", st["hint-label"]),
                (one_line(hint.text) if hint else "", st["hint"]),
                style=st["base"],
            )
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
            width, x, top = (
                self.scrollable_content_region.width,
                self.scroll_offset.x,
                self.scroll_offset.y,
            )
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
