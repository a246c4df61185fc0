"""The fleet's GPUs as one scrollable table: a row per host, a row per GPU beneath it.

Built on the line API: only the visible rows are rendered, so 128 hosts × 8 GPUs cost what
one screenful costs. Rows are rebuilt only when the structure changes (filter, sort, collapse,
a host's GPU count); value changes just repaint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.cluster.gpu_health import gpu_level, judge_host, worst
from tui.cluster.models import (
    GPU_METRICS,
    GpuMetric,
    GpuSample,
    HostTelemetry,
)
from tui.sanitize import one_line, pad
from tui.widgets.gauges import bar, gib, sparkline
from tui.widgets.gpu_table_rows import Built, RowIndex, TableRows
from tui.widgets.gpu_table_rows import RankedGpus as RankedGpus
from tui.widgets.gpu_table_rows import Row as Row

# Vendor words the table has no room for ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X").
_NAME_PREFIXES = ("NVIDIA ", "AMD Instinct ", "AMD Radeon ", "AMD ")


def _short_name(name: str | None) -> str:
    text = name or "—"
    for prefix in _NAME_PREFIXES:
        text = text.removeprefix(prefix) if text.startswith(prefix) else text
    return one_line(text)


RESORT_S = 1.0  # a metric sort re-orders the rows at most this often
# NVML health flag before a GPU's index (tui.cluster.gpu_health): glyph, style name. A healthy or
# unread GPU shows none, so the table stays quiet until something needs a look.
HEALTH_FLAGS = {"error": ("✖", "bad"), "warn": ("▲", "warn")}

# Thresholds a person would flag on sight.
HOT_C, WARM_C = 83.0, 75.0
MEM_FULL, MEM_HIGH = 0.95, 0.85
IDLE_UTIL, BUSY_PEERS = 5.0, 40.0

# The history sparkline takes whatever width the other columns leave, within these.
MIN_SPARK, MAX_SPARK = 8, 60


class Cell(NamedTuple):
    """What a column's renderer may read beside its own value."""

    gpu: GpuSample
    ht: HostTelemetry
    st: dict[str, Style]
    idle: bool  # idle while its peers are busy
    width: int  # the column's cells (the history's: what the line leaves)


class Column(NamedTuple):
    """One column of the GPU rows: its header, cells, value and sort order, in one place."""

    key: str  # its name in the sort keys ("util"); the metric's key for a GPU_METRICS column
    title: str  # header; the history's (width 0) is history_label's
    width: int  # cells; 0: what the other columns leave (MIN_SPARK..MAX_SPARK)
    getter: Callable[[GpuSample], object]
    render: Callable[[object, Cell], list[Segment]]
    sort: Callable[[GpuSample], float] | None = None  # None: not a sort key
    optional: bool = False  # shown only with the table's more-columns switch ("c")


def _by(getter: Callable[[GpuSample], float | None]) -> Callable[[GpuSample], float]:
    """A sort key from a getter: no value sorts below every value."""

    def key(g: GpuSample) -> float:
        v = getter(g)
        return -1.0 if v is None else float(v)

    return key


def _name_cells(_value: object, c: Cell) -> list[Segment]:
    gpu, st = c.gpu, c.st
    label = f"  {gpu.index:>2d} {_short_name(gpu.name)}"
    label_style = st["bad"] if gpu.error else st["dim"]
    peers = c.ht.latest.gpus if c.ht.latest else ()
    flag = HEALTH_FLAGS.get(gpu_level(gpu, len(peers) > 1) or "")
    if flag is None:
        return [Segment(pad(label, c.width - 1) + " ", label_style)]
    return [  # the glyph replaces the label's second space
        Segment(" ", label_style),
        Segment(one_line(flag[0]), st[flag[1]]),
        Segment(pad(label[2:], c.width - 3) + " ", label_style),
    ]


def _util_cells(value: object, c: Cell) -> list[Segment]:
    # Bar + number; an idle GPU among busy peers is called out.
    util = value if isinstance(value, (int, float)) else None
    st = c.st
    return [
        Segment(
            bar(None if util is None else util / 100, c.width - 6), st["warn" if c.idle else "bar"]
        ),
        Segment(" -   " if util is None else f"{util:3.0f}% ", st["warn" if c.idle else "host"]),
    ]


