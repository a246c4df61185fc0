"""Live GPU telemetry: one long-lived agent per host over the fleet, parsed into HostTelemetry.

One task per host, each re-armed only after its stream ends (never overlapping polls). Listeners
get the host name on every change; the UI coalesces those into ~10 frames per second.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable

from tui.cluster.agent_delta import (
    COMPACT_PREFIX,
    DELTA_PREFIX,
    REPEAT_PREFIX,
    BadDelta,
    DeltaPlan,
    Repeated,
    StaleDelta,
    apply_compact,
    apply_delta,
    apply_repeat,
    delta_plan,
    rebased_plan,
)
from tui.cluster.agent_schema import parse_line
from tui.cluster.models import HostSample, HostTelemetry, TelemetryState
from tui.cluster.relay_plan import RelayHub, relay_groups
from tui.config.hosts import Host, Inventory
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import (
    SETUP_FAILED_EXIT,
    HostState,
    LinkStatus,
    StreamProcess,
    TransportError,
)

log = logging.getLogger(__name__)

ChangeListener = Callable[[str], None]

_AGENT_RETRY_S = 5.0
_AGENT_RETRY_MAX_S = 60.0  # backoff cap for an agent that keeps failing
# Longest agent line kept: 64 GPUs × 256 processes fit; a longer line is dropped and counted.
MAX_AGENT_LINE = 1 << 20
_INDEX_RE = re.compile(r"\[\d+\]")
_STALE_AFTER_INTERVALS = 3.0


def agent_argv(
    python: str, interval: float, once: bool = False, *, delta: bool = False, compact: bool = False
) -> list[str]:
    """The GPU agent (tui/remote/gpu_agent.py) run with the host's `python`, streaming a sample
    every `interval` seconds (one sample with `once`; with `delta`, delta lines between full
    samples: agent_delta.py; with `compact` too, as lines of numbers: apply_compact)."""
    extra = ["--once"] if once else ["--delta"] if delta else []
    if delta and compact and not once:
        extra.append("--compact")
    return python_argv(python, "gpu_agent", "--interval", str(float(interval)), *extra)


def _agent_failure(exit_status: int | None, stderr: str, python: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if exit_status == SETUP_FAILED_EXIT and "env_setup failed" in last:
        return last  # the transport's one line: host, step, the setup's output tail
    if exit_status == 127 or "not found" in last or "No such file" in last:
        return f"interpreter {python!r} not found on the host (set python: in hosts.yaml)"
    if last:
        return f"agent exited ({exit_status}): {one_line(last, 200)}"
    return f"agent exited with status {exit_status}"


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


class TelemetryMonitor:
    def __init__(
        self,
        fleet: Fleet,
        inventory: Inventory,
        *,
        interval: float | None = None,
        retry: float = _AGENT_RETRY_S,
        delta: bool = True,
        relays: bool = True,
    ):
        self.fleet = fleet
        self.retry = retry  # first wait before restarting a failed agent (doubles, capped)
        self.inventory = inventory
        self.interval = interval or inventory.telemetry.interval
        self.hosts: dict[str, HostTelemetry] = {
            h.name: HostTelemetry(
                h.name,
                fleet.status(h.name),
                history_len=inventory.telemetry.history,
                container=h.container.label if h.container else None,
            )
            for h in inventory.hosts
        }
        self._listeners: list[ChangeListener] = []
        self._tasks: list[asyncio.Task] = []
        self._agents: dict[str, asyncio.Task] = {}  # host → its _follow task
        self._relays_wanted = relays
        self._closed = False
        self._first = {h.name: asyncio.Event() for h in inventory.hosts}
        self._unanswered = set(self._first)  # hosts with neither a sample nor a failure yet
        self.delta = delta
        self._bases: dict[str, HostSample] = {}  # each host's last full sample (deltas' base)
        self._plans: dict[str, DeltaPlan] = {}  # its compact deltas' layout (made once per base)
        self._streams: dict[str, StreamProcess] = {}  # each running agent (its stdin)
        self._asked_full: dict[str, float] = {}  # when each host's agent was last asked
        # Each host's last sample's arrival (time.time()): what the stale and quiet checks
        # scan twice an interval, in C, instead of a Python step per host.
        self._received: dict[str, float] = {}
        # Above ~64 hosts, groups of hosts send through a relay (relay_plan.py).
        # (a one-shot reader, like `gpus --once`, passes relays=False: nothing to batch)
        self.relays = RelayHub(
            fleet,
            relay_groups(inventory) if relays else [],
            self.interval,
            deliver=self.ingest_line,
            note=self._relay_note,
            route_shown=self._route_shown,
        )
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
        ht = self.hosts.get(status.host)
        if ht is None:  # a monitor of some of the fleet's hosts (a job's, see archive/follow.py)
            return
        ht.link = status
        if status.state != HostState.UP:
            ht.state = TelemetryState.WAITING
            if status.state.is_problem:
                self._answered(status.host)  # a failed host has answered, with its failure
        self._changed(status.host)

    def start(self) -> None:
        for host in self.inventory.hosts:
            self._start_agent(host)
        self._tasks.append(asyncio.create_task(self._watch_stale(), name="gpu:stale"))
        self.relays.start()

    def _start_agent(self, host: Host) -> None:
        task = asyncio.create_task(self._follow(host), name=f"gpu:{host.name}")
        self._agents[host.name] = task
        self._tasks.append(task)

    # -- a reloaded hosts.yaml (tui/cluster/reload.py) -----------------------------------------

    def agents_to_stop(self, inventory: Inventory) -> list[str]:
        """Hosts whose agent must stop before the fleet follows `inventory`: removed hosts and
        hosts whose spec changed in any way (its python, its connection)."""
        new = {h.name: h for h in inventory.hosts}
        return [h.name for h in self.inventory.hosts if new.get(h.name) != h]

    async def stop_agents(self, names: list[str]) -> None:
        tasks = [t for t in (self._agents.pop(n, None) for n in names) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = [t for t in self._tasks if t not in tasks]

    async def follow_inventory(self, inventory: Inventory) -> None:
        """After the fleet applied `inventory` (stop_agents first): removed hosts leave the
        table, added ones join it, a changed host's agent starts again (its history kept).
        With relays, the groups are planned again and every agent restarts on them."""
        new = {h.name for h in inventory.hosts}
        for name in [n for n in self.hosts if n not in new]:
            del self.hosts[name]
            self._first.pop(name, None)
            self._unanswered.discard(name)
            self._received.pop(name, None)
            self._forget_base(name)
        for h in inventory.hosts:
            if h.name not in self.hosts:
                self.hosts[h.name] = HostTelemetry(
                    h.name,
                    self.fleet.status(h.name),
                    history_len=inventory.telemetry.history,
                    container=h.container.label if h.container else None,
                )
                self._first[h.name] = asyncio.Event()
                self._unanswered.add(h.name)
        self.inventory = inventory
        groups = relay_groups(inventory) if self._relays_wanted else []
        if groups or self.relays:
            await self.stop_agents(list(self._agents))
            await self.relays.close()
            self.relays = RelayHub(
                self.fleet,
                groups,
                self.interval,
                deliver=self.ingest_line,
                note=self._relay_note,
                route_shown=self._route_shown,
            )
            self.relays.start()
        for h in inventory.hosts:
            if h.name not in self._agents:
                self._start_agent(h)

    async def close(self) -> None:
        self._closed = True
        self.fleet.remove_listener(self.on_link_status)
        await self.relays.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def _relay_note(self, name: str, problem: str | None) -> None:
        ht = self.hosts[name]
        if problem is None:
            ht.problems.pop("relay", None)
        else:
            ht.note_problem("relay", problem, time.time())
        self._changed(name)

    def _route_shown(self, name: str, route: str | None) -> None:
        ht = self.hosts[name]
        if ht.route != route:
            ht.route = route
            self._changed(name)

    async def wait_first(self, timeout: float) -> None:
        """Until every host has produced a sample or a failure (or the timeout passes)."""
        waiters = [asyncio.ensure_future(e.wait()) for e in self._first.values()]
        if not waiters:
            return
        try:
            await asyncio.wait(waiters, timeout=timeout)
        finally:  # also when cancelled (SIGTERM): no waiter is left behind unretrieved
            for waiter in waiters:
                waiter.cancel()

    async def _follow(self, host: Host) -> None:
        """Run the host's agent forever. Nothing ends this task but cancellation: whatever
        goes wrong becomes the host's state and error, and the agent is started again with
        backoff (the host recovers when its agent behaves again)."""
        ht = self.hosts[host.name]
        delay = self.retry
        # Checked as well as cancelled: a cancel that a wait swallowed (asyncio.wait_for before
        # 3.12) must not keep a closed monitor restarting agents on a host whose link flaps.
        while not self._closed:
            try:
                good = await self._run_agent(host, ht)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug or an input nobody foresaw: report, never die
                log.exception("%s: telemetry failed", host.name)
                ht.state = TelemetryState.ERROR
                ht.error = one_line(f"telemetry failed: {type(exc).__name__}: {exc}", 300)
                self._answered(host.name)
                self._changed(host.name)
                good = False
            if good is None:
                continue  # the link died; the fleet reconnects and we restart the agent at once
            if good:
                delay = self.retry
            await asyncio.sleep(delay)
            if not good:
                delay = min(delay * 2, max(self.retry, _AGENT_RETRY_MAX_S))

    async def _run_agent(self, host: Host, ht: HostTelemetry) -> bool | None:
        """One agent run. True: it sent valid samples before ending; False: it failed
        (reported in ht); None: the link went down under it."""
        argv = agent_argv(host.python, self.interval, delta=self.delta, compact=self.delta)
        transport = await self.fleet.wait_up(host.name)
        ht.bad_lines = ht.oversize_lines = 0
        self._forget_base(host.name)  # a new agent: its deltas need its own full sample
        samples_before = ht.samples
        opened: list[StreamProcess] = []  # lines may arrive before stream() returns

        def on_line(line: str) -> None:
            # Called from the transport's receive path for each line (no task switch).
            self._ingest(ht, line)
            if opened and opened[0].oversize_lines != ht.oversize_lines:
                ht.oversize_lines = opened[0].oversize_lines
                ht.note_problem(
                    "oversize",
                    f"{_lines(ht.oversize_lines)} over {MAX_AGENT_LINE >> 20} MiB dropped",
                    time.time(),
                )
                self._changed(ht.name)

        try:
            stream = await transport.stream(argv, max_line=MAX_AGENT_LINE, on_line=on_line)
        except TransportError as exc:
            self._fail(ht, TelemetryState.AGENT_FAILED, str(exc))
            return False
        opened.append(stream)
        self._streams[host.name] = stream
        self.relays.leaf_started(host.name, stream, transport)
        try:
            await stream.finished()
        finally:
            if self._streams.get(host.name) is stream:
                del self._streams[host.name]
            self.relays.leaf_ended(host.name)
            await stream.close()
        good = ht.samples > samples_before
        if self.fleet.status(host.name).state != HostState.UP:
            return None
        if ht.state == TelemetryState.ERROR and ht.error_from_agent:
            return good  # the agent said why it stopped (an error line): keep that message
        self._fail(
            ht,
            TelemetryState.AGENT_FAILED,
            _agent_failure(stream.exit_status, await stream.stderr_tail(), host.python),
        )
        return good

    def _fail(self, ht: HostTelemetry, state: TelemetryState, error: str) -> None:
        ht.state, ht.error = state, one_line(error, 300)
        self._answered(ht.name)
        self._changed(ht.name)

    def ingest_line(self, name: str, line: str) -> None:
        """Feed one agent output line for host `name` (what the stream tasks do)."""
        self._ingest(self.hosts[name], line)

    def _forget_base(self, name: str) -> None:
        self._bases.pop(name, None)
        self._plans.pop(name, None)

    def _ingest(self, ht: HostTelemetry, line: str) -> None:
        now = time.time()
        if line.startswith(COMPACT_PREFIX):  # most lines: the packed delta of every second
            self._ingest_delta(ht, line, now, apply_compact, self._plan(ht.name))
            return
        if line.startswith(DELTA_PREFIX):
            self._ingest_delta(ht, line, now)
            return
        if line.startswith(REPEAT_PREFIX):
            self._ingest_delta(ht, line, now, apply_repeat, self._plan(ht.name))
            return
        msg = parse_line(line, now)
        if msg.problems:
            for path, problem in msg.problems:
                # One entry per field whatever the GPU/process: gpus[3].x and gpus[5].x share.
                ht.note_problem(_INDEX_RE.sub("[]", path), problem, now)
            if msg.dropped_problems:
                ht.note_problem(
                    "more", f"bad data: {msg.dropped_problems} more fields in one line", now
                )
        kind = msg.kind
        if kind == "sample":
            sample = msg.sample
            assert sample is not None
            self._bases[ht.name] = sample
            if msg.driver:
                ht.driver = msg.driver
            self._accept(ht, sample)
        elif kind == "hello":
            hello = msg.hello
            assert hello is not None
            ht.hostname, ht.driver = hello.hostname, hello.driver
        elif kind == "error":
            ht.state, ht.error, ht.error_from_agent = TelemetryState.ERROR, msg.message, True
            self._answered(ht.name)
        elif kind == "route":
            self.relays.on_route(ht.name, msg.route, msg.message)
            return
        elif kind == "invalid":
            if not line.strip():
                return  # a blank line is harmless
            ht.bad_lines += 1
            ht.note_problem(
                "lines",
                f"{_lines(ht.bad_lines)} not JSON (last: {msg.message}: {one_line(line[:40], 40)})",
                now,
            )
        else:
            return
        self._changed(ht.name)

    def _ingest_repeated(self, ht: HostTelemetry, old: HostSample, repeated: Repeated) -> None:
        """A repeat line (agent_delta.apply_repeat): the base `old` (and its compact layout)
        goes on under the repeat's seq, which the agent's next deltas name."""
        sample, base, health = repeated
        name = ht.name
        plan = self._plans.get(name)
        if plan is not None and plan.base is old:
            self._plans[name] = rebased_plan(plan, base)
        self._bases[name] = base
        for index, gpu_health in health.items():  # as HostTelemetry.record keeps a full sample's
            gpu_health.t = sample.t
            ht.health[index] = gpu_health
        self._accept(ht, sample)
        self._changed(name)

    def _plan(self, name: str) -> DeltaPlan | None:
        """The compact layout of the host's base, made once per base."""
        base = self._bases.get(name)
        plan = self._plans.get(name)
        if base is not None and (plan is None or plan.base is not base):
            plan = self._plans[name] = delta_plan(base)
        return plan

    def _ask_full(self, name: str, now: float) -> None:
        """The host's deltas name a base we do not hold (a full sample was lost, or refused):
        its agent sends the next sample whole (an agent before "full" waits for its next
        full sample, at most 10 s away, as before). At most once per two intervals."""
        stream = self._streams.get(name)
        if stream is not None and now - self._asked_full.get(name, 0.0) >= 2 * self.interval:
            self._asked_full[name] = now
            stream.send("full\n")

    def _ingest_delta(
        self,
        ht: HostTelemetry,
        line: str,
        now: float,
        decode: Callable[..., HostSample | Repeated] = apply_delta,
        *plan: object,
    ) -> None:
        """A delta line (JSON, or packed: `decode` apply_compact with its plan, or a repeat
        line: apply_repeat) on its base."""
        base = self._bases.get(ht.name)
        try:
            sample = decode(line, base, now, *plan)
        except StaleDelta:
            self._ask_full(ht.name, now)  # its full sample was lost
            return
        except BadDelta as exc:
            ht.note_problem(_INDEX_RE.sub("[]", exc.path), exc.problem, now)
            self._changed(ht.name)
            return
        if isinstance(sample, Repeated):
            assert base is not None
            self._ingest_repeated(ht, base, sample)
            return
        self._accept(ht, sample)
        self._changed(ht.name)

    def _accept(self, ht: HostTelemetry, sample: HostSample) -> None:
        """A valid sample (full or rebuilt from a delta): recorded, and the host's state follows."""
        ht.record(sample)
        self._received[ht.name] = sample.received
        ht.error_from_agent = False
        if sample.source == "none":
            ht.state, ht.error = TelemetryState.NO_NVML, sample.error or "no NVML"
        else:
            ht.state, ht.error = TelemetryState.OK, sample.error
        self._answered(ht.name)

    def _answered(self, name: str) -> None:
        """The host produced a sample or a failure: wait_first stops waiting for it. A set
        lookup after the first time (this runs for every sample), not Event.set()."""
        if name in self._unanswered:
            self._unanswered.discard(name)
            self._first[name].set()

    async def _watch_stale(self) -> None:
        limit = max(self.interval * _STALE_AFTER_INTERVALS, 2.0)
        received = self._received
        while True:
            # Relayed hosts are checked twice an interval: a quiet one goes direct at once.
            await asyncio.sleep(min(self.interval, 1.0) / (2 if self.relays else 1))
            now = time.time()
            if self.relays:
                self.relays.check_quiet(now, received)
            cutoff = now - limit
            # `received` holds each host's latest sample's arrival: the late ones, found in C.
            for name, last in [(n, t) for n, t in received.items() if t < cutoff]:
                ht = self.hosts.get(name)
                if ht is not None and ht.state in (TelemetryState.OK, TelemetryState.NO_NVML):
                    ht.state = TelemetryState.STALE
                    ht.error = f"no sample for {now - last:.0f} s"
                    self._changed(name)
