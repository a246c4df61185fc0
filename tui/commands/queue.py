"""`verl-tui queue`: the local queue of validated jobs waiting for the cluster's GPUs (list,
cancel, reorder). `submit --queue` and `sweep` put them there through the one submission flow
(tui/jobs/flow.py)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from tui.commands import Command

if TYPE_CHECKING:  # `verl-tui queue --help` imports none of these (pydantic, Hydra)
    from tui.config.hosts import Inventory
    from tui.jobs.queue import QueueEntry


def queue_table(entries: list[QueueEntry], now: float | None = None) -> str:
    from tui.fmt import duration
    from tui.sanitize import one_line

    now = time.time() if now is None else now
    out = [f"{'POS':>3} {'SUBMISSION ID':<40} {'PRI':>3} {'NEEDS':<24} {'WAITING':>8}  STATE"]
    for i, e in enumerate(entries, 1):
        state = "starting" if e.state == "starting" else ("blocked" if e.blocked else "queued")
        if e.reason:
            state += f": {e.reason}"
        out.append(
            one_line(
                f"{i:>3} {e.submission_id:<40} {e.priority:>3} {e.needs.describe():<24} "
                f"{duration(now - e.queued_at):>8}  {state}",
                300,
            )
        )
    return "\n".join(out)


def run_queue(
    inv: Inventory,
    *,
    as_json: bool,
    cancel: str | None = None,
    move: str | None = None,
    to: int | None = None,
    up: bool = False,
    down: bool = False,
) -> int:
    from tui.cluster.dashboard import check_job_id
    from tui.commands.output import json_text
    from tui.config.yamlfile import ConfigError
    from tui.fmt import duration, plural
    from tui.jobs.queue import JobQueue, QueueError

    queue = JobQueue(inv.cluster)
    target = cancel or move
    if target is not None:
        check_job_id(target, "--cancel" if cancel else "--move")
    try:
        if cancel:
            entry = queue.cancel(cancel)
            waited = duration(time.time() - entry.queued_at)
            print(f"cancelled {entry.submission_id} (was queued {waited})")
            return 0
        if move:
            pos = queue.position(move)
            if pos is None:
                raise QueueError(f"{move} is not in the queue of {inv.cluster}")
            if to is None:
                to = pos - 1 if up else pos + 1 if down else None
            if to is None:
                raise ConfigError("--move ID needs --to N, --up or --down")
            now = queue.move(move, to)
            print(f"{move}: position {now}")
            return 0
    except QueueError as exc:
        print(f"verl-tui queue: {exc}", file=sys.stderr)
        return 1
    entries = queue.entries()
    if as_json:
        doc = {
            "cluster": inv.cluster,
            "queue": [e.summary_json(i) for i, e in enumerate(entries, 1)],
        }
        print(json_text(doc, inv))
    elif not entries:
        print(f"the queue of {inv.cluster} is empty")
    else:
        print(queue_table(entries))
        print(f"{plural(len(entries), 'job')} queued")
    return 0


def _position(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a position") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: positions start at 1")
    return value


def _queue_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help='JSON output: {"queue": [...]}')
    what = p.add_mutually_exclusive_group()
    what.add_argument("--cancel", metavar="SUBMISSION_ID", help="take a job out of the queue")
    what.add_argument(
        "--move", metavar="SUBMISSION_ID", help="move a job (with --to, --up, --down)"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--to", type=_position, metavar="N", help="the position to move it to (1: next)"
    )
    where.add_argument("--up", action="store_true", help="one position earlier")
    where.add_argument("--down", action="store_true", help="one position later")


def _queue(args: argparse.Namespace) -> int:
    from tui.config.yamlfile import ConfigError

    if (args.to is not None or args.up or args.down) and not args.move:
        raise ConfigError("--to/--up/--down need --move SUBMISSION_ID")
    return run_queue(
        args.inventory,
        as_json=args.json,
        cancel=args.cancel,
        move=args.move,
        to=args.to,
        up=args.up,
        down=args.down,
    )


QUEUE = Command(
    _queue_arguments,
    _queue,
    hosts="required",
    description="The local queue of validated jobs waiting for free GPUs: position, what each "
    "needs, how long it has waited, and why. A supervisor (the cockpit while open, or `verl-tui "
    "watch HOSTS.yaml`) submits the head of the queue once Ray's free GPUs and CPUs per node "
    "hold it, in priority then FIFO order. Add jobs with `verl-tui submit --queue` or "
    "`verl-tui sweep`.",
)