def _memory_cells(value: object, c: Cell) -> list[Segment]:
    # Bar + used/total GiB; nearly full is flagged.
    frac = value if isinstance(value, float) else None
    st, gpu = c.st, c.gpu
    mstyle = (
        st["bad"]
        if frac is not None and frac >= MEM_FULL
        else (st["warn"] if frac is not None and frac >= MEM_HIGH else st["bar"])
    )
    text = f" {gib(gpu.memory_used_bytes)}/{gib(gpu.memory_total_bytes, 0)}G"
    return [
        Segment(bar(frac, 8), mstyle),
        Segment(
            pad(text, c.width - 9) + " ",
            mstyle if mstyle is not st["bar"] else st["host"],
        ),
    ]


def _temperature_cells(value: object, c: Cell) -> list[Segment]:
    temp = value if isinstance(value, (int, float)) else None
    st = c.st
    style = (
        st["bad"]
        if temp is not None and temp >= HOT_C
        else (st["warn"] if temp is not None and temp >= WARM_C else st["host"])
    )
    return [Segment(("-" if temp is None else f"{temp:.0f}°C").ljust(c.width), style)]


def _power_cells(value: object, c: Cell) -> list[Segment]:
    power = "-" if value is None else f"{value:.0f}"
    limit = "" if c.gpu.power_limit_w is None else f"/{c.gpu.power_limit_w:.0f}"
    return [Segment(pad(f"{power}{limit}W", c.width - 1) + " ", c.st["host"])]


def _process_cells(value: object, c: Cell) -> list[Segment]:
    nproc = "-" if value is None else f"{value:d}"
    tag = " IDLE" if c.idle else ""
    return [Segment(pad(f"{nproc}{tag}", c.width), c.st["warn" if c.idle else "dim"])]


