"""The preflight doctor: what will make Ray or verl fail on this cluster, each with a fix.

`run_doctor` connects (the fleet), probes every host once (tui.cluster.probe), decides most
checks from those facts with pure functions (`evaluate`, testable without hosts), and runs one
active check: the GCS port, tried from every worker. Everything goes through fleet transports,
in parallel across hosts with bounded concurrency.

Check ids (stable; `Finding.check`) in report order:

ssh-reach          the fleet's link state per host (auth, host key, unreachable → fail)
python-interpreter the configured interpreter runs the probe (fail with its error)
python-version     every host's Python equals the head's to the patch (Ray refuses a worker
                   otherwise); RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor → warn on a patch gap
ray-version        every host's ray equals the head's (fail)
ray-installed      ray installed for the host's interpreter (fail)
verl-installed     verl installed there (warn: jobs import it)
debugpy            debugpy ≥ 1.8 for post-mortem debugging (warn)
head-ports         ray.port and ray.dashboard_port on the head: free, or held by Ray (ok);
                   held by anything else (fail, naming the process)
gcs-reach          a TCP connect from each worker to head node_ip:ray.port (a temporary
                   listener on the head when nothing listens); fail with the error
socket-ifname      NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (host env overlaid with ray.env):
                   unset with several candidate interfaces → warn; set but matching no
                   interface with an address here → fail
infiniband         IB ports Active/LinkUp where ibstat (or /sys/class/infiniband) exists
gpu-count          equal GPU counts per node, NVIDIA and AMD alike (hosts.yaml num_gpus wins
                   over the probe's count) → else fail; no GPUs / no NVML → warn; the visible-
                   devices rule: ROCR_VISIBLE_DEVICES with HIP/CUDA_VISIBLE_DEVICES (verl
                   refuses it), ROCR without HIP on an AMD host (Ray refuses it), HIP ≠ CUDA
                   → fail; NVIDIA and AMD GPUs on one host → warn (one Ray GPU resource)
cpus-per-gpu       Ray's CPUs (ray.num_cpus, else detected) ≥ 3 × GPUs (verl's bundles) → fail
hf-cache           the Hugging Face hub cache readable and writable → fail
memory             available memory < 10 % of total or < 8 GiB → warn
clock-skew         host clock vs the head's (median without a head), rtt-corrected:
                   > 2 s warn, > 30 s fail
numexpr-threads    numexpr installed, NUMEXPR_MAX_THREADS unset and > 64 CPUs → warn
mkl-threading      MKL present and neither MKL_SERVICE_FORCE_INTEL nor MKL_THREADING_LAYER=GNU
                   (or it is INTEL) → warn: "MKL_THREADING_LAYER=INTEL is incompatible with
                   libgomp" once torch is imported

Rows of one check that say the same thing on several hosts are folded into one row with
``host=None`` whose finding ends with the hosts it covers: "(all 3 hosts)" or "(2 hosts: a, b)"
(see `arrange`); with 128 hosts the table shows what differs, not 128 copies of "ok".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from tui.cluster.netcheck import tcp_reachable
from tui.cluster.probe import HostFacts, Listener, NetInterface, probe_all
from tui.config.hosts import Host, Inventory
from tui.fmt import GIB
from tui.remote import python_argv
from tui.transport.fleet import Fleet
from tui.transport.types import HostState, LinkStatus, StreamProcess

Status = Literal["ok", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail")

CPUS_PER_GPU = 3  # verl's STRICT_PACK bundles: {CPU: 3, GPU: 1} per GPU
MIN_DEBUGPY = (1, 8)
MEM_WARN_FRACTION = 0.10
MEM_WARN_BYTES = 8 * GIB
SKEW_WARN_S = 2.0
SKEW_FAIL_S = 30.0
NUMEXPR_CPU_LIMIT = 64
CONNECT_TIMEOUT_S = 3.0
MAX_PARALLEL = 32
LISTENER_LIFETIME_S = 120  # the temporary GCS-port listener exits by itself after this

CHECKS: dict[str, str] = {
    "ssh-reach": "SSH reach",
    "host-keys": "Host keys checked",
    "python-interpreter": "Interpreter runs",
    "python-version": "Python version equal",
    "ray-version": "Ray version equal",
    "ray-installed": "ray installed",
    "verl-installed": "verl installed",
    "debugpy": "debugpy ≥ 1.8",
    "head-ports": "Head ports free",
    "gcs-reach": "GCS port reachable",
    "socket-ifname": "NCCL/Gloo interface",
    "infiniband": "InfiniBand ports",
    "gpu-count": "GPU count equal",
    "cpus-per-gpu": "CPUs ≥ 3 × GPUs",
    "hf-cache": "HF cache writable",
    "memory": "Free memory",
    "clock-skew": "Clock skew",
    "numexpr-threads": "NUMEXPR_MAX_THREADS",
    "mkl-threading": "MKL threading layer",
}


@dataclass(frozen=True)
class Finding:
    check: str  # stable id, a key of CHECKS
    title: str
    status: Status
    host: str | None  # None: the whole cluster, or several hosts named in `finding`
    finding: str  # one line: what was seen
    fix: str  # one line: a command or a hosts.yaml key; "" when nothing needs doing

    def to_json(self) -> dict[str, str | None]:
        return {"check": self.check, "title": self.title, "status": self.status,
                "host": self.host, "finding": self.finding, "fix": self.fix}


def _f(check: str, status: Status, host: str | None, finding: str, fix: str = "") -> Finding:
    one = " ".join(finding.split())  # one line, always
    return Finding(check, CHECKS[check], status, host, one, " ".join(fix.split()))


def summarize(findings: Iterable[Finding]) -> dict[str, int]:
    counts = Counter(f.status for f in findings)
    return {s: counts.get(s, 0) for s in STATUSES}


def _names(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def _version_tuple(text: str | None) -> tuple[int, ...]:
    parts = []
    for piece in (text or "").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def _pip(python: str, requirement: str) -> str:
    return shlex.join([python, "-m", "pip", "install", requirement])


# --------------------------------------------------------------------------- link and probe


def reach_findings(inventory: Inventory, statuses: Mapping[str, LinkStatus],
                   waited_s: float) -> list[Finding]:
    out = []
    for host in inventory.hosts:
        st = statuses[host.name]
        where = f"{host.ssh.user + '@' if host.ssh.user else ''}{host.address}"
        if host.transport == "local":
            out.append(_f("ssh-reach", "ok", host.name, "local transport (no SSH)"))
        elif st.state == HostState.UP:
            out.append(_f("ssh-reach", "ok", host.name, "connected"))
        elif st.state == HostState.CONNECTING:
            out.append(_f("ssh-reach", "fail", host.name,
                          f"no SSH connection to {where} within {waited_s:.0f} s",
                          f"check address/port in hosts.yaml: ssh -p {host.ssh.port or 22} "
                          f"{where} true"))
        else:
            out.append(_f("ssh-reach", "fail", host.name,
                          f"{st.state.value}: {st.error or 'no detail'}", _reach_fix(host, st)))
    return out


def host_key_findings(inventory: Inventory) -> list[Finding]:
    """warn for every host whose SSH host key is not checked (insecure_skip_host_key_check);
    otherwise one ok row for the cluster (a config fact: it names no host that is fine)."""
    out = []
    for host in inventory.hosts:
        if host.transport != "local" and host.ssh.insecure_skip_host_key_check:
            out.append(_f(
                "host-keys", "warn", host.name,
                "host key NOT checked (insecure_skip_host_key_check: true): anyone on the path "
                "can pose as this host",
                f"ssh-keyscan -p {host.ssh.port or 22} {host.address} >> ~/.ssh/known_hosts "
                "(compare the fingerprint with the host's), then remove "
                "insecure_skip_host_key_check from hosts.yaml"))
    if not out:
        out.append(_f("host-keys", "ok", None, "every SSH host's key is checked against "
                      "known_hosts" if any(h.transport != "local" for h in inventory.hosts)
                      else "local transport only (no SSH)"))
    return out


def _reach_fix(host: Host, st: LinkStatus) -> str:
    where = f"{host.ssh.user + '@' if host.ssh.user else ''}{host.address}"
    if st.state == HostState.AUTH_FAILED:
        return (f"check ssh.user and ssh.identity_file in hosts.yaml; try: ssh -i KEY {where} "
                "true")
    if st.state == HostState.HOST_KEY_UNKNOWN:
        return (f"verify the host key, then: ssh-keyscan {host.address} >> "
                f"{host.ssh.known_hosts or '~/.ssh/known_hosts'}")
    if st.state == HostState.HOST_KEY_MISMATCH:
        return (f"if {host.name} was reinstalled: ssh-keygen -f "
                f"{host.ssh.known_hosts or '~/.ssh/known_hosts'} -R {host.address}")
    return (f"check that sshd runs and address/port in hosts.yaml are right: ssh -p "
            f"{host.ssh.port or 22} {where} true")


def _interpreter_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for host in inventory.hosts:
        f = facts.get(host.name)
        if f is None or not f.reached:
            continue  # the link check already says why
        if f.ok:
            where = f.python_executable or host.python
            real = f" → {f.python_realpath}" if f.python_realpath not in (None, where) else ""
            out.append(_f("python-interpreter", "ok", host.name,
                          f"Python {f.python_version} at {where}{real}"))
        else:
            out.append(_f("python-interpreter", "fail", host.name, f.error or "probe failed",
                          f"set python: (or hosts[].python: for {host.name}) in hosts.yaml to "
                          "the interpreter of the venv that has ray"))
    return out


# --------------------------------------------------------------------------- versions


def _reference(inventory: Inventory, values: Mapping[str, str]) -> tuple[str, str]:
    """(value, whose): the head's value when known, else the most common one."""
    head = inventory.head.name
    if head in values:
        return values[head], f"head {head}"
    value, _count = Counter(values.values()).most_common(1)[0]
    return value, "most hosts"


