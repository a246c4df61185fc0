"""`verl-tui profile check PROFILE [--hosts HOSTS.yaml] [--set k=v …] [--json]`.

Composes the profile with verl's config and checks verl's rules; with a hosts file, also the
runtime rules against the live cluster (Ray's nodes through the dashboard tunnel, debugpy from
a probe of every host when post-mortem debugging is on).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from tui.commands.output import json_text
from tui.config.hosts import Inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.rules import ClusterResources, Problem


async def _live_cluster(inv: Inventory, *, want_debugpy: bool) -> ClusterResources:
    """Ray's alive nodes (GPUs and CPUs as Ray counts them) and the hosts without debugpy.
    DashboardError / TransportError when Ray cannot be reached."""
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.pipeline import live_resources
    from tui.transport.fleet import Fleet

    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:
            return await live_resources(cluster, want_debugpy=want_debugpy)
        finally:
            await cluster.close()


def _fail(message: str, as_json: bool, hosts: Inventory | None = None) -> int:
    print(f"verl-tui profile check: {message}", file=sys.stderr)
    if as_json:
        print(json_text({"ok": False, "error": message, "problems": []}, hosts))
    return 2


def run_profile_check(path: Path, *, hosts: Inventory | None, sets: list[str],
                      as_json: bool) -> int:
    """0: no errors (warnings allowed), 1: errors, 2: bad input (profile file, --set)."""
    from tui.cluster.dashboard import DashboardError
    from tui.jobs.pipeline import (
        JobSpec,
        planned_resources,
        prepare_submission,
        submission_json,
        working_dir_size,
    )
    from tui.jobs.profiles import check_set, load_profile
    from tui.jobs.schema import SchemaError
    from tui.transport.types import TransportError

    try:
        profile = load_profile(path)
        for line in sets:
            check_set(line)
    except ConfigError as exc:
        return _fail(str(exc), as_json, hosts)

    spec = JobSpec(profile, sets=list(sets))
    cluster: ClusterResources | None = None
    extra: list[Problem] = []
    if hosts is not None:
        try:
            cluster = asyncio.run(_live_cluster(hosts, want_debugpy=spec.wants_post_mortem))
        except (DashboardError, TransportError, OSError) as exc:
            cluster = planned_resources(hosts)
            msg = (f"Ray is not reachable on the head ({hosts.head.name}): {exc}; "
                   + ("checked against hosts.yaml's GPUs" if cluster is not None
                      else "checked without the cluster rules"))
            extra.append(Problem(None, msg, "warn"))
            if not as_json:
                print(f"verl-tui profile check: {msg}", file=sys.stderr)
        except KeyboardInterrupt:
            return 130

    try:
        # The submission `verl-tui submit` would send (with a hosts file): the same pipeline.
        wd_bytes = working_dir_size(spec)[0] if hosts is not None else None
        sub, report = prepare_submission(hosts, spec, cluster, working_dir_bytes=wd_bytes)
    except (ConfigError, SchemaError) as exc:
        return _fail(str(exc), as_json, hosts)

    problems = [*extra, *report.problems]
    ok = report.ok
    if as_json:
        doc: dict[str, Any] = {"ok": ok, "problems": [p.to_json() for p in problems]}
        if sub is not None:  # the submission `submit` would send (with a hosts file)
            doc["submission"] = submission_json(sub)
        print(json_text(doc, hosts))
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
