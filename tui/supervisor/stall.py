"""Is a running job stuck? Pure logic over what the supervisor saw of it pass after pass (no I/O:
tui/supervisor/stall_duty.py reads the log and the GPUs and acts).

A job is stalled when its next training step is overdue: no new step line for max(factor × the
median step time, min_s), or no first step within startup_s of its start. An NCCL/c10d watchdog
line written after the last step says so at once (a collective already timed out). The job's
GPUs are evidence beside it: memory held and an activity pattern that has not changed — all
~0 % (a hang before the first kernel) or ~100 % (NCCL kernels spinning in a collective that
will never complete), or both at once (the waiting ranks busy, the absent one idle).

Times are the supervisor's wall clock when it first saw a line (logs carry no time of their
own); a log read after a restart counts its old lines as seen no later than the file's mtime.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.config.stall import StallOptions
from tui.metrics.parse import clean_line, parse_metrics_line
from tui.metrics.series import MAX_STEP_SECONDS, STEP_TIME_KEY
from tui.sanitize import one_line

STEP_WINDOW = 50  # recent step times the median is taken over
IDLE_BELOW = 5.0  # % busy: a GPU at or below this does nothing
BUSY_ABOVE = 95.0  # % busy: a GPU at or above this is flat out
HELD_BYTES = 256 << 20  # a GPU holding less than this holds no model
GIB = float(1 << 30)
# The remote pre-filter (fixed strings, grep -F) and the line test after it: step lines and
# the watchdog's words (torch's ProcessGroupNCCL/c10d, NCCL's own timeout warnings).
LOG_MARKS = ("step:", "atchdog", "imed out", "imeout")
_WATCHDOG = re.compile(
    r"[Ww]atchdog (?:caught|thread terminated|timeout)|ProcessGroupNCCL.*(?:[Tt]imeout|[Ww]atchdog)"
    r"|c10d.*(?:[Tt]imed out|timeout after|Timeout at)|NCCL WARN .*[Tt]imeout"
    r"|[Hh]eartbeat monitor timed out"
)


def watchdog_line(line: str) -> bool:
    return bool(_WATCHDOG.search(line))


def seconds_text(s: float) -> str:
    """ "14 min", "2.1 min", "45 s", "3.2 h": the evidence's own short durations."""
    if s >= 3 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 600:
        return f"{s / 60:.0f} min"
    if s >= 90:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


@dataclass(frozen=True)
class GpuState:
    """One of the job's GPUs in one sample: how busy, how much its processes hold."""

    gpu: str  # "host:index"
    util: float | None  # % busy
    held: int | None  # bytes


def _bucket(util: float | None) -> str:
    if util is None:
        return "?"
    return "idle" if util <= IDLE_BELOW else "busy" if util >= BUSY_ABOVE else "mid"


@dataclass
class Stall:
    since: float  # when progress stopped (the last step seen, or the job's start)
    evidence: str  # one line for people
    reasons: list[str]  # no_step | no_first_step | watchdog | gpus_idle | gpus_busy | gpus_split
    last_step: int | None = None
    median_step_s: float | None = None
    limit_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "evidence": self.evidence,
            "reasons": list(self.reasons),
            "last_step": self.last_step,
            "median_step_s": self.median_step_s,
            "limit_s": self.limit_s,
        }


