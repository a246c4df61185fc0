"""Ray across the fleet: bring up (probe, check, head, workers in parallel, wait), tear down,
status. Every remote command is an argv list; progress is published as StepEvents.

All or nothing: when a bring-up fails, the Ray processes it started are stopped again, so a
failed `up` never leaves a half-started cluster behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tui.cluster.dashboard import DashboardClient, DashboardError, Tunnel, open_tunnel
from tui.cluster.dashboard import wait_for_dashboard as _wait_for_dashboard
from tui.cluster.lock import (
    HeadLock,
    LocalLock,
    LockHeld,
    LockOwner,
    acquire_head_lock,
    local_lock_path,
)
from tui.cluster.netcheck import tcp_reachable
from tui.cluster.probe import HostFacts, probe_all
from tui.cluster.ray_plan import (
    RAY,
    foreign_listeners,
    head_argv,
    node_ip_problems,
    ray_env,
    start_failure,
    version_problems,
    worker_argv,
)
from tui.config.hosts import Host, Inventory
from tui.errors import VerlTuiError
from tui.fmt import plural
from tui.remote import python_argv
from tui.transport.deadline import CommandTimeout
from tui.transport.fleet import Fleet
from tui.transport.types import HostUnavailable, Transport, TransportError

MAX_PARALLEL_STARTS = 16
DASHBOARD_WAIT_S = 30.0  # the least the head's dashboard is waited for after `ray start`
STOP_TIMEOUT_FACTOR = 2  # `ray stop` gets this many times the host's ssh.command_timeout


@dataclass(frozen=True)
class StepEvent:
    host: str | None
    phase: str  # probe | check | head | worker | wait | stop | rollback | done
    status: str  # running | ok | skip | fail
    message: str
    at: float = field(default_factory=time.monotonic)


class BringUpError(VerlTuiError, title="Ray bring-up failed"):
    """Bring-up refused or failed; `failures` maps host → one-line reason."""

    def __init__(self, message: str, failures: dict[str, str] | None = None):
        self.message = message
        self.failures = failures or {}
        super().__init__(message)

    def __str__(self) -> str:
        lines = [self.message, *(f"  {h}: {why}" for h, why in self.failures.items())]
        return "\n".join(lines)


class ClusterBusy(BringUpError, title="cluster busy", kind="refused"):
    """Another up/down/restart holds the cluster's lock (here or on the head)."""


@dataclass(frozen=True)
class NodeInfo:
    host: str | None  # None: a node the hosts file does not list
    node_ip: str
    alive: bool
    is_head: bool
    gpus: float
    cpus: float
    memory_bytes: int
    node_id: str | None


@dataclass(frozen=True)
class ClusterStatus:
    nodes_alive: int
    nodes: list[NodeInfo]
    ray_version: str | None
    python_version: str | None
    dashboard: str | None
    missing: list[str]  # hosts of the file with no alive node

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = [{k: v for k, v in asdict(n).items()} for n in self.nodes]
        return d


@dataclass(frozen=True)
class TeardownReport:
    stopped: list[str]
    failures: dict[str, str]
    leftover: dict[str, str]  # host → Ray processes still running after stop