def _python_version_findings(inventory: Inventory,
                             facts: Mapping[str, HostFacts]) -> list[Finding]:
    versions = {n: f.python_version for n, f in facts.items() if f.ok and f.python_version}
    if not versions:
        return []
    ref, whose = _reference(inventory, versions)
    out = []
    for name, version in versions.items():
        if version == ref:
            continue
        level = facts[name].env.get("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "patch")
        same_minor = _version_tuple(version)[:2] == _version_tuple(ref)[:2]
        status: Status = "warn" if level == "minor" and same_minor else "fail"
        why = ("allowed by RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor" if status == "warn"
               else "Ray refuses a worker whose Python differs from the head's")
        out.append(_f("python-version", status, name,
                      f"Python {version} here, {ref} on {whose} ({why})",
                      f"make every host's python: a venv built from Python {ref} "
                      f"(e.g. uv venv -p {ref})"))
    if not out:
        out.append(_f("python-version", "ok", None,
                      f"Python {ref} on all {len(versions)} probed hosts"))
    return out


def _ray_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    probed = {n: f for n, f in facts.items() if f.ok}
    versions = {n: f.ray_version for n, f in probed.items() if f.ray_version}
    ref, whose = _reference(inventory, versions) if versions else (None, "")
    req = f"ray[default]=={ref}" if ref else "ray[default]"
    out = []
    for name, f in probed.items():
        python = inventory.host(name).python
        if f.ray_version is None:
            out.append(_f("ray-installed", "fail", name, f"ray is not installed for {python}",
                          _pip(python, req)))
        else:
            out.append(_f("ray-installed", "ok", name, f"ray {f.ray_version}"))
    mismatched = [n for n, v in versions.items() if v != ref]
    for name in mismatched:
        out.append(_f("ray-version", "fail", name,
                      f"ray {versions[name]} here, {ref} on {whose} (Ray refuses a worker whose "
                      "version differs)", _pip(inventory.host(name).python, req)))
    if versions and not mismatched:
        out.append(_f("ray-version", "ok", None, f"ray {ref} on all {len(versions)} hosts "
                                                 "that have it"))
    for name, f in probed.items():
        python = inventory.host(name).python
        if f.verl_version is None:
            out.append(_f("verl-installed", "warn", name,
                          f"verl is not installed for {python} (jobs import it)",
                          _pip(python, "verl")))
        else:
            out.append(_f("verl-installed", "ok", name, f"verl {f.verl_version}"))
        if f.debugpy_version is None:
            out.append(_f("debugpy", "warn", name,
                          "debugpy is missing: post-mortem debugging (RAY_DEBUG_POST_MORTEM) "
                          "needs debugpy ≥ 1.8 on every worker", _pip(python, "debugpy>=1.8")))
        elif _version_tuple(f.debugpy_version)[:2] < MIN_DEBUGPY:
            out.append(_f("debugpy", "warn", name,
                          f"debugpy {f.debugpy_version} is older than 1.8 (Ray's post-mortem "
                          "debugger needs ≥ 1.8)", _pip(python, "debugpy>=1.8")))
        else:
            out.append(_f("debugpy", "ok", name, f"debugpy {f.debugpy_version}"))
    return out


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
    for port, what, key in ((inventory.ray.port, "GCS", "ray.port"),
                            (inventory.ray.dashboard_port, "dashboard", "ray.dashboard_port")):
        if port not in f.listeners:
            out.append(_f("head-ports", "warn", head.name, f"port {port} ({what}) not inspected "
                          f"({f.probe_errors.get('procs', 'no listener data')})"))
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
        missing = [n for n in spec.names if not any(i.name == n and i.has_address
                                                     for i in ifaces)]
        if missing:
            return "fail", f"{var}={value}: no interface {', '.join(missing)} with an address " \
                           f"here (has {have})"
        return "ok", f"{var}={value}"
    selected = [i for i in ifaces if i.has_address and spec.selects(i.name)]
    if not selected:
        bare = [i.name for i in ifaces if spec.selects(i.name) and not spec.exclude]
        detail = f" ({', '.join(bare)} has no IP address)" if bare else ""
        return "fail", f"{var}={value} matches no interface with an address here{detail} " \
                       f"(has {have})"
    if not spec.exclude:
        unmatched = [n for n in spec.names
                     if not any(spec.item_matches(n, i.name) for i in ifaces if i.has_address)]
        if unmatched:
            return "warn", f"{var}={value}: {', '.join(unmatched)} matches nothing here " \
                           f"(uses {', '.join(i.name for i in selected)})"
    return "ok", f"{var}={value} → {', '.join(i.name for i in selected)}"


def _socket_ifname_findings(inventory: Inventory,
                            facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        if not f.interfaces:
            out.append(_f("socket-ifname", "warn", name, "interfaces could not be listed: "
                          f"{f.probe_errors.get('interfaces', 'none found')}"))
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
            parts.append(("warn", f"{' and '.join(unset)} unset with several interfaces "
                                  f"({', '.join(i.name for i in candidates)}): NCCL/Gloo may "
                                  "pick one the other nodes cannot reach"))
        worst = max((s for s, _ in parts), key=STATUSES.index, default="ok")
        if worst == "ok":
            text = "; ".join(t for _, t in parts) or (
                f"one candidate interface ({', '.join(i.name for i in candidates) or 'none'})")
            out.append(_f("socket-ifname", "ok", name, text))
        else:
            text = "; ".join(t for s, t in parts if s != "ok")
            fix = (f"ray.env: {{NCCL_SOCKET_IFNAME: {suggest}, GLOO_SOCKET_IFNAME: {suggest}}} "
                   "naming the interface that carries node_ip on every host")
            out.append(_f("socket-ifname", worst, name, text, fix))
    return out


def _infiniband_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        if f.env.get("NCCL_IB_DISABLE", "").strip() in ("1", "true", "True"):
            out.append(_f("infiniband", "ok", name, "NCCL_IB_DISABLE is set: NCCL will not use "
                                                   "InfiniBand"))
            continue
        if f.ib_source is None:
            out.append(_f("infiniband", "ok", name, "no ibstat and no /sys/class/infiniband "
                                                   "(no InfiniBand here)"))
            continue
        if f.ib_error:
            out.append(_f("infiniband", "warn", name, f.ib_error,
                          "check the IB stack: ibstat; systemctl status openibd"))
            continue
        ports = list(f.ib_ports)
        hca = f.env.get("NCCL_IB_HCA")
        if hca:
            spec = IfSpec.parse(hca)
            ports = [p for p in ports if spec.selects(p.ca)]
        if not ports:
            what = f"no HCA port matches NCCL_IB_HCA={hca}" if hca else "no HCA ports listed"
            out.append(_f("infiniband", "warn" if not hca else "fail", name,
                          f"{what} ({f.ib_source})",
                          "check NCCL_IB_HCA in ray.env against ibstat -l" if hca
                          else "check the IB stack: ibstat"))
            continue
        down = [p for p in ports if not p.active]
        if not down:
            out.append(_f("infiniband", "ok", name, f"{len(ports)} port(s) Active/LinkUp: "
                          f"{_names([p.label for p in ports])}"))
            continue
        desc = _names([f"{p.label} {p.state}/{p.physical_state}" for p in down])
        status: Status = "fail" if len(down) == len(ports) else "warn"
        out.append(_f("infiniband", status, name, f"{len(down)} of {len(ports)} IB port(s) not "
                      f"Active/LinkUp: {desc}",
                      "check cables/subnet manager (ibstat, sminfo), or leave those HCAs out: "
                      "ray.env: {NCCL_IB_HCA: <active HCAs>}"))
    return out


# --------------------------------------------------------------------------- resources


def effective_gpus(host: Host, facts: HostFacts) -> tuple[int | None, str]:
    """(GPUs Ray will see, where that number comes from)."""
    if host.num_gpus is not None:
        return host.num_gpus, "num_gpus in hosts.yaml"
    count = facts.gpu_count
    # Ray's AMD accelerator manager reads HIP_VISIBLE_DEVICES; CUDA_VISIBLE_DEVICES otherwise.
    var = "HIP_VISIBLE_DEVICES" if facts.amd_gpu_count and facts.env.get(
        "HIP_VISIBLE_DEVICES") is not None else "CUDA_VISIBLE_DEVICES"
    visible = facts.env.get(var)
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "NoDevFiles"]
        limited = len(ids) if count is None else min(count, len(ids))
        return limited, f"{var}={visible}"
    return count, facts.gpu_source or "NVML"


def _visible_findings(name: str, f: HostFacts) -> list[Finding]:
    """The HIP/ROCR/CUDA_VISIBLE_DEVICES rule (as tui.jobs.rules.check_runtime_env applies it
    to a job's env_vars) on what ``ray start`` and its workers inherit on this host."""
    env, out = f.env, []
    rocr, hip, cuda = (env.get(k) for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                             "CUDA_VISIBLE_DEVICES"))
    if rocr and (hip or cuda):
        out.append(_f("gpu-count", "fail", name,
                      "ROCR_VISIBLE_DEVICES is set together with HIP/CUDA_VISIBLE_DEVICES: "
                      "verl's workers refuse that", "keep only HIP_VISIBLE_DEVICES (ray.env or "
                      "the host's environment)"))
    elif rocr is not None and f.amd_gpu_count:
        out.append(_f("gpu-count", "fail", name,
                      f"ROCR_VISIBLE_DEVICES={rocr} without HIP_VISIBLE_DEVICES: Ray refuses "
                      "to start on AMD GPUs", f"use HIP_VISIBLE_DEVICES={rocr} instead"))
    if hip and cuda and hip != cuda:
        out.append(_f("gpu-count", "fail", name,
                      f"HIP_VISIBLE_DEVICES={hip} differs from CUDA_VISIBLE_DEVICES={cuda}: "
                      "verl requires the same value", "set both to the same list, or only one"))
    if f.amd_gpu_count and f.gpu_count and f.amd_gpu_count < f.gpu_count:
        out.append(_f("gpu-count", "warn", name,
                      f"NVIDIA and AMD GPUs on one host ({f.gpu_count - f.amd_gpu_count} + "
                      f"{f.amd_gpu_count}): Ray has one GPU resource for both",
                      "give Ray one vendor: num_gpus in hosts.yaml and CUDA_VISIBLE_DEVICES or "
                      "HIP_VISIBLE_DEVICES in ray.env"))
    return out


