"""`verl-tui profile check PROFILE [--hosts HOSTS.yaml] [--set k=v …] [--json]`.

Composes the profile with verl's config and checks verl's rules; with a hosts file, also the
runtime rules against the live cluster (Ray's nodes through the dashboard tunnel, debugpy from
a probe of every host when post-mortem debugging is on).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tui.commands.output import json_text
from tui.config.hosts import Inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.rules import ClusterResources, NodeResources, Problem, is_truthy


async def _live_cluster(inv: Inventory, *, want_debugpy: bool) -> ClusterResources:
    """Ray's alive nodes (GPUs and CPUs as Ray counts them) and the hosts without debugpy.
    DashboardError / TransportError when Ray cannot be reached."""
    from tui.cluster.probe import probe_all
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.fleet import Fleet

    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:
            if want_debugpy:
                status, facts = await asyncio.gather(cluster.status(), probe_all(fleet, inv))
            else:
                status, facts = await cluster.status(), {}
        finally:
            await cluster.close()
    nodes = [NodeResources(n.host or n.node_ip, n.gpus, n.cpus) for n in status.nodes if n.alive]
    without = [name for name, f in facts.items() if f.ok and not f.debugpy_version]
    return ClusterResources(nodes=nodes, hosts_without_debugpy=without)


def _fail(message: str, as_json: bool, hosts: Inventory | None = None) -> int:
    print(f"verl-tui profile check: {message}", file=sys.stderr)
    if as_json:
        print(json_text({"ok": False, "error": message, "problems": []}, hosts))
    return 2


def run_profile_check(path: Path, *, hosts: Inventory | None, sets: list[str],
                      as_json: bool) -> int:
    """0: no errors (warnings allowed), 1: errors, 2: bad input (profile file, --set)."""
    from tui.cluster.dashboard import DashboardError
    from tui.jobs.profiles import check_set, load_profile
    from tui.jobs.schema import SchemaError
    from tui.jobs.validate import check_profile
    from tui.transport.types import TransportError

    try:
        profile = load_profile(path)
        for line in sets:
            check_set(line)
    except ConfigError as exc:
        return _fail(str(exc), as_json, hosts)

    cluster: ClusterResources | None = None
    extra: list[Problem] = []
    if hosts is not None:
        post_mortem = is_truthy(profile.runtime_env.env_vars.get("RAY_DEBUG_POST_MORTEM"))
        try:
            cluster = asyncio.run(_live_cluster(hosts, want_debugpy=post_mortem))
        except (DashboardError, TransportError, OSError) as exc:
            msg = (f"Ray is not reachable on the head ({hosts.head.name}): {exc}; "
                   "checked without the cluster rules")
            extra.append(Problem(None, msg, "warn"))
            if not as_json:
                print(f"verl-tui profile check: {msg}", file=sys.stderr)
        except KeyboardInterrupt:
            return 130

    try:
        report = check_profile(profile, sets=sets, cluster=cluster)
    except (ConfigError, SchemaError) as exc:
        return _fail(str(exc), as_json, hosts)

    problems = [*extra, *report.problems]
    ok = report.ok
    if as_json:
        print(json_text({"ok": ok, "problems": [p.to_json() for p in problems]}, hosts))
        return 0 if ok else 1
    for p in report.problems:
        tag = "" if p.level == "error" else "warning: "
        print(f"{p.key or profile.name}: {tag}{p.message}")
    n_err, n_warn = len(report.errors), len(report.warnings)
    shape = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in report.from_cluster.items())
    summary = f"{profile.name}: {n_err} error{'s' * (n_err != 1)}, " \
              f"{n_warn} warning{'s' * (n_warn != 1)}"
    if shape:
        summary += f" (from the cluster: {shape})"
    print(summary)
    return 0 if ok else 1
