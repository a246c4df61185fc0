"""`verl-tui slurm JOBID [-o hosts.yaml] [--base base.yaml]`: a running Slurm allocation as a
hosts.yaml (tui/cluster/slurm.py does the work; this is the command line)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tui.commands import PROG, Command, seconds
from tui.commands.present import fail
from tui.config.yamlfile import ConfigError
from tui.state import write_output_file

if TYPE_CHECKING:
    from tui.cluster.slurm import Allocation

# The service (and the hosts.yaml models, pydantic) is imported when a command runs: `slurm
# --help` stays light.

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _summary(alloc: Allocation) -> str:
    head, *rest = alloc.nodes
    gpus = f", {alloc.total_gpus} GPUs" if any(n.gpus is not None for n in alloc.nodes) else ""
    more = f" + {len(rest)} worker{'s' if len(rest) != 1 else ''}" if rest else ""
    return f"Slurm job {alloc.job_id}: {head.name} (head){more}{gpus}"


def write_inventory(
    job_id: str, output: Path | None, base: Path | None, *, timeout: float | None = None
) -> tuple[Allocation, str]:
    """Read the allocation and write its hosts.yaml to `output` (atomically; a 0644-style mode)
    or return the text only (output None). ConfigError/SlurmError: one line."""
    from tui.cluster.slurm import TIMEOUT, inventory_for_job

    timeout = TIMEOUT if timeout is None else timeout
    alloc, text = asyncio.run(inventory_for_job(job_id, base, timeout=timeout))
    if output is not None:
        try:
            write_output_file(output, text)  # a regular file or a new path only
        except OSError as exc:
            raise ConfigError(f"cannot write: {exc.strerror or exc}", output) from None
    return alloc, text


def cockpit_hosts(job_id: str, base: Path | None) -> Path:
    """`verl-tui --slurm JOBID`: the allocation's hosts.yaml, written to the state dir (so every
    part that wants a hosts file path has one); its path."""
    from tui.cluster.slurm import state_file

    path = state_file(job_id)
    alloc, _ = write_inventory(job_id, path, base)
    print(f"{_summary(alloc)} → {path}", file=sys.stderr)
    return path


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "job",
        metavar="JOBID",
        nargs="?",
        help="a running Slurm job (default: $SLURM_JOB_ID, set inside salloc/sbatch)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="HOSTS.yaml",
        help="where to write the inventory (default: print it)",
    )
    p.add_argument(
        "--base",
        type=Path,
        metavar="BASE.yaml",
        help="hosts.yaml keys without hosts: (ssh, python, ray, ...) copied into the inventory",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        help="seconds to wait for each scontrol call (default 30)",
    )


def _run(args: argparse.Namespace) -> int:
    job = args.job or os.environ.get("SLURM_JOB_ID")
    if not job:
        return fail(
            ConfigError(
                "give a JOBID", hint="or run inside an allocation: salloc sets SLURM_JOB_ID"
            ),
            f"{PROG} slurm: error",
        )
    try:
        alloc, text = write_inventory(job, args.output, args.base, timeout=args.timeout)
    except ConfigError as exc:  # SlurmError too: exit 2
        return fail(exc, f"{PROG} slurm: error")
    if args.output is None:
        sys.stdout.write(text)
    else:
        print(f"{_summary(alloc)} → {args.output}", file=sys.stderr)
    return EXIT_OK


SLURM = Command(
    _arguments,
    _run,
    description="Write an inventory (hosts.yaml) from a running Slurm allocation: its nodes as "
    "Slurm names them, each one's SSH address from `scontrol show node` (NodeAddr), its GPUs "
    "from the job's GRES; the first node is the Ray head. --base copies ssh/python/ray/... keys "
    "from a hosts.yaml without hosts:. Exit 0: written; 2: no such job, not running, no "
    "scontrol, or bad input.",
)