def _gpu_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    counts: dict[str, int] = {}
    for name, f in facts.items():
        if not f.ok:
            continue
        out += _visible_findings(name, f)
        host = inventory.host(name)
        count, source = effective_gpus(host, f)
        if count is None:
            # pynvml there but no libnvidia-ml: a driver problem, not a missing package.
            no_driver = "not found" in (f.gpu_error or "").lower() and f.nvml_py_version
            fix = ("no NVIDIA driver library on this host: install the driver, or set the "
                   "host's num_gpus: in hosts.yaml" if no_driver else
                   f"{_pip(host.python, 'nvidia-ml-py')}, or set the host's num_gpus: "
                   "in hosts.yaml")
            out.append(_f("gpu-count", "warn", name, f"GPU count unknown: {f.gpu_error}", fix))
        elif count == 0 and host.num_gpus is None:
            out.append(_f("gpu-count", "warn", name, f"no GPUs visible ({source})",
                          "check nvidia-smi (or amd-smi) there; CPU-only on purpose: set the "
                          "host's num_gpus: 0"))
        elif count > 0:
            counts[name] = count
    if len(set(counts.values())) > 1:
        by_count: dict[int, list[str]] = {}
        for name, c in counts.items():
            by_count.setdefault(c, []).append(name)
        desc = "; ".join(f"{c} on {_names(ns)}" for c, ns in sorted(by_count.items()))
        low = min(by_count)
        out.append(_f("gpu-count", "fail", None,
                      f"GPU counts differ: {desc} (verl needs n_gpus_per_node on every node)",
                      f"bring the missing GPUs back, or set num_gpus: {low} on the hosts with "
                      "more"))
    elif counts:
        n = next(iter(counts.values()))
        out.append(_f("gpu-count", "ok", None, f"{n} GPU(s) on each of {len(counts)} node(s)"))
    return out


