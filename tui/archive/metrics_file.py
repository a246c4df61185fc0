"""A job's metrics from verl's own `file` logger, read on the node that writes it, over SSH, by
byte offset; kept in the run archive beside the log (``metrics_file.json.gz``) so the series
outlives the job, the head and Ray. Console parsing (tui/metrics/parse.py) stays the fallback.

Where the file is (tui/metrics/filelog.py): FileLogger's own "Creating file logger at PATH" line
in the driver log (grep on the head; Ray's ``ip=`` prefix names the node), else the absolute path
that the job's command line and runtime_env name (VERL_FILE_LOGGER_PATH / _ROOT, trainer.
project_name / experiment_name). The node is the inventory host with that node IP, else the
driver's, else the head.

Reading: one short command per call reads the bytes written since the last call, at most
CHUNK_BYTES, ending at a line end (a line still being written waits); a file shorter than the
offset was written again from the start (verl opens it with "wb" on a resumed run) and is read
from 0. Only a regular file is read (a FIFO there would hold the command). The shell text is
constant; path, numbers and grep words are argv words.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.archive.store import ArchiveStore
from tui.cluster import driver_log
from tui.metrics import MetricsTracker
from tui.metrics.filelog import LOGGER_MARK, FileLines, configured_path, find_logger_line
from tui.state import StateError, atomic_write_bytes, gunzip_bounded, read_state_bytes

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.types import Transport

CHUNK_BYTES = 16 << 20  # read per call at most (a long file comes in over several calls)
READ_TIMEOUT_S = 30.0
HOST_WAIT_S = 20.0
MAX_ARCHIVED = 256 << 20  # the inflated archived series
ARCHIVE_NAME = "metrics_file.json.gz"
FILE_PREFIX = "file:"

# $1 file, $2 offset, $3 chunk cap; the rest: grep -F words (none: every byte). Prints
# "OFFSET END SIZE", then bytes [OFFSET, END) (grep'd when words are given). END is a line end
# unless one line fills a whole chunk.
_READ = r"""
f=$1; off=$2; cap=$3; shift 3
[ -f "$f" ] || exit 4
size=$(stat -L -c %s -- "$f") || exit 4
[ "$size" -ge "$off" ] || off=0
end=$size
[ $((end - off)) -le "$cap" ] || end=$((off + cap))
if [ "$end" -gt "$off" ]; then
  last=$(tail -c +"$end" -- "$f" | head -c 1 | od -An -tx1 | tr -d ' \n')
  if [ "$last" != "0a" ]; then
    part=$(tail -c +$((off + 1)) -- "$f" | head -c $((end - off)) | tail -n 1 | wc -c)
    [ "$part" -ge $((end - off)) ] || end=$((end - part))
  fi
fi
printf '%s %s %s\n' "$off" "$end" "$size"
[ "$end" -gt "$off" ] || exit 0
if [ $# -gt 0 ]; then
  tail -c +$((off + 1)) -- "$f" | head -c $((end - off)) | grep -a -F "$@"
else
  tail -c +$((off + 1)) -- "$f" | head -c $((end - off))
fi
exit 0
"""


_GREP_LOGGER = 'grep -a -F -e "$1" -- "$2" | tail -n 4 | cut -c 1-8192'


class FileCursor:
    """Where the last read stopped in one file on one host."""

    def __init__(
        self, transport: Transport, path: str, offset: int = 0, marks: tuple[str, ...] = ()
    ):
        self.transport, self.path, self.offset, self.marks = transport, path, offset, marks
        self.size = 0

    async def read(self) -> tuple[str, bool, bool] | None:
        """(the text of the whole lines since the last read, whether the file's end was
        reached, whether the file was written again from its start); None when it is not a
        regular file there (gone, replaced by a FIFO, unreadable). TransportError / CommandTimeout
        when the host cannot be asked."""
        words = [w for m in self.marks for w in ("-e", m)]
        res = await self.transport.run(
            ["sh", "-c", _READ, "sh", self.path, str(self.offset), str(CHUNK_BYTES), *words],
            timeout=READ_TIMEOUT_S,
            what=f"read {self.path}",
        )
        if not res.ok:
            return None
        first, _, body = res.stdout.partition("\n")
        fields = first.split()
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            return None
        off, end, size = (int(f) for f in fields)
        restarted = off < self.offset
        self.offset, self.size = end, size
        return body, end >= size, restarted

    async def read_all(self) -> tuple[str, bool]:
        """Everything up to the file's end now (several reads for a long file): (text,
        whether it was written again from the start meanwhile)."""
        parts: list[str] = []
        again = False
        while True:
            got = await self.read()
            if got is None:
                break
            text, caught_up, restarted = got
            if restarted:
                parts, again = [], True
            parts.append(text)
            if caught_up:
                break
        return "".join(parts), again


@dataclass
class MetricsFile:
    """verl's metrics file of a job: the host that has it and its path there."""

    host: str
    path: str

    @property
    def source(self) -> str:
        return FILE_PREFIX + self.path


