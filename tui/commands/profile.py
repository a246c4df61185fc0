"""`verl-tui profile check PROFILE [--hosts HOSTS.yaml] [--set k=v …] [--json]` and
`verl-tui profile list [--json]`.

Check composes the profile with verl's config and checks verl's rules; with a hosts file, the
config is the cluster's own verl (read from the head, cached by version: jobs/verl_source.py)
and the runtime rules run against the live cluster (Ray's nodes through the dashboard tunnel,
debugpy from a probe of every host when post-mortem debugging is on). PROFILE is a file or a
preset's name (`profile list`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail
from tui.config.yamlfile import ConfigError
from tui.errors import VerlTuiError
from tui.fmt import plural
from tui.jobs.rules import ClusterResources, Problem
from tui.sanitize import one_line

if TYPE_CHECKING:  # a type only: `verl-tui profile check --help` stays light
    from tui.config.hosts import Inventory


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


def _fail(err: VerlTuiError, as_json: bool, hosts: Inventory | None = None) -> int:
    code = fail(err, "verl-tui profile check")
    if as_json:
        print(json_text({"ok": False, "error": str(err), "problems": []}, hosts))
    return code


def run_profile_check(
    path: Path, *, hosts: Inventory | None, sets: list[str], as_json: bool
) -> int:
    """0: no errors (warnings allowed), 1: errors, 2: bad input (profile file, --set)."""
    from tui.jobs.pipeline import (
        JobSpec,
        planned_resources,
        prepare_submission,
        submission_json,
        working_dir_size,
    )
    from tui.jobs.profiles import check_set, entry_note, load_profile, resolve_profile
    from tui.jobs.schema import SchemaError, current_source
    from tui.jobs.verl_source import select_verl_sync

    try:
        path, note = resolve_profile(path)
        if note:
            print(f"verl-tui profile check: {note}", file=sys.stderr)
        profile = load_profile(path)
        for line in sets:
            check_set(line)
    except ConfigError as exc:
        return _fail(exc, as_json, hosts)

    spec = JobSpec(profile, sets=list(sets))
    cluster: ClusterResources | None = None
    extra: list[Problem] = []
    if hosts is not None:
        # The cluster's own verl is what the job composes with (this Python's: the fallback).
        try:
            source = select_verl_sync(hosts)
        except SchemaError as exc:
            return _fail(exc, as_json, hosts)
        except KeyboardInterrupt:
            return 130
        if source.note:
            extra.append(Problem(None, source.note, "warn"))
            if not as_json:
                print(f"verl-tui profile check: warning: {source.note}", file=sys.stderr)
        try:
            cluster = asyncio.run(_live_cluster(hosts, want_debugpy=spec.wants_post_mortem))
        except (VerlTuiError, OSError) as exc:  # Ray cannot be asked: hosts.yaml's GPUs
            cluster = planned_resources(hosts)
            msg = f"Ray is not reachable on the head ({hosts.head.name}): {exc}; " + (
                "checked against hosts.yaml's GPUs"
                if cluster is not None
                else "checked without the cluster rules"
            )
            extra.append(Problem(None, msg, "warn"))
            if not as_json:
                print(f"verl-tui profile check: {msg}", file=sys.stderr)
        except KeyboardInterrupt:
            return 130

    try:
        # The submission `verl-tui submit` would send (with a hosts file): the same pipeline.
        wd_bytes = working_dir_size(spec)[0] if hosts is not None else None
        sub, report = prepare_submission(hosts, spec, cluster, working_dir_bytes=wd_bytes)
    except VerlTuiError as exc:  # a bad --set or profile, verl that does not compose: exit 2
        return _fail(exc, as_json, hosts)

    problems = [*extra, *report.problems]
    ok = report.ok
    used = current_source()  # composition succeeded, so there is one
    if as_json:
        doc: dict[str, Any] = {
            "ok": ok,
            "problems": [p.to_json() for p in problems],
            "verl": used.to_json(),
            "entrypoint": profile.entrypoint,
        }
        if sub is not None:  # the submission `submit` would send (with a hosts file)
            doc["submission"] = submission_json(sub)
        print(json_text(doc, hosts))
        return 0 if ok else 1
    for p in report.problems:
        tag = "" if p.level == "error" else "warning: "
        print(f"{p.key or profile.name}: {tag}{p.message}")
    n_err, n_warn = len(report.errors), len(report.warnings)
    shape = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in report.from_cluster.items())
    summary = f"{profile.name}: {plural(n_err, 'error')}, {plural(n_warn, 'warning')}"
    if entry_note(profile):  # another verl entry point than main_ppo: say which is checked
        summary += f" (runs {profile.entrypoint})"
    if shape:
        summary += f" (from the cluster: {shape})"
    print(f"{summary} — {used.label}")
    return 0 if ok else 1


def _shape(nodes: Any, gpus: Any) -> str:
    """nodes×GPUs as the profile pins them; "cluster" where it follows the live cluster."""
    return f"{nodes if nodes is not None else 'cluster'}×{gpus if gpus is not None else 'cluster'}"


def _cut(text: str, width: int) -> str:
    """One line of at most `width` characters, cut at a word boundary."""
    text = one_line(" ".join(text.split()))
    if len(text) <= width:
        return text
    head = text[: width - 1]
    space = head.rfind(" ")
    return (head[:space] if space > width // 2 else head).rstrip(" ,;:.") + "…"


def profile_rows() -> list[dict[str, Any]]:
    """The presets, then the user's profiles, as plain rows (a broken file with its error)."""
    from tui.jobs.profiles import list_profiles, preset_dir, user_profile_dir

    rows = []
    for kind, folder in (("preset", preset_dir()), ("user", user_profile_dir())):
        for e in list_profiles([folder]) if folder is not None else []:
            ov = e.profile.overrides if e.profile else {}
            rows.append(
                {
                    "name": e.name,
                    "kind": kind,
                    "path": str(e.path),
                    # verl's own default estimator is gae (PPO with a critic)
                    "algorithm": str(ov.get("algorithm.adv_estimator", "gae"))
                    if e.profile
                    else None,
                    "nodes": ov.get("trainer.nnodes"),
                    "gpus_per_node": ov.get("trainer.n_gpus_per_node"),
                    "description": e.profile.description if e.profile else "",
                    "entrypoint": e.profile.entrypoint if e.profile else None,
                    "error": e.error,
                }
            )
    return rows