def _cpu_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        gpus, _ = effective_gpus(inventory.host(name), f)
        if not gpus:
            continue
        if inventory.ray.num_cpus is not None:
            cpus, source = inventory.ray.num_cpus, "ray.num_cpus"
        else:
            cpus, source = f.ray_cpu_count or f.cpu_count, "detected"
        if cpus is None:
            out.append(_f("cpus-per-gpu", "warn", name, "CPU count unknown"))
            continue
        need = CPUS_PER_GPU * gpus
        if cpus < need:
            out.append(_f("cpus-per-gpu", "fail", name,
                          f"{cpus} CPUs ({source}) for {gpus} GPUs: verl's placement group needs "
                          f"{CPUS_PER_GPU} per GPU ({need})",
                          f"use nodes with ≥ {need} CPUs, fewer GPUs per node (num_gpus: "
                          f"{cpus // CPUS_PER_GPU}), or ray.num_cpus: {need} if the CPUs are "
                          "really there"))
        else:
            out.append(_f("cpus-per-gpu", "ok", name, f"{cpus} CPUs ({source}) for {gpus} GPUs"))
    return out


def _hf_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        hf = f.hf_cache
        if hf is None:
            out.append(_f("hf-cache", "warn", name, "HF cache not checked: "
                          f"{f.probe_errors.get('hf_cache', 'no data')}"))
            continue
        if hf.readable and hf.writable:
            note = "" if hf.exists else f" (absent; {hf.checked} lets it be created)"
            out.append(_f("hf-cache", "ok", name, f"{hf.path} is writable{note}"))
            continue
        why = hf.error or ("not readable" if not hf.readable else "not writable")
        out.append(_f("hf-cache", "fail", name, f"HF cache {hf.path} ({hf.source}) is unusable: "
                      f"{why}",
                      "point it at a writable directory: ray.env: {HF_HOME: /path/to/hf} "
                      f"(or mkdir -p {hf.path} and fix its owner)"))
    return out


