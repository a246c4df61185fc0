"""Live GPU telemetry: one long-lived agent per host over the fleet, parsed into HostTelemetry.

One task per host, each re-armed only after its stream ends (never overlapping polls). Listeners
get the host name on every change; the UI coalesces those into ~10 frames per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable

from tui.agent import agent_argv
from tui.cluster.models import HostSample, HostTelemetry, TelemetryState
from tui.config.hosts import Host, Inventory
from tui.transport.fleet import Fleet
from tui.transport.types import HostState, LinkStatus, TransportError

log = logging.getLogger(__name__)

ChangeListener = Callable[[str], None]

_AGENT_RETRY_S = 5.0
_STALE_AFTER_INTERVALS = 3.0


def _agent_failure(exit_status: int | None, stderr: str, python: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if exit_status == 127 or "not found" in last or "No such file" in last:
        return f"interpreter {python!r} not found on the host (set python: in hosts.yaml)"
    if last:
        return f"agent exited ({exit_status}): {last[:200]}"
    return f"agent exited with status {exit_status}"


class TelemetryMonitor:
    def __init__(self, fleet: Fleet, inventory: Inventory, *, interval: float | None = None):
        self.fleet = fleet
        self.inventory = inventory
        self.interval = interval or inventory.telemetry.interval
        self.hosts: dict[str, HostTelemetry] = {
            h.name: HostTelemetry(h.name, fleet.status(h.name),
                                  history_len=inventory.telemetry.history)
            for h in inventory.hosts
        }
        self._listeners: list[ChangeListener] = []
        self._tasks: list[asyncio.Task] = []
        self._first = {h.name: asyncio.Event() for h in inventory.hosts}
        fleet.add_listener(self.on_link_status)

    def add_listener(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _changed(self, name: str) -> None:
        for listener in self._listeners:
            try:
                listener(name)
            except Exception:
                log.exception("telemetry listener failed")

    def on_link_status(self, status: LinkStatus) -> None:
        ht = self.hosts[status.host]
        ht.link = status
        if status.state != HostState.UP:
            ht.state = TelemetryState.WAITING
            if status.state.is_problem:
                self._first[status.host].set()  # a failed host has answered, with its failure
        self._changed(status.host)

    def start(self) -> None:
        for host in self.inventory.hosts:
            self._tasks.append(asyncio.create_task(self._follow(host), name=f"gpu:{host.name}"))
        self._tasks.append(asyncio.create_task(self._watch_stale(), name="gpu:stale"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def wait_first(self, timeout: float) -> None:
        """Until every host has produced a sample or a failure (or the timeout passes)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(e.wait() for e in self._first.values())), timeout
            )

    async def _follow(self, host: Host) -> None:
        ht = self.hosts[host.name]
        argv = agent_argv(host.python, self.interval)
        while True:
            transport = await self.fleet.wait_up(host.name)
            try:
                stream = await transport.stream(argv)
            except TransportError as exc:
                ht.state, ht.error = TelemetryState.AGENT_FAILED, str(exc)
                self._first[host.name].set()
                self._changed(host.name)
                await asyncio.sleep(_AGENT_RETRY_S)
                continue
            try:
                async for line in stream.lines():
                    self._ingest(ht, line)
            finally:
                await stream.close()
            if self.fleet.status(host.name).state != HostState.UP:
                continue  # the link died; the fleet reconnects and we restart the agent
            ht.state = TelemetryState.AGENT_FAILED
            ht.error = _agent_failure(stream.exit_status, await stream.stderr_tail(), host.python)
            self._first[host.name].set()
            self._changed(host.name)
            await asyncio.sleep(_AGENT_RETRY_S)

    def ingest_line(self, name: str, line: str) -> None:
        """Feed one agent output line for host `name` (what the stream tasks do)."""
        self._ingest(self.hosts[name], line)

    def _ingest(self, ht: HostTelemetry, line: str) -> None:
        try:
            msg = json.loads(line)
            kind = msg.get("type")
        except (ValueError, AttributeError):
            log.debug("%s: not an agent line: %.120s", ht.name, line)
            return
        if kind == "hello":
            ht.hostname = msg.get("hostname")
            ht.driver = msg.get("driver")
            return
        if kind != "sample":
            return
        try:
            sample = HostSample.from_json(msg, time.time())
        except (KeyError, TypeError, ValueError) as exc:
            log.debug("%s: bad sample: %s", ht.name, exc)
            return
        ht.record(sample)
        if msg.get("driver"):
            ht.driver = msg["driver"]
        if sample.source == "none":
            ht.state, ht.error = TelemetryState.NO_NVML, sample.error or "no NVML"
        else:
            ht.state, ht.error = TelemetryState.OK, sample.error
        self._first[ht.name].set()
        self._changed(ht.name)

    async def _watch_stale(self) -> None:
        limit = max(self.interval * _STALE_AFTER_INTERVALS, 2.0)
        while True:
            await asyncio.sleep(min(self.interval, 1.0))
            now = time.time()
            for ht in self.hosts.values():
                if (ht.state in (TelemetryState.OK, TelemetryState.NO_NVML)
                        and ht.latest is not None and now - ht.latest.received > limit):
                    ht.state = TelemetryState.STALE
                    ht.error = f"no sample for {now - ht.latest.received:.0f} s"
                    self._changed(ht.name)
