"""`verl-tui stack HOSTS JOB`: every process of a job on every host dumped with py-spy at once,
grouped by stack (odd ones out first), with Ray's view of the job; the whole dump saved into the
run archive. Exit 0 when every process Ray named was dumped, 1 otherwise (a problem line says
why, with its fix)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail_job
from tui.commands.ray import _run, _with_cluster
from tui.errors import VerlTuiError

if TYPE_CHECKING:  # the services are imported where used: `verl-tui stack --help` stays light
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory


def run_stack(inv: Inventory, job: str, *, native: bool, as_json: bool) -> int:
    from tui.archive.store import ArchiveStore
    from tui.cluster.dashboard import check_job_id
    from tui.stack import dump_job_stacks
    from tui.state import StateError

    check_job_id(job, "JOB")  # before anything is sent: a bad id is exit 2
    store = ArchiveStore(inv.cluster)

    async def body(cluster: RayCluster) -> int:
        try:
            client = await cluster.dashboard()
            report = await dump_job_stacks(cluster.fleet, client, job, native=native)
        except VerlTuiError as exc:
            return fail_job(exc, "verl-tui stack", job)
        saved = ""
        try:
            saved = str(report.save(store))
        except StateError as exc:
            print(f"verl-tui stack: not saved: {exc}", file=sys.stderr)
        if as_json:
            print(json_text({**report.to_json(), "saved": saved or None}, inv))
        else:
            print("\n".join(report.text_lines()))
            if saved:
                print(f"saved: {saved}", file=sys.stderr)
        complete = len(report.dumps) == report.expected and not report.problems
        return 0 if complete else 1

    return _run(_with_cluster(inv, body))


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", help="submission id (verl-tui jobs lists them)")
    p.add_argument(
        "--native",
        action="store_true",
        help="with C/C++/CUDA frames (py-spy --native: where an NCCL call waits)",
    )
    p.add_argument("--json", action="store_true", help="JSON output")


STACK = Command(
    _arguments,
    lambda a: run_stack(a.inventory, a.job, native=a.native, as_json=a.json),
    hosts="required",
    description="Dump every process of a job (driver, TaskRunner, every worker actor) on "
    "every host at once with py-spy over SSH, group identical stacks and name the ranks (odd "
    "ones out first), with Ray's view of the job: actors and their states, tasks waiting, "
    "placement groups waiting and what they need. The whole dump is saved into the run "
    "archive. A host without py-spy, a ptrace that is denied or a process of another user "
    "is one line naming the fix. Exit 0 when every process was dumped, 1 otherwise.",
)
