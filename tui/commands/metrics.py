"""`verl-tui metrics HOSTS JOB [--json] [--key K…]`: the series the cockpit charts and where they
were read: verl's own `file` logger on the node that writes it (exact numbers, every key), else
verl's console lines in the driver log, else the run archive. JSON:
``{"source": "file:PATH" | "console", "series": {KEY: [[step, value|null], …]}}`` — null is a
non-finite value (NaN, ±Inf: orjson writes them as null in verl's file)."""

from __future__ import annotations

import argparse
import fnmatch
import math
import sys
from typing import TYPE_CHECKING, Any

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail_job
from tui.commands.ray import _run, _with_cluster
from tui.errors import VerlTuiError

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.metrics import MetricsTracker
    from tui.metrics.phases import Breakdown


def select_keys(keys: list[str], patterns: list[str] | None) -> list[str]:
    """The keys `patterns` name (exact, or shell-style: timing_s/*), in the tracker's order."""
    if not patterns:
        return keys
    return [k for k in keys if any(k == p or fnmatch.fnmatchcase(k, p) for p in patterns)]


def metrics_doc(tracker: MetricsTracker, patterns: list[str] | None = None) -> dict[str, Any]:
    """The command's JSON document: source and series (non-finite values as null)."""
    series = {
        key: [[step, v if math.isfinite(v) else None] for step, v in tracker.series(key)]
        for key in select_keys(tracker.keys(), patterns)
    }
    return {"source": tracker.source, "series": series}


def text_lines(tracker: MetricsTracker, patterns: list[str] | None = None) -> list[str]:
    from tui.sanitize import one_line, pad
    from tui.widgets.metrics import fmt_value

    keys = select_keys(tracker.keys(), patterns)
    lines = [f"source: {one_line(tracker.source, 300)}   {len(keys)} keys"]
    width = min(max((len(k) for k in keys), default=3), 60)
    lines.append(f"{pad('KEY', width)}  {'POINTS':>6}  {'STEP':>7}  {'LAST':>10}  NON-FINITE")
    for key in keys:
        points = tracker.series(key)
        bad = sum(1 for _s, v in points if not math.isfinite(v))
        step, last = points[-1] if points else (None, math.nan)
        lines.append(
            f"{pad(one_line(key, 200), width)}  {len(points):>6}  {step!s:>7}  "
            f"{fmt_value(last):>10}  {bad or ''}"
        )
    return lines


def phases_of(tracker: MetricsTracker, gpu_util: dict[str, float] | None = None) -> Breakdown:
    """The job's step-time breakdown (tui/metrics/phases.py) from its timing and perf keys;
    `gpu_util`: the GPUs' busy share per phase, where the supervisor measured it."""
    from tui.metrics.phases import breakdown

    keys = [k for k in tracker.keys() if k.startswith(("timing_s/", "perf/"))]  # noqa: SIM118
    return breakdown({k: tracker.series(k) for k in keys}, gpu_util)


def supervised_phase_util(cluster: str, job: str) -> dict[str, float]:
    """What the supervisor (cockpit or `watch`) measured of the job's GPUs per phase."""
    from tui.state import StateError, state_dir
    from tui.supervisor.health_duty import read_phase_util

    try:
        return read_phase_util(state_dir(), cluster, job)
    except StateError:
        return {}


def phase_lines(b: Breakdown) -> list[str]:
    from tui.metrics.phases import reading

    lines = [f"time per step: {reading(b)}"]
    for phase, seconds in sorted(b.phases.items(), key=lambda x: -x[1]):
        mean = seconds / b.steps if b.steps else 0.0
        lines.append(f"  {phase:<26} {b.share(phase) * 100:5.1f} %  {mean:9.3f} s/step")
    return lines


def run_metrics(
    inv: Inventory, job: str, *, keys: list[str] | None, as_json: bool, phases: bool = False
) -> int:
    from tui.archive.metrics_source import job_metrics
    from tui.archive.store import ArchiveStore
    from tui.cluster.dashboard import check_job_id

    check_job_id(job, "JOB")
    store = ArchiveStore(inv.cluster)

    async def body(cluster: RayCluster) -> int:
        try:
            tracker = await job_metrics(cluster, job, store=store)
        except VerlTuiError as exc:
            return fail_job(
                exc, "verl-tui metrics", job, looked="on the head or in the run archive"
            )
        for warning in store.take_warnings():
            print(f"verl-tui metrics: {warning}", file=sys.stderr)
        doc = metrics_doc(tracker, keys)
        gpu = supervised_phase_util(inv.cluster, job) if phases else {}
        if phases:
            doc["phases"] = phases_of(tracker, gpu).to_json()
        if as_json:
            print(json_text(doc, inv))
        else:
            print("\n".join(text_lines(tracker, keys)))
            if phases:
                print("\n".join(phase_lines(phases_of(tracker, gpu))))
        return 0

    return _run(_with_cluster(inv, body))


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", help="submission id (verl-tui jobs lists them)")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--phases",
        action="store_true",
        help="where the step's time goes: verl's timing_s/* phases, their shares, MFU",
    )
    p.add_argument(
        "--key",
        dest="keys",
        action="extend",
        nargs="+",
        metavar="K",
        help="only these keys (exact, or shell-style like 'timing_s/*'); repeatable",
    )


METRICS = Command(
    _arguments,
    lambda a: run_metrics(a.inventory, a.job, keys=a.keys, as_json=a.json, phases=a.phases),
    hosts="required",
    description="Print a job's training metrics and where they were read: verl's own `file` "
    "logger (trainer.logger with file: one JSON line per step, read over SSH on the node that "
    "writes it, exact numbers, every key), else verl's console lines in the driver log, else "
    "the run archive. NaN and ±Inf are null in --json. The series read are archived.",
)
