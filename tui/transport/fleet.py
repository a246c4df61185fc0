"""The fleet: one reused connection per host, kept up by a supervisor task per host.

A connect semaphore bounds the handshakes in flight (the cockpit's own CPU: sshd's MaxStartups
is per server, and every host is its own server); a lost host is retried with a capped backoff
so it comes back by itself, and no host's trouble ever stalls another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tui.config.hosts import Host, Inventory
from tui.transport.deadline import within
from tui.transport.local import LocalTransport
from tui.transport.types import HostShell, HostState, HostUnavailable, LinkStatus, Transport

if TYPE_CHECKING:
    import asyncssh

log = logging.getLogger(__name__)

StateListener = Callable[[LinkStatus], None]

# Key and auth problems need a person; retry them slowly (a fixed known_hosts is picked up).
_SLOW_RETRY_S = 30.0
_FLAP_S = 10.0  # a connection that ends sooner than this after it came up counts as a flap


class _HostLink:
    def __init__(self, host: Host):
        self.host = host
        self.status = LinkStatus(host.name, HostState.CONNECTING)
        self.transport: Transport | None = None
        self.up = asyncio.Event()
        self.settled = asyncio.Event()  # set once the first attempt has an outcome
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.conn: asyncssh.SSHClientConnection | None = None


def _link_spec(host: Host) -> tuple:
    """What a host's connection and its transport are made from: a host whose spec is the same
    in a new hosts.yaml keeps its connection (num_gpus, role, python, node_ip do not touch it)."""
    return (host.address, host.transport, host.ssh, host.env_setup, host.container)


@dataclass(frozen=True)
class FleetChange:
    """What applying a new Inventory did, by host name (each in the new file's order)."""

    added: tuple[str, ...] = ()  # connecting now
    removed: tuple[str, ...] = ()  # closed
    reconnected: tuple[str, ...] = ()  # its connection spec changed: closed, connecting anew
    kept: tuple[str, ...] = ()  # the same connection

    @property
    def any(self) -> bool:
        return bool(self.added or self.removed or self.reconnected)


class Fleet:
    def __init__(
        self,
        inventory: Inventory,
        *,
        max_concurrent_connects: int = 64,
        reconnect_max_delay: float = 5.0,
    ):
        self.inventory = inventory
        self._links = {h.name: _HostLink(h) for h in inventory.hosts}
        self._connect_slots = asyncio.Semaphore(max_concurrent_connects)
        self._reconnect_max_delay = reconnect_max_delay
        self._listeners: list[StateListener] = []
        self._jumps: dict[str, asyncssh.SSHClientConnection] = {}
        self._jump_lock = asyncio.Lock()
        self._closing = False
        self._started = False
        self._ssh_loaded = False

    # -- observation -------------------------------------------------------------------------

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def status(self, name: str) -> LinkStatus:
        return self._links[name].status

    def statuses(self) -> list[LinkStatus]:
        return [link.status for link in self._links.values()]

    def transport(self, name: str) -> Transport | None:
        return self._links[name].transport

    async def wait_up(self, name: str, timeout: float | None = None) -> Transport:
        link = self._links[name]
        try:
            if timeout is None:
                await link.up.wait()
            else:
                await within(link.up.wait(), timeout)
        except asyncio.TimeoutError:
            raise HostUnavailable(link.status) from None
        assert link.transport is not None
        return link.transport

    async def ready(self, name: str, timeout: float) -> Transport:
        """The host's transport once it is up; a host that already failed to connect (or a
        closed fleet) fails at once instead of waiting out the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(name)
            transport = self.transport(name)
            if status.state == HostState.UP and transport is not None:
                return transport
            if status.state.is_problem or status.state == HostState.CLOSED:
                raise HostUnavailable(status)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HostUnavailable(status)
            try:
                return await self.wait_up(name, min(remaining, 0.2))
            except HostUnavailable:
                continue

    async def wait_settled(self, timeout: float | None = None) -> None:
        """Until every host has connected or failed at least once."""
        waits = asyncio.gather(*(link.settled.wait() for link in self._links.values()))
        with contextlib.suppress(asyncio.TimeoutError):
            await (waits if timeout is None else within(waits, timeout))

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._started = True
        for link in self._links.values():
            if link.task is None:
                link.task = asyncio.create_task(
                    self._supervise(link), name=f"fleet:{link.host.name}"
                )

    def reconnect(self, name: str | None = None) -> None:
        """Retry now instead of after the backoff (all hosts when name is None)."""
        for link in self._links.values():
            if name in (None, link.host.name):
                link.wake.set()

    async def close(self) -> None:
        self._closing = True
        for conn in self._jumps.values():
            conn.close()
        await self._retire(list(self._links.values()))

    def changes(self, inventory: Inventory) -> FleetChange:
        """What apply(inventory) would do (nothing is touched)."""
        new = {h.name: h for h in inventory.hosts}
        old = self._links
        return FleetChange(
            added=tuple(n for n in new if n not in old),
            removed=tuple(n for n in old if n not in new),
            reconnected=tuple(
                n for n in new if n in old and _link_spec(old[n].host) != _link_spec(new[n])
            ),
            kept=tuple(
                n for n in new if n in old and _link_spec(old[n].host) == _link_spec(new[n])
            ),
        )

    async def apply(self, inventory: Inventory) -> FleetChange:
        """Follow a reloaded hosts.yaml: removed hosts are closed, added ones connect, a host
        whose connection spec changed is closed and connects anew, and every other host keeps
        its connection (its Host, with the new num_gpus, role, python, is swapped in)."""
        change = self.changes(inventory)
        new = {h.name: h for h in inventory.hosts}
        gone = [self._links[n] for n in (*change.removed, *change.reconnected)]
        await self._retire(gone)
        for name in change.kept:
            self._links[name].host = new[name]
        links = {
            name: self._links[name] if name in change.kept else _HostLink(host)
            for name, host in new.items()
        }
        self._links = links
        self.inventory = inventory
        if self._started:
            self.start()  # supervisors for the new links only
        return change

    async def _retire(self, links: list[_HostLink]) -> None:
        """End these links' supervisors and close their connections (their status: CLOSED)."""
        tasks = [link.task for link in links if link.task]
        for task in tasks:
            task.cancel()
        # A connect that completes as it is cancelled can swallow the cancellation (asyncio's
        # wait_for before 3.12, used inside asyncssh); its supervisor then holds a fresh
        # connection. Close whatever connections exist, again, until every task has ended.
        pending = set(tasks)
        for _ in range(50):
            for link in links:
                if link.conn is not None:
                    link.conn.close()
            if not pending:
                break
            _, pending = await asyncio.wait(pending, timeout=0.2)
            for task in pending:
                task.cancel()
        for task in tasks:  # mark their outcomes retrieved (no "never retrieved" noise)
            if task.done() and not task.cancelled():
                task.exception()
        for link in links:
            link.transport = None
            self._set(link, HostState.CLOSED)

    async def __aenter__(self) -> Fleet:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ---------------------------------------------------------------------------

    def _set(
        self, link: _HostLink, state: HostState, error: str | None = None, attempts: int = 0
    ) -> None:
        old = link.status
        if old.state == state and old.error == error and old.attempts == attempts:
            return
        since = old.since if old.state == state else time.monotonic()
        link.status = LinkStatus(link.host.name, state, error, since, attempts)
        if state == HostState.UP:
            link.up.set()
        else:
            link.up.clear()
        for listener in self._listeners:
            try:
                listener(link.status)
            except Exception:  # a listener's bug must not kill the supervisor
                log.exception("fleet listener failed")

    async def _sleep(self, link: _HostLink, delay: float) -> None:
        link.wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await within(link.wake.wait(), delay)

    async def _load_ssh(self) -> None:
        # asyncssh (and cryptography) cost ~0.2 s to import: do it off the event loop, once,
        # and only when a host actually needs SSH (the localhost default never does). Callers
        # then import tui.transport.ssh themselves: a lookup in sys.modules, and typed.
        if not self._ssh_loaded:
            await asyncio.to_thread(importlib.import_module, "tui.transport.ssh")
            self._ssh_loaded = True

    async def _jump(self, host: Host) -> asyncssh.SSHClientConnection | None:
        spec = host.ssh.jump
        if not spec:
            return None
        # One bastion connection shared by every host behind it.
        async with self._jump_lock:
            conn = self._jumps.get(spec)
            if conn is None or conn.is_closed():
                await self._load_ssh()
                from tui.transport.ssh import open_jump

                conn = await open_jump(spec, host.ssh)
                self._jumps[spec] = conn
            return conn

    async def _supervise(self, link: _HostLink) -> None:
        host = link.host
        if host.transport == "local":
            link.transport = LocalTransport(
                host.name, HostShell.for_host(host), host.command_timeout
            )
            link.settled.set()
            self._set(link, HostState.UP)
            return
        await self._load_ssh()
        from tui.transport import ssh

        attempts = 0
        flaps = 0  # connections in a row that dropped within _FLAP_S
        was_up = False
        while not self._closing:
            attempts += 1
            try:
                async with self._connect_slots:
                    conn, client = await ssh.open_connection(host, await self._jump(host))
            except ssh.ConnectFailure as failure:
                state = failure.state
                if was_up and state == HostState.UNREACHABLE:
                    state = HostState.LOST
                self._set(link, state, failure.reason, attempts)
                link.settled.set()
                if state in (
                    HostState.HOST_KEY_MISMATCH,
                    HostState.HOST_KEY_UNKNOWN,
                    HostState.AUTH_FAILED,
                ):
                    delay = _SLOW_RETRY_S
                else:
                    delay = min(0.5 * 2 ** (attempts - 1), self._reconnect_max_delay)
                await self._sleep(link, delay * random.uniform(0.8, 1.0))
                continue
            if self._closing:  # closed while connecting (see close())
                conn.close()
                return
            attempts = 0
            was_up = True
            link.conn = conn
            link.transport = ssh.SshTransport(
                host.name,
                conn,
                HostShell.for_host(host),
                host.ssh.keepalive_interval or ssh.DEFAULT_KEEPALIVE_INTERVAL,
                host.command_timeout,
            )
            self._set(link, HostState.UP)
            link.settled.set()
            up_at = time.monotonic()
            await conn.wait_closed()
            link.transport = None
            link.conn = None
            if self._closing:
                return
            self._set(link, HostState.LOST, client.lost_reason or "connection closed")
            # A link that drops again soon after each connect (a flapping host) is retried
            # with a growing delay, not a fresh handshake every 0.3 s.
            flaps = flaps + 1 if time.monotonic() - up_at < _FLAP_S else 0
            delay = min(0.3 * 2**flaps, self._reconnect_max_delay)
            await self._sleep(link, delay * random.uniform(0.8, 1.0))
