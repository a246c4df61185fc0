"""The run archive on disk: per job, its driver log (gzip members appended while it is
followed), its parsed metric series, and a meta record (status, timings, overrides, hosts, GPU
use), under the XDG state dir, so a run outlives Ray restarts and the head's rebuild.

Layout: ``<state>/archive/<cluster>/<sid>/{meta.json, log.gz, metrics.json.gz}``.

- ``log.gz`` is a series of gzip members, one per flush. meta's ``log.members`` lists
  ``[byte offset, first line, first char]`` of each member, so a reader can start at a line
  without inflating what comes before it; ``log.gz_bytes`` is what meta vouches for: bytes past
  it (a write cut off by a crash) are dropped by the next writer and never read.
- the archived log is always a prefix of the job's log: a follower skips what is stored already
  (several followers of one job, in one process or several, take turns under a file lock).
- everything else is written atomically (tui/state.py: temp file, fsync, rename, folder fsync).
  Every file is read by the state reader (a regular file, never a FIFO; capped; gzip inflated
  within a cap). A damaged file becomes a one-line warning naming it in
  ``ArchiveStore.warnings``, never an exception.
- cleanup deletes only job-id folders inside this cluster's own folder (never a symlink, never
  anything the archive did not name).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import math
import os
import re
import shutil
import stat
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tui.cluster.dashboard import check_job_id, is_job_id
from tui.config.yamlfile import ConfigError
from tui.state import (
    StateError,
    atomic_write_bytes,
    atomic_write_json,
    decode_state_text,
    gunzip_bounded,
    open_append,
    open_lock_file,
    open_regular,
    parse_state_json,
    read_state_bytes,
    state_path,
    writing,
)

VERSION = 1
MAX_ENV = "VERL_TUI_ARCHIVE_MAX"  # the bound, e.g. 2G, 500M, 2GiB, 1000000 (bytes)
DEFAULT_MAX = 2 << 30
MAX_META_BYTES = 4 << 20
MAX_SERIES_BYTES = 256 << 20  # the inflated metric series: ~10 M points
MAX_LOG_BYTES = 1 << 30  # the inflated log read back at once (a longer one ends with a warning)
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

Series = dict[str, list[tuple[int, float]]]


def parse_size(text: str, where: str = MAX_ENV) -> int:
    """``2G`` / ``500MiB`` / ``123456`` → bytes (binary units); ConfigError naming `where`."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ConfigError(f"{where}: {text!r} is not a size (e.g. 2G, 500M, 1048576)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def max_bytes_setting() -> int:
    """The archive's bound: $VERL_TUI_ARCHIVE_MAX, else 2 GiB."""
    value = os.environ.get(MAX_ENV)
    return DEFAULT_MAX if value is None or not value.strip() else parse_size(value)


def archive_root() -> Path:
    return state_path("archive")


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


