"""`verl-tui sweep HOSTS PROFILE --grid KEY=V1,V2 …`: every combination validated against verl's
rules and the live cluster first (all or nothing), then queued as one group (tui/jobs/sweep.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.commands import EXIT_BAD_INPUT, Command

if TYPE_CHECKING:  # `verl-tui sweep --help` imports none of these (pydantic, Hydra)
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory


def run_sweep(
    inv: Inventory,
    profile_path: Path,
    *,
    grids: list[str],
    sets: list[str],
    name: str | None,
    priority: int,
    dry_run: bool,
    as_json: bool,
    print_config: bool = False,
    skip_preflight: bool = False,
) -> int:
    from tui.cluster.dashboard import DashboardError
    from tui.commands.jobs import DRY_RUN_RAY_WAIT_S
    from tui.commands.output import json_text
    from tui.commands.ray import _run, _with_cluster
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec, live_resources, working_dir_size
    from tui.jobs.profiles import check_set, load_profile, resolve_profile
    from tui.jobs.queue import JobQueue, QueueError
    from tui.jobs.sweep import parse_grid, plan_sweep, queue_sweep, runs_of
    from tui.jobs.verl_source import select_verl_sync
    from tui.sanitize import one_line
    from tui.transport.types import TransportError

    parsed = [parse_grid(g) for g in grids]  # ConfigError: one line, exit 2
    for line in sets:
        check_set(line)
    profile_path, note = resolve_profile(profile_path)
    if note:
        print(f"verl-tui sweep: {note}", file=sys.stderr)
    profile = load_profile(profile_path)
    sweep_name = name or profile.name
    queue, history = JobQueue(inv.cluster), JobHistory(inv.cluster)
    queued_ids = {e.submission_id for e in queue.entries()}

    def taken(sid: str) -> bool:
        return sid in queued_ids or history.get(sid) is not None

    runs_of(sweep_name, parsed, taken)  # the grid's own limits before anything is composed
    source = select_verl_sync(inv)
    if source.note:
        print(f"verl-tui sweep: warning: {source.note}", file=sys.stderr)
    spec = JobSpec(profile, sets=list(sets), print_config=print_config)

    def plan(resources: Any) -> Any:
        wd_bytes, _skipped = working_dir_size(spec)
        return plan_sweep(
            inv,
            spec,
            parsed,
            name=sweep_name,
            resources=resources,
            taken=taken,
            working_dir_bytes=wd_bytes,
        )

    async def body(cluster: RayCluster) -> int:
        try:
            asking = live_resources(cluster)
            resources = await (asyncio.wait_for(asking, DRY_RUN_RAY_WAIT_S) if dry_run else asking)
        except (DashboardError, TransportError, TimeoutError) as exc:
            why = str(exc) or f"no answer within {DRY_RUN_RAY_WAIT_S:.0f} s"
            if not dry_run:
                print(one_line(f"verl-tui sweep: Ray is not reachable: {why}"), file=sys.stderr)
                return 1
            print(
                one_line(f"verl-tui sweep: Ray is not reachable ({why}): checked without it"),
                file=sys.stderr,
            )
            resources = None
        result = await asyncio.to_thread(plan, resources)
        if not result.ok:
            for label, problems in result.invalid.items():
                for p in problems:
                    print(
                        one_line(
                            f"{profile_path}: combination {label}: {p.key or 'profile'}: "
                            f"{p.message}",
                            600,
                        ),
                        file=sys.stderr,
                    )
            print(
                f"verl-tui sweep: nothing queued ({len(result.invalid)} of "
                f"{len(result.runs)} combinations invalid)",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        rows = [{"submission_id": r.submission_id, "values": dict(r.values)} for r in result.runs]
        from tui.commands.check import print_preflight, say_preflight_skipped

        if skip_preflight and dry_run:
            say_preflight_skipped("verl-tui sweep")
        elif not skip_preflight:
            # The job preflight, as `submit --queue` runs it (data, model, imports, limits on
            # every host), for every run: one failing run queues none. A dry run runs it too
            # (a host it could not ask while Ray was down is a warning there).
            from tui.jobs.sweep import first_failing_preflight

            refused = await first_failing_preflight(
                cluster.fleet,
                cluster.inv,
                result,
                unasked="warn" if dry_run and resources is None else "fail",
            )
            if refused is not None:
                run, findings = refused
                print_preflight(findings)
                done = "the real sweep would queue nothing" if dry_run else "nothing queued"
                print(
                    one_line(
                        f"verl-tui sweep: combination {run.label}: the job preflight "
                        f"failed; {done} (--skip-preflight queues anyway)",
                        600,
                    ),
                    file=sys.stderr,
                )
                return EXIT_BAD_INPUT
        if dry_run:
            if as_json:
                print(json_text({"sweep": sweep_name, "runs": rows, "queued": False}, inv))
            else:
                for r in result.runs:
                    print(f"{r.submission_id}  {r.label}")
                print(f"{len(result.runs)} combinations valid (dry run: nothing queued)")
            return 0
        try:
            placed = queue_sweep(
                inv,
                result,
                queue,
                priority=priority,
                profile_path=str(profile_path.resolve()),
                taken=lambda sid: history.get(sid) is not None,
            )
        except QueueError as exc:
            print(f"verl-tui sweep: nothing queued: {exc}", file=sys.stderr)
            return 1
        if as_json:
            for row, (_entry, pos) in zip(rows, placed, strict=True):
                row["position"] = pos
            print(json_text({"sweep": sweep_name, "runs": rows, "queued": True}, inv))
        else:
            for entry, pos in placed:
                print(f"queued {entry.submission_id} at position {pos}  ({entry.tags['grid']})")
            print(
                f"sweep {sweep_name}: {len(placed)} runs queued; they start as the GPUs free up "
                "while a supervisor runs (the cockpit, or verl-tui watch HOSTS.yaml)"
            )
        return 0

    return _run(_with_cluster(inv, body))


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "profile", type=Path, metavar="PROFILE", help="a profile file or a preset's name"
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        required=True,
        metavar="KEY=V1,V2",
        help="a key and its values (repeatable, 1 to 3 keys; commas inside [..] or quotes "
        "stay in the value)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a verl config key for every run (repeatable)",
    )
    p.add_argument(
        "--name", help="the sweep's name: the runs' ids start with it (default: profile)"
    )
    p.add_argument(
        "--priority", type=int, default=0, metavar="N", help="queue priority (higher first)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every combination and run its job preflight, queue nothing (exit as "
        "the real sweep would)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="each run is main_ppo --cfg job: the cluster's verl prints its config and exits",
    )
    p.add_argument(
        "--skip-preflight",
        action="store_true",
        help="queue although the job preflight (data, model, imports, host limits) fails; "
        "with --dry-run: do not run it (said on stderr)",
    )
    p.add_argument("--json", action="store_true", help="JSON output")


SWEEP = Command(
    _sweep_arguments,
    lambda a: run_sweep(
        a.inventory,
        a.profile,
        grids=a.grid,
        sets=a.set,
        name=a.name,
        priority=a.priority,
        dry_run=a.dry_run,
        as_json=a.json,
        print_config=a.print_config,
        skip_preflight=a.skip_preflight,
    ),
    hosts="required",
    description="Run a profile over a grid of values: every combination is validated against "
    "verl's rules and the live cluster first (any invalid one: exit 2 naming it, nothing "
    "queued), then all are queued as one group with readable submission ids "
    "(NAME-lr1e-6-tbs64). A supervisor (the cockpit, or `verl-tui watch`) starts them as the "
    "GPUs free up.",
)
