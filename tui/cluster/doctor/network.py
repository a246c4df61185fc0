"""Network checks: the head's ports, the GCS port reached from every worker (the one active
check), NCCL/Gloo socket interfaces and InfiniBand ports."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from tui.cluster.doctor.findings import (
    CONNECT_TIMEOUT_S,
    LISTENER_LIFETIME_S,
    MAX_PARALLEL,
    STATUSES,
    Finding,
    Status,
    _f,
    _names,
)
from tui.cluster.netcheck import tcp_reachable
from tui.cluster.probe import HostFacts, Listener, NetInterface
from tui.config.hosts import Host, Inventory
from tui.remote import python_argv
from tui.transport.fleet import Fleet
from tui.transport.types import StreamProcess, TransportError

# --------------------------------------------------------------------------- head ports


def classify_port(port: int, what: str, listener: Listener | None) -> tuple[Status, str]:
    if listener is None:
        return "ok", f"port {port} ({what}) is free"
    if listener.is_ray:
        return "ok", f"port {port} ({what}) is held by Ray ({listener.describe()})"
    return "fail", f"port {port} ({what}) is held by {listener.describe()}"


def _head_port_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    head = inventory.head
    f = facts.get(head.name)
    if f is None or not f.ok:
        return []
    out = []
    for port, what, key in (
        (inventory.ray.port, "GCS", "ray.port"),
        (inventory.ray.dashboard_port, "dashboard", "ray.dashboard_port"),
    ):
        if port not in f.listeners:
            out.append(
                _f(
                    "head-ports",
                    "warn",
                    head.name,
                    f"port {port} ({what}) not inspected "
                    f"({f.probe_errors.get('procs', 'no listener data')})",
                )
            )
            continue
        listener = f.listeners[port]
        status, text = classify_port(port, what, listener)
        fix = ""
        if status == "fail":
            assert listener is not None
            stop = f"kill {listener.pid}" if listener.pid else f"ss -ltnp 'sport = :{port}'"
            fix = f"stop it on {head.name} ({stop}) or pick another port: {key}: {port + 1}"
        out.append(_f("head-ports", status, head.name, text, fix))
    return out


# --------------------------------------------------------------------------- interfaces


@dataclass(frozen=True)
class IfSpec:
    """NCCL's interface list syntax: ``[^][=]name[,name…]`` (prefix match unless ``=``)."""

    names: tuple[str, ...]
    exclude: bool = False
    exact: bool = False

    @classmethod
    def parse(cls, text: str) -> IfSpec:
        text = text.strip()
        exclude = text.startswith("^")
        text = text[1:] if exclude else text
        exact = text.startswith("=")
        text = text[1:] if exact else text
        names = tuple(n.strip().split(":")[0] for n in text.split(",") if n.strip())
        return cls(names, exclude, exact)

    def item_matches(self, item: str, ifname: str) -> bool:
        return ifname == item if self.exact else ifname.startswith(item)

    def selects(self, ifname: str) -> bool:
        hit = any(self.item_matches(n, ifname) for n in self.names)
        return hit != self.exclude


def _usable(iface: NetInterface) -> bool:
    return iface.has_address and not iface.loopback


def _nccl_default(ifaces: Sequence[NetInterface]) -> list[NetInterface]:
    """What NCCL picks unset: ib* first, else everything but docker* and lo."""
    ib = [i for i in ifaces if _usable(i) and i.name.startswith("ib")]
    if ib:
        return ib
    return [i for i in ifaces if _usable(i) and not i.name.startswith("docker")]


def _ifname_problems(var: str, value: str, facts: HostFacts) -> tuple[Status, str]:
    spec = IfSpec.parse(value)
    ifaces = facts.interfaces
    have = ", ".join(i.name for i in ifaces if not i.loopback) or "none"
    if var == "GLOO_SOCKET_IFNAME":
        # Gloo opens a device per listed name and needs each, by exact name, with an address.
        missing = [n for n in spec.names if not any(i.name == n and i.has_address for i in ifaces)]
        if missing:
            return (
                "fail",
                f"{var}={value}: no interface {', '.join(missing)} with an address "
                f"here (has {have})",
            )
        return "ok", f"{var}={value}"
    selected = [i for i in ifaces if i.has_address and spec.selects(i.name)]
    if not selected:
        bare = [i.name for i in ifaces if spec.selects(i.name) and not spec.exclude]
        detail = f" ({', '.join(bare)} has no IP address)" if bare else ""
        return (
            "fail",
            f"{var}={value} matches no interface with an address here{detail} (has {have})",
        )
    if not spec.exclude:
        unmatched = [
            n
            for n in spec.names
            if not any(spec.item_matches(n, i.name) for i in ifaces if i.has_address)
        ]
        if unmatched:
            return (
                "warn",
                f"{var}={value}: {', '.join(unmatched)} matches nothing here "
                f"(uses {', '.join(i.name for i in selected)})",
            )
    return "ok", f"{var}={value} → {', '.join(i.name for i in selected)}"


