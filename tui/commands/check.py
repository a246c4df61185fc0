"""`verl-tui check`: the preflight doctor without a terminal UI, as a table or JSON."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tui.commands import Command, seconds
from tui.commands.output import json_text
from tui.config.yamlfile import ConfigError
from tui.sanitize import one_line, raw

if TYPE_CHECKING:  # imported where used: `verl-tui check --help` stays light
    from tui.cluster.doctor import Finding
    from tui.config.hosts import Inventory
    from tui.jobs.profiles import Profile
    from tui.transport.fleet import Fleet

SYMBOLS = {"ok": "✓", "warn": "!", "fail": "✗"}
_COLORS = {"ok": "\x1b[32m", "warn": "\x1b[33m", "fail": "\x1b[31m"}
_DIM, _RESET = "\x1b[2m", "\x1b[0m"


def to_json(findings: list[Finding]) -> dict:
    from tui.cluster.doctor import summarize

    return {"checks": [f.to_json() for f in findings], "summary": summarize(findings)}


def format_table(findings: list[Finding], *, color: bool = False) -> str:
    """One line per finding (symbol, check, host, finding), its fix indented below it. Hosts'
    answers are cleaned here: with colour this goes to the terminal past the SafeWriter."""
    findings = [
        replace(
            f,
            check=one_line(f.check),
            host=f.host and one_line(f.host),
            finding=one_line(f.finding),
            fix=f.fix and one_line(f.fix),
        )
        for f in findings
    ]
    check_w = max((len(f.check) for f in findings), default=5)
    host_w = max((len(f.host or "-") for f in findings), default=4)
    lines = []
    for f in findings:
        symbol = SYMBOLS[f.status]
        if color:
            symbol = f"{_COLORS[f.status]}{symbol}{_RESET}"
        lines.append(f"{symbol} {f.check:<{check_w}}  {f.host or '-':<{host_w}}  {f.finding}")
        if f.fix:
            fix = f"{' ' * (check_w + 4)}fix: {f.fix}"
            lines.append(f"{_DIM}{fix}{_RESET}" if color else fix)
    from tui.cluster.doctor import summarize

    counts = summarize(findings)
    lines.append(f"\n{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail")
    return "\n".join(lines)


async def _doctor(
    inventory: Inventory,
    timeout: float,
    progress_to: TextIO | None,
    job: tuple[Profile, list[str]] | None = None,
) -> list[Finding]:
    def progress(msg: str) -> None:
        if progress_to is not None:
            progress_to.write(f"\r\x1b[K{one_line(msg)}…")
            progress_to.flush()

    from tui.cluster.doctor import run_doctor
    from tui.transport.fleet import Fleet

    async with Fleet(inventory) as fleet:
        try:
            if job is None:
                return await run_doctor(fleet, inventory, progress=progress, timeout=timeout)
            return await _with_job(fleet, inventory, job, timeout, progress)
        finally:
            if progress_to is not None:
                progress_to.write("\r\x1b[K")
                progress_to.flush()


async def _with_job(
    fleet: Fleet,
    inventory: Inventory,
    job: tuple[Profile, list[str]],
    timeout: float,
    progress: Callable[[str], None],
) -> list[Finding]:
    """The doctor and the job preflight (tui/jobs/preflight/) side by side: the profile is
    composed with the head's verl, then every host is asked what the job needs."""
    from tui.cluster.doctor import run_doctor
    from tui.jobs.pipeline import planned_resources
    from tui.jobs.preflight import needs_for_profile, run_preflight
    from tui.jobs.verl_source import select_verl

    profile, sets = job
    doctor = asyncio.create_task(run_doctor(fleet, inventory, progress=progress, timeout=timeout))
    try:
        await select_verl(fleet, inventory, timeout=timeout)
        found, needs = await asyncio.to_thread(
            needs_for_profile, inventory, profile, sets, planned_resources(inventory)
        )
        if needs is not None:
            found += await run_preflight(fleet, inventory, needs, timeout=min(timeout, 30.0))
    except BaseException:
        doctor.cancel()
        raise
    return [*await doctor, *found]


def run_check(
    inventory: Inventory,
    *,
    as_json: bool,
    timeout: float = 60,
    profile: Path | None = None,
    sets: Sequence[str] = (),
) -> int:
    """Run the doctor (and with `profile` the job preflight: its data, model, imports and
    limits on every host) and print the findings; 0 when nothing failed, 1 otherwise.
    ConfigError / SchemaError (exit 2) for a bad profile or --set."""
    job = None
    if profile is not None:
        from tui.jobs.profiles import check_set, load_profile, resolve_profile

        path, note = resolve_profile(profile)
        if note:
            print(f"verl-tui check: {note}", file=sys.stderr)
        for line in sets:
            check_set(line)
        job = (load_profile(path), list(sets))
    # Progress goes to stderr, and only to a terminal: stdout stays the table or the JSON.
    progress_to = raw(sys.stderr) if sys.stderr.isatty() else None
    try:
        findings = asyncio.run(_doctor(inventory, timeout, progress_to, job))
    except KeyboardInterrupt:
        return 130
    try:
        if as_json:
            print(json_text(to_json(findings), inventory, indent=2))
        else:
            color = sys.stdout.isatty()
            # Our own colours pass (raw stream); format_table cleaned the findings' text.
            print(
                format_table(findings, color=color), file=raw(sys.stdout) if color else sys.stdout
            )
        sys.stdout.flush()
    except BrokenPipeError:
        sys.stderr.close()  # `verl-tui check | head`: the reader left
    return 1 if any(f.status == "fail" for f in findings) else 0


def print_preflight(findings: Sequence[Finding]) -> None:
    """A job preflight's warnings and failures as a table on stderr (nothing when all ok)."""
    shown = [f for f in findings if f.status != "ok"]
    if shown:
        print(format_table(shown).rsplit("\n\n", 1)[0], file=sys.stderr)


def say_preflight_skipped(prog: str) -> None:
    """A dry run asked not to run the job preflight says so on stderr, loudly: its exit status
    then says nothing about the data, model, imports and limits on the hosts."""
    print(
        f"{prog}: dry run: the job preflight was NOT run (--skip-preflight): data, model, "
        "verl's imports and host limits are unchecked",
        file=sys.stderr,
    )


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="seconds for the whole check (default 60)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        metavar="PROFILE",
        help="also check what this job needs of every host (a profile file or a preset's name):"
        " data and model paths, HF cache, verl's imports for it, /dev/shm, open files, disk",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Hydra override on top of the profile (repeatable)",
    )


def _run_args(args: argparse.Namespace) -> int:
    if args.set and args.profile is None:
        raise ConfigError("--set: needs --profile")
    return run_check(
        args.inventory,
        as_json=args.json,
        timeout=args.timeout,
        profile=args.profile,
        sets=args.set,
    )


CHECK = Command(
    _arguments,
    _run_args,
    hosts="optional",
    description="Preflight checks that catch what makes multi-node verl hang. "
    "Exit 0: nothing fails; 1: something fails; 2: bad input.",
)
