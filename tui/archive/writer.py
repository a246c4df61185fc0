"""Archiving one job while its log is read: the text is buffered and appended as gzip members
(only what the archive lacks), the metric series rewritten now and then, meta kept current."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from tui.archive.gpu_use import JobGpuUse
from tui.archive.store import ArchiveStore
from tui.jobs.history import JobRecord
from tui.jobs.owner import owner_of_metadata
from tui.metrics import MetricsTracker
from tui.state import StateError

FLUSH_BYTES = 4 << 20  # a member per this much text at most: each costs an fsync (~10 ms)
FLUSH_S = 2.0  # and at least this often while text arrives
METRICS_S = 10.0  # the series file is rewritten whole: not on every flush
CLEANUP_BYTES = 16 << 20  # look at the bound again after this much new archive


def _ms(v: Any) -> float | None:
    return v / 1000.0 if isinstance(v, (int, float)) and not isinstance(v, bool) and v else None


def record_fields(rec: JobRecord | None) -> dict[str, Any]:
    if rec is None:
        return {}
    return {
        "entrypoint": rec.entrypoint,
        "submitted_at": rec.submitted_at,
        "kind": rec.kind,
        "profile": rec.profile,
        "overrides": list(rec.overrides),
        "config_hash": rec.config_hash,
        "hosts_file": rec.hosts_file,
    }


def info_fields(info: dict[str, Any]) -> dict[str, Any]:
    """What the Jobs API says about a job, as archive meta fields (checked: texts are texts)."""
    out: dict[str, Any] = {}
    for key in ("status", "message", "job_id", "entrypoint"):
        if isinstance(info.get(key), str):
            out[key] = info[key]
    for key in ("start_time", "end_time"):
        t = _ms(info.get(key))
        if t is not None:
            out[key] = t
    owner = owner_of_metadata(info.get("metadata"))  # who submitted it (tui/jobs/owner.py)
    if owner is not None:
        out["owner"] = owner
    return out


class ArchiveWriter:
    """Archives one job's log stream. Feed it the stream from its first character."""

    def __init__(
        self,
        store: ArchiveStore,
        sid: str,
        record: JobRecord | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.sid, self._clock = store, sid, clock
        self.tracker = MetricsTracker()
        self.pos = 0  # characters of the stream received
        self._buf: list[str] = []
        self._buf_start = 0
        self._buf_len = 0
        self._flushed_at = clock()
        self._metrics_at = 0.0
        self._metrics_version = -1
        self._pending: dict[str, Any] = record_fields(record)
        self._hosts: set[str] = set()
        self._grown = 0
        self.disabled = False  # the archive could not be written: the log is still read
        meta: dict[str, Any] = {"log": {"chars": 0}}
        try:
            with store.job_lock(sid):
                found = store.meta(sid)
                if found is None and os.path.lexists(store.job_dir(sid) / "meta.json"):
                    # Damaged (warned): a fresh record would restart the log over what is kept.
                    raise StateError(f"{store.job_dir(sid) / 'meta.json'}: unreadable, kept as is")
                meta = found or {
                    "submission_id": sid,
                    "cluster": store.cluster,
                    "first_seen": time.time(),
                    "log": {"chars": 0, "lines": 0, "gz_bytes": 0, "members": []},
                }
                meta.update({k: v for k, v in self._pending.items() if v is not None})
                store.write_meta(sid, meta)
        except OSError as exc:
            self._fail(exc)
        self._stored = meta["log"]["chars"]
        self.gpu_use = JobGpuUse.from_json(meta.get("gpu_use"))
        hosts = meta.get("hosts")
        self._hosts = {h for h in hosts if isinstance(h, str)} if isinstance(hosts, list) else set()
        self.final = bool(meta.get("final"))
        if not self.disabled:
            store.cleanup(frozenset({sid}))

    def _fail(self, exc: OSError) -> None:
        self.disabled = True
        self.store.warn(f"archive: {self.sid}: not archived ({exc.strerror or exc})")

    # --- feeding ---------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        if not text or self.disabled:
            return
        self.tracker.feed_text(text)
        start = self.pos
        self.pos += len(text)
        if self.pos <= self._stored:
            return  # archived before (an earlier follower, this one's last run)
        if not self._buf:
            self._buf_start = start
        self._buf.append(text)
        self._buf_len += len(text)
        if self._buf_len >= FLUSH_BYTES or self._clock() - self._flushed_at >= FLUSH_S:
            self.flush()

    def update(self, **fields: Any) -> None:
        """Meta fields to write with the next flush."""
        self._pending.update(fields)

    def note_hosts(self, hosts: Iterable[str]) -> None:
        new = set(hosts) - self._hosts
        if new:
            self._hosts |= new
            self._pending["hosts"] = sorted(self._hosts)

    # --- writing ---------------------------------------------------------------------------

    def flush(self, *, final: bool = False, done: bool = False) -> None:
        """Write what is buffered. final: the stream ended (its last line counts); done: the
        job's status will not change again. A write that fails (a full disk) stops archiving
        this stream with a warning in the store; the reader goes on."""
        if self.disabled:
            return
        try:
            self._flush(final, done)
        except OSError as exc:
            self._fail(exc)

    def _flush(self, final: bool, done: bool) -> None:
        store, sid = self.store, self.sid
        if final:
            self.tracker.flush()
        data = "".join(self._buf)
        self._buf, self._buf_len = [], 0
        self._flushed_at = self._clock()
        with store.job_lock(sid):
            meta = store.meta(sid)
            if meta is None:  # removed under us (cleanup, forget): start the record again
                meta = {
                    "submission_id": sid,
                    "cluster": store.cluster,
                    "first_seen": time.time(),
                    "log": {"chars": 0, "lines": 0, "gz_bytes": 0, "members": []},
                }
            log = meta["log"]
            stored = log["chars"]
            end = self._buf_start + len(data)
            new = data[stored - self._buf_start :] if self._buf_start <= stored < end else ""
            keep = ""
            if new and not final:
                # Members end at a line's end (so each starts one): the rest waits for its
                # newline, unless one line alone grows past a few flushes' worth.
                cut = new.rfind("\n") + 1
                if cut:
                    new, keep = new[:cut], new[cut:]
                elif len(new) < 4 * FLUSH_BYTES:
                    new, keep = "", new
            if new and not log.get("truncated"):
                before = store.job_bytes(sid)
                if before + len(new) // 4 > store.max_bytes:
                    log["truncated"] = True  # one run alone past the bound: keep its metrics
                else:
                    store.append_log(sid, meta, new)
                    self._grown += len(new)
            if log.get("truncated"):
                keep = ""
                self._stored = max(log["chars"], end)
            else:
                self._stored = log["chars"]
            if keep:
                self._buf, self._buf_len, self._buf_start = [keep], len(keep), end - len(keep)
            now = self._clock()
            tracker = self.tracker
            if tracker.version != self._metrics_version and (
                final or now - self._metrics_at >= METRICS_S
            ):
                series = {k: tracker.series(k) for k in tracker.keys()}  # noqa: SIM118 (a method, not a dict)
                if series or tracker.total_steps:
                    store.write_series(sid, series, tracker.total_steps)
                    meta["metrics"] = {
                        "keys": len(series),
                        "last_step": tracker.last_step,
                        "total_steps": tracker.total_steps,
                    }
                self._metrics_version, self._metrics_at = tracker.version, now
            gpu = self.gpu_use.to_json()
            if gpu is not None:
                meta["gpu_use"] = gpu
            meta.update(self._pending)
            self._pending = {}
            if done:
                meta["final"] = True
                self.final = True
            store.write_meta(sid, meta)
        if final or self._grown >= CLEANUP_BYTES:
            self._grown = 0
            store.cleanup(frozenset({sid}))

    def finish(self, status: str | None, message: str | None, *, done: bool = True) -> None:
        """The stream ended: the job's last status (done: it will not change again)."""
        if status is not None:
            self._pending["status"] = status
        if message is not None:
            self._pending["message"] = message
        self._pending["finished_at"] = time.time()
        self.flush(final=True, done=done)