def _socket_ifname_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        if not f.interfaces:
            out.append(
                _f(
                    "socket-ifname",
                    "warn",
                    name,
                    "interfaces could not be listed: "
                    f"{f.probe_errors.get('interfaces', 'none found')}",
                )
            )
            continue
        host = inventory.host(name)
        own = f.interface_with_address(host.node_ip)
        suggest = own.name if own else "IFACE"
        parts: list[tuple[Status, str]] = []
        unset = [v for v in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if not f.env.get(v)]
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if f.env.get(var):
                parts.append(_ifname_problems(var, f.env[var], f))
        candidates = _nccl_default(f.interfaces)
        if unset and len(candidates) > 1:
            parts.append(
                (
                    "warn",
                    f"{' and '.join(unset)} unset with several interfaces "
                    f"({', '.join(i.name for i in candidates)}): NCCL/Gloo may "
                    "pick one the other nodes cannot reach",
                )
            )
        worst: Status = max((s for s, _ in parts), key=STATUSES.index, default="ok")
        if worst == "ok":
            text = "; ".join(t for _, t in parts) or (
                f"one candidate interface ({', '.join(i.name for i in candidates) or 'none'})"
            )
            out.append(_f("socket-ifname", "ok", name, text))
        else:
            text = "; ".join(t for s, t in parts if s != "ok")
            fix = (
                f"ray.env: {{NCCL_SOCKET_IFNAME: {suggest}, GLOO_SOCKET_IFNAME: {suggest}}} "
                "naming the interface that carries node_ip on every host"
            )
            out.append(_f("socket-ifname", worst, name, text, fix))
    return out


def _infiniband_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        if f.env.get("NCCL_IB_DISABLE", "").strip() in ("1", "true", "True"):
            out.append(
                _f("infiniband", "ok", name, "NCCL_IB_DISABLE is set: NCCL will not use InfiniBand")
            )
            continue
        if f.ib_source is None:
            out.append(
                _f(
                    "infiniband",
                    "ok",
                    name,
                    "no ibstat and no /sys/class/infiniband (no InfiniBand here)",
                )
            )
            continue
        if f.ib_error:
            out.append(
                _f(
                    "infiniband",
                    "warn",
                    name,
                    f.ib_error,
                    "check the IB stack: ibstat; systemctl status openibd",
                )
            )
            continue
        ports = list(f.ib_ports)
        hca = f.env.get("NCCL_IB_HCA")
        if hca:
            spec = IfSpec.parse(hca)
            ports = [p for p in ports if spec.selects(p.ca)]
        if not ports:
            what = f"no HCA port matches NCCL_IB_HCA={hca}" if hca else "no HCA ports listed"
            out.append(
                _f(
                    "infiniband",
                    "warn" if not hca else "fail",
                    name,
                    f"{what} ({f.ib_source})",
                    "check NCCL_IB_HCA in ray.env against ibstat -l"
                    if hca
                    else "check the IB stack: ibstat",
                )
            )
            continue
        down = [p for p in ports if not p.active]
        if not down:
            out.append(
                _f(
                    "infiniband",
                    "ok",
                    name,
                    f"{len(ports)} port(s) Active/LinkUp: {_names([p.label for p in ports])}",
                )
            )
            continue
        desc = _names([f"{p.label} {p.state}/{p.physical_state}" for p in down])
        status: Status = "fail" if len(down) == len(ports) else "warn"
        out.append(
            _f(
                "infiniband",
                status,
                name,
                f"{len(down)} of {len(ports)} IB port(s) not Active/LinkUp: {desc}",
                "check cables/subnet manager (ibstat, sminfo), or leave those HCAs out: "
                "ray.env: {NCCL_IB_HCA: <active HCAs>}",
            )
        )
    return out


# --------------------------------------------------------------------------- GCS reach

_WILDCARDS = ("0.0.0.0", "::", "::ffff:0.0.0.0")


def _explain_connect_error(text: str) -> str:
    if text == "Invalid argument":
        return "Invalid argument (the route to it is unusable, e.g. a blackhole route)"
    return text


