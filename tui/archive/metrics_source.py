"""A job's training metrics, from the best place that has them: verl's `file` logger on the node
that writes it (tui/archive/metrics_file.py), else verl's console lines in the driver log (read
and archived by tui/archive/follow.py), else the run archive (a job the head no longer knows).
The one home of "read a job's metrics" for `verl-tui metrics`, compare and the health duty's
first read."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from tui.archive import metrics_file
from tui.archive.follow import archived_log_chunks
from tui.archive.store import ArchiveStore
from tui.cluster.dashboard import DashboardError
from tui.cluster.job_logs import job_info
from tui.metrics import MetricsTracker
from tui.metrics.series import CONSOLE
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster


async def job_metrics(
    cluster: RayCluster, sid: str, *, store: ArchiveStore | None = None
) -> MetricsTracker:
    """The job's metric series now (tracker.source says where they came from: "file:PATH" or
    "console"). DashboardError (HTTP 404) when neither the head nor the archive has the job."""
    store = store or ArchiveStore(cluster.inv.cluster)
    info: dict[str, Any] | None = None
    with contextlib.suppress(DashboardError, TransportError):
        info = await job_info(await cluster.dashboard(), sid)
    if info is not None:
        tracker = await _from_file(cluster, sid, info, store)
        if tracker is not None:
            return tracker
    # The file is not there (the head forgot the job, or the file was removed): what was read
    # of it before is archived, exact, and better than console lines.
    archived = metrics_file.load(store, sid)
    if archived is not None:
        return metrics_file.tracker_from(archived)
    tracker = MetricsTracker()
    async for chunk in archived_log_chunks(cluster, sid, follow=False, store=store):
        tracker.feed_text(chunk)
    tracker.flush()
    if tracker.source != CONSOLE:  # never: console text only feeds console rows
        tracker.use_source(CONSOLE)
    return tracker


async def _from_file(
    cluster: RayCluster, sid: str, info: dict[str, Any], store: ArchiveStore
) -> MetricsTracker | None:
    try:
        mf = await metrics_file.locate_metrics_file(cluster, sid, info)
        if mf is None:
            return None
        transport = await cluster.fleet.ready(mf.host, metrics_file.HOST_WAIT_S)
    except TransportError:
        return None
    archived = metrics_file.load(store, sid)
    if archived is not None and archived.source == mf.source:
        tracker = metrics_file.tracker_from(archived)
        follower = metrics_file.FileFollower(transport, mf, tracker, archived.offset)
    else:
        follower = metrics_file.FileFollower(transport, mf, MetricsTracker())
    try:
        if await follower.poll() is None:
            return None
    except TransportError:
        return None
    with contextlib.suppress(OSError):
        follower.save(store, sid)
    return follower.tracker
