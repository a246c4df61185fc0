"""Facts about each host — one SSH exec of tui/remote/probe.py per host, all hosts in parallel.

The probe runs with the host's configured interpreter and with hosts.yaml ``ray.env`` exported
(by default), so its answers are what ``ray start`` and Ray's workers will see: the packages of
that interpreter, the GPUs NVML shows it, the effective NCCL/MKL/HF variables. Like every
command, it runs after the host's ``env_setup`` and inside its ``container`` (the transport does
that), so a bare ``python:`` is the one the setup put on PATH: ``python_executable`` is it,
resolved (`interpreter_label`, `resolve_python`).

`HostFacts` is the stable interface for bring-up and the doctor. Its fields (None = unknown):

========================  ======================================================================
host                      inventory name
ok                        the probe ran and answered; False: see ``error``
error                     one line: why there are no facts (host down, interpreter missing, …)
reached                   the host was up and the command ran (``ok`` False then means the
                          interpreter failed, not the link)
rtt_s                     wall time of the probe exec as the cockpit saw it (includes startup)
clock_offset_s            host clock − cockpit clock, estimated at the midpoint of the exec
remote_time               the host's time.time() just before it answered
hostname                  socket.gethostname() on the host
python_executable         sys.executable; python_realpath: with symlinks resolved
python_version            platform.python_version(), e.g. "3.11.7" (Ray matches this exactly)
python_prefix             sys.prefix (the venv); path_env: $PATH
packages                  distribution name → version or None, for PACKAGES below
ray_version, verl_version, debugpy_version, numpy_version, numexpr_version, mkl_version,
mkl_service_version, torch_version, nvml_py_version      shortcuts into ``packages``
numpy_mkl                 numpy built against MKL (from its build config; None: no numpy)
mkl_present               numpy MKL-linked, or mkl / mkl-service installed, or libmkl in prefix
gpu_count                 NVML's device count (nvidia-smi -L without pynvml) plus the AMD GPUs
                          (amdgpu sysfs, else amd-smi/rocm-smi); None: unknown
amd_gpu_count             how many of gpu_count are AMD's (0: none; None: an older probe)
gpu_names, gpu_source ("nvml" | "nvidia-smi" | "amdgpu-sysfs" | …; "+"-joined when
                          mixed), gpu_error (why gpu_count is None), driver_version
cpu_count                 os.cpu_count(); cpu_affinity_count: len(sched_getaffinity(0))
ray_cpu_count             the CPUs Ray detects by itself (cpu_count, lowered by a cgroup quota or
                          cpuset, as ray._private.utils.get_num_cpus does)
mem_total_bytes, mem_available_bytes    /proc/meminfo; mem_cgroup_limit_bytes: cgroup limit
interfaces                NetInterface per interface (name, ipv4, ipv6 non-link-local, up,
                          loopback)
env                       the selected variables that are set (remote/probe.py ENV_KEYS)
hf_cache                  HfCache: the hub cache dir, whether it exists / is readable / writable
ib_source                 "ibstat" | "sysfs" | None (no InfiniBand tools or devices)
ib_ports, ib_error        IbPort per HCA port (state "Active", physical_state "LinkUp", …)
listeners                 port → Listener(pid, name, address, cmdline, is_ray) or None (free)
ray_running               raylet or gcs_server runs on the host
ray_processes             process name → pids, for Ray's processes
probe_errors              section → one-line error, for sections that failed on the host
========================  ======================================================================
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tui.config.hosts import Host, Inventory
from tui.remote import python_argv
from tui.transport.fleet import Fleet
from tui.transport.types import HostUnavailable, Transport, TransportError

MAX_PARALLEL = 128  # probes in flight at once; each is one channel on an existing connection


def probe_argv(python: str, ports: Iterable[int] = ()) -> list[str]:
    """``python -u -c SOURCE --ports 6379,8265``: tui/remote/probe.py, inline."""
    ports = sorted(set(ports))
    return python_argv(python, "probe", *(["--ports", ",".join(map(str, ports))] if ports else []))


@dataclass(frozen=True)
class NetInterface:
    name: str
    ipv4: tuple[str, ...] = ()
    ipv6: tuple[str, ...] = ()  # link-local addresses left out
    up: bool | None = None
    loopback: bool = False

    @property
    def has_address(self) -> bool:
        return bool(self.ipv4 or self.ipv6)


@dataclass(frozen=True)
class Listener:
    pid: int | None  # None: something listens, but its owner is not visible to us
    name: str | None  # /proc/PID/comm
    address: str | None = None
    cmdline: str | None = None
    is_ray: bool = False

    def describe(self) -> str:
        if self.pid is None:
            return "a process this user cannot see"
        return f"{self.name or '?'} (pid {self.pid})"


@dataclass(frozen=True)
class HfCache:
    path: str
    source: str  # HF_HUB_CACHE | HF_HOME | default
    exists: bool = False
    readable: bool = False
    writable: bool = False
    checked: str | None = None  # the directory actually tested (nearest existing parent)
    error: str | None = None


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    state: str | None = None
    physical_state: str | None = None
    rate: str | None = None
    link_layer: str | None = None

    @property
    def active(self) -> bool:
        return (self.state or "").lower() == "active" and (
            (self.physical_state or "").lower() == "linkup"
        )

    @property
    def label(self) -> str:
        return f"{self.ca}:{self.port}"


@dataclass(frozen=True)
class HostFacts:
    host: str
    ok: bool = False
    error: str | None = None
    reached: bool = False
    no_answer: bool = False  # connected, but the probe's command stalled or its link dropped
    rtt_s: float | None = None
    clock_offset_s: float | None = None
    remote_time: float | None = None
    hostname: str | None = None
    python_executable: str | None = None
    python_realpath: str | None = None
    python_version: str | None = None
    python_prefix: str | None = None
    path_env: str | None = None
    packages: Mapping[str, str | None] = field(default_factory=dict)
    ray_version: str | None = None
    verl_version: str | None = None
    debugpy_version: str | None = None
    numpy_version: str | None = None
    numexpr_version: str | None = None
    mkl_version: str | None = None
    mkl_service_version: str | None = None
    torch_version: str | None = None
    nvml_py_version: str | None = None
    numpy_mkl: bool | None = None
    mkl_present: bool = False
    gpu_count: int | None = None
    amd_gpu_count: int | None = None
    gpu_names: tuple[str | None, ...] = ()
    gpu_source: str | None = None
    gpu_error: str | None = None
    driver_version: str | None = None
    cpu_count: int | None = None
    cpu_affinity_count: int | None = None
    ray_cpu_count: int | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    mem_cgroup_limit_bytes: int | None = None
    interfaces: tuple[NetInterface, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    hf_cache: HfCache | None = None
    ib_source: str | None = None
    ib_ports: tuple[IbPort, ...] = ()
    ib_error: str | None = None
    listeners: Mapping[int, Listener | None] = field(default_factory=dict)
    ray_running: bool = False
    ray_processes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    probe_errors: Mapping[str, str] = field(default_factory=dict)
    tracing: Mapping[str, Any] = field(default_factory=dict)  # tui/cluster/tracing.py reads it

    def interface_with_address(self, address: str) -> NetInterface | None:
        for iface in self.interfaces:
            if address in iface.ipv4 or address in iface.ipv6:
                return iface
        return None


def _get(data: Mapping[str, Any] | None, key: str, kind: type | tuple[type, ...]) -> Any:
    value = (data or {}).get(key)
    return value if isinstance(value, kind) else None


def _int(data: Mapping[str, Any] | None, key: str) -> int | None:
    value = _get(data, key, (int, float))
    return None if value is None or isinstance(value, bool) else int(value)


def facts_from_json(
    host: str,
    data: Mapping[str, Any],
    *,
    rtt_s: float | None = None,
    clock_offset_s: float | None = None,
) -> HostFacts:
    """HostFacts from the probe's JSON object; tolerant of missing or mistyped parts."""
    py = _get(data, "python", dict)
    pkgs = {
        str(k): (v if isinstance(v, str) else None)
        for k, v in (_get(data, "packages", dict) or {}).items()
    }
    mkl = _get(data, "mkl", dict)
    gpus = _get(data, "gpus", dict)
    cpus = _get(data, "cpus", dict)
    mem = _get(data, "memory", dict)
    ib = _get(data, "infiniband", dict)
    hf = _get(data, "hf_cache", dict)
    interfaces = tuple(
        NetInterface(
            name=str(i.get("name")),
            ipv4=tuple(str(a) for a in i.get("ipv4") or ()),
            ipv6=tuple(str(a) for a in i.get("ipv6") or ()),
            up=i.get("up") if isinstance(i.get("up"), bool) else None,
            loopback=bool(i.get("loopback")),
        )
        for i in _get(data, "interfaces", list) or ()
        if isinstance(i, dict)
    )
    listeners: dict[int, Listener | None] = {}
    for port, item in (_get(data, "listeners", dict) or {}).items():
        if not str(port).isdigit():
            continue
        listeners[int(port)] = (
            None
            if not isinstance(item, dict)
            else Listener(
                pid=_int(item, "pid"),
                name=_get(item, "name", str),
                address=_get(item, "address", str),
                cmdline=_get(item, "cmdline", str),
                is_ray=bool(item.get("ray")),
            )
        )
    ib_ports = tuple(
        IbPort(
            ca=str(p.get("ca")),
            port=_int(p, "port") or 0,
            state=_get(p, "state", str),
            physical_state=_get(p, "physical_state", str),
            rate=_get(p, "rate", str),
            link_layer=_get(p, "link_layer", str),
        )
        for p in (_get(ib, "ports", list) or ())
        if isinstance(p, dict)
    )
    hf_cache = None
    if hf and isinstance(hf.get("path"), str):
        hf_cache = HfCache(
            path=hf["path"],
            source=str(hf.get("source")),
            exists=bool(hf.get("exists")),
            readable=bool(hf.get("readable")),
            writable=bool(hf.get("writable")),
            checked=_get(hf, "checked", str),
            error=_get(hf, "error", str),
        )
    ray_procs = {
        str(k): tuple(int(p) for p in v if isinstance(p, int))
        for k, v in (_get(data, "ray_processes", dict) or {}).items()
        if isinstance(v, list)
    }
    return HostFacts(
        host=host,
        ok=True,
        reached=True,
        rtt_s=rtt_s,
        clock_offset_s=clock_offset_s,
        remote_time=_get(data, "time", (int, float)),
        hostname=_get(data, "hostname", str),
        python_executable=_get(py, "executable", str),
        python_realpath=_get(py, "realpath", str),
        python_version=_get(py, "version", str),
        python_prefix=_get(py, "prefix", str),
        path_env=_get(data, "path", str),
        packages=pkgs,
        ray_version=pkgs.get("ray"),
        verl_version=pkgs.get("verl"),
        debugpy_version=pkgs.get("debugpy"),
        numpy_version=pkgs.get("numpy"),
        numexpr_version=pkgs.get("numexpr"),
        mkl_version=pkgs.get("mkl"),
        mkl_service_version=pkgs.get("mkl-service"),
        torch_version=pkgs.get("torch"),
        nvml_py_version=pkgs.get("nvidia-ml-py"),
        numpy_mkl=_get(mkl, "numpy_mkl", bool),
        mkl_present=bool(_get(mkl, "present", bool)),
        gpu_count=_int(gpus, "count"),
        amd_gpu_count=_int(gpus, "amd_count"),
        gpu_names=tuple(n if isinstance(n, str) else None for n in _get(gpus, "names", list) or ()),
        gpu_source=_get(gpus, "source", str),
        gpu_error=_get(gpus, "error", str),
        driver_version=_get(gpus, "driver", str),
        cpu_count=_int(cpus, "count"),
        cpu_affinity_count=_int(cpus, "affinity"),
        ray_cpu_count=_int(cpus, "ray_detected"),
        mem_total_bytes=_int(mem, "total"),
        mem_available_bytes=_int(mem, "available"),
        mem_cgroup_limit_bytes=_int(mem, "cgroup_limit"),
        interfaces=interfaces,
        env={str(k): str(v) for k, v in (_get(data, "env", dict) or {}).items()},
        hf_cache=hf_cache,
        tracing=_get(data, "tracing", dict) or {},
        ib_source=_get(ib, "source", str),
        ib_ports=ib_ports,
        ib_error=_get(ib, "error", str),
        listeners=listeners,
        ray_running=bool(data.get("ray_running")),
        ray_processes=ray_procs,
        probe_errors={str(k): str(v) for k, v in (_get(data, "errors", dict) or {}).items()},
    )


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    # A traceback's last line says what happened; anything else, its first.
    if lines and lines[0].startswith("Traceback"):
        return lines[-1]
    return lines[0] if lines else ""