def _memory_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        total, avail = f.mem_total_bytes, f.mem_available_bytes
        if f.mem_cgroup_limit_bytes and total:
            total = min(total, f.mem_cgroup_limit_bytes)
        if not total or avail is None:
            out.append(_f("memory", "warn", name, "memory unknown: "
                          f"{f.probe_errors.get('memory', 'no /proc/meminfo')}"))
            continue
        avail = min(avail, total)
        text = f"{avail / GIB:.1f} of {total / GIB:.1f} GiB available"
        if avail < MEM_WARN_BYTES or avail < MEM_WARN_FRACTION * total:
            out.append(_f("memory", "warn", name, text + " (little room for Ray's object store "
                          "and workers)",
                          f"free memory on {name}: ps aux --sort=-rss | head; leftover Ray: "
                          "ray stop"))
        else:
            out.append(_f("memory", "ok", name, text))
    return out


def classify_clock_offsets(offsets: Mapping[str, tuple[float, float]],
                           reference: str | None = None) -> list[Finding]:
    """Clock skew per host from (offset to the cockpit, rtt) pairs, both in seconds.

    Skew is measured against the reference host (the head) or, without one, the median
    offset; each estimate is only good to ± rtt/2, so that much is forgiven.
    """
    if not offsets:
        return []
    if reference in offsets:
        ref_offset, ref_rtt = offsets[reference]
        against = f"head {reference}"
    else:
        ref_offset = statistics.median(o for o, _ in offsets.values())
        ref_rtt = 0.0
        against = "the median host"
    out = []
    for name, (offset, rtt) in offsets.items():
        skew = offset - ref_offset
        slack = (rtt + ref_rtt) / 2
        certain = max(0.0, abs(skew) - slack)
        status: Status = ("fail" if certain > SKEW_FAIL_S
                          else "warn" if certain > SKEW_WARN_S else "ok")
        if status == "ok":  # one text for every good host, so they fold into one row
            out.append(_f("clock-skew", "ok", name, f"within {SKEW_WARN_S:g} s of {against}"))
            continue
        out.append(_f("clock-skew", status, name,
                      f"clock {skew:+.3f} s vs {against} (±{slack:.3f} s); {offset:+.3f} s vs "
                      "this machine",
                      f"sync clocks with NTP on {name}: timedatectl set-ntp true; chronyc "
                      "tracking"))
    return out