def _history_cells(_value: object, c: Cell) -> list[Segment]:
    # The whole kept history (default 300 samples) squeezed into the column.
    ht = c.ht
    per_cell = -(-ht.history_len // c.width)
    line = sparkline(
        ht.util_history.get(c.gpu.index, ()),
        c.width,
        per_cell=per_cell,
        newest=ht.samples % per_cell,
    )
    return [Segment(line, c.st["spark"])]


def metric_column(m: GpuMetric) -> Column:
    """The optional column of a GPU_METRICS number that has a title: value and unit, sorted
    by value."""

    def getter(g: GpuSample) -> float | None:
        return getattr(g, m.key)

    def render(value: object, c: Cell) -> list[Segment]:
        text = "-" if value is None else format(value, m.fmt) + m.unit
        return [Segment(pad(text, c.width - 1) + " ", c.st["host"])]

    return Column(m.title.lower(), m.title, m.width, getter, render, _by(getter), optional=True)


# The GPU rows' columns, left to right (the host rows have their own layout). Optional ones
# (the GPU_METRICS numbers with a title) go before the history, hidden until "c".
COLUMNS: tuple[Column, ...] = (
    Column("name", "HOST / GPU", 24, lambda g: g.index, _name_cells, lambda g: float(g.index)),
    Column(
        "util", "UTIL", 15, lambda g: g.util_percent, _util_cells, _by(lambda g: g.util_percent)
    ),
    Column(
        "mem",
        "MEMORY",
        23,
        lambda g: g.memory_fraction,
        _memory_cells,
        _by(lambda g: g.memory_fraction),
    ),
    Column(
        "temp",
        "TEMP",
        6,
        lambda g: g.temperature_c,
        _temperature_cells,
        _by(lambda g: g.temperature_c),
    ),
    Column("power", "POWER", 12, lambda g: g.power_w, _power_cells, _by(lambda g: g.power_w)),
    Column(
        "procs",
        "PROCS",
        9,
        lambda g: None if g.processes is None else len(g.processes),
        _process_cells,
    ),
    *(metric_column(m) for m in GPU_METRICS if m.title),
    Column("history", "", 0, lambda g: None, _history_cells),
)
BY_KEY = {c.key: c for c in COLUMNS}
W_NAME, W_UTIL = BY_KEY["name"].width, BY_KEY["util"].width
# The sort keys "s" cycles through: the shown columns' and the hosts' state (see GpuTable).
SORT_KEYS = (*(c.key for c in COLUMNS if c.sort is not None and not c.optional), "state")


def shown_columns(extra: bool) -> tuple[Column, ...]:
    return COLUMNS if extra else tuple(c for c in COLUMNS if not c.optional)


def spark_width(width: int, columns: tuple[Column, ...] | None = None) -> int:
    rest = width - sum(c.width for c in columns or shown_columns(False)) - 1
    return min(MAX_SPARK, max(MIN_SPARK, rest))


def history_label(seconds: float) -> str:
    return f"UTIL, LAST {seconds / 60:.0f} MIN" if seconds >= 120 else f"UTIL, LAST {seconds:.0f} S"


def column_header(width: int, history_s: float, columns: tuple[Column, ...] | None = None) -> str:
    columns = columns or shown_columns(False)
    spark = spark_width(width, columns)
    return "".join(
        pad(history_label(history_s) if c.width == 0 else c.title, c.width or spark)
        for c in columns
    )[:width]


def idle_while_peers_busy(gpu: GpuSample, peers: tuple[GpuSample, ...]) -> bool:
    others = [g.util_percent for g in peers if g.index != gpu.index and g.util_percent is not None]
    if gpu.util_percent is None or not others:
        return False
    return gpu.util_percent < IDLE_UTIL and sum(others) / len(others) >= BUSY_PEERS


def _gpu_metric(g: GpuSample, key: str) -> float:
    column = BY_KEY.get(key)
    sort = column.sort if column is not None else None
    return sort(g) if sort is not None else float(g.index)


class GpuTable(ScrollView, can_focus=True):
    """Hosts and their GPUs; arrow keys / j,k move, enter folds a host."""

    HELP_TITLE = "Host and GPU table"

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "Top", show=False),
        Binding("end,G", "jump(-1)", "Bottom", show=False),
        Binding("enter,space", "toggle_host", "Fold host"),
        Binding("z", "toggle_all", "Fold all"),
    ]

    COMPONENT_CLASSES = {
        "gpu-table--cursor",
        "gpu-table--host",
        "gpu-table--dim",
        "gpu-table--ok",
        "gpu-table--warn",
        "gpu-table--bad",
        "gpu-table--bar",
        "gpu-table--spark",
    }

    DEFAULT_CSS = """
    GpuTable { background: $surface; overflow-x: hidden; }
    GpuTable > .gpu-table--cursor { background: $primary 45%; }
    GpuTable:focus > .gpu-table--cursor { background: $primary; }
    GpuTable > .gpu-table--host { text-style: bold; color: $text; }
    GpuTable > .gpu-table--dim { color: $text-muted; }
    GpuTable > .gpu-table--ok { color: $success; }
    GpuTable > .gpu-table--warn { color: $warning; }
    GpuTable > .gpu-table--bad { color: $error; text-style: bold; }
    GpuTable > .gpu-table--bar { color: $success; }
    GpuTable > .gpu-table--spark { color: $primary-lighten-3; }
    """

    cursor: reactive[int] = reactive(0)

    class Selected(Message):
        """The cursor moved to another row."""

        def __init__(self, row: Row | None) -> None:
            self.row = row
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hosts: Mapping[str, HostTelemetry] = {}
        self.rows: Sequence[Row] = RowIndex([], [])
        self.filter_text = ""
        self.sort_key = "name"
        self.sort_reverse = False
        self.extra_columns = False  # the optional columns (Column.optional) shown
        self.collapsed: set[str] = set()
        # The last build: its rows, and what decided each host's rows (GPU count; state and
        # hostname where the sort or the filter reads them): only the hosts a frame names are
        # compared, not the whole fleet every frame.
        self._built = Built(self.rows, {}, None, None)
        self._sorted_at = 0.0  # monotonic time of the last rebuild (metric sorts re-sort ~1 Hz)
        self._style_cache: dict[str, Style] | None = None
        # host → "head alive" / "worker not started" …; set by the screen when Ray is known.
        self.ray_label: Callable[[str], str] | None = None
        # Called as soon as the cursor moves (the screen's details pane): drawn in the same
        # frame as the cursor, not one frame later as a Selected message's handler would be.
        self.on_cursor: Callable[[Row | None], None] | None = None
        # What the rows are built from, and what a rebuild keeps for the next (TableRows).
        self._rows = TableRows(_gpu_metric)

    @property
    def columns(self) -> tuple[Column, ...]:
        """The GPU rows' columns shown now, left to right."""
        return shown_columns(self.extra_columns)

    @property
    def sort_keys(self) -> tuple[str, ...]:
        """What "s" cycles through: SORT_KEYS, and the optional columns' while shown."""
        if not self.extra_columns:
            return SORT_KEYS
        more = tuple(c.key for c in COLUMNS if c.optional and c.sort is not None)
        return (*SORT_KEYS[:-1], *more, SORT_KEYS[-1])

    def toggle_columns(self) -> None:
        """Show or hide the optional columns (sorted by one, back to the name order)."""
        self.extra_columns = not self.extra_columns
        if self.sort_key not in self.sort_keys:
            self.sort_key = "name"
        self.rebuild()

    # -- data --------------------------------------------------------------------------------

    def set_hosts(self, hosts: Mapping[str, HostTelemetry]) -> None:
        self.hosts = hosts
        self.rebuild()

    def _gpu_count(self, ht: HostTelemetry) -> int:
        return ht.latest.gpu_count if ht.latest else 0

    def rebuild(self) -> None:
        """Recompute the visible rows (filter, sort, folding) keeping the cursor's row."""
        current = self.current_row
        built = self._rows.build(
            self.hosts, self.sort_key, self.sort_reverse, self.filter_text, self.collapsed
        )
        rows = self.rows = built.rows
        self._built = built
        self._sorted_at = time.monotonic()
        self.virtual_size = Size(self.scrollable_content_region.width, len(rows))
        at = None if current is None else rows._position(current)
        if at is not None:
            self.cursor = at
        else:
            self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self.refresh()

    def _host_shape(self, ht: HostTelemetry) -> object:
        """What the rows depend on: the GPU count; the state and hostname only where the sort
        or the filter reads them (else a host's state change repaints its row, and a fleet
        whose hosts flap between up and stale is not re-sorted every frame)."""
        if self.sort_key == "state" or self.filter_text:
            return (self._gpu_count(ht), ht.display_state, ht.hostname)
        return self._gpu_count(ht)

    def update_hosts(self, changed: set[str]) -> None:
        """New samples arrived for `changed`; repaint (rebuild only if the shape moved).

        Sorted by a metric, the rows are re-sorted at most every RESORT_S (as top does):
        re-sorting the whole fleet on every frame cost more than drawing it."""
        hosts, built = self.hosts, self._built
        self._rows.prepare([hosts[n] for n in changed if n in hosts], self.sort_key)
        moved = any(built.shape(n) != self._host_shape(hosts[n]) for n in changed if n in hosts)
        if not moved and self.sort_key not in ("name", "state"):
            moved = time.monotonic() - self._sorted_at >= RESORT_S
        if moved:
            self.rebuild()
            return
        # Repaint only the visible lines whose host changed: with 128 hosts streaming, a frame
        # touches a few rows, not the whole table.
        top = self.scroll_offset.y
        start = None
        for y, row in enumerate(self.rows[top : top + self.size.height], start=top):
            if row.host in changed:
                if start is None:
                    start = y
            elif start is not None:
                self.refresh_lines(start, y - start)
                start = None
        if start is not None:
            self.refresh_lines(start, top + self.size.height - start)

    @property
    def current_row(self) -> Row | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    # -- cursor ------------------------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh_lines(old, 1)
        self.refresh_lines(new, 1)
        self.scroll_to_region(Region(0, new, 1, 1), animate=False, force=True)
        if self.on_cursor is not None:
            self.on_cursor(self.current_row)
        self.post_message(self.Selected(self.current_row))

    def refresh_lines(self, y: int, count: int = 1) -> None:
        self.refresh(Region(0, y - self.scroll_offset.y, self.size.width, count))

    def action_cursor(self, delta: int) -> None:
        if self.rows:
            self.cursor = min(max(self.cursor + delta, 0), len(self.rows) - 1)

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 1))

    def action_jump(self, where: int) -> None:
        if self.rows:
            self.cursor = 0 if where == 0 else len(self.rows) - 1

    def action_toggle_host(self) -> None:
        row = self.current_row
        if row is None:
            return
        if row.host in self.collapsed:
            self.collapsed.discard(row.host)
        else:
            self.collapsed.add(row.host)
        self.cursor = self.rows.index(Row(row.host))
        self.rebuild()

    def action_toggle_all(self) -> None:
        if self.collapsed:
            self.collapsed.clear()
        else:
            self.collapsed = set(self.hosts)
        self.rebuild()

    def on_click(self, event) -> None:
        y = event.y + self.scroll_offset.y
        if 0 <= y < len(self.rows):
            self.cursor = y

    # -- rendering ---------------------------------------------------------------------------

    def on_resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows))

    def notify_style_update(self) -> None:
        self._style_cache = None
        super().notify_style_update()

    def _styles(self) -> dict[str, Style]:
        # Component styles are looked up once per theme, not once per rendered line.
        if self._style_cache is None:
            cache = {}
            for name in self.COMPONENT_CLASSES:
                style = self.get_component_rich_style(name)
                if not name.endswith("cursor"):
                    # Foreground only, so the cursor row's background shows through.
                    style = Style(color=style.color, bold=style.bold, italic=style.italic)
                cache[name.split("--")[1]] = style
            self._style_cache = cache
        return self._style_cache

    def render_line(self, y: int) -> Strip:
        index = y + self.scroll_offset.y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if index >= len(self.rows):
            return Strip.blank(width, base)
        row = self.rows[index]
        st = self._styles()
        ht = self.hosts.get(row.host)
        if ht is None:
            return Strip.blank(width, base)
        if row.gpu is None:
            segments = self._host_segments(ht, st, width)
        else:
            segments = self._gpu_segments(ht, row.gpu, st, width)
        # One Strip per line with final styles: this runs for every repainted row, ~10 times a
        # second, so no intermediate strips (Textual builds caches for each one).
        under = base + st["cursor"] if index == self.cursor else base
        out: list[Segment] = []
        used = 0
        for seg in segments:
            text = one_line(seg.text)  # every cell's text, whatever built it (fast path)
            cells = cell_len(text)
            if used + cells > width:
                text, cells = set_cell_size(text, max(0, width - used)), max(0, width - used)
            if text:
                out.append(Segment(text, under + seg.style))
                used += cells
        if used < width:
            out.append(Segment(" " * (width - used), under))
        return Strip(out, width)

    def _host_segments(self, ht: HostTelemetry, st: dict[str, Style], width: int) -> list[Segment]:
        state = ht.display_state
        fold = "▸" if ht.name in self.collapsed else "▾"
        state_style = (
            st["ok"]
            if state == "up"
            else (st["dim"] if state in ("connecting", "starting") else st["bad"])
        )
        segs = [
            Segment(pad(f"{fold} {ht.name}", W_NAME - 1) + " ", st["host"]),
            Segment(pad(state, 17) + " ", state_style),
        ]
        if self.ray_label is not None:
            label = one_line(self.ray_label(ht.name))
            ray_style = (
                st["ok"]
                if label.endswith("alive")
                else (st["bad"] if label.endswith(("dead", "absent")) else st["dim"])
            )
            segs.append(Segment(f"ray {pad(label, 18)} ", ray_style))
        s = ht.latest
        if s is not None and state in ("up", "no NVML", "stale"):
            info = []
            if s.cpu_percent is not None:
                info.append(f"cpu {s.cpu_percent:3.0f}%")
            if s.load1 is not None:
                info.append(f"load {s.load1:.1f}")
            if s.mem_total_bytes:
                info.append(f"mem {gib(s.mem_used_bytes)}/{gib(s.mem_total_bytes, 0)} GiB")
            if s.gpus:
                utils = [g.util_percent for g in s.gpus if g.util_percent is not None]
                mean = f" · mean util {sum(utils) / len(utils):.0f}%" if utils else ""
                info.append(f"{len(s.gpus)} GPU{'s' if len(s.gpus) != 1 else ''}{mean}")
            segs.append(Segment("  ".join(info) + "  ", st["dim"]))
            level = worst(judge_host(s.gpus)) if s.gpus else None
            if level in HEALTH_FLAGS:
                glyph, name = HEALTH_FLAGS[level]
                segs.append(Segment(one_line(f"{glyph} GPU health {level}  "), st[name]))
        error = ht.display_error
        if error:
            segs.append(Segment(one_line(error), st["bad"] if state != "up" else st["warn"]))
        return segs

    def _gpu_segments(
        self, ht: HostTelemetry, index: int, st: dict[str, Style], width: int
    ) -> list[Segment]:
        s = ht.latest
        gpu = next((g for g in s.gpus if g.index == index), None) if s else None
        if s is None or gpu is None:
            return [Segment(f"   gpu{index:d} (gone)", st["dim"])]
        columns = self.columns
        idle = not gpu.error and idle_while_peers_busy(gpu, s.gpus)
        spark = spark_width(width, columns)
        segs: list[Segment] = []
        for column in columns:
            cell = Cell(gpu, ht, st, idle, column.width or spark)
            segs += column.render(column.getter(gpu), cell)
            if gpu.error:  # the error takes the place of the numbers
                segs.append(Segment(one_line(gpu.error), st["bad"]))
                return segs
        if ht.display_state != "up":  # last known values of a host we cannot reach: greyed
            segs = [Segment(one_line(seg.text), st["dim"]) for seg in segs]
        return segs