class ArchiveStore:
    """One cluster's archived runs."""

    def __init__(self, cluster: str, root: Path | None = None, max_bytes: int | None = None):
        self.cluster = cluster
        self.root = root or archive_root()
        self.dir = state_path("archive", cluster, root=self.root)
        self.max_bytes = max_bytes_setting() if max_bytes is None else max_bytes
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def take_warnings(self) -> list[str]:
        out, self.warnings = self.warnings, []
        return out

    # --- paths and locks -------------------------------------------------------------------

    def job_dir(self, sid: str) -> Path:
        return state_path("archive", self.cluster, check_job_id(sid), root=self.root)

    @contextlib.contextmanager
    def job_lock(self, sid: str, *, wait: bool = True) -> Iterator[bool]:
        """Held while a job's files change: followers in other processes take turns."""
        fd = open_lock_file(self.job_dir(sid) / ".lock")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # drops the flock

    # --- reading ---------------------------------------------------------------------------

    def meta(self, sid: str) -> dict[str, Any] | None:
        """A job's meta record, or None (a damaged one also warns, once)."""
        if not is_job_id(sid):
            return None
        path = self.job_dir(sid) / "meta.json"
        try:
            raw = read_state_bytes(path, max_bytes=MAX_META_BYTES)
            if raw is None:
                return None
            data = parse_state_json(decode_state_text(raw, path), path)
        except StateError as exc:
            self.warn(f"archive: unreadable: {exc}; ignored")
            return None
        if not isinstance(data, dict) or data.get("submission_id") != sid:
            self.warn(f"archive: {path}: not this job's record; ignored")
            return None
        log = data.get("log")
        if not isinstance(log, dict):
            data["log"] = log = {}
        for key in ("chars", "lines", "gz_bytes"):
            if not isinstance(log.get(key), int) or log[key] < 0:
                log[key] = 0
        if not isinstance(log.get("members"), list):
            log["members"] = []
        return data

    def has(self, sid: str) -> bool:
        return self.meta(sid) is not None

    def all(self) -> list[dict[str, Any]]:
        """Every readable record, newest first."""
        out = []
        for name in self._job_names():
            m = self.meta(name)
            if m is not None:
                out.append(m)
        return sorted(out, key=lambda m: _num(m.get("updated_at")), reverse=True)

    def read_log(self, sid: str, start_line: int = 0) -> str | None:
        """The archived log from line `start_line` (0: all of it); None when none is archived.
        A damaged member ends the text there, with a warning."""
        m = self.meta(sid)
        if m is None:
            return None
        log = m["log"]
        offset, first = 0, 0
        for member in log["members"]:
            if (
                isinstance(member, list)
                and len(member) == 3
                and all(isinstance(x, int) for x in member)
                and member[1] <= start_line
            ):
                offset, first = member[0], member[1]
        path = self.job_dir(sid) / "log.gz"
        try:
            fd = open_regular(path)
        except StateError as exc:
            self.warn(f"archive: unreadable: {exc}; ignored")
            return ""
        if fd is None:
            return "" if not log["gz_bytes"] else self._damaged(path, "missing")
        try:
            with os.fdopen(fd, "rb") as f:
                f.seek(offset)
                raw = f.read(max(log["gz_bytes"] - offset, 0))
        except OSError as exc:
            return self._damaged(path, type(exc).__name__)
        text = _inflate(raw, lambda why: self._damaged(path, why), MAX_LOG_BYTES)
        if start_line > first:
            text = "".join(text.splitlines(keepends=True)[start_line - first :])
        return text

    def _damaged(self, path: Path, why: str) -> str:
        self.warn(f"archive: {path}: damaged ({why}); showing what could be read")
        return ""

    def series(self, sid: str) -> tuple[Series, int | None] | None:
        """The archived metric series ({key: [(step, value)]}, total steps), or None."""
        if not is_job_id(sid):
            return None
        path = self.job_dir(sid) / "metrics.json.gz"
        try:
            packed = read_state_bytes(path, max_bytes=MAX_SERIES_BYTES)
            if packed is None:
                return None
            text = decode_state_text(gunzip_bounded(packed, MAX_SERIES_BYTES, path), path)
            data = parse_state_json(text, path)
        except StateError as exc:
            self.warn(f"archive: unreadable: {exc}; ignored")
            return None
        raw = data.get("series") if isinstance(data, dict) else None
        if not isinstance(raw, dict):
            self.warn(f"archive: {path}: no series; ignored")
            return None
        out: Series = {}
        for key, points in raw.items():
            if isinstance(key, str) and isinstance(points, list):
                out[key] = [
                    (int(p[0]), float(p[1]) if p[1] is not None else math.nan)
                    for p in points
                    if isinstance(p, list)
                    and len(p) == 2
                    and isinstance(p[0], int)
                    and (p[1] is None or isinstance(p[1], (int, float)))
                ]
        total = data.get("total_steps")
        return out, total if isinstance(total, int) else None

    # --- writing ---------------------------------------------------------------------------

    def write_meta(self, sid: str, meta: dict[str, Any]) -> None:
        meta["version"] = VERSION
        meta["updated_at"] = time.time()
        atomic_write_json(self.job_dir(sid) / "meta.json", meta)

    def write_series(self, sid: str, series: Series, total_steps: int | None) -> None:
        doc = {
            "series": {k: [[s, _finite(v)] for s, v in pts] for k, pts in series.items()},
            "total_steps": total_steps,
        }
        raw = gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
        atomic_write_bytes(self.job_dir(sid) / "metrics.json.gz", raw)

    def append_log(self, sid: str, meta: dict[str, Any], text: str) -> None:
        """Append `text` as one gzip member; update meta's log fields (caller holds the lock
        and writes meta after)."""
        log = meta["log"]
        path = self.job_dir(sid) / "log.gz"
        member = gzip.compress(text.encode("utf-8"), 1)  # fast: a big log arrives at ~100 MB/s
        fd = open_append(path)  # a FIFO or a folder there: StateError, never a wait
        with writing(path.parent), os.fdopen(fd, "ab") as f:
            # Bytes past what meta vouches for are a write cut off before its meta: drop them.
            if f.tell() != log["gz_bytes"]:
                f.truncate(log["gz_bytes"])
            f.write(member)
            f.flush()
            os.fsync(f.fileno())
        # Only a member that starts a line is a place to start reading line N from.
        if log.get("nl", True):
            log["members"].append([log["gz_bytes"], log["lines"], log["chars"]])
        log["nl"] = text.endswith("\n")
        log["gz_bytes"] += len(member)
        log["chars"] += len(text)
        log["lines"] += text.count("\n")

    def job_bytes(self, sid: str) -> int:
        return _tree_bytes(self.job_dir(sid))

    def total_bytes(self) -> int:
        return sum(self.job_bytes(name) for name in self._job_names())

    def _job_names(self) -> list[str]:
        """The job folders of this cluster's archive: real folders (not symlinks) named by a
        job id. Anything else there is not ours: never read, never deleted."""
        names = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.dir):
                if is_job_id(entry.name) and entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
        return names

    def forget(self, sid: str) -> None:
        if is_job_id(sid):
            _remove_job_dir(self.job_dir(sid))

    def cleanup(self, keep: frozenset[str] = frozenset()) -> list[str]:
        """Remove the oldest runs until the archive fits its bound; runs in `keep` and runs a
        follower is writing now stay. Only job folders (`_job_names`) are counted or removed.
        Returns the removed ids."""
        sizes: list[tuple[float, str, int]] = []
        total = 0
        for name in self._job_names():
            d = self.job_dir(name)
            n = _tree_bytes(d)
            total += n
            try:
                when = (d / "meta.json").stat().st_mtime
            except OSError:
                when = 0.0  # no record: a leftover, the first to go
            sizes.append((when, name, n))
        removed = []
        for _when, name, n in sorted(sizes):
            if total <= self.max_bytes:
                break
            if name in keep:
                continue
            try:
                with self.job_lock(name, wait=False) as got:
                    if not got:
                        continue  # being written by a follower (maybe another process)
                    _remove_job_dir(self.job_dir(name))
            except StateError as exc:
                self.warn(f"archive: {exc}; not removed")
                continue
            total -= n
            removed.append(name)
        return removed


def _remove_job_dir(d: Path) -> None:
    """Remove one job's folder: a real folder named by a job id (a symlink is never followed:
    rmtree refuses one)."""
    if not is_job_id(d.name):
        return
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(d).st_mode):
            shutil.rmtree(d, ignore_errors=True)


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def _tree_bytes(d: Path) -> int:
    """Bytes of the regular files under `d`, symlinks not followed."""
    total = 0
    for top, _dirs, files in os.walk(d, followlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def _inflate(raw: bytes, damaged: Any, max_out: int) -> str:
    """Concatenated gzip members → text, at most `max_out` bytes; a bad or cut member, or the
    cap, ends it (damaged(why) called)."""
    out: list[bytes] = []
    total = 0
    while raw:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(raw, max_out + 1 - total)
        except zlib.error:
            damaged("bad gzip data")
            break
        out.append(chunk)
        total += len(chunk)
        if total > max_out:
            out[-1] = chunk[: len(chunk) - (total - max_out)]
            damaged(f"inflates to more than {max_out >> 20} MiB")
            break
        if d.unconsumed_tail or not d.eof:
            damaged("cut short")
            break
        raw = d.unused_data
    return b"".join(out).decode("utf-8", "replace")