def _host_of(cluster: RayCluster, ip: str | None) -> str | None:
    if ip is None:
        return None
    return cluster.inv.host_of_ip(ip) or next(
        (h.name for h in cluster.inv.hosts if h.address == ip), None
    )


async def _logger_line_on_head(cluster: RayCluster, sid: str) -> tuple[str, str | None] | None:
    """FileLogger's last "Creating file logger at" line in the driver log: (path, node IP)."""
    head = await cluster.fleet.ready(cluster.inv.head.name, HOST_WAIT_S)
    log = await driver_log.locate(head, sid, tail_bytes=1)
    if log is None:
        return None
    res = await head.run(
        ["sh", "-c", _GREP_LOGGER, "sh", LOGGER_MARK, log.path],
        timeout=READ_TIMEOUT_S,
        what=f"find {sid}'s metrics file",
    )
    found = find_logger_line(res.stdout) if res.ok else None
    return (found.path, found.node_ip) if found else None


async def locate_metrics_file(
    cluster: RayCluster, sid: str, info: dict[str, Any] | None = None
) -> MetricsFile | None:
    """The job's file-logger file and its host, or None when it logs none or it is not
    found there (the caller falls back to console lines). `info`: the Jobs API's answer
    (entrypoint, runtime_env, driver node). TransportError when the head cannot be asked."""
    info = info or {}
    driver = info.get("driver_info")
    driver_ip = driver.get("node_ip_address") if isinstance(driver, dict) else None
    driver_host = _host_of(cluster, driver_ip if isinstance(driver_ip, str) else None)
    candidates: list[tuple[str, str]] = []
    line = await _logger_line_on_head(cluster, sid)
    if line is not None:
        host = _host_of(cluster, line[1]) or driver_host or cluster.inv.head.name
        candidates.append((host, line[0]))
    entry = info.get("entrypoint")
    env = info.get("runtime_env")
    raw_vars = env.get("env_vars") if isinstance(env, dict) else None
    env_vars: dict[str, Any] = raw_vars if isinstance(raw_vars, dict) else {}
    if isinstance(entry, str):
        path = configured_path(entry, {k: v for k, v in env_vars.items() if isinstance(v, str)})
        if path is not None:
            candidates.append((driver_host or cluster.inv.head.name, path))
    for host, path in candidates:
        transport = await cluster.fleet.ready(host, HOST_WAIT_S)
        res = await transport.run(["test", "-f", path], timeout=READ_TIMEOUT_S)
        if res.ok:
            return MetricsFile(host, path)
    return None


# --- the archive ---------------------------------------------------------------------------


@dataclass
class ArchivedFile:
    """The series read from a job's metrics file, as archived: where from and how far."""

    source: str
    host: str
    offset: int
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def save(
    store: ArchiveStore, sid: str, mf: MetricsFile, offset: int, tracker: MetricsTracker
) -> None:
    """The tracker's series (read from `mf` up to byte `offset`) into the job's archive.
    OSError (StateError) when it cannot be written."""
    doc = {
        "source": mf.source,
        "host": mf.host,
        "offset": offset,
        "series": {
            k: [[s, v if math.isfinite(v) else None] for s, v in tracker.series(k)]
            for k in tracker.keys()  # noqa: SIM118 (a method, not a dict)
        },
    }
    raw = gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
    atomic_write_bytes(store.job_dir(sid) / ARCHIVE_NAME, raw)


