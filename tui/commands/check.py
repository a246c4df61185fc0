"""`verl-tui check`: the preflight doctor without a terminal UI, as a table or JSON."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from tui.commands import Command, seconds
from tui.commands.output import json_text
from tui.sanitize import one_line, raw

if TYPE_CHECKING:  # imported where used: `verl-tui check --help` stays light
    from tui.cluster.doctor import Finding
    from tui.config.hosts import Inventory

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
    inventory: Inventory, timeout: float, progress_to: TextIO | None
) -> list[Finding]:
    def progress(msg: str) -> None:
        if progress_to is not None:
            progress_to.write(f"\r\x1b[K{one_line(msg)}…")
            progress_to.flush()

    from tui.cluster.doctor import run_doctor
    from tui.transport.fleet import Fleet

    async with Fleet(inventory) as fleet:
        try:
            return await run_doctor(fleet, inventory, progress=progress, timeout=timeout)
        finally:
            if progress_to is not None:
                progress_to.write("\r\x1b[K")
                progress_to.flush()


def run_check(inventory: Inventory, *, as_json: bool, timeout: float = 60) -> int:
    """Run the doctor and print its findings; 0 when nothing failed, 1 otherwise."""
    # Progress goes to stderr, and only to a terminal: stdout stays the table or the JSON.
    progress_to = raw(sys.stderr) if sys.stderr.isatty() else None
    try:
        findings = asyncio.run(_doctor(inventory, timeout, progress_to))
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


def _run_args(args: argparse.Namespace) -> int:
    return run_check(args.inventory, as_json=args.json, timeout=args.timeout)


CHECK = Command(
    _arguments,
    _run_args,
    hosts="optional",
    description="Preflight checks that catch what makes multi-node verl hang. "
    "Exit 0: nothing fails; 1: something fails; 2: bad input.",
)
