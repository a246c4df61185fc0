"""Training metrics from a job's log: one series per key, step progress and ETA.

The tracker is fed every chunk of the job log as it arrives (up to ~100k lines/s while a
log replays), so a chunk without a metrics line costs two substring scans and nothing more.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable

from tui.metrics.parse import TOTAL_MARK, parse_metrics_line, parse_total_steps

STEP_TIME_KEY = "timing_s/step"
CONSOLE = "console"
STEP_MARK = "step:"
# A line longer than this without a newline is not a verl metrics line worth keeping whole.
MAX_TAIL = 1 << 20
# ETA averages this many recent steps: recent enough to follow a slowdown, long enough to
# include the periodic validation and checkpoint steps.
ETA_WINDOW = 20
# verl logs a few hundred keys; a log that makes up more (or keys of a page each) could grow the
# tracker without end, so past these the extra keys are left out (and counted).
MAX_KEYS = 10_000
MAX_KEY_CHARS = 200
# A step time outside (0, this] is not one (a year: 3e7 s); the ETA ignores it.
MAX_STEP_SECONDS = 3.2e7
# What a chart can draw. plotext turns its axis range into integers and scales by it: a value
# past ~3.5e306 (or a range near the smallest float) raises OverflowError inside the drawing,
# and inf/nan fail outright. Values keep their true number everywhere else (the latest-values
# line, tables, exports); only the points handed to a chart pass through chart_points.
CHART_LIMIT = 1e15  # |v| above: drawn at ±CHART_LIMIT
CHART_TINY = 1e-30  # 0 < |v| below: drawn at 0


def chart_value(v: float) -> float | None:
    """The value as a chart draws it: None (a gap) for nan and ±inf, ±CHART_LIMIT for a larger
    magnitude, 0 for one below CHART_TINY, else itself."""
    if not math.isfinite(v):
        return None
    if v > CHART_LIMIT:
        return CHART_LIMIT
    if v < -CHART_LIMIT:
        return -CHART_LIMIT
    if -CHART_TINY < v < CHART_TINY:
        return 0.0
    return float(v)


def chart_points(points: Iterable[tuple[int, float]]) -> tuple[list[tuple[int, float]], int, int]:
    """(the points a chart may draw, how many were left out as nan/inf, how many were moved
    into the drawable range): the one filter between a metric series and a chart."""
    out: list[tuple[int, float]] = []
    gaps = moved = 0
    for step, v in points:
        c = chart_value(v)
        if c is None:
            gaps += 1
            continue
        if c != v:
            moved += 1
        out.append((step, c))
    return out, gaps, moved


class MetricsTracker:
    """Series of verl metrics parsed from log text, keyed by metric name then step."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.version = 0
        self.clear()

    def clear(self) -> None:
        """Forget everything (another job's log is about to be fed)."""
        self._tail = ""
        # One row per step rather than one series per key: a verl line has ~100 keys, and
        # recording it must stay a few C-level dict updates.
        self._rows: dict[int, dict[str, float]] = {}
        self._rows_sorted = True
        self._latest: dict[str, float] = {}  # its key order is the order keys were first seen
        self._latest_step: dict[str, int] = {}
        self._last_step: int | None = None
        self._total_log: int | None = None
        self._total_config: int | None = None
        self._step_times: deque[float] = deque(maxlen=ETA_WINDOW)
        self._intervals: deque[float] = deque(maxlen=ETA_WINDOW)
        self._arrival: tuple[int, float] | None = None
        self.metric_lines = 0
        self.keys_dropped = 0  # metric keys left out (MAX_KEYS, MAX_KEY_CHARS)
        # Where the rows come from: "console" (verl's step lines in the log text fed here) or
        # "file:PATH" (verl's file logger, rows given by add_rows; step lines are then ignored).
        self.source = CONSOLE
        self.version += 1

    def use_source(self, source: str) -> None:
        """Take rows from `source` from now on ("console" or "file:PATH"): the rows read so far
        from another source are forgotten (the total step count is kept)."""
        if source == self.source:
            return
        total_log, total_config = self._total_log, self._total_config
        self.clear()
        self._total_log, self._total_config = total_log, total_config
        self.source = source

    def add_rows(self, rows: Iterable[tuple[int, dict[str, float]]]) -> bool:
        """Record parsed rows ((step, {key: value}), e.g. verl's file logger's); True if any."""
        now = self._clock()
        changed = False
        for step, metrics in rows:
            if metrics:
                self._record(step, metrics, now)
                changed = True
        return changed

    # --- feeding ---------------------------------------------------------------------------

    def feed_text(self, text: str) -> bool:
        """Take the next chunk of log text; True if a metric or the total step count arrived.

        A line split across chunks is kept until its newline arrives."""
        if not text:
            return False
        data = self._tail + text if self._tail else text
        end = data.rfind("\n")
        if end < 0:
            self._tail = data if len(data) <= MAX_TAIL else ""
            return False
        self._tail = data[end + 1 :]
        if len(self._tail) > MAX_TAIL:
            self._tail = ""
        return self._scan(data, end)

    def flush(self) -> bool:
        """Parse a last line that never got its newline (the log ended)."""
        data, self._tail = self._tail, ""
        return self._scan(data, len(data)) if data else False

    def _scan(self, data: str, end: int) -> bool:
        changed = False
        pos = data.find(STEP_MARK, 0, end) if self.source == CONSOLE else -1
        if pos >= 0:
            now = self._clock()
            while pos >= 0:
                nl = data.rfind("\n", 0, pos) + 1
                # tqdm's "\r" redraws share a line with whatever follows them.
                start = max(nl, data.rfind("\r", nl, pos) + 1)
                stop = data.find("\n", pos, end)
                if stop < 0:
                    stop = end
                cr = data.find("\r", pos, stop)
                if cr >= 0:
                    stop = cr
                parsed = parse_metrics_line(data[start:stop])
                if parsed is not None:
                    self._record(parsed[0], parsed[1], now)
                    changed = True
                # A metrics line holds "step:" several times (timing_s/step:...): skip past it.
                pos = data.find(STEP_MARK, stop, end)
        pos = data.find(TOTAL_MARK, 0, end)
        while pos >= 0:
            stop = data.find("\n", pos, end)
            if stop < 0:
                stop = end
            total = parse_total_steps(data[pos:stop])
            if total is not None and total != self._total_log:
                old = self.total_steps
                self._total_log = total
                if self.total_steps != old:
                    self.version += 1
                    changed = True
            pos = data.find(TOTAL_MARK, stop, end)
        return changed

    def _record(self, step: int, metrics: dict[str, float], now: float) -> None:
        if len(self._latest) + len(metrics) > MAX_KEYS or max(map(len, metrics)) > MAX_KEY_CHARS:
            metrics = self._bounded(metrics)
            if not metrics:
                return
        row = self._rows.get(step)
        if row is None:
            if self._rows and step < next(reversed(self._rows)):
                self._rows_sorted = False
            self._rows[step] = metrics
        else:
            row.update(metrics)  # a repeated step (resumed run) overwrites, never duplicates
        self._latest.update(metrics)
        self._latest_step.update(dict.fromkeys(metrics, step))
        step_time = metrics.get(STEP_TIME_KEY)
        if step_time is not None and 0 < step_time <= MAX_STEP_SECONDS:  # nan compares False
            self._step_times.append(step_time)
        # Wall clock between step lines: the fallback when timing_s/step is absent. Lines of a
        # replayed log arrive within one chunk (zero time apart) and teach nothing.
        if self._arrival is not None:
            prev_step, prev_t = self._arrival
            if step > prev_step and now > prev_t:
                self._intervals.append((now - prev_t) / (step - prev_step))
        if self._arrival is None or step != self._arrival[0]:
            self._arrival = (step, now)
        self._last_step = step
        self.metric_lines += 1
        self.version += 1

    def _bounded(self, metrics: dict[str, float]) -> dict[str, float]:
        """The keys already known and new ones while there is room (MAX_KEYS), none longer
        than MAX_KEY_CHARS; what is left out is counted in keys_dropped."""
        room = MAX_KEYS - len(self._latest)
        kept: dict[str, float] = {}
        for key, value in metrics.items():
            if len(key) <= MAX_KEY_CHARS and (key in self._latest or room > 0):
                if key not in self._latest:
                    room -= 1
                kept[key] = value
        self.keys_dropped += len(metrics) - len(kept)
        return kept

    # --- reading ---------------------------------------------------------------------------

    def keys(self) -> list[str]:
        """Every metric key seen, in the order first seen."""
        return list(self._latest)

    def series(self, key: str) -> list[tuple[int, float]]:
        """``(step, value)`` points of one key, by step; empty for an unknown key."""
        if key not in self._latest:
            return []
        rows = self._rows
        steps = rows if self._rows_sorted else sorted(rows)
        return [(step, rows[step][key]) for step in steps if key in rows[step]]

    def steps(self) -> list[int]:
        """Every step with a row, in order."""
        return list(self._rows) if self._rows_sorted else sorted(self._rows)

    def row(self, step: int) -> dict[str, float]:
        """Every value logged at `step` ({} for none)."""
        return dict(self._rows.get(step, {}))

    def latest(self) -> dict[str, float]:
        """Each key's most recently logged value."""
        return dict(self._latest)

    def latest_step(self, key: str) -> int | None:
        """The step of a key's most recent value (validation keys lag the training step)."""
        return self._latest_step.get(key)

    @property
    def last_step(self) -> int | None:
        """The step of the most recent metrics line (after a resume it can go back)."""
        return self._last_step

    @property
    def total_steps(self) -> int | None:
        """Total training steps: verl's own "Total training steps: N" wins over the config's."""
        return self._total_log if self._total_log is not None else self._total_config

    @total_steps.setter
    def total_steps(self, value: int | None) -> None:
        old = self.total_steps
        self._total_config = value if value and value > 0 else None
        if self.total_steps != old:
            self.version += 1

    def step_seconds(self) -> float | None:
        """Mean seconds per step over the recent steps: timing_s/step, else the wall clock."""
        recent = self._step_times or self._intervals
        return sum(recent) / len(recent) if recent else None

    def eta_seconds(self) -> float | None:
        """Seconds left until the last training step, or None while unknown."""
        total, last = self.total_steps, self._last_step
        if total is None or last is None:
            return None
        remaining = total - last
        if remaining <= 0:
            return 0.0
        per_step = self.step_seconds()
        return None if per_step is None else remaining * per_step

    def progress(self) -> float | None:
        """Fraction of training steps done, 0..1, or None without a total or a step."""
        total, last = self.total_steps, self._last_step
        if not total or last is None:
            return None
        return min(max(last / total, 0.0), 1.0)
