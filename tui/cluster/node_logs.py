"""A host's Ray session logs over SSH: list the files of its session log folder and follow one.

Ray writes every node's logs under <temp dir>/session_latest/logs on that node (raylet.out,
gcs_server.out on the head, worker-*.out/.err, job-driver-*.log, ...). Nothing here needs Ray
on this machine: `find` lists, `tail -F` follows (it survives the file being rotated), and a
search runs on each host (tui/remote/log_grep.py) with a byte bound per file and per host, so
only the matching lines travel.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.errors import VerlTuiError
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.transport.types import StreamProcess, Transport, TransportError

if TYPE_CHECKING:
    from tui.transport.fleet import Fleet

SESSION_LOGS = "/tmp/ray/session_latest/logs"
FIRST_LINES = 5000  # how much of a file to show before following it


@dataclass(frozen=True)
class LogFile:
    name: str
    size: int
    mtime: float

    @property
    def kind(self) -> str:
        """A coarse kind for grouping: raylet, gcs, worker, driver, agent, other."""
        n = self.name
        for prefix, kind in (
            ("raylet", "raylet"),
            ("gcs_server", "gcs"),
            ("worker-", "worker"),
            ("python-core-worker", "worker"),
            ("job-driver", "driver"),
            ("dashboard", "dashboard"),
            ("runtime_env", "agent"),
            ("log_monitor", "agent"),
            ("monitor", "autoscaler"),
        ):
            if n.startswith(prefix):
                return kind
        return "other"


async def list_logs(transport: Transport, log_dir: str = SESSION_LOGS) -> list[LogFile]:
    """Files of the folder, newest first. A host without a Ray session gives a clear error."""
    res = await transport.run(
        ["find", log_dir + "/", "-maxdepth", "1", "-type", "f", "-printf", r"%s\t%T@\t%f\n"],
        timeout=20,
    )
    if not res.ok:
        why = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
        if "No such file" in why:
            why = f"no Ray session logs in {log_dir} (Ray never started on this host?)"
        raise TransportError(f"{transport.host}: {why}")
    files = []
    for line in res.stdout.splitlines():
        size, _, rest = line.partition("\t")
        mtime, _, name = rest.partition("\t")
        try:
            files.append(LogFile(name, int(size), float(mtime)))
        except ValueError:
            continue
    return sorted(files, key=lambda f: -f.mtime)


def log_path(name: str, log_dir: str = SESSION_LOGS) -> str:
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a log file name: {name!r}")
    return posixpath.join(log_dir, name)


async def follow_log(
    transport: Transport, name: str, *, log_dir: str = SESSION_LOGS, first_lines: int = FIRST_LINES
) -> StreamProcess:
    """A stream of the file's last `first_lines` lines, then every line appended."""
    return await transport.stream(
        ["tail", "-n", str(first_lines), "-F", "--", log_path(name, log_dir)]
    )


async def batched(lines: AsyncIterator[str], *, max_lines: int = 2000) -> AsyncIterator[str]:
    """Join lines that are already waiting into one text chunk, so a fast stream reaches the
    widget in few appends (the widget coalesces redraws on its own)."""
    it = lines.__aiter__()
    pending: asyncio.Task | None = None
    while True:
        buf: list[str] = []
        try:
            if pending is None:
                pending = asyncio.ensure_future(it.__anext__())
            buf.append(await pending)
            pending = None
            while len(buf) < max_lines:
                pending = asyncio.ensure_future(it.__anext__())
                await asyncio.sleep(0)
                if not pending.done():
                    break
                buf.append(pending.result())
                pending = None
        except StopAsyncIteration:
            if buf:
                yield "\n".join(buf) + "\n"
            return
        yield "\n".join(buf) + "\n"


# ---- a search across every host's session logs (`logs --grep`, the node-logs screen) --------

GREP_FILE_BYTES = 16 << 20  # per file: its newest 16 MiB
GREP_TOTAL_BYTES = 128 << 20  # per host, all files together
GREP_MAX_MATCHES = 1000  # per host
GREP_TIMEOUT = 60.0
MAX_PATTERN = 500
_MAX_NAME = 255
_MAX_TEXT = 500


class BadPattern(VerlTuiError, ValueError, title="bad pattern", kind="bad_input"):
    """A regex that does not compile (or is too long): one line naming what is wrong."""


