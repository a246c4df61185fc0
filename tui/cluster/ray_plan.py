"""How Ray is started on a host (its argv and environment) and what refuses a bring-up
before anything starts (mismatched versions, a node_ip that is not the host's, taken ports).
Pure functions of hosts.yaml and the probe's facts; RayCluster (ray_cluster.py) runs them."""

from __future__ import annotations

import ipaddress
import posixpath
import re

from tui.cluster.probe import HostFacts
from tui.config.hosts import Host, Inventory

RAY = ("-m", "ray.scripts.scripts")  # the interpreter's own Ray, wherever its scripts live


def last_error_line(text: str) -> str:
    """Ray's own error line out of `ray start` output (ANSI codes and log prefixes removed)."""
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln.strip() for ln in clean.splitlines() if ln.strip()]
    for marker in ("ERROR", "Error", "error", "Exception", "failed", "Failed"):
        hits = [ln for ln in lines if marker in ln]
        if hits:
            return re.sub(r"^\S+ \S+\s+(ERROR|INFO|WARNING)\s+\S+ -- ", "", hits[-1])[:300]
    return lines[-1][:300] if lines else "no output"


# What `ray start`'s own error means and where to look: (words in the error, what to add).
_START_HINTS = (
    (
        ("Failed to get node info", "timed out during startup"),
        "the node did not register in time: a loaded host, or a slow file system under the "
        "venv (the raylet waits 15 s for its dashboard agent); the host's raylet.out says "
        "which: l on its row",
    ),
)


def start_failure(text: str) -> str:
    """`ray start`'s error line, with what it means when Ray's own words do not say it."""
    line = last_error_line(text)
    for words, hint in _START_HINTS:
        if any(w in line for w in words):
            return f"{line} ({hint})"
    return line


def ray_env(inv: Inventory, host: Host, facts: HostFacts) -> dict[str, str]:
    # The interpreter's directory first on PATH: `python` in job entrypoints then means it.
    # A bare `python:` is what the probe resolved it to after the host's env_setup.
    python = host.python if "/" in host.python else (facts.python_executable or "")
    bindir = posixpath.dirname(python)
    path = facts.path_env or "/usr/local/bin:/usr/bin:/bin"
    env = {"PATH": f"{bindir}:{path}" if bindir else path}
    # Ray waits its own 30 s for each of the head's dashboard module processes (Ray 2.4x-2.6x);
    # on a busy head one that misses it leaves a dashboard that closes every connection, and
    # `up` then fails at start_timeout anyway: the modules get the bring-up's own deadline,
    # so `ray: start_timeout:` (the hint `up` gives) is what lengthens it. ray.env wins.
    wait = max(30.0, inv.ray.start_timeout)
    env[DASHBOARD_MODULE_WAIT] = f"{wait:g}"
    env.update(inv.ray.env)
    return env


DASHBOARD_MODULE_WAIT = "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT"


def _resource_args(inv: Inventory, host: Host, facts: HostFacts) -> list[str]:
    gpus = host.num_gpus if host.num_gpus is not None else (facts.gpu_count or 0)
    args = [f"--node-ip-address={host.node_ip}", f"--num-gpus={gpus}", "--disable-usage-stats"]
    if inv.ray.num_cpus is not None:
        args.append(f"--num-cpus={inv.ray.num_cpus}")
    if inv.ray.memory is not None:
        args.append(f"--memory={inv.ray.memory}")
    if inv.ray.object_store_memory is not None:
        args.append(f"--object-store-memory={inv.ray.object_store_memory}")
    return args


def head_argv(inv: Inventory, host: Host, facts: HostFacts) -> list[str]:
    return [
        host.python,
        *RAY,
        "start",
        "--head",
        f"--port={inv.ray.port}",
        # The dashboard and jobs API run code for whoever reaches them: loopback only,
        # reached through our SSH tunnel.
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={inv.ray.dashboard_port}",
        *_resource_args(inv, host, facts),
    ]


def worker_argv(inv: Inventory, host: Host, facts: HostFacts) -> list[str]:
    return [
        host.python,
        *RAY,
        "start",
        f"--address={inv.head.node_ip}:{inv.ray.port}",
        *_resource_args(inv, host, facts),
    ]


def version_problems(inv: Inventory, facts: dict[str, HostFacts]) -> dict[str, str]:
    """Hosts whose Ray or Python differs from the others' (Ray refuses such a worker)."""
    problems: dict[str, str] = {}
    reachable = {h: f for h, f in facts.items() if f.ok}
    for h, f in reachable.items():
        if not f.ray_version:
            problems[h] = f"no ray in {inv.host(h).python} (pip install 'ray[default]' there)"
    versions = {
        (f.ray_version, f.python_version) for h, f in reachable.items() if h not in problems
    }
    if len(versions) > 1:
        for h, f in reachable.items():
            if h not in problems:
                problems[h] = f"ray {f.ray_version}, Python {f.python_version}"
    return problems


def node_ip_problems(inv: Inventory, facts: dict[str, HostFacts]) -> dict[str, str]:
    """Hosts whose node_ip (an IP literal) is none of their addresses: Ray would otherwise
    time out half a minute later with 'Failed to get node info'."""
    problems = {}
    for host in inv.hosts:
        f = facts.get(host.name)
        if f is None or not f.ok or not f.interfaces:
            continue
        try:
            ip = ipaddress.ip_address(host.node_ip)
        except ValueError:
            continue  # a host name: Ray resolves it there
        if ip.is_loopback:
            continue
        have = [a for i in f.interfaces for a in (*i.ipv4, *i.ipv6) if not i.loopback]
        if str(ip) not in have:
            problems[host.name] = (
                f"node_ip {host.node_ip} is not an address of this host "
                f"(it has {', '.join(have) or 'none'}); fix node_ip: in "
                "hosts.yaml"
            )
    return problems


def foreign_listeners(inv: Inventory, head: HostFacts) -> str | None:
    """The head's GCS / dashboard ports held by something that is not Ray, if any."""
    out = []
    for port in (inv.ray.port, inv.ray.dashboard_port):
        holder = (head.listeners or {}).get(port)
        if holder is not None and not holder.is_ray:
            out.append(f"port {port} is held by {holder.describe()}")
    return "; ".join(out) or None
