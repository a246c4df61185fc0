"""A job's stack dump as data: each process's threads, the processes grouped by identical
stacks (odd ones out first), the problems that kept a process or a host from being dumped.

Everything here was read from hosts and Ray at one boundary (tui/stack/pyspy.py, the dashboard
schema) and is plain text already cut to size; `text_lines` cleans again for a terminal.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.sanitize import one_line

if TYPE_CHECKING:
    from tui.archive.store import ArchiveStore

MAX_FRAMES = 128  # frames kept per thread (innermost first)
SUMMARY_FRAMES = 3  # frames named in a group's one line
KEEP_DUMPS = 20  # stack dumps kept per job in the run archive
_HEX = re.compile(r"0x[0-9a-fA-F]+")


@dataclass(frozen=True)
class Frame:
    """One frame: a function and where it is (`line` 0 for a native frame)."""

    name: str
    file: str
    line: int = 0

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.name} ({where})" if where else self.name

    @property
    def unnamed(self) -> bool:
        """A native frame py-spy knows only by its address (no symbol)."""
        return _HEX.fullmatch(self.name) is not None

    @property
    def key(self) -> str:
        """What two ranks' frames must share to count as the same place: the function and its
        file, not the line (the same wait reached from one line or its neighbour); a native
        frame known only by its address counts as its library."""
        return f"{'?' if self.unnamed else self.name} ({self.file})"


def frame_lines(frames: Sequence[Frame]) -> list[str]:
    """Frames as lines, innermost first, a run of address-only frames of one library folded
    into one line (``… 9 frames in libcuda.so.580``): what `--native` shows between symbols."""
    out: list[str] = []
    run: list[Frame] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(str(run[0]))
        elif run:
            out.append(f"… {len(run)} frames in {run[0].file or '?'}")
        run.clear()

    for f in frames:
        if f.unnamed and (not run or run[0].file == f.file):
            run.append(f)
            continue
        flush()
        if f.unnamed:
            run.append(f)
        else:
            out.append(str(f))
    flush()
    return out


@dataclass(frozen=True)
class Thread:
    name: str  # py-spy's thread name, or its id
    frames: tuple[Frame, ...]  # innermost first
    idle: bool = False
    main: bool = False  # the process's main thread (its os thread id is the pid)


@dataclass(frozen=True)
class Target:
    """A process of the job, as Ray (or the Jobs API, for the driver) names it."""

    host: str
    pid: int
    role: str  # "driver", the actor's class ("TaskRunner", "WorkerDict"), "task NAME"
    actor: str = ""  # the actor's name, when it has one
    rank: int | None = None  # torch.distributed's RANK, read from the process's environment

    @property
    def label(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"{self.role} {self.host}:{self.pid}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "pid": self.pid, "role": self.role}
        if self.rank is not None:
            out["rank"] = self.rank
        if self.actor:
            out["actor"] = self.actor
        return out


@dataclass(frozen=True)
class ProcessDump:
    target: Target
    threads: tuple[Thread, ...]

    @property
    def main_thread(self) -> Thread | None:
        """The thread whose stack says what the process is doing: the main one (where an actor
        runs its methods), else the first with frames."""
        for t in self.threads:
            if t.main and t.frames:
                return t
        return next((t for t in self.threads if t.frames), None)

    @property
    def key(self) -> tuple[str, ...]:
        main = self.main_thread
        return tuple(f.key for f in main.frames) if main else ()


@dataclass(frozen=True)
class Problem:
    """Why a host or a process was not dumped: one line that names the fix."""

    host: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"host": self.host, "message": self.message}

    def __str__(self) -> str:
        return f"{self.host}: {self.message}"


@dataclass(frozen=True)
class StackGroup:
    """Processes whose main threads stand in the same place."""

    dumps: tuple[ProcessDump, ...]

    @property
    def frames(self) -> tuple[Frame, ...]:
        main = self.dumps[0].main_thread
        return main.frames if main else ()

    @property
    def who(self) -> str:
        return name_processes([d.target for d in self.dumps])

    @property
    def where(self) -> str:
        """The innermost named frames: ``all_reduce ← train_step ← …`` (a native frame known
        only by its address says nothing here)."""
        # A closure's qualified name says where it was defined, not what runs: its own name.
        named = [f.name.rsplit(".<locals>.", 1)[-1] for f in self.frames if not f.unnamed]
        if not named:
            return "(no frames)"
        more = " ← …" if len(named) > SUMMARY_FRAMES else ""
        return " ← ".join(named[:SUMMARY_FRAMES]) + more

    @property
    def summary(self) -> str:
        """``ranks 0-6, 8-15: all_reduce ← train_step ← …``"""
        return f"{self.who}: {self.where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "processes": [d.target.to_json() for d in self.dumps],
            "frames": [str(f) for f in self.frames],
        }


def _ranges(numbers: Iterable[int]) -> str:
    """0,1,2,3,5,7,8 → ``0–3, 5, 7–8``."""
    nums = sorted(set(numbers))
    out: list[str] = []
    start = prev = None
    for n in [*nums, None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(f"{start}" if start == prev else f"{start}–{prev}")
        start = prev = n
    return ", ".join(out)


def name_processes(targets: Sequence[Target]) -> str:
    """``ranks 0–6, 8–15`` for ranked processes, then the others by role and host:pid."""
    ranked = [t.rank for t in targets if t.rank is not None]
    parts = []
    if ranked:
        parts.append(("rank " if len(ranked) == 1 else "ranks ") + _ranges(ranked))
    others = [t for t in targets if t.rank is None]
    shown = others[:6]
    parts += [f"{t.role} {t.host}:{t.pid}" for t in shown]
    if len(others) > len(shown):
        parts.append(f"{len(others) - len(shown)} more")
    return "; ".join(parts)


def group_dumps(dumps: Iterable[ProcessDump]) -> list[StackGroup]:
    """Identical main-thread stacks together; the smallest groups (the odd ones out) first,
    then by their first rank (or host, pid)."""
    by_key: dict[tuple[str, ...], list[ProcessDump]] = {}
    for d in dumps:
        by_key.setdefault(d.key, []).append(d)

    def order(d: ProcessDump) -> tuple[int, int, str, int]:
        t = d.target
        return (0 if t.rank is not None else 1, t.rank or 0, t.host, t.pid)

    groups = [StackGroup(tuple(sorted(ds, key=order))) for ds in by_key.values()]
    return sorted(groups, key=lambda g: (len(g.dumps), order(g.dumps[0])))


@dataclass
class StackReport:
    """One dump of a job: the groups, the problems, Ray's view, and when it was taken."""

    job: str
    dumps: list[ProcessDump] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    ray: dict[str, Any] = field(default_factory=dict)  # tui/stack/ray_view.py's RayView.to_json
    ray_lines: list[str] = field(default_factory=list)  # the same view as lines to show
    native: bool = False
    taken_at: float = field(default_factory=time.time)
    seconds: float = 0.0  # how long the dump took
    expected: int = 0  # processes Ray named

    @property
    def groups(self) -> list[StackGroup]:
        return group_dumps(self.dumps)

    def to_json(self, *, threads: bool = False) -> dict[str, Any]:
        """The `stack --json` answer; `threads` adds every thread of every process (what the
        run archive keeps)."""
        out: dict[str, Any] = {
            "job": self.job,
            "taken_at": self.taken_at,
            "seconds": round(self.seconds, 3),
            "native": self.native,
            "processes": self.expected,
            "dumped": len(self.dumps),
            "groups": [g.to_json() for g in self.groups],
            "problems": [p.to_json() for p in self.problems],
            "ray": self.ray,
        }
        if threads:
            out["threads"] = [
                {
                    **d.target.to_json(),
                    "threads": [
                        {
                            "name": t.name,
                            "idle": t.idle,
                            "main": t.main,
                            "frames": [str(f) for f in t.frames],
                        }
                        for t in d.threads
                    ],
                }
                for d in self.dumps
            ]
        return out

    def text_lines(self, *, frames: int = 12) -> list[str]:
        """The report as plain lines (the CLI's text, the archive's summary): each group's line
        then its frames (innermost first), then the problems; all cleaned to one line each."""
        out = [
            f"{self.job}: {len(self.dumps)} of {self.expected} process(es) dumped in "
            f"{self.seconds:.1f} s" + (" (native frames)" if self.native else "")
        ]
        for g in self.groups:
            out.append("")
            out.append(one_line(g.summary, 400))
            lines = frame_lines(g.frames)
            out += [f"    {one_line(line, 300)}" for line in lines[:frames]]
            if len(lines) > frames:
                out.append(f"    … {len(lines) - frames} more line(s)")
        if self.ray_lines:
            out.append("")
            out += [one_line(f"ray: {line}", 600) for line in self.ray_lines]
        if self.problems:
            out.append("")
            out += [one_line(f"problem: {p}", 600) for p in self.problems]
        return out

    def save(self, store: ArchiveStore) -> Path:
        """The whole dump (every thread of every process, Ray's view, the problems) into the
        job's folder of the run archive: ``stacks/<UTC time>.json.gz``, written atomically; the
        oldest beyond KEEP_DUMPS are removed. StateError (one line) when it cannot be written."""
        from tui.state import atomic_write_bytes

        folder = store.job_dir(self.job) / "stacks"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.taken_at))
        path = folder / f"{stamp}-{int(self.taken_at * 1000) % 1000:03d}.json.gz"
        doc = json.dumps(self.to_json(threads=True), separators=(",", ":")).encode()
        atomic_write_bytes(path, gzip.compress(doc, 6))
        old = sorted(p for p in folder.glob("*.json.gz") if p.is_file() and not p.is_symlink())
        for stale in old[:-KEEP_DUMPS]:
            with contextlib.suppress(OSError):
                stale.unlink()
        return path
