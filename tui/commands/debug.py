"""`verl-tui debug`: what waits for a debugger on the cluster (paused post-mortem workers and
legacy pdb breakpoints), for scripts and for a quick look without the cockpit."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail
from tui.commands.ray import _run, _with_cluster
from tui.errors import VerlTuiError

if TYPE_CHECKING:  # the services are imported where used: `verl-tui debug --help` stays light
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.debug.targets import DebugTargets


def targets_text(t: DebugTargets) -> str:
    out = []
    if t.paused:
        out.append(f"{'PAUSED WORKER':<14} {'HOST':<12} {'PID':>7} {'PORT':>6}  {'JOB':<32} TASK")
        out += [
            f"{'post-mortem':<14} {p.host:<12} {p.pid:>7} {p.port:>6}  {p.job:<32} {p.task}"
            for p in t.paused
        ]
    else:
        out.append("no paused workers")
    if t.breakpoints:
        out.append("")
        out.append(f"{'BREAKPOINT':<14} {'HOST':<12} {'PORT':>6}  {'JOB':<32} WHERE")
        for b in t.breakpoints:
            age = f"{time.time() - b.timestamp:.0f}s ago" if b.timestamp else ""
            out.append(
                f"{'legacy pdb':<14} {b.host:<12} {b.port:>6}  {b.job:<32} "
                f"{b.filename}:{b.lineno}  {b.task} {age}".rstrip()
            )
    else:
        out.append("no legacy breakpoints")
    out += [f"problem: {p}" for p in t.problems]
    return "\n".join(out)


def run_debug(inv: Inventory, *, as_json: bool) -> int:
    from tui.debug.targets import debug_targets

    async def body(cluster: RayCluster) -> int:
        try:
            targets = await debug_targets(cluster)
        except VerlTuiError as exc:
            return fail(exc, "verl-tui debug")
        print(json_text(targets.to_json(), inv) if as_json else targets_text(targets))
        return 1 if targets.problems else 0

    return _run(_with_cluster(inv, body))


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")


DEBUG = Command(
    _arguments,
    lambda a: run_debug(a.inventory, as_json=a.json),
    hosts="required",
    description="Workers paused by post-mortem debugging (RAY_DEBUG_POST_MORTEM) "
    "and legacy pdb breakpoints (RAY_DEBUG=legacy) of running jobs.",
)
