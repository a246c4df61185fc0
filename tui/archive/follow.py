"""A job's log, read in this order: the head's Jobs API (archived while it streams), then the run
archive, then the head's old Ray session directory over SSH (archived too). The one home of
"read a job's log" for `logs`, the log pane, the metrics screen and the supervisor.

While a followed job runs, its GPU use is sampled: the telemetry of the GPUs its workers hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tui.archive.gpu_use import SampleSource, job_worker_pids
from tui.archive.store import ArchiveStore
from tui.archive.writer import ArchiveWriter, info_fields
from tui.cluster.dashboard import TERMINAL, DashboardClient, DashboardError
from tui.cluster.job_logs import (
    LOST,
    JobLogEnd,
    any_job_log_chunks,
    job_info,
    old_session_log,
    restarted_status,
)
from tui.jobs.history import JobHistory
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster

log = logging.getLogger(__name__)

GPU_SAMPLE_S = 2.0  # read the newest telemetry this often (each host sample counts once)
PIDS_EVERY = 3  # ... and ask Ray for the job's worker pids every this many reads (new workers)
FROM_ARCHIVE = "from the run archive"


async def archived_log_chunks(
    cluster: RayCluster,
    sid: str,
    *,
    follow: bool = True,
    ends: list[JobLogEnd] | None = None,
    store: ArchiveStore | None = None,
    samples: SampleSource | None = None,
) -> AsyncIterator[str]:
    """Yield the job's log text in chunks (the first is everything so far), archiving it.

    The Jobs API first; for a job the head does not know (Ray restarted) or an unreachable
    head: the archive (when it holds the whole run, or more than the head's old session), else
    the old session's driver log over SSH. DashboardError (HTTP 404) when none has it.
    `samples`: the newest telemetry per host (the cockpit's); None starts the GPU agents for
    the time a running job is followed."""
    store = store or ArchiveStore(cluster.inv.cluster)
    history = JobHistory(cluster.inv.cluster)
    try:
        client = await cluster.dashboard()
        info = await job_info(client, sid)
    except (DashboardError, TransportError) as exc:
        missing = exc
    else:
        async for chunk in _from_head(client, cluster, sid, info, follow, ends, store, samples):
            yield chunk
        return
    async for chunk in _fallback(cluster, sid, ends, store, history, missing):
        yield chunk


async def _from_head(
    client: DashboardClient,
    cluster: RayCluster,
    sid: str,
    info: dict[str, Any],
    follow: bool,
    ends: list[JobLogEnd] | None,
    store: ArchiveStore,
    samples: SampleSource | None,
) -> AsyncIterator[str]:
    fields = info_fields(info)
    old = store.meta(sid)
    started = old.get("start_time") if old else None
    if isinstance(started, (int, float)) and abs(started - fields.get("start_time", started)) > 1:
        # The id was used again (after a Ray restart): another run, not more of the same log.
        store.warn(f"archive: {sid}: an earlier run with this id was replaced")
        store.forget(sid)
    writer = ArchiveWriter(store, sid, JobHistory(cluster.inv.cluster).get(sid))
    writer.update(**fields)
    driver = _driver_host(cluster, info)
    if driver:
        writer.note_hosts([driver])
    running = follow and info.get("status") not in TERMINAL
    sampler = (
        asyncio.create_task(_sample_gpus(client, cluster, info, writer, samples))
        if running
        else None
    )
    mine: list[JobLogEnd] = []
    try:
        # The whole log in file order (the head's file over SSH, else the Jobs API).
        async for chunk in any_job_log_chunks(cluster, sid, follow=follow, ends=mine):
            writer.feed(chunk)
            yield chunk
    finally:
        if sampler is not None:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sampler
        end = mine[-1] if mine else JobLogEnd(None)
        if end.status is None:
            writer.flush(final=True)  # cut short: what arrived stays archived
        else:
            writer.finish(end.status, end.message, done=end.status in TERMINAL)
    if mine:
        with contextlib.suppress(DashboardError, TransportError):
            final = await job_info(client, sid)
            writer.update(**info_fields(final))  # its end time
            driver = _driver_host(cluster, final)
            if driver:
                writer.note_hosts([driver])
            writer.flush()
        if ends is not None:
            ends.append(mine[-1])


async def _fallback(
    cluster: RayCluster,
    sid: str,
    ends: list[JobLogEnd] | None,
    store: ArchiveStore,
    history: JobHistory,
    missing: Exception,
) -> AsyncIterator[str]:
    meta = store.meta(sid)
    archived = store.read_log(sid) if meta is not None else None
    if meta is not None and archived is not None and meta.get("final"):
        yield from_archive(archived, meta, ends)
        return
    old: str | None = None
    with contextlib.suppress(TransportError, OSError, DashboardError):
        transport = await cluster.fleet.ready(cluster.inv.head.name, 20)
        old = await old_session_log(transport, sid)
    if old is not None and (archived is None or len(old) > len(archived)):
        writer = ArchiveWriter(store, sid, history.get(sid))
        writer.feed(old)
        rec = history.get(sid)
        # A job that had finished keeps its outcome; one that had not is LOST.
        status, message = restarted_status(rec.status if rec is not None else None)
        writer.finish(status, message, done=status != LOST)
        if rec is not None and rec.status:
            writer.update(last_known_status=rec.status)
            writer.flush()
        yield old
        if ends is not None:
            ends.append(JobLogEnd(status, message))
        return
    if meta is not None and archived is not None:
        yield from_archive(archived, meta, ends)
        return
    raise missing


def from_archive(text: str, meta: dict[str, Any], ends: list[JobLogEnd] | None) -> str:
    status = meta.get("status") if meta.get("final") else LOST
    if ends is not None:
        ends.append(JobLogEnd(status if isinstance(status, str) else LOST, FROM_ARCHIVE))
    return text


def _driver_host(cluster: RayCluster, info: dict[str, Any]) -> str | None:
    d = info.get("driver_info")
    ip = d.get("node_ip_address") if isinstance(d, dict) else None
    if not isinstance(ip, str):
        return None
    return cluster.inv.host_of_ip(ip) or ip


async def _sample_gpus(
    client: DashboardClient,
    cluster: RayCluster,
    info: dict[str, Any],
    writer: ArchiveWriter,
    samples: SampleSource | None,
) -> None:
    """Until cancelled: the job's worker pids (from Ray) × the GPUs' process lists (from the
    agents) → the writer's GPU use and the hosts the job ran on. Without `samples` (a CLI
    follower) agents run only on the hosts where the job has processes, not the whole fleet."""
    watch = None
    if samples is None:
        watch = _JobHostsMonitor(cluster)
        samples = watch.samples
    pids: dict[str, set[int]] = {}
    sid = str(info.get("submission_id") or "")
    try:
        n = 0
        while True:
            if n % PIDS_EVERY == 0 or not pids:
                try:
                    if not info.get("job_id") and sid:
                        info = await job_info(client, sid)  # Ray names the job once it starts
                    job_id, driver = _job_ids(info)
                    if job_id:
                        pids = await job_worker_pids(client, job_id, cluster.inv, driver)
                except DashboardError as exc:
                    log.debug("job pids: %s", exc)
                writer.note_hosts(pids)
                if watch is not None:
                    await watch.follow(pids)
            if writer.gpu_use.add_all(samples(), pids):
                writer.note_hosts(g.split(":")[0] for g in writer.gpu_use.gpus)
            n += 1
            await asyncio.sleep(GPU_SAMPLE_S)
    finally:
        if watch is not None:
            await watch.close()


class _JobHostsMonitor:
    """GPU agents on the hosts where a job has had processes (restarted when one is added)."""

    def __init__(self, cluster: RayCluster):
        self.cluster = cluster
        self.hosts: frozenset[str] = frozenset()
        self.monitor: Any = None

    async def follow(self, pids: dict[str, set[int]]) -> None:
        from tui.cluster.telemetry import TelemetryMonitor

        inv = self.cluster.inv
        # Grows only: a host whose workers ended keeps its agent (no restart churn per task).
        wanted = self.hosts | {h.name for h in inv.hosts if pids.get(h.name)}
        if wanted == self.hosts:
            return
        await self.close()
        hosts = tuple(h for h in inv.hosts if h.name in wanted)
        self.monitor = TelemetryMonitor(self.cluster.fleet, inv.model_copy(update={"hosts": hosts}))
        self.monitor.start()
        self.hosts = wanted

    def samples(self) -> dict[str, Any]:
        if self.monitor is None:
            return {}
        return {name: ht.latest for name, ht in self.monitor.hosts.items()}

    async def close(self) -> None:
        if self.monitor is not None:
            await self.monitor.close()
            self.monitor = None


def _job_ids(info: dict[str, Any]) -> tuple[str | None, tuple[str, int] | None]:
    """Ray's hex job id and the driver's (node IP, pid) from the Jobs API's answer."""
    job_id = info.get("job_id")
    d = info.get("driver_info")
    driver = None
    if isinstance(d, dict) and isinstance(d.get("node_ip_address"), str):
        pid = d.get("pid")
        if isinstance(pid, (int, str)) and str(pid).isdigit():
            driver = (d["node_ip_address"], int(pid))
    return (job_id if isinstance(job_id, str) and job_id else None), driver


async def follow_and_archive(
    cluster: RayCluster,
    sid: str,
    *,
    store: ArchiveStore | None = None,
    samples: SampleSource | None = None,
) -> JobLogEnd:
    """Follow a job to its end and archive it, printing nothing: for a supervisor. Returns how
    it ended (DashboardError / TransportError as archived_log_chunks raises them)."""
    ends: list[JobLogEnd] = []
    async for _chunk in archived_log_chunks(
        cluster, sid, follow=True, ends=ends, store=store, samples=samples
    ):
        pass
    return ends[-1] if ends else JobLogEnd(None)


async def refresh_archive(
    cluster: RayCluster, sids: list[str], store: ArchiveStore | None = None
) -> list[str]:
    """Bring the archive up to date for runs it lacks or that had not ended: their log read
    once from the head (or its old session), archived on the way. One line per run that could
    not be read and is not archived either."""
    store = store or ArchiveStore(cluster.inv.cluster)
    problems = []
    for sid in sids:
        meta = store.meta(sid)
        if meta is not None and meta.get("final"):
            continue
        try:
            async for _chunk in archived_log_chunks(cluster, sid, follow=False, store=store):
                pass
        except (DashboardError, TransportError) as exc:
            if meta is None:
                problems.append(f"{sid}: {exc}")
    return problems


class ArchiveFollowers:
    """Background followers that archive jobs to their end, at most one per job: what a
    supervisor keeps (`ensure` on every tick with the jobs the head runs)."""

    def __init__(self, store: ArchiveStore | None = None) -> None:
        self.store = store
        self.tasks: dict[str, asyncio.Task[JobLogEnd]] = {}

    def ensure(
        self, cluster: RayCluster, sids: list[str], samples: SampleSource | None = None
    ) -> list[str]:
        """Start following each job of `sids` not followed yet (jobs whose archive is already
        final are skipped); returns the ids started. Finished followers are dropped."""
        for sid, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[sid]
                if not task.cancelled() and task.exception() is not None:
                    log.debug("archiving %s: %s", sid, task.exception())
        store = self.store or ArchiveStore(cluster.inv.cluster)
        started = []
        for sid in sids:
            if sid in self.tasks:
                continue
            meta = store.meta(sid)
            if meta is not None and meta.get("final"):
                continue
            self.tasks[sid] = asyncio.create_task(
                follow_and_archive(cluster, sid, store=store, samples=samples),
                name=f"archive:{sid}",
            )
            started.append(sid)
        return started

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()
