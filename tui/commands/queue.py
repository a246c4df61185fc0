"""`verl-tui queue`: the cluster's queue of validated jobs waiting for its GPUs, kept on the
head and shared by every user of the cluster (list, cancel, reorder). `submit --queue` and
`sweep` put them there through the one submission flow (tui/jobs/flow.py). Cancelling or
moving another user's entry is refused without --force (exit 3)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from tui.commands import Command

if TYPE_CHECKING:  # `verl-tui queue --help` imports none of these (pydantic, Hydra)
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.jobs.queue import QueueEntry
    from tui.jobs.queue_shared import AnyQueue


def queue_table(entries: list[QueueEntry], now: float | None = None) -> str:
    from tui.fmt import duration
    from tui.sanitize import one_line

    now = time.time() if now is None else now
    out = [
        f"{'POS':>3} {'SUBMISSION ID':<40} {'OWNER':<24} {'PRI':>3} {'NEEDS':<24} "
        f"{'WAITING':>8}  STATE"
    ]
    for i, e in enumerate(entries, 1):
        state = "starting" if e.state == "starting" else ("blocked" if e.blocked else "queued")
        if e.reason:
            state += f": {e.reason}"
        out.append(
            one_line(
                f"{i:>3} {e.submission_id:<40} {e.owner or '-':<24} {e.priority:>3} "
                f"{e.needs.describe():<24} "
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
    force: bool = False,
) -> int:
    from tui.cluster.dashboard import check_job_id
    from tui.commands.ray import _run, _with_cluster

    target = cancel or move
    if target is not None:
        check_job_id(target, "--cancel" if cancel else "--move")
    if move and to is None and not (up or down):
        from tui.config.yamlfile import ConfigError

        raise ConfigError("--move ID needs --to N, --up or --down")

    async def body(cluster: RayCluster) -> int:
        from tui.jobs.queue_shared import cluster_queue

        queue = cluster_queue(inv, cluster.fleet)
        return await queue_command(
            inv,
            queue,
            as_json=as_json,
            cancel=cancel,
            move=move,
            to=to,
            up=up,
            down=down,
            force=force,
        )

    return _run(_with_cluster(inv, body))


async def queue_command(
    inv: Inventory,
    queue: AnyQueue,
    *,
    as_json: bool,
    cancel: str | None = None,
    move: str | None = None,
    to: int | None = None,
    up: bool = False,
    down: bool = False,
    force: bool = False,
) -> int:
    """`verl-tui queue` on `queue`: the exit status (3: another user's entry without --force)."""
    from tui.commands.output import json_text
    from tui.commands.present import fail, fail_with
    from tui.fmt import duration, plural
    from tui.jobs.owner import me
    from tui.jobs.queue import QueueError

    try:
        target = cancel or move
        if target is not None:
            entry = await queue.get(target)
            if entry is None:
                raise QueueError(f"{target} is not in the queue of {inv.cluster}")
            if not force and entry.owner is not None and entry.owner != me():
                what = "cancel" if cancel else "move"
                return fail_with(
                    "verl-tui queue",
                    f"{target} was queued by {entry.owner}, not you ({me()})",
                    kind="refused",
                    title="not your entry",
                    hint=f"--force {what}s it anyway",
                )
        if cancel:
            gone = await queue.cancel(cancel)
            waited = duration(time.time() - gone.queued_at)
            print(f"cancelled {gone.submission_id} (was queued {waited})")
            return 0
        if move:
            pos = await queue.position(move)
            if pos is None:
                raise QueueError(f"{move} is not in the queue of {inv.cluster}")
            if to is None:
                to = pos - 1 if up else pos + 1
            now = await queue.move(move, to)
            print(f"{move}: position {now}")
            return 0
        entries = await queue.entries()
    except (QueueError, OSError) as exc:  # OSError: the queue's file (StateError's kin)
        return fail(exc, "verl-tui queue")
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
    p.add_argument(
        "--force",
        action="store_true",
        help="cancel or move another user's entry (refused without it: exit 3)",
    )


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
        force=args.force,
    )


QUEUE = Command(
    _queue_arguments,
    _queue,
    hosts="required",
    description="The cluster's queue of validated jobs waiting for free GPUs, kept on the head "
    "and shared by its users: position, owner, what each needs, how long it has waited, and "
    "why. Any user's supervisor (the cockpit while open, or `verl-tui "
    "watch HOSTS.yaml`) submits the head of the queue once Ray's free GPUs and CPUs per node "
    "hold it, in priority then FIFO order. Add jobs with `verl-tui submit --queue` or "
    "`verl-tui sweep`.",
)