async def _transport(fleet: Fleet, name: str, timeout: float) -> Transport:
    return await fleet.ready(name, timeout)


async def probe_host(
    fleet: Fleet,
    host: Host | str,
    *,
    ports: Iterable[int] = (),
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> HostFacts:
    """Probe one host. Never raises for host trouble: ``ok=False`` with a one-line ``error``.

    ``env`` is exported for the probe (pass hosts.yaml ``ray.env`` to see what Ray will see);
    ``ports`` are the TCP ports whose listeners are reported. ``timeout`` bounds the wait for
    the connection and the probe's answer together (None: the host's ssh.command_timeout,
    each).
    """
    spec = fleet.inventory.host(host) if isinstance(host, str) else host
    name = spec.name
    start = time.monotonic()
    try:
        transport = await _transport(fleet, name, timeout or spec.command_timeout)
    except HostUnavailable as exc:
        return HostFacts(host=name, error=str(exc))
    argv = probe_argv(spec.python, ports)
    left = None if timeout is None else max(1.0, timeout - (time.monotonic() - start))
    before = time.time()
    try:
        res = await transport.run(argv, env=dict(env) if env else None, timeout=left, what="probe")
    except TransportError as exc:  # the host is named beside the error wherever it is shown
        return HostFacts(
            host=name,
            error=str(exc).removeprefix(f"{name}: "),
            reached=True,
            no_answer=True,
        )
    after = time.time()
    if res.exit_status == 127:
        after_setup = " after env_setup" if spec.env_setup else ""
        return HostFacts(
            host=name,
            reached=True,
            error=f"interpreter not found{after_setup}: {spec.python} ({_first_line(res.stderr)})",
        )
    if res.exit_status == 126:
        return HostFacts(
            host=name, reached=True, error=f"interpreter not executable: {spec.python}"
        )
    data = None
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            break
    if not isinstance(data, dict) or "fatal" in data:
        why = (
            (data or {}).get("fatal")
            or _first_line(res.stderr)
            or (f"exit status {res.exit_status}, no output")
        )
        inside = f" in {spec.container.label}" if spec.container else ""
        return HostFacts(
            host=name, reached=True, error=f"probe failed with {spec.python}{inside}: {why}"
        )
    remote = data.get("time")
    offset = remote - (before + after) / 2 if isinstance(remote, (int, float)) else None
    return facts_from_json(name, data, rtt_s=after - before, clock_offset_s=offset)


def interpreter_label(host: Host, facts: HostFacts | None = None) -> str:
    """hosts.yaml's `python:` as the probe found it: a bare name with what it resolved to after
    the host's env_setup (`python → /opt/conda/envs/verl/bin/python`), and the container it
    runs in, if any."""
    python = host.python
    found = facts.python_executable if facts is not None and facts.ok else None
    text = python if not found or found == python else f"{python} → {found}"
    if host.container is not None:
        text += f"  (in {host.container.label})"
    return text


class InterpreterNotFound(TransportError, title="no python on host"):
    """A bare `python:` that no command on the host's PATH (after env_setup) answers to."""


_resolved: weakref.WeakKeyDictionary[Fleet, dict[str, str]] = weakref.WeakKeyDictionary()


async def resolve_python(fleet: Fleet, host: Host | str, *, timeout: float = 20.0) -> str:
    """The absolute path of the host's interpreter: hosts.yaml's `python:` when it is a path,
    else what `command -v NAME` answers on the host after its env_setup (inside its container),
    cached per fleet. TransportError (InterpreterNotFound) when it cannot be resolved."""
    spec = fleet.inventory.host(host) if isinstance(host, str) else host
    if "/" in spec.python:
        return spec.python
    known = _resolved.setdefault(fleet, {})
    if spec.name in known:
        return known[spec.name]
    transport = await _transport(fleet, spec.name, timeout)
    res = await transport.run(
        ["sh", "-c", 'command -v "$1"', "verl-tui", spec.python], timeout=timeout
    )
    found = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    if not res.ok or not found.startswith("/"):
        after = " after env_setup" if spec.env_setup else ""
        raise InterpreterNotFound(
            f"{spec.name}: {spec.python!r} is not on PATH{after}",
            hint=f"{spec.name}'s python: in hosts.yaml (a full path, or env_setup that finds it)",
        )
    known[spec.name] = found
    return found


def default_ports(inventory: Inventory) -> tuple[int, int]:
    return (inventory.ray.port, inventory.ray.dashboard_port)


def probe_tasks(
    fleet: Fleet,
    inventory: Inventory,
    *,
    timeout: float | None = None,
    ports: Iterable[int] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, asyncio.Task[HostFacts]]:
    """`probe_all`'s probes as one task per host (inventory order), started now: each waits
    for its own host's connection only, and a caller can go on with a host as soon as its facts
    are in instead of after the slowest host's. The caller owns the tasks (cancel what it
    leaves)."""
    wanted = tuple(ports) if ports is not None else default_ports(inventory)
    exported = dict(inventory.ray.env) if env is None else dict(env)
    slots = asyncio.Semaphore(MAX_PARALLEL)

    async def one(host: Host) -> HostFacts:
        async with slots:
            try:
                return await probe_host(fleet, host, ports=wanted, env=exported, timeout=timeout)
            except Exception as exc:  # a bug in one host's answer must not lose the others
                return HostFacts(host=host.name, error=f"{type(exc).__name__}: {exc}")

    return {h.name: asyncio.ensure_future(one(h)) for h in inventory.hosts}


async def probe_all(
    fleet: Fleet,
    inventory: Inventory,
    *,
    timeout: float | None = None,
    ports: Iterable[int] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, HostFacts]:
    """Probe every host in parallel (bounded); a dict in inventory order.

    Defaults: the Ray head's ports (ray.port, ray.dashboard_port) and hosts.yaml ``ray.env``.
    """
    tasks = probe_tasks(fleet, inventory, timeout=timeout, ports=ports, env=env)
    results = await asyncio.gather(*tasks.values())  # cancelled: so is every probe
    return {f.host: f for f in results}