def _clock_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    offsets = {n: (f.clock_offset_s, f.rtt_s or 0.0) for n, f in facts.items()
               if f.ok and f.clock_offset_s is not None}
    return classify_clock_offsets(offsets, inventory.head.name)


def _numexpr_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        cpus = f.cpu_count or 0
        if f.numexpr_version is None:
            out.append(_f("numexpr-threads", "ok", name, "numexpr not installed"))
        elif f.env.get("NUMEXPR_MAX_THREADS"):
            out.append(_f("numexpr-threads", "ok", name,
                          f"NUMEXPR_MAX_THREADS={f.env['NUMEXPR_MAX_THREADS']}"))
        elif cpus > NUMEXPR_CPU_LIMIT:
            out.append(_f("numexpr-threads", "warn", name,
                          f"numexpr {f.numexpr_version} with {cpus} CPUs and NUMEXPR_MAX_THREADS "
                          "unset: it caps its threads and logs a note in every worker",
                          f'ray.env: {{NUMEXPR_MAX_THREADS: "{NUMEXPR_CPU_LIMIT}"}}'))
        else:
            out.append(_f("numexpr-threads", "ok", name,
                          f"numexpr {f.numexpr_version}, {cpus} CPUs (≤ {NUMEXPR_CPU_LIMIT})"))
    return out


