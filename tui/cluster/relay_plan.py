"""Telemetry relays: above ~64 hosts, each group of hosts sends its agent lines through a relay
on one of its hosts (tui/remote/gpu_relay.py), so the cockpit receives one SSH packet per
group every RELAY_FLUSH_MS (50 ms; longer with many groups: relay_flush_ms) instead of one per
host each second: at 1,024 hosts the SSH receive path was a third of the cockpit's cost per
sample.

What stays as before: each host keeps its own SSH link and agent; the agent's first lines
(hello, the first full sample) and every route change come over it, and a host is LOST as
fast as before. Its link is silent while relayed, so its keepalive goes from the host's
setting to RELAYED_KEEPALIVE_S (a keepalive a second per host would be the packets saved;
at 15 s, 4,096 relayed hosts still cost the cockpit ~270 keepalive round trips a second);
a relayed host that misses a sample is told to go direct and its keepalive drops to
QUIET_KEEPALIVE_S, so a dead host is LOST within ~1 s of that (tests: ≤5 s in all).

Trust: the relay host sees its leaves' lines but cannot forge or replay them (each is signed
with a key only the leaf and the cockpit hold, relay_wire.py); dropping them only sends the
leaves direct. The relay's own lines are validated like any host's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tui.config.hosts import Host, Inventory
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import HostState, StreamProcess, Transport, TransportError

log = logging.getLogger(__name__)

RELAY_AUTO_MIN_HOSTS = 64
# Between a relay's writes. 1,024 hosts on the 2-core box: 100 ms gave p95 269 ms sample →
# screen (above 256 hosts the screen draws 5 frames a second); 50 ms costs ~160 packets a second.
RELAY_FLUSH_MS = 50
# The relays' writes the cockpit takes a second, all relays together: each costs asyncssh's
# receive path and an event-loop turn whatever it holds, so more relays write less often
# (relay_flush_ms). 160: 1,024 hosts' 8 relays at RELAY_FLUSH_MS, p95 225 ms on the device.
RELAY_WRITES_PER_S = 160
RELAY_FLUSH_MAX_MS = 250  # 4,096 hosts: 32 relays at 200 ms (their goal: p95 ≤ 500 ms)
# A relayed host's silence is found by the quiet check below (a missed sample), not by this:
# it only keeps an idle link's NAT and firewall state, as ssh's ServerAliveInterval 60 does.
RELAYED_KEEPALIVE_S = 60.0
QUIET_KEEPALIVE_S = 0.5
QUIET_AFTER_INTERVALS = 1.6  # a relayed host this many intervals without a sample goes direct
BACK_TO_RELAY_S = 30.0  # a host that went direct (quiet) is asked to use the relay again after
RETRY_SCAN_S = 5.0  # how often the hosts off their relay are looked at for that
RETRY_FAILED_S = 300.0  # a host that could not reach the relay tries again after
RELAY_START_TIMEOUT_S = 15.0
RELAY_SHORT_RUN_S = 30.0
RELAY_RETRY_MAX_S = 120.0
MAX_RELAY_LINE = (1 << 20) + 256  # an agent line (relay_wire.MAX_RELAY_LINE) and its prefix
SIG_HEX = 32  # relay_wire.SIG_HEX


def relay_groups(inventory: Inventory) -> list[tuple[Host, ...]]:
    """The hosts in groups of `telemetry.relay_group`, each with one relay (none: relays off,
    or auto below RELAY_AUTO_MIN_HOSTS). A last group of one host stays direct."""
    opts, hosts = inventory.telemetry, inventory.hosts
    if opts.relay == "off" or (opts.relay == "auto" and len(hosts) < RELAY_AUTO_MIN_HOSTS):
        return []
    size = opts.relay_group
    groups = [tuple(hosts[i : i + size]) for i in range(0, len(hosts), size)]
    return [g for g in groups if len(g) > 1]


def relay_flush_ms(relays: int) -> int:
    """Milliseconds between each relay's writes when `relays` run: RELAY_FLUSH_MS up to
    RELAY_WRITES_PER_S writes a second in all, longer above (to RELAY_FLUSH_MAX_MS)."""
    spread = round(1000 * relays / RELAY_WRITES_PER_S)
    return min(RELAY_FLUSH_MAX_MS, max(RELAY_FLUSH_MS, spread))


def hello_token(key: bytes, index: int) -> str:
    """What leaf `index` shows the relay (the rule of relay_wire.hello_token)."""
    return hmac.new(key, b"hello:%d" % index, hashlib.sha256).hexdigest()


def keyed_mac(key: bytes) -> hashlib.blake2b:
    """The keyed BLAKE2b state of a leaf's key, for signature_ok: made once per key
    (Leaf.keyed), copied for each line (the key's block is not hashed again)."""
    return hashlib.blake2b(key=key, digest_size=SIG_HEX // 2)


def signature_ok(keyed: hashlib.blake2b, counter: int, line: bytes, sig: bytes) -> bool:
    """A leaf's line as signed by relay_wire.sign with its key (only the leaf and the cockpit
    hold it); `keyed`: keyed_mac(key), left as it is. Every relayed line of the fleet comes
    here: keyed BLAKE2b, in C, ~0.9 µs a line on the 2-core box where HMAC-SHA256 took ~1.4."""
    mac = keyed.copy()
    mac.update(b"%d " % counter)
    mac.update(line)
    return hmac.compare_digest(mac.hexdigest().encode(), sig)


@dataclass(slots=True)
class Leaf:
    """One host of a group. state: "direct" (lines over its own link), "asked" (told to use
    the relay), "relayed" (it said it does), "quiet" (relayed, then missed a sample: told to
    go direct), "failed" (could not reach this relay; tried again with the next one)."""

    name: str
    index: int
    stream: StreamProcess | None = None
    transport: Transport | None = None
    key: bytes | None = None  # this assignment's signing key
    keyed: tuple[bytes, hashlib.blake2b] | None = None  # (key, its MAC state), made on first use
    counter: int = 0  # the last accepted line's counter (a replay is refused)
    state: str = "direct"
    since: float = 0.0  # time.time() of the last route change
    refused: int = 0  # relayed lines refused (bad signature, replay, malformed)


class RelayGroup:
    def __init__(self, number: int, hosts: Sequence[Host]):
        self.number = number
        self.hosts = tuple(hosts)
        self.leaves = [Leaf(h.name, i) for i, h in enumerate(hosts)]
        self.relay_host: str | None = None  # where the relay runs, once it listens
        self.address: str | None = None
        self.port: int | None = None
        self.key = b""
        self.error: str | None = None  # the relay's own error line
        self.stats: dict[str, int] = {}
        self.listening = asyncio.Event()


Deliver = Callable[[str, str], None]  # (host, agent line)
Note = Callable[[str, str | None], None]  # (host, relay problem or None: cleared)
RouteShown = Callable[[str, str | None], None]  # (host, "relay HOST" or None: direct)


class RelayHub:
    """The relays of one TelemetryMonitor: starts one per group on its first host that is up
    (the next one if it fails), tells each running agent of the group where to send, checks
    every relayed line, and sends a host that goes quiet back to its own link."""

    def __init__(
        self,
        fleet: Fleet,
        groups: Sequence[Sequence[Host]],
        interval: float,
        *,
        deliver: Deliver,
        note: Note,
        route_shown: RouteShown,
    ):
        self.fleet = fleet
        self.interval = interval
        self.groups = [RelayGroup(i, g) for i, g in enumerate(groups)]  # see relay_groups
        self.flush_ms = relay_flush_ms(len(self.groups))
        self._leaf = {leaf.name: (g, leaf) for g in self.groups for leaf in g.leaves}
        self._deliver, self._note, self._route_shown = deliver, note, route_shown
        self._tasks: list[asyncio.Task] = []
        self._retry_scanned = 0.0  # check_quiet's last look at the hosts off their relay

    def __bool__(self) -> bool:
        return bool(self.groups)

    def start(self) -> None:
        for group in self.groups:
            self._tasks.append(
                asyncio.create_task(self._keep_relay(group), name=f"gpu:relay{group.number}")
            )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # -- the leaves (called by the monitor) ---------------------------------------------------

    def leaf_started(self, name: str, stream: StreamProcess, transport: Transport) -> None:
        found = self._leaf.get(name)
        if found is None:
            return
        group, leaf = found
        leaf.stream, leaf.transport, leaf.state, leaf.key = stream, transport, "direct", None
        if group.relay_host is not None:
            self._assign(group, leaf)

    def leaf_ended(self, name: str) -> None:
        found = self._leaf.get(name)
        if found is not None:
            leaf = found[1]
            leaf.stream = leaf.transport = leaf.key = None
            leaf.state = "direct"
            self._route_shown(name, None)

    def on_route(self, name: str, via: str | None, error: str | None) -> None:
        """The agent's route line: where its lines go from now on."""
        found = self._leaf.get(name)
        if found is None:
            return
        group, leaf = found
        now = time.time()
        if via == "relay" and leaf.state == "asked" and leaf.transport is not None:
            leaf.state, leaf.since = "relayed", now
            leaf.transport.set_keepalive(RELAYED_KEEPALIVE_S)
            self._route_shown(name, f"relay {group.relay_host}")
            self._note(name, None)
            return
        if via == "direct":
            leaf.state = "failed" if error and leaf.state == "asked" else "direct"
            leaf.key, leaf.since = None, now
            if leaf.transport is not None:
                leaf.transport.set_keepalive(None)
            self._route_shown(name, None)
            if error:
                self._note(name, f"relay: {error} (lines go direct)")

    def check_quiet(self, now: float, last_sample: Mapping[str, float]) -> None:
        """A relayed host without a sample for QUIET_AFTER_INTERVALS intervals is told to go
        direct, and its link is checked at once (a dead host: LOST about a second later).
        One that went direct is asked back after BACK_TO_RELAY_S (RETRY_FAILED_S when it
        could not reach the relay), so a passing stall does not cost the relay for good.

        `last_sample`: each host's last sample's time (none yet: absent). Called twice an
        interval: only the hosts late or without a sample are looked at (found in C, not one
        Python step per leaf: 4,096 leaves cost ~1 % of a core that way), and the hosts off
        their relay at most every RETRY_SCAN_S (their waits are 30 s and more)."""
        limit = max(QUIET_AFTER_INTERVALS * self.interval, 1.5)
        cutoff = now - limit
        late = [name for name, t in last_sample.items() if t < cutoff]
        late += self._leaf.keys() - last_sample.keys()
        for name in late:
            found = self._leaf.get(name)
            if found is None:
                continue
            leaf = found[1]
            if leaf.state != "relayed" or leaf.stream is None or leaf.transport is None:
                continue
            if max(last_sample.get(name, 0.0), leaf.since) < cutoff:
                leaf.state, leaf.since = "quiet", now
                leaf.transport.set_keepalive(QUIET_KEEPALIVE_S)
                leaf.stream.send("direct\n")
        if abs(now - self._retry_scanned) < RETRY_SCAN_S:
            return
        self._retry_scanned = now
        for group in self.groups:
            if group.relay_host is None:
                continue
            for leaf in group.leaves:
                if (
                    leaf.stream is not None
                    and leaf.transport is not None
                    and leaf.since
                    and (
                        (leaf.state == "direct" and now - leaf.since > BACK_TO_RELAY_S)
                        or (leaf.state == "failed" and now - leaf.since > RETRY_FAILED_S)
                    )
                ):
                    self._assign(group, leaf)

    # -- the relay's output -------------------------------------------------------------------

    def _relay_line(self, group: RelayGroup, line: str) -> None:
        """One line of the relay's stdout: `<index> <counter> <sig> <agent line>`, or JSON."""
        if line.startswith("{"):
            self._control(group, line)
            return
        parts = line.split(" ", 3)
        leaf = None
        try:
            if not parts[0].isdigit():
                return
            leaf = group.leaves[int(parts[0])]
            counter = int(parts[1])
            sig, payload = parts[2], parts[3]
        except (ValueError, IndexError):
            if leaf is not None:
                self._refuse(leaf, "a malformed line")
            return
        if leaf.key is None or leaf.stream is None:
            return  # an assignment that ended (a late line): its key is gone
        if counter <= leaf.counter:
            self._refuse(leaf, "a replayed line")
        else:
            keyed = leaf.keyed
            if keyed is None or keyed[0] is not leaf.key:
                keyed = leaf.keyed = (leaf.key, keyed_mac(leaf.key))
            if not signature_ok(keyed[1], counter, payload.encode(), sig.encode()):
                self._refuse(leaf, "a line with a bad signature")
                return
            leaf.counter = counter
            self._deliver(leaf.name, payload)

    def _refuse(self, leaf: Leaf, what: str) -> None:
        leaf.refused += 1
        n = leaf.refused
        self._note(leaf.name, f"relay: {n} line{'s' if n != 1 else ''} refused (last: {what})")

    def _control(self, group: RelayGroup, line: str) -> None:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return
        if type(msg) is not dict:
            return
        kind = msg.get("type")
        if kind == "relay":
            port = msg.get("port")
            if type(port) is int and 0 < port < 65536:
                group.port = port
                group.listening.set()
        elif kind == "relay-stats":
            group.stats = {
                k: v for k, v in msg.items() if k != "type" and type(v) is int and v >= 0
            }
        elif kind == "error":
            group.error = one_line(str(msg.get("error")), 300)

    # -- running the relay --------------------------------------------------------------------

    async def _keep_relay(self, group: RelayGroup) -> None:
        """Run the group's relay for as long as the monitor runs: on the first host that is
        up; one where it could not start is tried again only after the others. Waits between
        runs double (capped) while relays fail or end within RELAY_SHORT_RUN_S."""
        failed: set[str] = set()
        short = 0
        while True:
            host = next(
                (
                    h
                    for h in group.hosts
                    if h.name not in failed and self.fleet.status(h.name).state == HostState.UP
                ),
                None,
            )
            if host is None:
                failed.clear()
                await asyncio.sleep(2.0)
                continue
            started = time.monotonic()
            try:
                ran = await self._run_relay(group, host)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the relay end telemetry: the hosts stay direct
                log.exception("relay %d on %s failed", group.number, host.name)
                ran = False
            if not ran:
                failed.add(host.name)
            short = short + 1 if not ran or time.monotonic() - started < RELAY_SHORT_RUN_S else 0
            await asyncio.sleep(min(2.0 ** (short - 1), RELAY_RETRY_MAX_S) if short else 1.0)

    async def _run_relay(self, group: RelayGroup, host: Host) -> bool:
        """One relay run on `host`. True: it listened (and has ended); False: it never did."""
        transport = self.fleet.transport(host.name)
        if transport is None:
            return False
        group.key, group.error, group.port = secrets.token_bytes(32), None, None
        group.listening.clear()
        argv = python_argv(
            host.python, "gpu_relay", "--bind", host.node_ip, "--leaves", str(len(group.leaves)),
            "--flush-ms", str(self.flush_ms), site=False,
        )  # fmt: skip
        try:
            stream = await transport.stream(
                argv, max_line=MAX_RELAY_LINE, on_line=lambda line: self._relay_line(group, line)
            )
        except TransportError as exc:
            self._note(host.name, f"relay: {exc}")
            return False
        ended = asyncio.ensure_future(stream.finished())
        try:
            stream.send(group.key.hex() + "\n")
            listening = asyncio.ensure_future(group.listening.wait())
            await asyncio.wait(
                [listening, ended], timeout=RELAY_START_TIMEOUT_S, return_when="FIRST_COMPLETED"
            )
            listening.cancel()
            if not group.listening.is_set():
                why = group.error or one_line(await stream.stderr_tail(), 200) or "no answer"
                self._note(host.name, f"relay could not start here: {why}")
                return False
            group.relay_host, group.address = host.name, host.node_ip
            for leaf in group.leaves:
                if leaf.stream is not None and leaf.state in ("direct", "failed"):
                    self._assign(group, leaf)
            await asyncio.wait([ended])
            return True
        finally:
            group.relay_host = None
            self._all_direct(group)
            ended.cancel()
            with contextlib.suppress(BaseException):
                await ended
            await stream.close()

    def _assign(self, group: RelayGroup, leaf: Leaf) -> None:
        assert leaf.stream is not None
        leaf.key, leaf.counter, leaf.state, leaf.since = secrets.token_bytes(32), 0, "asked", 0.0
        token = hello_token(group.key, leaf.index)
        # Over the leaf's own SSH channel: the relay host never sees the leaf's key.
        leaf.stream.send(
            f"relay {group.address} {group.port} {leaf.index} {token} {leaf.key.hex()}\n"
        )

    def _all_direct(self, group: RelayGroup) -> None:
        """The relay ended: its leaves go back to their own links now (not when a send to the
        dead relay times out)."""
        for leaf in group.leaves:
            if leaf.stream is not None and leaf.state in ("asked", "relayed", "quiet"):
                leaf.stream.send("direct\n")
                leaf.state, leaf.key = "direct", None
                if leaf.transport is not None:
                    leaf.transport.set_keepalive(None)
                self._route_shown(leaf.name, None)
