"""The log screen's run-archive part: a job opened here is archived while it is shown (log,
metric series, status, GPU use from the cockpit's own telemetry), and a job the head no longer
knows is shown from the archive — before the head's old session file when the archive holds
the whole run. A mixin, so the log screen keeps only a few hook lines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from textual import work

from tui.archive.follow import FROM_ARCHIVE, follow_and_archive
from tui.archive.store import ArchiveStore
from tui.cluster.dashboard import DashboardError
from tui.cluster.job_logs import LOST, job_info
from tui.config.yamlfile import ConfigError
from tui.sanitize import markup
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.models import HostSample
    from tui.cluster.ray_cluster import RayCluster

SLICE = 256 << 10


class ArchivedLog:
    """Mixed into JobLogsScreen (cluster, sid, pane, metrics, status, _title, app, notify)."""

    cluster: RayCluster
    sid: str
    status: str | None

    def _samples(self) -> Mapping[str, HostSample | None]:
        monitor = getattr(self.app, "monitor", None)  # type: ignore[attr-defined]
        hosts = getattr(monitor, "hosts", None) or {}
        return {name: ht.latest for name, ht in hosts.items()}

    @work(exclusive=True, group="job-archive", exit_on_error=False)
    async def archive_job(self) -> None:
        """Follow the job to its end into the run archive (the cockpit's telemetry gives its
        GPU use); a head that does not answer leaves the archive as it is."""
        try:
            with contextlib.suppress(DashboardError, TransportError):
                await follow_and_archive(self.cluster, self.sid, samples=self._samples)
        except (OSError, ConfigError) as exc:  # a full disk, a bad VERL_TUI_ARCHIVE_MAX
            self.notify(  # type: ignore[attr-defined]
                markup(f"not archived: {exc}"), severity="warning", timeout=8
            )

    async def show_archived(self, *, only_final: bool) -> bool:
        """Show the archived run when there is one (with only_final: a whole run, and only
        when the head does not know the job). True when it was shown."""
        store = ArchiveStore(self.cluster.inv.cluster, max_bytes=0)
        meta = store.meta(self.sid)
        if meta is None or (only_final and not meta.get("final")):
            return False
        if only_final:
            try:
                await job_info(await self.cluster.dashboard(), self.sid)
                return False  # the head has it: its log is the live one
            except (DashboardError, TransportError) as exc:
                why = str(exc)
                # Another answer than "no such job" or "no head": the head may have it.
                if isinstance(exc, DashboardError) and not (
                    "HTTP 404" in why or "unreachable" in why
                ):
                    return False
        text = await asyncio.to_thread(store.read_log, self.sid)
        for warning in store.take_warnings():
            self.notify(markup(warning), severity="warning", timeout=6)  # type: ignore[attr-defined]
        if text is None:
            return False
        pane, metrics = self.pane, self.metrics  # type: ignore[attr-defined]
        pane.clear()
        metrics.clear()
        for start in range(0, len(text), SLICE):
            part = text[start : start + SLICE]
            pane.append(part)
            metrics.feed_text(part)
            await asyncio.sleep(0)
        status = meta.get("status") if meta.get("final") else LOST
        self.status = status if isinstance(status, str) else LOST
        pane.finish(self.status)
        metrics.feed_text("\n")
        metrics.finish(self.status)
        self._title(FROM_ARCHIVE)  # type: ignore[attr-defined]
        return True
