"""`verl-tui rollouts HOSTS JOB [--step N] [--sort score|length] [--grep RE] [--dir DIR]
[--json]`: a job's rollout samples as verl dumped them (trainer.rollout_data_dir), read over SSH a
page at a time on the host that has them (tui/rollouts). JSON: ``{"steps": [N…], "step": N,
"where": "host:dir", "samples": [{"step", "input", "output", "score", "flags", …}…],
"histogram": {…}, "bad_lines": ["file:line: why"…]}``."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Any

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail_job, fail_with
from tui.commands.ray import _run, _with_cluster

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory
    from tui.rollouts.reader import DumpDir, StepView

PREVIEW_CHARS = 160


async def rollouts_doc(
    dump: DumpDir,
    *,
    step: int | None = None,
    sort: str = "file",
    reverse: bool = False,
    pattern: str | None = None,
    start: int = 0,
    limit: int = 20,
) -> tuple[dict[str, Any], StepView | None]:
    """The command's JSON document for one dump folder (and the view it was read from)."""
    from tui.rollouts.reader import RolloutError, view_step

    steps = [s for s, _size in await dump.steps()]
    doc: dict[str, Any] = {"where": dump.where, "steps": steps, "step": None, "samples": []}
    if not steps:
        return doc, None
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise RolloutError(f"no step {chosen} in {dump.where} (steps: {_span(steps)})")
    view = await view_step(
        dump, chosen, sort=sort, reverse=reverse, pattern=pattern, start=start, count=limit
    )
    doc.update(
        step=chosen,
        file=view.index.path,
        total=len(view.order),
        samples=[s.to_json() for s in view.samples],
        histogram=view.histogram.to_json(),
        bad_lines=view.index.bad,
    )
    if view.index.stopped:
        doc["stopped"] = view.index.stopped
    return doc, view


def _span(steps: list[int]) -> str:
    return f"{steps[0]}…{steps[-1]}" if len(steps) > 3 else ", ".join(map(str, steps))


def text_lines(doc: dict[str, Any], view: StepView | None) -> list[str]:
    from tui.sanitize import one_line

    lines = [f"{one_line(doc['where'], 300)}   steps: {_span(doc['steps']) or 'none'}"]
    if view is None:
        return lines
    lines.append(f"step {doc['step']}: {doc['total']} samples   {one_line(doc['file'], 300)}")
    lines += ["  " + line for line in view.histogram.lines()]
    for s in view.samples:
        score = "-" if s.score is None else f"{s.score:.4g}"
        flags = ",".join(s.flags)
        lines.append(f"#{s.line:<6} score {score:>7}  {len(s.output):>6} ch  {flags}")
        lines.append("   in:  " + one_line(s.input[-PREVIEW_CHARS:], PREVIEW_CHARS))
        lines.append("   out: " + one_line(s.output[:PREVIEW_CHARS], PREVIEW_CHARS))
    lines += [one_line(b, 300) for b in doc["bad_lines"]]
    return lines


def run_rollouts(inv: Inventory, job: str, args: argparse.Namespace) -> int:
    from tui.cluster.dashboard import check_job_id
    from tui.errors import VerlTuiError
    from tui.rollouts.reader import locate_dump

    check_job_id(job, "JOB")
    if args.grep is not None:
        try:
            re.compile(args.grep)
        except re.error as exc:
            return fail_with("verl-tui rollouts", f"--grep: bad regex: {exc}", kind="bad_input")

    async def body(cluster: RayCluster) -> int:
        try:
            dump = await locate_dump(cluster, job, folder=args.dir, validation=args.validation)
            doc, view = await rollouts_doc(
                dump,
                step=args.step,
                sort=args.sort,
                reverse=args.reverse,
                pattern=args.grep,
                start=args.start,
                limit=args.limit,
            )
        except VerlTuiError as exc:
            return fail_job(exc, "verl-tui rollouts", job)
        for bad in doc.get("bad_lines", [])[:20] if not args.json else ():
            print(f"verl-tui rollouts: {bad}", file=sys.stderr)
        print(json_text(doc, inv) if args.json else "\n".join(text_lines(doc, view)))
        return 0

    return _run(_with_cluster(inv, body))


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0 or n > 100_000:
        raise argparse.ArgumentTypeError(f"out of range 0..100000: {n}")
    return n


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB", help="submission id (verl-tui jobs lists them)")
    p.add_argument("--step", type=int, metavar="N", help="the step (default: the latest dumped)")
    p.add_argument(
        "--sort",
        choices=("file", "score", "length"),
        default="file",
        help="order: as dumped, by score (highest first) or by output length (longest first)",
    )
    p.add_argument("--reverse", action="store_true", help="the other way round")
    p.add_argument("--grep", metavar="RE", help="only samples whose input or output matches RE")
    p.add_argument(
        "--dir",
        metavar="DIR",
        help="the dump folder (for a job submitted as a raw command; default: the job's "
        "trainer.rollout_data_dir, or the folder verl announced in its log)",
    )
    p.add_argument(
        "--validation",
        action="store_true",
        help="the validation dumps (trainer.validation_data_dir) instead",
    )
    p.add_argument("--start", type=_count, default=0, metavar="I", help="skip the first I samples")
    p.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="samples to print (default 20)"
    )
    p.add_argument("--json", action="store_true", help="JSON output")


ROLLOUTS = Command(
    _arguments,
    lambda a: run_rollouts(a.inventory, a.job, a),
    hosts="required",
    description="Print a job's rollout samples as verl dumped them (trainer.rollout_data_dir: "
    "one JSONL file per step), read over SSH on the node that has them, a page at a time: "
    "input, output, score, flags (empty, ends at the length limit, repeats itself) and the "
    "step's score histogram. Lines that are not samples are named file:line.",
)
