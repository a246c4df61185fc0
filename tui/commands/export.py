"""`verl-tui export HOSTS --prometheus 127.0.0.1:PORT [--public] [--interval S]`: serve GPU
telemetry, job states and the running jobs' training metrics (with their health alerts) in the
Prometheus text format until Ctrl-C (tui/export/prometheus.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

from tui.commands import Command, seconds
from tui.commands.present import fail_with

if TYPE_CHECKING:
    from tui.config.hosts import Inventory


async def _serve(inv: Inventory, host: str, port: int, interval: float) -> int:
    from tui.cluster.ray_cluster import RayCluster
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.export.prometheus import Exporter
    from tui.jobs.history import JobHistory
    from tui.transport.fleet import Fleet

    task = asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv)
    cluster = RayCluster(fleet, inv)
    exporter = Exporter(cluster, JobHistory(inv.cluster), monitor, interval=interval)
    try:
        bound = exporter.serve(host, port)
    except OSError as exc:
        return fail_with(
            "verl-tui export", f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        )
    fleet.start()
    monitor.start()
    print(f"serving http://{bound[0]}:{bound[1]}/metrics (Ctrl-C stops)", flush=True)
    try:
        await exporter.run()
    finally:
        exporter.close()
        await cluster.close()
        await monitor.close()
        await fleet.close()
    return 0


def run_export(inv: Inventory, args: argparse.Namespace) -> int:
    from tui.config.listen import ListenError, parse_listen

    try:
        host, port = parse_listen(args.prometheus, public=args.public)
    except ListenError as exc:
        return fail_with("verl-tui export", f"--prometheus {exc}", kind=exc.kind, title=exc.title)
    try:
        return asyncio.run(_serve(inv, host, port, args.interval))
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:
        return 143


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prometheus",
        required=True,
        metavar="HOST:PORT",
        help="where to serve /metrics (loopback: 127.0.0.1:9400)",
    )
    p.add_argument(
        "--public",
        action="store_true",
        help="allow a non-loopback address (the endpoint has no authentication)",
    )
    p.add_argument(
        "--interval",
        type=seconds,
        default=15.0,
        metavar="S",
        help="seconds between reads of the jobs and their metrics (default 15)",
    )


EXPORT = Command(
    _arguments,
    lambda a: run_export(a.inventory, a),
    hosts="required",
    description="Serve the cluster's GPU telemetry, job states and the running jobs' training "
    "metrics (verl's file logger or console lines: the latest value of every key, the step, "
    "the training-health alerts per rule) at http://HOST:PORT/metrics in the Prometheus text "
    "format, until Ctrl-C. Loopback only unless --public. hosts.yaml `prometheus: "
    "127.0.0.1:PORT` makes the cockpit serve the same while it runs.",
)
