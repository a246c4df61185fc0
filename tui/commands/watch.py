"""`verl-tui watch HOSTS`: the supervisor, headless (tmux, nohup, `systemd-run --user`).

The same loop the cockpit runs while it is open (tui/supervisor/core.py): it retries failed
jobs that have a retry policy, and runs the other duties registered there. One supervisor acts
per cluster: a second `watch` exits 3 naming the holder, or with `--standby` waits (a team's
shared cluster: each account's watch delivers its own jobs' notifications meanwhile) and takes
over when the holder's lease expires; a holder killed with -9 is taken over once its lease
expires (at once from the same machine)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail
from tui.commands.ray import _run, _with_cluster
from tui.sanitize import one_line

if TYPE_CHECKING:  # `verl-tui watch --help` imports no pydantic
    from tui.config.hosts import Inventory


def run_watch(
    inv: Inventory,
    *,
    once: bool,
    interval: float,
    as_json: bool,
    bring_up: bool,
    gpu_interval: float = 0.0,
    standby: bool = False,
) -> int:
    from tui.cluster.ray_cluster import RayCluster
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.jobs.history import JobHistory
    from tui.state import state_dir
    from tui.supervisor.core import Supervisor
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.events import Decision
    from tui.supervisor.lease import LeaseHeld
    from tui.supervisor.retry import RetryDuty
    from tui.supervisor.stall_duty import use_telemetry
    from tui.transport.types import TransportError

    def show(d: Decision) -> None:
        if as_json:
            print(json_text(d.to_json(), inv), flush=True)
        else:
            print(d.line(), flush=True)

    async def body(cluster: RayCluster) -> int:
        ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), state_dir())
        sup = Supervisor(ctx, interval=interval, on_decision=show)
        from tui.supervisor.notify import install

        install(ctx, echo=show)  # hosts.yaml notify: (a notifier's failure is printed too)
        for duty in sup.duties:
            if isinstance(duty, RetryDuty):
                duty.bring_up = bring_up
        said = ""
        while True:  # the head first: a second supervisor is refused before it does anything
            try:
                await sup.lease.acquire()
                break
            except LeaseHeld as exc:  # refused: exit 3, like up/down while another holds it
                if not standby:
                    return fail(exc, "verl-tui watch")
                # Standing by: each pass renews nothing, delivers this account's events from
                # the shared log, and acts once the holder's lease has expired (Supervisor.tick).
                print(f"verl-tui watch: standing by: {one_line(str(exc), 300)}", file=sys.stderr)
                break
            except (TransportError, OSError) as exc:
                why = one_line(f"verl-tui watch: cannot reach the head: {exc}", 300)
                if once:
                    print(why, file=sys.stderr)
                    return 1
                if why != said:
                    print(f"{why} (trying again every {interval:g} s)", file=sys.stderr)
                    said = why
                await asyncio.sleep(interval)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        # The stall check's GPU evidence (memory held, busy or idle since when): the agents
        # the cockpit would run, at the watch's own pace.
        monitor = None
        if gpu_interval > 0 and not once:
            monitor = TelemetryMonitor(cluster.fleet, inv, interval=gpu_interval, relays=True)
            monitor.start()
            use_telemetry(ctx, monitor)
        try:
            await sup.run(once=once, stop=stop)
        finally:
            if monitor is not None:
                await monitor.close()
            await sup.close()
        return 0

    return _run(_with_cluster(inv, body))


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="one pass over the jobs, then exit")
    p.add_argument(
        "--interval",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between passes (default 10); also the lease's heartbeat",
    )
    p.add_argument("--json", action="store_true", help="each decision as one JSON line")
    p.add_argument(
        "--standby",
        action="store_true",
        help="while another supervisor holds the cluster, wait instead of exiting 3: deliver "
        "this account's jobs' notifications, and take over when its lease expires",
    )
    p.add_argument(
        "--gpus",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between GPU samples of every host, the stall check's GPU evidence "
        "(default 5; 0: none, the stall check reads the logs only)",
    )
    p.add_argument(
        "--bring-up",
        action="store_true",
        help="before a retry, start Ray again on hosts that are back but whose node is gone "
        "(like `verl-tui up`)",
    )


def _run_args(args: argparse.Namespace) -> int:
    if not 0.5 <= args.interval <= 3600:
        from tui.config.yamlfile import ConfigError

        raise ConfigError(f"--interval {args.interval:g}: give 0.5 to 3600 seconds")
    if args.gpus != 0 and not 0.5 <= args.gpus <= 3600:
        from tui.config.yamlfile import ConfigError

        raise ConfigError(f"--gpus {args.gpus:g}: give 0.5 to 3600 seconds, or 0 for none")
    return run_watch(
        args.inventory,
        once=args.once,
        interval=args.interval,
        as_json=args.json,
        bring_up=args.bring_up,
        gpu_interval=args.gpus,
        standby=args.standby,
    )


WATCH = Command(
    _arguments,
    _run_args,
    hosts="required",
    description="Supervise the cluster's jobs headless: retry failed jobs that have a retry "
    "policy (submit --retries) from their latest complete checkpoint once every host is back, "
    "and run the supervisor's other duties. Prints one line per decision (--json: JSON lines); "
    "each decision is also recorded on its job (verl-tui jobs --json). One supervisor acts per "
    "cluster: exit 3 while another holds it (the cockpit, or another watch), or with --standby "
    "wait for it, delivering this account's notifications meanwhile.",
)