def load(store: ArchiveStore, sid: str) -> ArchivedFile | None:
    """The archived file series of a job, or None (a damaged one warns in the store)."""
    path = store.job_dir(sid) / ARCHIVE_NAME
    try:
        packed = read_state_bytes(path, max_bytes=MAX_ARCHIVED)
        if packed is None:
            return None
        doc = json.loads(gunzip_bounded(packed, MAX_ARCHIVED, path))
    except (StateError, ValueError, RecursionError) as exc:
        store.warn(f"archive: {path}: unreadable ({exc}); ignored")
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), str):
        store.warn(f"archive: {path}: not a metrics record; ignored")
        return None
    out = ArchivedFile(doc["source"], str(doc.get("host") or ""), int(doc.get("offset") or 0))
    series = doc.get("series")
    for key, points in series.items() if isinstance(series, dict) else ():
        if isinstance(key, str) and isinstance(points, list):
            out.series[key] = [
                (p[0], math.nan if p[1] is None else float(p[1]))
                for p in points
                if isinstance(p, list)
                and len(p) == 2
                and isinstance(p[0], int)
                and not isinstance(p[0], bool)
                and (p[1] is None or isinstance(p[1], (int, float)))
            ]
    return out


def tracker_from(archived: ArchivedFile) -> MetricsTracker:
    """A tracker holding an archived file's series (its rows rebuilt by step)."""
    rows: dict[int, dict[str, float]] = {}
    for key, points in archived.series.items():
        for step, value in points:
            rows.setdefault(step, {})[key] = value
    tracker = MetricsTracker()
    tracker.use_source(archived.source)
    tracker.add_rows(sorted(rows.items()))
    return tracker


# --- following one job ---------------------------------------------------------------------


class FileFollower:
    """A job's metrics file read pass after pass into a tracker, archived as it goes."""

    def __init__(
        self, transport: Transport, mf: MetricsFile, tracker: MetricsTracker, offset: int = 0
    ) -> None:
        self.mf, self.tracker = mf, tracker
        self.cursor = FileCursor(transport, mf.path, offset)
        self.lines = FileLines()
        tracker.use_source(mf.source)

    async def poll(self) -> bool | None:
        """Read what was written since the last poll: True when rows arrived, False when none,
        None when the file cannot be read there any more."""
        changed = False
        while True:
            got = await self.cursor.read()
            if got is None:
                return None
            text, caught_up, restarted = got
            if restarted:  # verl opened it again ("wb"): its steps come again, same keys
                self.lines = FileLines()
            changed |= self.tracker.add_rows(self.lines.feed(text))
            if caught_up:
                return changed

    def save(self, store: ArchiveStore, sid: str) -> None:
        save(store, sid, self.mf, self.cursor.offset, self.tracker)


LOCATE_EVERY_S = 5.0  # while a running job's file is not found yet (its trainer starts late)
SAVE_EVERY_S = 10.0


async def follow_job_file(
    cluster: RayCluster,
    sid: str,
    tracker: MetricsTracker,
    *,
    on_rows: Callable[[], None] = lambda: None,
    store: ArchiveStore | None = None,
    poll_s: float = 2.0,
) -> MetricsFile | None:
    """Follow the job's metrics file into `tracker` (its source becomes "file:PATH") while the
    job runs, archiving the series; `on_rows` after rows arrived. Returns the file read (None:
    the job logs no file that could be found; the console lines stay the tracker's source).
    DashboardError / TransportError when the head cannot be asked."""
    from tui.cluster.dashboard import TERMINAL
    from tui.cluster.job_logs import job_info

    store = store or ArchiveStore(cluster.inv.cluster)
    client = await cluster.dashboard()
    loop = asyncio.get_running_loop()
    mf: MetricsFile | None = None
    follower: FileFollower | None = None
    saved_at = loop.time()
    while True:
        info = await job_info(client, sid)
        over = info.get("status") in TERMINAL
        if mf is None:
            mf = await locate_metrics_file(cluster, sid, info)
            if mf is None:
                if over:
                    return None
                await asyncio.sleep(LOCATE_EVERY_S)
                continue
        if follower is None or tracker.source != mf.source:  # first, or the tracker was cleared
            transport = await cluster.fleet.ready(mf.host, HOST_WAIT_S)
            follower = FileFollower(transport, mf, tracker)
        got = await follower.poll()
        if got:
            on_rows()
        if over or got is None or loop.time() - saved_at >= SAVE_EVERY_S:
            with contextlib.suppress(OSError):
                follower.save(store, sid)
            saved_at = loop.time()
        if over or got is None:
            return mf
        await asyncio.sleep(poll_s)
