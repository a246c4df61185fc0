"""`verl-tui sweep HOSTS PROFILE --grid KEY=V1,V2 …`: every combination validated against verl's
rules and the live cluster first (all or nothing), then queued as one group (tui/jobs/sweep.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tui.commands import EXIT_BAD_INPUT, Command

if TYPE_CHECKING:  # `verl-tui sweep --help` imports none of these (pydantic, Hydra)
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.jobs.flow import Outcome, Refused, Step


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
    """Through the one submission flow (tui/jobs/flow.py): every combination validated and
    its job preflight run (one failing run queues none), then all queued as one group."""
    from tui.commands.jobs import DRY_RUN_RAY_WAIT_S
    from tui.commands.ray import _run, _with_cluster
    from tui.jobs.flow import Request, Sweep, outcome, submission_flow
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.profiles import check_set, load_profile, resolve_profile
    from tui.jobs.sweep import parse_grid, runs_of
    from tui.jobs.verl_source import select_verl_sync

    parsed = [parse_grid(g) for g in grids]  # ConfigError: one line, exit 2
    for line in sets:
        check_set(line)
    profile_path, note = resolve_profile(profile_path)
    if note:
        print(f"verl-tui sweep: {note}", file=sys.stderr)
    profile = load_profile(profile_path)
    sweep_name = name or profile.name
    history = JobHistory(inv.cluster)
    runs_of(sweep_name, parsed, lambda _sid: False)  # the grid's limits before composing
    source = select_verl_sync(inv)
    if source.note:
        print(f"verl-tui sweep: warning: {source.note}", file=sys.stderr)
    spec = JobSpec(profile, sets=list(sets), print_config=print_config)
    request = Request(
        Sweep(spec, tuple(parsed), sweep_name),
        mode="dry_run" if dry_run else "queue",
        skip_preflight=skip_preflight,
        profile_path=str(profile_path.resolve()),
        priority=priority,
        ray_wait_s=DRY_RUN_RAY_WAIT_S,
    )
    show = SweepPrinter(inv, profile_path, sweep_name, dry_run=dry_run, as_json=as_json)

    async def body(cluster: RayCluster) -> int:
        steps = submission_flow(inv, cluster, history, request)
        return show.outcome(await outcome(steps, show.step))

    return _run(_with_cluster(inv, body))


class SweepPrinter:
    """`verl-tui sweep`'s rendering of the flow: problems and refusals on stderr, the runs
    (dry run) or where they were queued on stdout; the exit status."""

    def __init__(
        self, inv: Inventory, path: Path, name: str, *, dry_run: bool, as_json: bool
    ) -> None:
        self.inv, self.path, self.name = inv, path, name
        self.dry_run, self.as_json = dry_run, as_json

    def say(self, text: str) -> None:
        from tui.sanitize import one_line

        print(one_line(f"verl-tui sweep: {text}", 600), file=sys.stderr)

    def step(self, step: Step) -> None:
        from tui.commands.check import print_preflight, say_preflight_skipped
        from tui.jobs.flow import ClusterRead, PreflightDone, PreflightSkipped

        if isinstance(step, ClusterRead) and step.resources is None:
            self.say(f"Ray is not reachable ({step.why}): checked without it")
        elif isinstance(step, PreflightSkipped) and self.dry_run:
            say_preflight_skipped("verl-tui sweep")
        elif isinstance(step, PreflightDone):
            print_preflight(step.findings)

    def outcome(self, done: Outcome) -> int:
        from tui.commands.output import json_text
        from tui.jobs.flow import Queued, Ready, Refused

        if isinstance(done, Refused):
            return self.refused(done)
        if isinstance(done, Ready):
            runs = [r for r in done.runs if r is not None]
            if self.as_json:
                found = [{"submission_id": r.submission_id, "values": dict(r.values)} for r in runs]
                print(json_text({"sweep": self.name, "runs": found, "queued": False}, self.inv))
            else:
                for r in runs:
                    print(f"{r.submission_id}  {r.label}")
                print(f"{len(runs)} combinations valid (dry run: nothing queued)")
            return 0
        assert isinstance(done, Queued)
        if self.as_json:
            rows: list[dict[str, object]] = [
                {
                    "submission_id": q.sub.submission_id,
                    "values": dict(q.run.values if q.run else ()),
                    "position": q.position,
                }
                for q in done.placed
            ]
            print(json_text({"sweep": self.name, "runs": rows, "queued": True}, self.inv))
        else:
            for q in done.placed:
                print(
                    f"queued {q.sub.submission_id} at position {q.position}  "
                    f"({q.entry.tags['grid']})"
                )
            print(
                f"sweep {self.name}: {len(done.placed)} runs queued; they start as the GPUs "
                "free up while a supervisor runs (the cockpit, or verl-tui watch HOSTS.yaml)"
            )
        return 0

    def refused(self, r: Refused) -> int:
        from tui.commands.check import print_preflight
        from tui.jobs.flow import Refusal
        from tui.sanitize import one_line

        if r.kind is Refusal.INVALID:
            if r.error is not None:  # a grid past its limits: exit 2, one line
                raise r.error
            for label, problems in r.per_run:
                for p in problems:
                    where = f"{self.path}: combination {label}: {p.key or 'profile'}"
                    print(one_line(f"{where}: {p.message}", 600), file=sys.stderr)
            self.say(f"nothing queued ({r.reason})")
            return EXIT_BAD_INPUT
        if r.kind is Refusal.PREFLIGHT:
            print_preflight(r.findings)
            done = "the real sweep would queue nothing" if self.dry_run else "nothing queued"
            self.say(
                f"combination {r.run}: the job preflight failed; {done} (--skip-preflight "
                "queues anyway)"
            )
            return EXIT_BAD_INPUT
        if r.kind in (Refusal.RAY_DOWN, Refusal.UNREACHABLE):
            self.say(f"Ray is not reachable: {r.detail}")
        else:
            self.say(f"nothing queued: {r.detail or r.text()}")
        return 1


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
