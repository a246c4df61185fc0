"""Small text gauges used inside table rows: bars, sparklines, human units."""

from __future__ import annotations

from collections.abc import Iterable

from tui.fmt import GIB

_SPARK = "▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of `width` cells with eighth-cell resolution."""
    if width <= 0:
        return ""
    if fraction is None:
        return "·" * width
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full
    if full < width:
        text += _EIGHTHS[part] if part else " "
    return text.ljust(width)


def sparkline(
    values: Iterable[float], width: int, top: float = 100.0, per_cell: int = 1, newest: int = 0
) -> str:
    """Values as block glyphs, newest at the right. Each cell is the mean of `per_cell`
    consecutive values so a long history fits a short column; `newest` is how many values the
    newest (still filling) cell holds, so cells keep their boundaries as values arrive instead
    of shimmering."""
    if width <= 0:
        return ""
    vals = list(values)
    if per_cell > 1:
        cells: list[float] = []
        end = len(vals)
        start = max(0, end - (newest or per_cell))
        while end > 0 and len(cells) < width:
            chunk = vals[start:end]
            cells.append(sum(chunk) / len(chunk))
            end, start = start, max(0, start - per_cell)
        vals = cells[::-1]
    vals = vals[-width:]
    steps = len(_SPARK) - 1
    chars = [_SPARK[min(steps, max(0, round(v / top * steps)))] for v in vals]
    return "".join(chars).rjust(width)


def gib(n: int | None, digits: int = 1) -> str:
    return "-" if n is None else f"{n / GIB:.{digits}f}"