@dataclass
class JobProgress:
    """What the supervisor saw of one running job: its steps, watchdog lines, GPU pattern."""

    started_at: float  # Ray's start time of the job
    last_step: int | None = None
    last_step_at: float | None = None
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))
    watchdog: str | None = None
    watchdog_at: float | None = None
    pattern: tuple[str, ...] | None = None  # each GPU's bucket, by GPU name
    pattern_since: float | None = None
    gpus: tuple[GpuState, ...] = ()

    def feed_lines(self, lines: Iterable[str], seen_at: float) -> None:
        """Lines of the log (pre-filtered or not), all first seen at `seen_at`."""
        for raw in lines:
            if "step:" in raw:
                parsed = parse_metrics_line(raw)
                if parsed is not None:
                    self._step(parsed[0], parsed[1].get(STEP_TIME_KEY), seen_at)
                    continue
            if watchdog_line(raw):
                self.watchdog = one_line(clean_line(raw), 300)
                self.watchdog_at = seen_at

    def _step(self, step: int, took: float | None, at: float) -> None:
        if took is not None and 0 < took <= MAX_STEP_SECONDS:
            self.step_times.append(took)
        last, last_at = self.last_step, self.last_step_at
        if last is not None and last_at is not None and step > last and at > last_at:
            self.gaps.append((at - last_at) / (step - last))
        if step != self.last_step:
            self.last_step, self.last_step_at = step, at

    def feed_gpus(self, gpus: Sequence[GpuState], at: float) -> None:
        """The job's GPUs now (empty: none known). The pattern's `since` moves on any change."""
        gpus = tuple(sorted(gpus, key=lambda g: g.gpu))
        pattern = tuple(f"{g.gpu}={_bucket(g.util)}" for g in gpus)
        if pattern != self.pattern:
            self.pattern, self.pattern_since = pattern, at
        self.gpus = gpus

    @property
    def median_step_s(self) -> float | None:
        """The median step time: verl's timing_s/step, else the gaps between step lines."""
        times = self.step_times or self.gaps
        return statistics.median(times) if times else None


def _gpu_evidence(p: JobProgress, progress_since: float) -> tuple[str | None, str | None]:
    """(reason, text) for GPUs that hold memory in one unchanged idle/busy pattern since before
    progress stopped (or since at least the last sample); (None, None) otherwise."""
    if not p.gpus or p.pattern_since is None:
        return None, None
    held = [g.held for g in p.gpus if g.held is not None]
    if not held or min(held) < HELD_BYTES:
        return None, None
    buckets = [_bucket(g.util) for g in p.gpus]
    if any(b in ("mid", "?") for b in buckets):
        return None, None
    idle, busy = buckets.count("idle"), buckets.count("busy")
    n = len(p.gpus)
    each = f"{sum(held) / len(held) / GIB:.0f} GiB each"
    since = clock(max(p.pattern_since, progress_since))
    if busy and idle:
        reason = "gpus_split"
        what = f"{busy} 100 % busy, {idle} 0 % busy"
    else:
        reason = "gpus_busy" if busy else "gpus_idle"
        what = "100 % busy" if busy else "0 % busy"
    return reason, f"{n} GPU{'s' if n != 1 else ''} hold {each}, {what} since {since}"


def judge(p: JobProgress, opts: StallOptions, now: float) -> Stall | None:
    """The job's stall, or None while it makes progress (or the check is off)."""
    if not opts.enabled:
        return None
    median = p.median_step_s
    if p.last_step_at is None:
        since, limit = p.started_at, opts.startup_s
        reason = "no_first_step"
        text = (
            f"no first step {seconds_text(now - since)} after the start "
            f"(start-up allowance {seconds_text(limit)})"
        )
    else:
        since = p.last_step_at
        limit = max(opts.factor * median, opts.min_s) if median else opts.min_s
        reason = "no_step"
        text = f"no step for {seconds_text(now - since)} (last step {p.last_step})"
        if median:
            text += f"; median step {seconds_text(median)}"
    overdue = now - since > limit
    watchdog = p.watchdog_at is not None and p.watchdog_at >= since
    if not (overdue or watchdog):
        return None
    reasons, parts = ([reason], [text]) if overdue else ([], [])
    gpu_reason, gpu_text = _gpu_evidence(p, since)
    if gpu_reason and gpu_text:
        reasons.append(gpu_reason)
        parts.append(gpu_text)
    if watchdog:
        reasons.append("watchdog")
        parts.append(f"watchdog: {p.watchdog}")
    return Stall(
        since=since,
        evidence=one_line("; ".join(parts), 600),
        reasons=reasons,
        last_step=p.last_step,
        median_step_s=round(median, 3) if median else None,
        limit_s=round(limit, 3),
    )