def check_pattern(pattern: str, *, ignore_case: bool = False) -> re.Pattern[str]:
    """The search's regex, checked at the boundary: the hosts get only one that compiles."""
    if not pattern:
        raise BadPattern("an empty pattern matches every line; give a regex")
    if len(pattern) > MAX_PATTERN:
        raise BadPattern(f"the pattern is {len(pattern)} characters, over {MAX_PATTERN}")
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise BadPattern(f"not a regular expression: {exc}") from None


@dataclass(frozen=True)
class LogMatch:
    host: str
    file: str
    line: int
    text: str  # sanitized: one line, no control characters

    def __str__(self) -> str:
        return f"{self.host}:{self.file}:{self.line}: {self.text}"


@dataclass
class HostGrep:
    """One host's answer: its matches, the files not searched in full, or why it has none."""

    host: str
    matches: list[LogMatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    files: int = 0
    bytes: int = 0


def _host_answer(host: str, stdout: str) -> HostGrep:
    """The host's JSON lines (untrusted): each checked and cleaned, the rest counted."""
    out = HostGrep(host)
    bad = 0
    for raw in stdout.splitlines():
        try:
            doc = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if not isinstance(doc, dict):
            bad += 1
        elif isinstance(doc.get("m"), list) and len(doc["m"]) == 3:
            name, line, text = doc["m"]
            if (
                isinstance(name, str)
                and 0 < len(name) <= _MAX_NAME
                and isinstance(line, int)
                and not isinstance(line, bool)
                and line > 0
                and isinstance(text, str)
            ):
                out.matches.append(LogMatch(host, one_line(name), line, one_line(text, _MAX_TEXT)))
            else:
                bad += 1
        elif isinstance(doc.get("skip"), list) and len(doc["skip"]) == 2:
            out.notes.append(one_line(f"{doc['skip'][0]}: {doc['skip'][1]}", 300))
        elif isinstance(doc.get("done"), dict):
            done = doc["done"]
            out.files = done.get("files") if isinstance(done.get("files"), int) else 0
            out.bytes = done.get("bytes") if isinstance(done.get("bytes"), int) else 0
            if isinstance(done.get("stopped"), str):
                out.notes.append(one_line(f"stopped: {done['stopped']}", 200))
        elif isinstance(doc.get("error"), str):
            out.error = one_line(doc["error"], 300)
        else:
            bad += 1
    if bad:
        out.notes.append(f"{bad} line(s) of its answer not understood")
    return out


async def grep_host(
    fleet: Fleet,
    host: str,
    pattern: str,
    *,
    ignore_case: bool = False,
    log_dir: str = SESSION_LOGS,
    file_bytes: int = GREP_FILE_BYTES,
    total_bytes: int = GREP_TOTAL_BYTES,
    max_matches: int = GREP_MAX_MATCHES,
    timeout: float = GREP_TIMEOUT,
) -> HostGrep:
    """One host's session logs searched there (tui/remote/log_grep.py); never raises for a
    host that is down or answers badly: that is its `error`."""
    req = {
        "dir": log_dir,
        "pattern": pattern,
        "ignore_case": ignore_case,
        "file_bytes": file_bytes,
        "total_bytes": total_bytes,
        "max_matches": max_matches,
    }
    python = fleet.inventory.host(host).python
    try:
        transport = await fleet.ready(host, min(timeout, 20.0))
        res = await transport.run(
            python_argv(python, "log_grep"), input=json.dumps(req), timeout=timeout
        )
    except TransportError as exc:
        return HostGrep(host, error=one_line(str(exc), 300))
    found = _host_answer(host, res.stdout)
    if found.error is None and not res.ok and not found.files:
        why = (res.stderr.strip().splitlines() or [f"exit status {res.exit_status}"])[-1]
        found.error = one_line(f"{python}: {why}", 300)
    return found


async def grep_logs(
    fleet: Fleet, hosts: Sequence[str], pattern: str, **options: Any
) -> list[HostGrep]:
    """Every host's search at once (bounded in flight), in `hosts` order."""
    slots = asyncio.Semaphore(GREP_PARALLEL)

    async def one(host: str) -> HostGrep:
        async with slots:
            return await grep_host(fleet, host, pattern, **options)

    return list(await asyncio.gather(*(one(h) for h in hosts)))


GREP_PARALLEL = 64