def run_profile_list(*, as_json: bool, width: int = 60) -> int:
    """`verl-tui profile list`: name, algorithm, nodes×GPUs, description (one line). 0."""
    from tui.jobs.profiles import user_profile_dir

    rows = profile_rows()
    if as_json:
        print(json_text({"profiles": rows}, None))
        return 0
    if not rows:
        print(f"no profiles (presets ship with verl-tui; yours go in {user_profile_dir()})")
        return 0
    name_w = max(len("NAME"), *(len(r["name"]) for r in rows))
    print(f"{'NAME':<{name_w}}  {'ALGORITHM':<10}  {'NODES×GPUS':<10}  DESCRIPTION")
    for r in rows:
        if r["error"]:
            algo, shape, text = "-", "-", f"error: {r['error']}"
        else:
            algo, shape = r["algorithm"], _shape(r["nodes"], r["gpus_per_node"])
            text = ("" if r["kind"] == "preset" else "(yours) ") + r["description"]
        print(
            f"{one_line(r['name']):<{name_w}}  {one_line(algo):<10}  {shape:<10}  "
            f"{_cut(text, width)}"
        )
    return 0


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "profile",
        type=Path,
        metavar="PROFILE",
        help="a profile file or a preset's name (verl-tui profile list)",
    )
    p.add_argument(
        "--hosts",
        type=Path,
        metavar="HOSTS.yaml",
        help="also check against the live cluster, with the cluster's own verl",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a verl config key (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="JSON output")


def _check(args: argparse.Namespace) -> int:
    from tui.commands import load_hosts

    hosts = load_hosts(args.hosts) if args.hosts else None
    return run_profile_check(args.profile, hosts=hosts, sets=args.set, as_json=args.json)


def _list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")


CHECK = Command(
    _check_arguments,
    _check,
    description="Validate a profile against verl's config and rules; with --hosts, "
    "also against the live cluster, with the cluster's verl. Exit 0: no errors "
    "(warnings allowed); 1: errors; 2: bad input.",
)
LIST = Command(
    _list_arguments,
    lambda a: run_profile_list(as_json=a.json),
    description="The presets shipped with verl-tui, then your profiles: name, "
    "algorithm, nodes×GPUs, description.",
)
