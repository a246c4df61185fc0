"""`verl-tui submit`'s terminal side of the submission flow (tui/jobs/flow.py): the flow run
in a command's event loop, its steps and its one outcome printed (stderr for what went wrong,
stdout for a dry run's command and what was submitted or queued), its exit status."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tui.cluster.ray_cluster import RayCluster
from tui.commands.check import print_preflight, say_preflight_skipped
from tui.commands.output import json_text
from tui.commands.ray import _run, _with_cluster
from tui.config.hosts import Inventory
from tui.jobs.flow import (
    Checked,
    ClusterRead,
    Outcome,
    PreflightDone,
    PreflightSkipped,
    Queued,
    Ready,
    Refusal,
    Refused,
    Request,
    Step,
    Submitted,
    outcome,
    submission_flow,
)
from tui.jobs.history import JobHistory
from tui.jobs.pipeline import submission_json
from tui.jobs.rules_base import Problem
from tui.jobs.submit import Submission, shell_command
from tui.sanitize import one_line


def _print_submitted(sub: Submission, sid: str, url: str, as_json: bool, inv: Inventory) -> None:
    if as_json:
        print(json_text({**submission_json(sub), "submission_id": sid, "dashboard": url}, inv))
    else:
        print(f"submitted {sid}\n  follow: {follow_line(inv, sid)}")


def follow_line(inv: Inventory | None, sid: str) -> str:
    """`verl-tui logs <the hosts file given> <id> --follow`, ready to copy."""
    from tui.shellcmd import copy_line

    hosts = [str(inv.source)] if inv is not None and inv.source is not None else []
    return copy_line(["verl-tui", "logs", *hosts, sid, "--follow"])


def submit_through_flow(
    inv: Inventory,
    request: Request,
    *,
    as_json: bool,
    cluster: bool = True,
    profile_path: Path | None = None,
) -> int:
    """`verl-tui submit`: the submission flow (tui/jobs/flow.py), rendered on the terminal."""
    show = SubmitPrinter(inv, request, as_json=as_json, profile_path=profile_path)

    async def body(ray: RayCluster | None) -> int:
        history = JobHistory(inv.cluster)
        steps = submission_flow(inv, ray, history, request)
        done = await outcome(steps, show.step)
        show.url = ray.tunnel.url if ray is not None and ray.tunnel else ""
        return show.outcome(done)

    if not cluster:
        return _run(body(None))
    return _run(_with_cluster(inv, body))


class SubmitPrinter:
    """Renders the flow's steps and outcome for `verl-tui submit` (stderr for what went wrong,
    stdout for the command of a dry run and what was submitted or queued); exit status."""

    PROG = "verl-tui submit"

    def __init__(
        self, inv: Inventory, request: Request, *, as_json: bool, profile_path: Path | None
    ) -> None:
        self.inv, self.request, self.as_json = inv, request, as_json
        self.profile_path = profile_path
        self.dry_run = request.mode == "dry_run"
        self.url = ""  # the head's dashboard through the tunnel (--json)

    def say(self, text: str) -> None:
        print(one_line(f"{self.PROG}: {text}", 2000), file=sys.stderr)

    def problems(self, problems: Sequence[Problem]) -> None:
        for p in problems:
            print(f"{self.profile_path}: {p.key or 'profile'}: {p.message}", file=sys.stderr)

    def step(self, step: Step) -> None:
        if isinstance(step, ClusterRead) and step.resources is None:
            self.say(f"Ray is not reachable ({step.why}): checked without the cluster")
        elif isinstance(step, Checked):
            for path, why in step.skipped_files:  # left out of the upload: which and why
                self.say(f"working_dir: skipped {path} ({why})")
            for report in step.reports:
                self.problems(report.problems if report is not None else [])
            if self.dry_run:
                (sub,) = step.subs
                address = f"http://127.0.0.1:{self.inv.ray.dashboard_port}"
                print(
                    json_text(submission_json(sub), self.inv)
                    if self.as_json
                    else shell_command(sub, address)
                )
        elif isinstance(step, PreflightDone):
            print_preflight(step.findings)
        elif isinstance(step, PreflightSkipped) and self.dry_run:
            say_preflight_skipped(self.PROG)

    def outcome(self, done: Outcome) -> int:
        if isinstance(done, Submitted):
            _print_submitted(done.sub, done.submission_id, self.url, self.as_json, self.inv)
            return 0
        if isinstance(done, Queued):
            (run,) = done.placed
            if self.as_json:
                print(json_text({"queued": run.entry.summary_json(run.position)}, self.inv))
            else:
                print(
                    f"queued {run.sub.submission_id} at position {run.position} "
                    f"(needs {run.entry.needs.describe()})\n"
                    "  it starts when the GPUs are free and a supervisor runs "
                    "(the cockpit, or: verl-tui watch HOSTS.yaml)"
                )
            return 0
        if isinstance(done, Ready):
            return 0
        return self.refused(done)

    def refused(self, r: Refused) -> int:
        if r.kind is Refusal.INVALID:
            if r.error is not None:  # a malformed --set, a config verl cannot read: exit 2
                raise r.error
            self.problems(r.report.problems if r.report is not None else r.problems)
            if not self.dry_run:
                self.say("not submitted (fix the problems above)")
        elif r.kind is Refusal.PREFLIGHT:
            print_preflight(r.findings)
            lead = "dry run: the real submit would be refused" if self.dry_run else "not submitted"
            self.say(
                f"{lead}: the job preflight failed (fix the problems above; verl-tui check "
                "HOSTS --profile P shows every check; --skip-preflight sends it anyway)"
            )
        elif r.kind in (Refusal.RAY_DOWN, Refusal.UNREACHABLE):
            self.say(f"Ray is not reachable: {r.detail}")
        elif r.kind is Refusal.NOT_QUEUED:
            self.say(f"not queued: {r.detail}")
        else:  # not sent, an id taken, an outcome unknown: the error says it all
            self.say(str(r.error or r.text()))
        return 1