class RayCluster:
    def __init__(
        self,
        fleet: Fleet,
        inventory: Inventory,
        progress: Callable[[StepEvent], None] | None = None,
    ):
        self.fleet = fleet
        self.inv = inventory
        self._progress = progress
        self.tunnel: Tunnel | None = None
        self.facts: dict[str, HostFacts] = {}
        self._lock_depth = 0  # nested actions (up --restart tears down) take the lock once
        self._background: set[asyncio.Future[Any]] = set()  # late lock releases, probes

    def set_progress(self, progress: Callable[[StepEvent], None] | None) -> None:
        self._progress = progress

    def _emit(self, host: str | None, phase: str, status: str, message: str) -> None:
        if self._progress is not None:
            self._progress(StepEvent(host, phase, status, message))

    # -- dashboard ---------------------------------------------------------------------------

    async def dashboard(self) -> DashboardClient:
        """The client over a kept-open tunnel (opened on first use)."""
        if self.tunnel is None:
            self.tunnel = await open_tunnel(self.fleet)
        return self.tunnel.client

    async def close(self) -> None:
        if self.tunnel is not None:
            self.tunnel.close()
            self.tunnel = None

    # -- the lock ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock(self, action: str) -> AsyncIterator[None]:
        """Hold the cluster for a changing action: here first (no SSH needed to refuse), then
        on the head. ClusterBusy at once, naming the holder, when someone else has either."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        owner = LockOwner.here(action)
        local = LocalLock(local_lock_path(self.inv.cluster))
        try:
            local.acquire(owner)
        except LockHeld as exc:
            raise ClusterBusy(str(exc)) from None
        except OSError as exc:
            raise ClusterBusy(f"cannot take the lock {local.path}: {exc}") from None
        head_lock: HeadLock | None = None
        try:
            head = self.inv.head
            taking = asyncio.ensure_future(self._take_head_lock(owner))
            try:
                if action in ("up", "restart"):
                    # Bring-up refuses a host whose link failed anyway: say so as soon as one
                    # fails, not after the head's connection and lock (the head may be slow).
                    await self._refuse_unusable_until(taking)
                head_lock = await taking
            except LockHeld as exc:
                raise ClusterBusy(str(exc)) from None
            except TransportError as exc:
                # The head cannot be reached: up fails at its probe anyway; down still stops
                # the workers. Only this machine's lock holds meanwhile.
                why = str(exc).removeprefix(f"{head.name}: ")
                self._emit(head.name, "lock", "fail", f"no lock on the head: {why}")
            finally:
                if not taking.done():  # refused first: a lock taken later is let go at once
                    taking.add_done_callback(self._release_late)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
        finally:
            if head_lock is not None:
                await head_lock.release()
            local.release()

    async def _take_head_lock(self, owner: LockOwner) -> HeadLock:
        head = self.inv.head
        transport = await self.fleet.ready(head.name, 10)
        return await acquire_head_lock(
            transport, head.python, owner, first_line=head.command_timeout
        )

    def _release_late(self, taking: asyncio.Future[HeadLock]) -> None:
        """A head lock taken after `up` was refused (its acquisition is let finish: cancelled
        midway, its helper could hold the lock as long as the connection lives): let go."""
        if not taking.cancelled() and taking.exception() is None:
            self._detach(asyncio.ensure_future(taking.result().release()))

    def _detach(self, task: asyncio.Future[Any]) -> None:
        """Let `task` finish on its own: referenced until done, its outcome retrieved."""

        def done(t: asyncio.Future[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled():
                t.exception()

        self._background.add(task)
        task.add_done_callback(done)

    async def _refuse_unusable_until(self, task: asyncio.Future[Any]) -> None:
        """Until `task` is done: BringUpError, naming them, as soon as hosts' links fail
        (unreachable, auth, host key)."""
        while not task.done():
            bad = {
                s.host: f"{s.host} is {s.state.value}" + (f": {s.error}" if s.error else "")
                for s in self.fleet.statuses()
                if s.state.is_problem
            }
            if bad:
                for host, why in bad.items():
                    self._emit(host, "probe", "fail", why)
                raise BringUpError("not starting: some hosts cannot be used", bad)
            await asyncio.wait([task], timeout=0.05)

    # -- status ------------------------------------------------------------------------------

    async def status(self) -> ClusterStatus:
        client = await self.dashboard()
        nodes, meta = await asyncio.gather(client.alive_nodes(), client.cluster_metadata())
        infos = []
        for n in nodes:
            res = n.get("resources_total") or {}
            infos.append(
                NodeInfo(
                    host=self.inv.host_of_ip(n.get("node_ip")),
                    node_ip=n.get("node_ip", "?"),
                    alive=n.get("state") == "ALIVE",
                    is_head=bool(n.get("is_head_node")),
                    gpus=float(res.get("GPU", 0)),
                    cpus=float(res.get("CPU", 0)),
                    memory_bytes=int(res.get("memory", 0)),
                    node_id=n.get("node_id"),
                )
            )
        infos.sort(key=lambda i: (not i.is_head, i.host or "~", i.node_ip))
        alive_hosts = {i.host for i in infos if i.alive}
        return ClusterStatus(
            nodes_alive=sum(1 for i in infos if i.alive),
            nodes=infos,
            ray_version=meta.get("rayVersion"),
            python_version=meta.get("pythonVersion"),
            dashboard=self.tunnel.url if self.tunnel else None,
            missing=[h.name for h in self.inv.hosts if h.name not in alive_hosts],
        )

    async def _alive_hosts(self) -> set[str]:
        """The hosts of this file with a node ALIVE at the head (by the IP Ray reports)."""
        client = await self.dashboard()
        names = (self.inv.host_of_ip(n.get("node_ip")) for n in await client.alive_nodes())
        return {name for name in names if name is not None}

    # -- bring-up ----------------------------------------------------------------------------

    async def probe(self) -> dict[str, HostFacts]:
        self._emit(None, "probe", "running", f"probing {plural(len(self.inv.hosts), 'host')}")
        return self._probed(await probe_all(self.fleet, self.inv))

    def _probed(self, facts: dict[str, HostFacts]) -> dict[str, HostFacts]:
        self.facts = facts
        for name, f in facts.items():
            if f.ok:
                self._emit(
                    name,
                    "probe",
                    "ok",
                    f"Python {f.python_version}, ray {f.ray_version or '-'}, "
                    f"{f.gpu_count or 0} GPUs, {f.cpu_count} CPUs{self._declared(name)}",
                )
            else:
                self._emit(name, "probe", "fail", f.error or "probe failed")
        return facts

    def _declared(self, name: str) -> str:
        """What hosts.yaml tells Ray instead of what the host has (num_gpus:, ray: num_cpus:),
        so the probe line does not read as a contradiction of the file."""
        gpus, cpus = self.inv.host(name).num_gpus, self.inv.ray.num_cpus
        told = [
            *([plural(gpus, "GPU")] if gpus is not None else []),
            *([plural(cpus, "CPU")] if cpus is not None else []),
        ]
        return f"; Ray is told {', '.join(told)} (hosts.yaml)" if told else ""

    async def probe_or_refuse(self) -> dict[str, HostFacts]:
        """probe(), but a host whose link fails (unreachable, auth, host key) refuses bring-up
        at once, naming it: with 128 hosts, `up` does not wait for the other 127 probes."""
        self._emit(None, "probe", "running", f"probing {plural(len(self.inv.hosts), 'host')}")
        task = asyncio.ensure_future(probe_all(self.fleet, self.inv))
        try:
            await self._refuse_unusable_until(task)
        except BringUpError:
            # Refused: the other probes answer unheard (each ends within its timeout);
            # cancelled, each host would get a kill command (tui/transport ends its group).
            self._detach(task)
            raise
        except BaseException:
            task.cancel()
            raise
        return self._probed(task.result())

    async def bring_up(
        self, *, restart: bool = False, facts: dict[str, HostFacts] | None = None
    ) -> ClusterStatus:
        """Start what is not running yet; `facts` from a probe just made, if any. Holds the
        cluster's lock (ClusterBusy when another action has it)."""
        async with self.lock("restart" if restart else "up"):
            return await self._bring_up(restart=restart, facts=facts)

    async def _bring_up(
        self, *, restart: bool, facts: dict[str, HostFacts] | None
    ) -> ClusterStatus:
        inv = self.inv
        facts = facts or await self.probe_or_refuse()
        down = {h: f.error or "unreachable" for h, f in facts.items() if not f.ok}
        if down:
            raise BringUpError("not starting: some hosts cannot be used", down)
        problems = version_problems(inv, facts)
        if problems:
            head = facts[inv.head.name]
            raise BringUpError(
                f"not starting: Ray and Python must match on every host "
                f"(head {inv.head.name}: ray {head.ray_version}, Python {head.python_version})",
                problems,
            )
        misplaced = node_ip_problems(inv, facts)
        if misplaced:
            raise BringUpError("not starting: a node_ip is not an address of its host", misplaced)
        taken = foreign_listeners(inv, facts[inv.head.name])
        if taken:
            raise BringUpError(
                "not starting: the head's Ray ports are taken", {inv.head.name: taken}
            )
        self._emit(
            None,
            "check",
            "ok",
            f"ray {facts[inv.head.name].ray_version}, "
            f"Python {facts[inv.head.name].python_version} on every host",
        )
        if restart:
            await self._tear_down(quiet=True)
            facts = await self.probe()

        started: list[str] = []
        try:
            await self._start_head(facts, started)
            await self._start_workers(facts, started)
            await self._wait_alive()
        except BaseException as exc:
            if started:
                await self._rollback(started)
            if isinstance(exc, BringUpError):
                raise
            if isinstance(exc, (TransportError, DashboardError, asyncio.TimeoutError)):
                raise BringUpError(f"bring-up failed: {exc}") from None
            raise
        status = await self.status()
        self._emit(None, "done", "ok", f"{plural(status.nodes_alive, 'node')} alive")
        return status

    async def _run_start(
        self, host: Host, argv: list[str], env: dict[str, str], phase: str
    ) -> None:
        try:
            transport = await self.fleet.ready(host.name, 5)
            res = await transport.run(
                argv, env=env, timeout=self.inv.ray.start_timeout, what="ray start"
            )
        except TransportError as exc:  # HostUnavailable too
            why = str(exc).removeprefix(f"{host.name}: ")  # the host is named beside it
            self._emit(host.name, phase, "fail", why)
            raise BringUpError(f"{phase} start failed", {host.name: why}) from None
        if not res.ok:
            why = start_failure(res.stderr + "\n" + res.stdout)
            self._emit(host.name, phase, "fail", why)
            raise BringUpError(f"{phase} start failed", {host.name: why})

    async def _start_head(self, facts: dict[str, HostFacts], started: list[str]) -> None:
        head = self.inv.head
        f = facts[head.name]
        if f.ray_running:
            # Ours already (its GCS answers through the tunnel)? Then leave it alone.
            try:
                client = await self.dashboard()
                await client.alive_nodes()
                self._emit(head.name, "head", "skip", "already running")
                return
            except DashboardError:
                raise BringUpError(
                    "Ray runs on the head but its dashboard does not answer",
                    {head.name: "use --restart to stop and start it"},
                ) from None
        self._emit(head.name, "head", "running", f"ray start --head on {head.node_ip}")
        t0 = time.monotonic()
        started.append(head.name)
        await self._run_start(
            head, head_argv(self.inv, head, f), ray_env(self.inv, head, f), "head"
        )
        client = await self.dashboard()
        # `ray start` returns before the dashboard serves: on a loaded machine, or a Ray whose
        # dashboard modules are subprocesses of their own (2.4x), that took 30-90 s. It gets
        # what is left of start_timeout, and at least DASHBOARD_WAIT_S.
        left = max(DASHBOARD_WAIT_S, self.inv.ray.start_timeout - (time.monotonic() - t0))
        try:
            await _wait_for_dashboard(client, left)
        except DashboardError as exc:
            raise BringUpError(
                "the head's dashboard did not answer",
                {head.name: f"{exc} (hosts.yaml `ray: start_timeout:` gives it longer)"},
            ) from None
        self._emit(head.name, "head", "ok", f"started in {time.monotonic() - t0:.1f} s")

    async def _start_workers(self, facts: dict[str, HostFacts], started: list[str]) -> None:
        """Every worker not in the cluster yet is checked first (its link, Ray not running
        apart, the head's GCS reachable from it), then all of them start: a bring-up that
        fails on one worker starts no other only to roll it back."""
        alive = await self._alive_hosts()
        slots = asyncio.Semaphore(MAX_PARALLEL_STARTS)
        failures: dict[str, str] = {}
        ready: list[Host] = []

        def fail(host: Host, why: str) -> None:
            failures[host.name] = why
            self._emit(host.name, "worker", "fail", why)

        async def check(host: Host) -> None:
            if host.name in alive:
                self._emit(host.name, "worker", "skip", "already in the cluster")
                return
            if facts[host.name].ray_running:
                fail(host, "Ray runs there but is not part of this cluster (use --restart)")
                return
            async with slots:
                # Ray retries an unreachable GCS for minutes: ask the network first, fast.
                try:
                    transport = await self.fleet.ready(host.name, 5)
                except HostUnavailable as exc:
                    fail(host, str(exc))
                    return
                head = self.inv.head
                why = await tcp_reachable(transport, host.python, head.node_ip, self.inv.ray.port)
                if why is not None:
                    fail(
                        host,
                        f"cannot reach the head's GCS at {head.node_ip}:{self.inv.ray.port}: "
                        f"{why} (firewall? node_ip?)",
                    )
                    return
            ready.append(host)

        async def start(host: Host) -> None:
            f = facts[host.name]
            async with slots:
                self._emit(host.name, "worker", "running", f"ray start on {host.node_ip}")
                t0 = time.monotonic()
                started.append(host.name)
                try:
                    await self._run_start(
                        host, worker_argv(self.inv, host, f), ray_env(self.inv, host, f), "worker"
                    )
                except BringUpError as exc:
                    failures.update(exc.failures)
                    return
                self._emit(host.name, "worker", "ok", f"joined in {time.monotonic() - t0:.1f} s")

        await asyncio.gather(*(check(h) for h in self.inv.hosts if not h.is_head))
        if failures:
            for host in ready:  # its row says why it never started
                self._emit(
                    host.name,
                    "worker",
                    "skip",
                    f"not started: {plural(len(failures), 'worker')} failed",
                )
            raise BringUpError("workers failed to start", failures)
        await asyncio.gather(*(start(h) for h in ready))
        if failures:
            raise BringUpError("workers failed to start", failures)

    async def _wait_alive(self) -> None:
        want = [h.name for h in self.inv.hosts]
        self._emit(None, "wait", "running", f"waiting for {plural(len(want), 'node')} ALIVE")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.inv.ray.start_timeout
        while True:
            alive = await self._alive_hosts()
            missing = [name for name in want if name not in alive]
            if not missing:
                self._emit(None, "wait", "ok", f"{plural(len(want), 'node')} ALIVE")
                return
            if loop.time() > deadline:
                raise BringUpError(
                    "nodes did not come up", {m: "not ALIVE at the head" for m in missing}
                )
            await asyncio.sleep(0.5)

    async def _rollback(self, started: list[str]) -> None:
        self._emit(None, "rollback", "running", f"stopping Ray on {', '.join(started)}")
        hosts = [self.inv.host(n) for n in started]
        await asyncio.gather(*(self._stop_host(h) for h in hosts if not h.is_head))
        for h in hosts:
            if h.is_head:
                await self._stop_host(h)
        await self.close()  # the head is gone: so is what the tunnel pointed at

    # -- teardown ----------------------------------------------------------------------------

    async def _stop_host(self, host: Host) -> str | None:
        """`ray stop` (then --force if anything is left); None when the host is clean, else
        one line saying why. A host that gives no answer is reported at its deadline and not
        asked again (its next command would stall as well)."""
        try:
            transport = await self.fleet.ready(host.name, 5)
        except HostUnavailable as exc:
            return str(exc)
        argv = [host.python, *RAY, "stop"]
        # `ray stop` itself waits up to 16 s for Ray's processes to go.
        stop_s = STOP_TIMEOUT_FACTOR * host.command_timeout
        try:
            await transport.run(argv, timeout=stop_s, what="ray stop")
        except CommandTimeout as exc:
            if not exc.answered:
                return exc.detail
        except TransportError:
            pass  # what is left is asked next
        try:
            left = await _ray_processes(transport, host.python)
            if left:
                with contextlib.suppress(TransportError):
                    await transport.run([*argv, "--force"], timeout=stop_s, what="ray stop --force")
                left = await _ray_processes(transport, host.python)
        except CommandTimeout as exc:
            return exc.detail
        except TransportError as exc:
            return str(exc).removeprefix(f"{host.name}: ")
        return f"still running: {left}" if left else None

    async def ray_processes(self) -> dict[str, str | None]:
        """Each host's running Ray processes by name ("" when none, None when the host cannot
        be asked): what `down` would stop, checked before asking the user to confirm it."""

        async def one(host: Host) -> tuple[str, str | None]:
            try:
                transport = await self.fleet.ready(host.name, 5)
                return host.name, await _ray_processes(transport, host.python)
            except TransportError:
                return host.name, None

        return dict(await asyncio.gather(*(one(h) for h in self.inv.hosts)))

    async def tear_down(self, *, quiet: bool = False) -> TeardownReport:
        """Stop Ray everywhere, holding the cluster's lock (ClusterBusy when taken)."""
        async with self.lock("down"):
            return await self._tear_down(quiet=quiet)

    async def _tear_down(self, *, quiet: bool = False) -> TeardownReport:
        inv = self.inv
        workers = [h for h in inv.hosts if not h.is_head]
        stopped: list[str] = []
        failures: dict[str, str] = {}
        leftover: dict[str, str] = {}

        async def one(host: Host) -> None:
            if not quiet:
                self._emit(host.name, "stop", "running", "ray stop")
            problem = await self._stop_host(host)
            if problem is None:
                stopped.append(host.name)
                if not quiet:
                    self._emit(host.name, "stop", "ok", "no Ray process left")
            else:
                (leftover if problem.startswith("still") else failures)[host.name] = problem
                self._emit(host.name, "stop", "fail", problem)

        await self.close()
        await asyncio.gather(*(one(h) for h in workers))
        await one(inv.head)  # workers first: they would otherwise log GCS errors
        return TeardownReport(stopped, failures, leftover)


async def _ray_processes(transport: Transport, python: str) -> str:
    """Names of Ray processes running on the host (empty when none)."""
    res = await transport.run(python_argv(python, "ray_procs"), what="list Ray processes")
    return res.stdout.strip() if res.ok else ""
