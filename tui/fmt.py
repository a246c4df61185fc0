"""Short human forms of sizes, ages and durations, shared by screens and headless commands."""

from __future__ import annotations

import time

GIB = 1 << 30


def human_size(n: int) -> str:
    """1536 → "1.5K"; binary units, one decimal."""
    for unit, size in (("T", 1 << 40), ("G", GIB), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


def age(since: float | None, now: float | None = None) -> str:
    """Seconds since a Unix time, in the largest whole unit: "42s", "5m", "3h", "2d"."""
    if not since:
        return "-"
    s = max(0, int((now or time.time()) - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def duration(seconds: float | None) -> str:
    """ "4m07s", "2h13m", "3d04h"; "-" when unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def plural(count: int, word: str, many: str | None = None) -> str:
    """ "1 host", "3 hosts" (`many` for irregular plurals)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