def _mkl_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    fix = ('ray.env: {MKL_SERVICE_FORCE_INTEL: "1"} (or MKL_THREADING_LAYER: GNU)')
    for name, f in facts.items():
        if not f.ok:
            continue
        layer = f.env.get("MKL_THREADING_LAYER", "").strip().upper()
        forced = bool(f.env.get("MKL_SERVICE_FORCE_INTEL", "").strip())
        what = ", ".join(x for x in (
            "numpy linked with MKL" if f.numpy_mkl else "",
            f"mkl {f.mkl_version}" if f.mkl_version else "",
            f"mkl-service {f.mkl_service_version}" if f.mkl_service_version else "",
        ) if x) or "MKL libraries"
        if not f.mkl_present:
            out.append(_f("mkl-threading", "ok", name, "no MKL"))
        elif layer == "INTEL" and not forced:
            out.append(_f("mkl-threading", "warn", name,
                          f"{what} with MKL_THREADING_LAYER=INTEL: torch's libgomp makes it fail "
                          "('MKL_THREADING_LAYER=INTEL is incompatible with libgomp')", fix))
        elif forced or layer == "GNU":
            setting = "MKL_SERVICE_FORCE_INTEL" if forced else "MKL_THREADING_LAYER=GNU"
            out.append(_f("mkl-threading", "ok", name, f"{what}; {setting} set"))
        else:
            out.append(_f("mkl-threading", "warn", name,
                          f"{what}, and neither MKL_SERVICE_FORCE_INTEL nor "
                          "MKL_THREADING_LAYER=GNU is set: a worker importing numpy then torch "
                          "can fail with 'MKL_THREADING_LAYER=INTEL is incompatible with "
                          "libgomp'", fix))
    return out


# --------------------------------------------------------------------------- assembly


ORDER = {check: i for i, check in enumerate(CHECKS)}