async def _gcs_reach(
    fleet: Fleet,
    inventory: Inventory,
    probes: Mapping[str, Awaitable[HostFacts]],
    progress: Callable[[str], None],
    timeout: float,
) -> list[Finding]:
    """A TCP connect from every worker to the head's node_ip:ray.port. `probes`: each host's
    facts, awaited host by host (tasks, so awaiting one twice is fine): the head's test
    listener opens once the head's probe answered, and each worker connects once its own probe
    and the listener are ready, while other hosts are still being probed."""
    head = inventory.head
    port = inventory.ray.port
    workers = [h for h in inventory.hosts if not h.is_head]
    if not workers:
        return [_f("gcs-reach", "ok", None, "single node: no worker has to reach the GCS")]
    stream: StreamProcess | None = None

    async def head_side() -> str | list[Finding]:
        """How the workers are tested ("a test listener", …), or the findings that end the
        check (the head was not probed, or cannot listen on node_ip)."""
        nonlocal stream
        hf = await probes[head.name]
        if not hf.ok or fleet.transport(head.name) is None:
            return [_f("gcs-reach", "warn", None, f"not tested: head {head.name} was not probed")]
        listener = hf.listeners.get(port)
        if listener is not None and (
            listener.address in _WILDCARDS or listener.address == head.node_ip
        ):
            return f"{head.name}'s GCS port"
        progress(f"opening a test listener on {head.node_ip}:{port}")
        transport = fleet.transport(head.name)
        assert transport is not None
        try:
            stream = await transport.stream(
                python_argv(
                    head.python,
                    "port_listener",
                    head.node_ip,
                    str(port),
                    str(LISTENER_LIFETIME_S),
                    site=False,
                ),
                first_line=min(timeout, 15.0),
                what="test listener",
            )
            first = await _first_line(stream)
        except TransportError as exc:  # it did not start, or gave no line in time
            return [_f("gcs-reach", "fail", head.name, f"no test listener: {exc}")]
        if first != "ready":
            err = (first or await stream.stderr_tail() or "no answer").removeprefix("error: ")
            return [
                _f(
                    "gcs-reach",
                    "fail",
                    head.name,
                    f"cannot listen on node_ip {head.node_ip}:{port} on {head.name}: {err}",
                    f"set node_ip: of {head.name} to one of its addresses ({_addresses(hf)})",
                )
            ]
        return "a test listener"

    ready = asyncio.ensure_future(head_side())
    slots = asyncio.Semaphore(MAX_PARALLEL)
    testers: list[str] = []

    async def attempt(worker: Host) -> Finding | None:
        f = await probes[worker.name]
        if not f.ok or fleet.transport(worker.name) is None:
            return None  # not a tester: its probe already says why
        testers.append(worker.name)
        how = await ready
        if not isinstance(how, str):
            return None  # the head's answer ends the check
        async with slots:
            return await _connect_from(fleet, worker, head, port, how)

    try:
        tried = await asyncio.gather(*(attempt(w) for w in workers))
        how = await ready
        if isinstance(how, list) and how[0].status == "warn":
            return how  # the head was not probed
        if not testers:
            return [_f("gcs-reach", "warn", None, "not tested: no worker could be probed")]
        if isinstance(how, list):
            return how  # the head cannot listen on node_ip
        return [f for f in tried if f is not None]
    finally:
        ready.cancel()
        await asyncio.gather(ready, return_exceptions=True)
        if stream is not None:
            await stream.close()  # EOF on its stdin ends the listener


async def _first_line(stream: StreamProcess) -> str | None:
    """The stream's first line (None if it ended without one); its deadline is the stream's
    own (first_line), which raises CommandTimeout."""
    lines = stream.lines()
    try:
        async for line in lines:
            return line.strip()
        return None
    finally:
        # Only the first line is wanted: close the generator now, not at loop shutdown.
        closer = getattr(lines, "aclose", None)
        if closer is not None:
            await closer()


def _addresses(f: HostFacts) -> str:
    addrs = [a for i in f.interfaces if not i.loopback for a in i.ipv4]
    return ", ".join(addrs) or "none with IPv4"


async def _connect_from(fleet: Fleet, worker: Host, head: Host, port: int, how: str) -> Finding:
    transport = fleet.transport(worker.name)
    target = f"{head.node_ip}:{port}"
    if transport is None:
        return _f("gcs-reach", "warn", worker.name, "not tested: the host went away")
    why = await tcp_reachable(transport, worker.python, head.node_ip, port, CONNECT_TIMEOUT_S)
    if why is None:
        return _f("gcs-reach", "ok", worker.name, f"reached {target} ({how})")
    return _f(
        "gcs-reach",
        "fail",
        worker.name,
        f"cannot reach {target}: {_explain_connect_error(why)}",
        f"open TCP {port} from {worker.name} to {head.node_ip} (firewall, security "
        f"group), or set node_ip: of {head.name} to an address {worker.name} can reach",
    )
