"""`verl-tui submit | jobs | stop`: Ray jobs through the head's Jobs API, over the tunnel."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tui.cluster.dashboard import DashboardError, check_job_id
from tui.cluster.ray_cluster import RayCluster
from tui.commands.ray import _run, _with_cluster
from tui.config.hosts import Inventory
from tui.config.yamlfile import ConfigError
from tui.fmt import duration
from tui.jobs.history import JobHistory
from tui.jobs.service import TERMINAL, JobRow, list_jobs, stop_job, submit_and_record
from tui.jobs.submit import Submission, raw_submission, shell_command
from tui.jobs.workdir import WorkdirError
from tui.sanitize import one_line
from tui.transport.types import TransportError


def parse_env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not (key[0].isalpha() or key[0] == "_") \
                or not key.replace("_", "a").isalnum():
            raise ConfigError(f"--env {pair!r}: expected NAME=VALUE")
        out[key] = value
    return out


def jobs_table(rows: list[JobRow]) -> str:
    out = [f"{'SUBMISSION ID':<40} {'STATUS':<20} {'DURATION':>9} {'PROFILE':<24} DRIVER"]
    for r in rows:
        profile = (r.record.profile if r.record and r.record.profile else "-")
        out.append(f"{r.submission_id:<40} {r.status:<20} {duration(r.duration_s):>9} "
                   f"{profile:<24} {r.driver_node or '-'}")
    return "\n".join(out)


def _print_submitted(sub: Submission, sid: str, url: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"submission_id": sid, "entrypoint": sub.entrypoint,
                          "runtime_env": sub.runtime_env(), "metadata": sub.metadata,
                          "dashboard": url}))
    else:
        print(f"submitted {sid}\n  follow: verl-tui logs HOSTS.yaml {sid} --follow")


def run_submit_raw(inv: Inventory, command: list[str], *, env: Mapping[str, str],
                   working_dir: str | None, excludes: list[str], submission_id: str | None,
                   dry_run: bool, as_json: bool) -> int:
    if submission_id is not None:
        check_job_id(submission_id, "--submission-id")
    try:
        sub = raw_submission(command, env={**inv.ray.env, **env}, working_dir=working_dir,
                             excludes=excludes, submission_id=submission_id)
    except ValueError as exc:
        print(f"verl-tui submit: {exc}", file=sys.stderr)
        return 2
    address = f"http://127.0.0.1:{inv.ray.dashboard_port}"
    if dry_run:
        print(shell_command(sub, address))
        return 0

    async def body(cluster: RayCluster) -> int:
        try:
            sid = await submit_and_record(cluster, sub, JobHistory(inv.cluster))
        except (DashboardError, TransportError, WorkdirError) as exc:
            print(f"verl-tui submit: {exc}", file=sys.stderr)
            return 1
        _print_submitted(sub, sid, cluster.tunnel.url if cluster.tunnel else "", as_json)
        return 0

    return _run(_with_cluster(inv, body))


def run_jobs(inv: Inventory, *, as_json: bool) -> int:
    async def body(cluster: RayCluster) -> int:
        try:
            rows = await list_jobs(cluster, JobHistory(inv.cluster))
        except (DashboardError, TransportError) as exc:
            print(f"verl-tui jobs: {exc}", file=sys.stderr)
            return 1
        print(json.dumps({"jobs": [r.to_json() for r in rows]}) if as_json else jobs_table(rows))
        return 0

    return _run(_with_cluster(inv, body))


def run_stop(inv: Inventory, job: str, *, wait: float = 30.0) -> int:
    check_job_id(job, "SUBMISSION_ID")  # before anything is sent: bad id → exit 2

    async def body(cluster: RayCluster) -> int:
        try:
            status = await stop_job(cluster, job, JobHistory(inv.cluster), wait=wait)
        except (DashboardError, TransportError) as exc:
            print(f"verl-tui stop: {exc}", file=sys.stderr)
            return 1
        print(f"{job}: {status}")
        return 0 if status in TERMINAL else 1

    return _run(_with_cluster(inv, body))


def resolve_working_dir(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ConfigError(f"--working-dir {value}: not a directory")
    return str(path.resolve())


def run_submit_profile(inv: Inventory, profile_path: Path, *, sets: list[str],
                       env: Mapping[str, str], working_dir: str | None, excludes: list[str],
                       submission_id: str | None, post_mortem: bool, legacy_debug: bool,
                       dry_run: bool, as_json: bool, print_config: bool = False) -> int:
    from tui.cluster.probe import probe_all
    from tui.jobs.profiles import load_profile
    from tui.jobs.rules import ClusterResources, NodeResources
    from tui.jobs.submit import merged_env, verl_submission
    from tui.jobs.validate import check_profile
    from tui.jobs.workdir import scan

    if submission_id is not None:
        check_job_id(submission_id, "--submission-id")
    profile = load_profile(profile_path)  # ConfigError: one line, exit 2 (cli.main)
    rt = profile.runtime_env
    wd = working_dir or (str(Path(rt.working_dir).expanduser()) if rt.working_dir else None)
    excl = [*rt.excludes, *excludes]
    job_env = merged_env(inv, rt.env_vars, post_mortem=post_mortem,
                         legacy_debug=legacy_debug, extra=env)
    address = f"http://127.0.0.1:{inv.ray.dashboard_port}"

    def wd_bytes() -> int | None:
        if not wd:
            return None
        found = scan(Path(wd), excl)
        for path, why in found.skipped:  # left out of the upload: say which and why
            print(one_line(f"verl-tui submit: working_dir: skipped {path} ({why})"),
                  file=sys.stderr)
        return found.total

    def build(cluster: Any) -> tuple[Submission | None, list[Any]]:
        # nnodes / n_gpus_per_node follow the live cluster unless pinned (check_profile adds
        # them to report.overrides), so what is validated is exactly what is submitted.
        report = check_profile(profile, sets=sets, cluster=cluster,
                               working_dir_bytes=wd_bytes(),
                               post_mortem=post_mortem)
        if not report.ok:
            return None, report.problems
        sub = verl_submission(
            inv, name=profile.name, overrides=report.overrides, python=profile.python,
            env=job_env, working_dir=wd, excludes=excl, composed=report.config,
            submission_id=submission_id, print_config=print_config)
        return sub, report.problems

    def show_problems(problems: list[Any]) -> None:
        for p in problems:
            where = p.key or "profile"
            print(f"{profile_path}: {where}: {p.message}", file=sys.stderr)

    if dry_run:
        sub, problems = build(None)
        show_problems(problems)
        if sub is None:
            return 1
        print(shell_command(sub, address))
        return 0

    async def body(cluster: RayCluster) -> int:
        try:
            st = await cluster.status()
        except (DashboardError, TransportError) as exc:
            print(f"verl-tui submit: Ray is not reachable: {exc}", file=sys.stderr)
            return 1
        resources = ClusterResources(nodes=[NodeResources(n.host or n.node_ip, n.gpus, n.cpus)
                                            for n in st.nodes if n.alive])
        if post_mortem:
            facts = await probe_all(cluster.fleet, inv)
            resources.hosts_without_debugpy = [h for h, f in facts.items()
                                               if f.ok and not f.debugpy_version]
        sub, problems = await asyncio.to_thread(build, resources)
        show_problems(problems)
        if sub is None:
            print("verl-tui submit: not submitted (fix the problems above)", file=sys.stderr)
            return 1
        try:
            sid = await submit_and_record(cluster, sub, JobHistory(inv.cluster),
                                          profile_path=str(profile_path.resolve()))
        except (DashboardError, TransportError, WorkdirError) as exc:
            print(f"verl-tui submit: {exc}", file=sys.stderr)
            return 1
        _print_submitted(sub, sid, cluster.tunnel.url if cluster.tunnel else "", as_json)
        return 0

    return _run(_with_cluster(inv, body))