def evaluate(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    """Every check decided from probe facts alone (all but ssh-reach and gcs-reach)."""
    out: list[Finding] = []
    out += _interpreter_findings(inventory, facts)
    out += _python_version_findings(inventory, facts)
    out += _ray_findings(inventory, facts)
    out += _head_port_findings(inventory, facts)
    out += _socket_ifname_findings(inventory, facts)
    out += _infiniband_findings(facts)
    out += _gpu_findings(inventory, facts)
    out += _cpu_findings(inventory, facts)
    out += _hf_findings(facts)
    out += _memory_findings(facts)
    out += _clock_findings(inventory, facts)
    out += _numexpr_findings(facts)
    out += _mkl_findings(facts)
    return out


def _hosts_note(hosts: Sequence[str], n_hosts: int) -> str:
    if len(hosts) == n_hosts:
        return f"all {n_hosts} hosts"
    return f"{len(hosts)} hosts: {_names(hosts)}"


def _fold(group: list[Finding], n_hosts: int) -> list[Finding]:
    """One check's rows: cluster rows, then problems, then ok; identical host rows as one."""
    per_host = [f for f in group if f.host is not None]
    if len({f.host for f in per_host}) != len(per_host):
        return group  # several rows per host (head-ports): each says something else
    out = [f for f in group if f.host is None]
    for status in ("fail", "warn"):
        buckets: dict[tuple[str, str], list[Finding]] = {}
        for f in per_host:
            if f.status == status:
                buckets.setdefault((f.finding, f.fix), []).append(f)
        for rows in buckets.values():
            if len(rows) == 1:
                out.append(rows[0])
            else:
                hosts = [f.host for f in rows if f.host]
                note = _hosts_note(hosts, n_hosts)
                out.append(replace(rows[0], host=None, finding=f"{rows[0].finding} ({note})"))
    oks = [f for f in per_host if f.status == "ok"]
    if len(oks) == 1:
        out.append(oks[0])
    elif oks:
        hosts = [f.host for f in oks if f.host]
        note = _hosts_note(hosts, n_hosts)
        if len({f.finding for f in oks}) == 1:
            text = f"{oks[0].finding} ({note})"
        else:
            text = f"e.g. {oks[0].host}: {oks[0].finding} (ok on {note})"
        out.append(replace(oks[0], host=None, finding=text))
    return out


def arrange(findings: Iterable[Finding], host_order: Sequence[str]) -> list[Finding]:
    """Report order (CHECKS, then fail/warn/ok, then hosts), identical host rows folded.

    With 128 hosts, a row per host per check would bury what differs: rows of one check that
    say the same thing on several hosts become one row (host None) naming those hosts.
    """
    rank = {h: i for i, h in enumerate(host_order)}
    items = sorted(findings, key=lambda f: (ORDER.get(f.check, len(ORDER)),
                                            -1 if f.host is None else rank.get(f.host, 0)))
    by_check: dict[str, list[Finding]] = {}
    for f in items:
        by_check.setdefault(f.check, []).append(f)
    out: list[Finding] = []
    for group in by_check.values():
        out += _fold(group, len(host_order))
    return out


# --------------------------------------------------------------------------- GCS reach

_WILDCARDS = ("0.0.0.0", "::", "::ffff:0.0.0.0")


def _explain_connect_error(text: str) -> str:
    if text == "Invalid argument":
        return "Invalid argument (the route to it is unusable, e.g. a blackhole route)"
    return text


async def _gcs_reach(fleet: Fleet, inventory: Inventory, facts: Mapping[str, HostFacts],
                     progress: Callable[[str], None], timeout: float) -> list[Finding]:
    head = inventory.head
    port = inventory.ray.port
    workers = [h for h in inventory.hosts if not h.is_head]
    if not workers:
        return [_f("gcs-reach", "ok", None, "single node: no worker has to reach the GCS")]
    hf = facts.get(head.name)
    if hf is None or not hf.ok or fleet.transport(head.name) is None:
        return [_f("gcs-reach", "warn", None, f"not tested: head {head.name} was not probed")]
    testers = [w for w in workers if facts.get(w.name) and facts[w.name].ok
               and fleet.transport(w.name) is not None]
    if not testers:
        return [_f("gcs-reach", "warn", None, "not tested: no worker could be probed")]
    listener = hf.listeners.get(port)
    stream = None
    how = f"{head.name}'s GCS port"
    try:
        if listener is None or (listener.address not in _WILDCARDS
                                and listener.address != head.node_ip):
            progress(f"opening a test listener on {head.node_ip}:{port}")
            transport = fleet.transport(head.name)
            assert transport is not None
            stream = await transport.stream(
                python_argv(head.python, "port_listener", head.node_ip, str(port),
                            str(LISTENER_LIFETIME_S)))
            first = await _first_line(stream, min(timeout, 15.0))
            if first != "ready":
                err = (first or await stream.stderr_tail() or "no answer").removeprefix("error: ")
                return [_f("gcs-reach", "fail", head.name,
                           f"cannot listen on node_ip {head.node_ip}:{port} on {head.name}: "
                           f"{err}",
                           f"set node_ip: of {head.name} to one of its addresses "
                           f"({_addresses(hf)})")]
            how = "a test listener"
        progress(f"connecting to {head.node_ip}:{port} from {len(testers)} worker(s)")
        slots = asyncio.Semaphore(MAX_PARALLEL)

        async def attempt(worker: Host) -> Finding:
            async with slots:
                return await _connect_from(fleet, worker, head, port, how)

        return list(await asyncio.gather(*(attempt(w) for w in testers)))
    finally:
        if stream is not None:
            await stream.close()  # EOF on its stdin ends the listener


async def _first_line(stream: StreamProcess, timeout: float) -> str | None:
    async def read() -> str | None:
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

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        return None


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
    return _f("gcs-reach", "fail", worker.name,
              f"cannot reach {target}: {_explain_connect_error(why)}",
              f"open TCP {port} from {worker.name} to {head.node_ip} (firewall, security "
              f"group), or set node_ip: of {head.name} to an address {worker.name} can reach")


# --------------------------------------------------------------------------- entry point


async def run_doctor(
    fleet: Fleet,
    inventory: Inventory,
    *,
    progress: Callable[[str], None] | None = None,
    timeout: float = 60.0,
) -> list[Finding]:
    """Run every check; findings in report order (see the module docstring for the ids).

    ``fleet`` must be started (``async with Fleet(inv)``). ``timeout`` bounds the connect wait
    and each step; hosts that do not answer in time fail their checks, nothing raises.
    """
    say = progress or (lambda _msg: None)
    start = time.monotonic()

    def left(cap: float) -> float:
        return max(1.0, min(cap, timeout - (time.monotonic() - start)))

    names = [h.name for h in inventory.hosts]
    say(f"connecting to {len(names)} host(s)")
    connect_wait = left(max(1.0, timeout * 0.4))
    await fleet.wait_settled(connect_wait)
    findings = reach_findings(inventory, {n: fleet.status(n) for n in names},
                              time.monotonic() - start)
    findings += host_key_findings(inventory)
    up = [n for n in names if fleet.status(n).state == HostState.UP]
    say(f"probing {len(up)} host(s)")
    facts = await probe_all(fleet, inventory, timeout=left(30.0))
    findings += evaluate(inventory, facts)
    say("testing the GCS port from the workers")
    with contextlib.suppress(asyncio.TimeoutError):
        findings += await asyncio.wait_for(
            _gcs_reach(fleet, inventory, facts, say, left(30.0)), left(45.0))
    if not any(f.check == "gcs-reach" for f in findings):
        findings.append(_f("gcs-reach", "warn", None, "not finished in time"))
    say("done")
    return arrange(findings, names)
