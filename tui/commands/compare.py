"""`verl-tui compare HOSTS JOB JOB…`: runs side by side from the run archive — a summary each,
the config keys that differ, and (--json, --csv) every metric series all of them logged."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.ray import _run, _with_cluster
from tui.config.yamlfile import ConfigError

if TYPE_CHECKING:
    from tui.archive.store import ArchiveStore
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory


def _warn(store: ArchiveStore) -> None:
    from tui.sanitize import one_line

    for w in store.take_warnings():
        print(f"verl-tui compare: {one_line(w, 300)}", file=sys.stderr)


def run_compare(
    inv: Inventory,
    jobs: list[str],
    *,
    as_json: bool,
    csv_path: Path | None,
    keys: list[str] | None,
    offline: bool,
) -> int:
    from tui.archive.compare import MAX_RUNS, MIN_RUNS
    from tui.archive.store import ArchiveStore
    from tui.cluster.dashboard import check_job_id

    for job in jobs:
        check_job_id(job, "JOB")
    if not MIN_RUNS <= len(jobs) <= MAX_RUNS:
        raise ConfigError(f"JOB: give {MIN_RUNS} to {MAX_RUNS} jobs (got {len(jobs)})")
    if len(set(jobs)) != len(jobs):
        raise ConfigError("JOB: a job is named twice")
    store = ArchiveStore(inv.cluster)  # ConfigError for a bad VERL_TUI_ARCHIVE_MAX: exit 2

    async def body(cluster: RayCluster) -> int:
        from tui.archive.follow import refresh_archive

        for line in await refresh_archive(cluster, jobs, store):
            print(f"verl-tui compare: not refreshed: {line}", file=sys.stderr)
        return 0

    if not offline:
        _run(_with_cluster(inv, body))
    return show(inv, store, jobs, as_json=as_json, csv_path=csv_path, keys=keys)


def show(
    inv: Inventory,
    store: ArchiveStore,
    jobs: list[str],
    *,
    as_json: bool,
    csv_path: Path | None,
    keys: list[str] | None,
) -> int:
    from tui.archive.compare import (
        common_keys,
        compare_doc,
        config_diff,
        csv_text,
        load_runs,
    )
    from tui.commands.output import json_text
    from tui.commands.present import fail_with
    from tui.jobs.history import JobHistory
    from tui.sanitize import one_line
    from tui.state import write_output_file

    runs, missing = load_runs(store, jobs, JobHistory(inv.cluster))
    _warn(store)
    for sid in missing:
        print(
            f"verl-tui compare: no archived run {sid!r} (follow it once: verl-tui logs "
            "HOSTS JOB --follow)",
            file=sys.stderr,
        )
    if len(runs) < 2:
        return 1
    shared = common_keys(runs)
    if keys:
        unknown = [k for k in keys if k not in shared]
        if unknown:
            raise ConfigError(
                f"--key: {one_line(unknown[0], 120)} is not logged by every run "
                f"({len(shared)} keys are)"
            )
        shared = keys
    diff = config_diff(runs)
    if csv_path is not None:
        try:
            write_output_file(csv_path, csv_text(runs, shared))  # never over a symlink/device
        except OSError as exc:  # a folder, a device, a full disk: the file was not written
            return fail_with("verl-tui compare", f"--csv {csv_path}: {exc.strerror or exc}")
    if as_json:
        print(json_text(compare_doc(runs, shared, diff), inv))
        return 0
    print(text_report(runs, diff, len(shared)))
    return 0


def text_report(runs: list, diff: dict, shared: int) -> str:
    from tui.archive.compare import (
        SUMMARY_COLUMNS,
        fastest_learner,
        set_in,
        summary_cells,
        value_text,
    )
    from tui.sanitize import one_line

    rows = [list(SUMMARY_COLUMNS)] + [[one_line(c, 60) for c in summary_cells(r)] for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(SUMMARY_COLUMNS))]
    out = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    best = fastest_learner(runs)
    if best:
        out.append(one_line(best, 200))
    out += run_readings(runs)
    out.append("")
    if diff:
        out.append(f"config keys that differ ({len(diff)}):")
        for key, values in diff.items():
            parts = []
            for r in runs:
                text = value_text(values[r.submission_id])
                if not set_in(r, key):
                    text += " (default)"
                parts.append(f"{r.submission_id}={text}")
            out.append(one_line(f"  {key}: " + "  ".join(parts), 400))
    else:
        out.append("no config key differs")
    out.append(f"{shared} metric keys logged by every run (--json or --csv for the series)")
    return "\n".join(out)


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", nargs="+", metavar="JOB", help="2 to 8 submission ids")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument(
        "--csv", type=Path, metavar="FILE", help="write every point as submission_id,key,step,value"
    )
    p.add_argument(
        "--key",
        action="append",
        metavar="KEY",
        help="only this metric key in --json/--csv (repeatable; default: every shared key)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="use the archive as it is; do not ask the head for runs it lacks",
    )


def _run_args(args: argparse.Namespace) -> int:
    return run_compare(
        args.inventory,
        args.jobs,
        as_json=args.json,
        csv_path=args.csv,
        keys=args.key,
        offline=args.offline,
    )


COMPARE = Command(
    _arguments,
    _run_args,
    hosts="required",
    description="Compare 2 to 8 runs from the run archive (kept under the state dir for every "
    "job whose log verl-tui followed, across Ray restarts): a summary each (steps, last and "
    "best score, s/step, tokens/s/GPU, GPU-hours, GPU use), the config keys that differ "
    "(verl's default where a run did not set one), and with --json / --csv every metric "
    "series they all logged. Runs the archive lacks or that had not ended are read from the "
    "head first (unless --offline).",
)


def run_readings(runs: list) -> list[str]:
    """Per run: where its step time went and its training-health alerts (tui/metrics)."""
    from tui.metrics.health import series_alerts
    from tui.metrics.phases import breakdown, reading
    from tui.sanitize import one_line

    out = []
    for r in runs:
        out.append(f"{one_line(r.submission_id, 80)}: {reading(breakdown(r.series))}")
        alerts = series_alerts(r.series)
        if alerts:
            rules = ", ".join(sorted({a.rule for a in alerts}))
            first = one_line(alerts[0].message, 200)
            out.append(f"  health: {len(alerts)} alerts ({rules}); first: {first}")
    return out
