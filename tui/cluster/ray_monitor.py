"""Which hosts are Ray nodes right now: the head's view, polled through the kept tunnel.

One poll at a time (the next is scheduled only after the last finished), paused while a
bring-up or teardown runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from tui.cluster.ray_cluster import ClusterStatus, RayCluster
from tui.errors import VerlTuiError

POLL_S = 3.0


class RayState(str, enum.Enum):
    UNKNOWN = "unknown"  # not asked yet, or the head is unreachable
    DOWN = "not running"  # the head answers SSH but no dashboard
    UP = "up"
    BUSY = "busy"  # bring-up / teardown in progress


@dataclass
class RayView:
    state: RayState = RayState.UNKNOWN
    error: str | None = None
    status: ClusterStatus | None = None
    node_state: dict[str, str] = field(default_factory=dict)  # host → alive | absent

    def host_label(self, host: str, role: str) -> str:
        if self.state == RayState.UP:
            return f"{role} {self.node_state.get(host, 'absent')}"
        if self.state == RayState.BUSY:
            return f"{role} …"
        if self.state == RayState.DOWN:
            return f"{role} not started"
        return f"{role} ?"


class RayMonitor:
    def __init__(self, cluster: RayCluster, on_change: Callable[[RayView], None]):
        self.cluster = cluster
        self.view = RayView()
        self._on_change = on_change
        self._task: asyncio.Task | None = None
        self._paused = False
        self._wake = asyncio.Event()
        self._closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ray-monitor")

    async def close(self) -> None:
        self._closed = True  # a poll that ends while it is cancelled tells no one any more
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def pause(self) -> None:
        self._paused = True
        self._set(RayView(RayState.BUSY, None, self.view.status, self.view.node_state))

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def _set(self, view: RayView) -> None:
        self.view = view
        if not self._closed:
            self._on_change(view)

    async def poll_once(self) -> RayView:
        try:
            st = await self.cluster.status()
        except VerlTuiError as exc:  # the dashboard or the head cannot be asked: Ray is down
            await self.cluster.close()  # reopen the tunnel next time (the head may be back)
            head_up = self.cluster.fleet.status(self.cluster.inv.head.name).state.value == "up"
            return RayView(RayState.DOWN if head_up else RayState.UNKNOWN, str(exc))
        node_state = {h.name: "absent" for h in self.cluster.inv.hosts}
        for n in st.nodes:
            if n.host is not None:
                node_state[n.host] = "alive" if n.alive else "dead"
        return RayView(RayState.UP, None, st, node_state)

    async def _run(self) -> None:
        while True:
            if not self._paused:
                view = await self.poll_once()
                if not self._paused:
                    self._set(view)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
