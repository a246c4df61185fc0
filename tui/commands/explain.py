"""`verl-tui explain LOGFILE`: the log pane's failure signatures over a saved log.

A driver log, a worker's .err, a Slurm output file, or `-` for stdin. The file is read in blocks
(never whole: logs run to hundreds of MB) and each block goes through `scan_block`, the same
code path the log pane's store takes, so a line gets here exactly the flags and hint it gets
there. Reported: every line with a hint; the exception line closing each traceback; and the last
line of each run of plain error lines (an engine that prefixes every traceback line with ERROR
is one finding, not forty).

A line is read up to MAX_LINE bytes (1 MiB; the rest of it is skipped, line numbers stay the
file's) and classified by its first 4,096 characters (signatures.MATCH_CHARS), in time linear
in its length: one hostile 300 KB line took 80 s before (bench/log_hostile.py).

Exit status: 0 no error found, 1 errors found, 2 bad input (missing or unreadable file, a
directory, a FIFO or other non-regular file).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from tui.commands import Command
from tui.commands.output import plain_json_text
from tui.commands.present import fail
from tui.errors import VerlTuiError
from tui.logs.retriable import RETRIABLE_KEYS
from tui.logs.signatures import (
    ANSI_RE_B,
    ERROR,
    TRACEBACK,
    TRACEBACK_HEAD,
    WARNING,
    Hint,
    LineClassifier,
    scan_block,
    split_source,
)
from tui.sanitize import one_line

EXIT_OK, EXIT_ERRORS, EXIT_BAD_INPUT = 0, 1, 2
BLOCK = 1 << 20  # bytes read at a time
MAX_LINE = 1 << 20  # bytes of a line read (the rest skipped); the signatures see MATCH_CHARS
MAX_FINDINGS = 10_000  # kept for output; more are counted, not listed
TEXT_LIMIT = 2000  # characters of a line kept in a finding
SHOW_LIMIT = 300  # … and shown in text output


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    text: str
    severity: str  # "error" or "warning"
    hint: Hint | None

    def as_json(self) -> dict[str, object]:
        return {
            "line": self.line,
            "text": self.text,
            "severity": self.severity,
            "hint": self.hint.text if self.hint else None,
        }


class BadInput(VerlTuiError, title="log unreadable", kind="bad_input"):
    """The log cannot be read; the message names it."""


def _open(path: str) -> tuple[BinaryIO, str]:
    if path == "-":
        return sys.stdin.buffer, "<stdin>"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{path}: is a directory, not a log file")
    if not stat.S_ISREG(st.st_mode):
        # a FIFO would block until a writer comes; a device may never end
        raise BadInput(f"{path}: not a regular file (use - to read a pipe from stdin)")
    try:
        return open(path, "rb"), path  # closed by run_explain
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}") from None


def _blocks(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(index of the block's first line, block of whole lines without ANSI codes). An overlong
    line keeps its first MAX_LINE bytes; the rest of it is skipped, so line numbers stay the
    file's own."""
    pending = b""
    line = 0
    skipping = False
    while True:
        chunk = f.read(BLOCK)
        if not chunk:
            break
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl + 1 :], False
            line += 1
        data = pending + chunk
        cut = data.rfind(b"\n") + 1
        if not cut and len(data) >= MAX_LINE:
            data, cut, skipping = data[:MAX_LINE] + b"\n", MAX_LINE + 1, True
        if not cut:
            pending = data
            continue
        pending = data[cut:]
        whole = data[:cut]
        yield line, _plain(whole)
        line += whole.count(b"\n") - (1 if skipping else 0)
    if pending and not skipping:
        yield line, _plain(pending + b"\n")


def _plain(data: bytes) -> bytes:
    """Whole lines as the log pane's store keeps them: CRLF as LF, a progress bar's line (\r
    redraws) as its last state, ANSI escape sequences dropped."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
        if b"\r" in data:
            data = b"\n".join(
                next((s for s in reversed(line.split(b"\r")) if s), b"") if b"\r" in line else line
                for line in data.split(b"\n")
            )
    return ANSI_RE_B.sub(b"", data) if b"\x1b" in data else data


def findings(f: BinaryIO) -> Iterator[Finding | int]:
    """The findings of a log, in line order, then the number of lines read."""
    clf = LineClassifier()
    run_last: Finding | None = None  # last plain error line of the current run
    prev = -2
    lines = 0
    for first, data in _blocks(f):
        lines = first + data.count(b"\n")
        for idx, flags, hint, raw in scan_block(clf, data, first):
            if run_last is not None and idx != prev + 1:
                yield run_last
                run_last = None
            prev = idx
            text = raw[:TEXT_LIMIT]
            severity = "error" if flags & ERROR else "warning" if flags & WARNING else ""
            if hint is not None:
                if run_last is not None:
                    yield run_last
                    run_last = None
                yield Finding(idx + 1, text, severity or "warning", hint)
            elif flags & ERROR and flags & TRACEBACK:
                if run_last is not None:
                    yield run_last
                    run_last = None
                if not split_source(raw)[1].lstrip().startswith(TRACEBACK_HEAD):
                    yield Finding(idx + 1, text, "error", None)  # the exception itself
            elif flags & ERROR:
                run_last = Finding(idx + 1, text, "error", None)
            elif run_last is not None:
                yield run_last
                run_last = None
    if run_last is not None:
        yield run_last
    yield lines


def run_explain(path: str, *, as_json: bool) -> int:
    try:
        f, name = _open(path)
    except BadInput as exc:
        return fail(exc, "verl-tui explain")
    kept: list[Finding] = []
    counts = {"error": 0, "warning": 0, "hint": 0}
    lines = 0
    shown = one_line(name, 200)
    try:
        try:
            for item in findings(f):
                if isinstance(item, int):
                    lines = item
                    continue
                counts[item.severity] += 1
                counts["hint"] += item.hint is not None
                if as_json:
                    if len(kept) < MAX_FINDINGS:
                        kept.append(item)
                elif counts["error"] + counts["warning"] <= MAX_FINDINGS:
                    _print_finding(shown, item)
        except BrokenPipeError:
            raise  # our stdout closed, not the log: handled below
        except OSError as exc:  # reading the log failed: EIO, a file turned into a directory…
            return fail(BadInput(f"{shown}: {exc.strerror or exc}"), "verl-tui explain")
        finally:
            if f is not sys.stdin.buffer:
                f.close()
        total = counts["error"] + counts["warning"]
        if as_json:
            out: dict[str, object] = {"findings": [k.as_json() for k in kept]}
            if total > len(kept):
                out["truncated"] = total - len(kept)
            print(plain_json_text(out, indent=1))
        else:
            more = f" (first {MAX_FINDINGS} shown)" if total > MAX_FINDINGS else ""
            print(
                f"{shown}: {lines} lines, {counts['error']} errors, {counts['warning']} "
                f"warnings, {counts['hint']} with a known cause{more}"
            )
        sys.stdout.flush()
    except BrokenPipeError:  # `explain … | head`: the reader left; not an error of the log
        with contextlib.suppress(OSError, AttributeError, ValueError):
            # nothing more reaches the closed pipe (nor the flush at exit)
            if sys.__stdout__ is not None:  # None without a console (pythonw)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    return EXIT_ERRORS if counts["error"] else EXIT_OK


def _print_finding(name: str, item: Finding) -> None:
    print(f"{name}:{item.line}: {item.severity}: {one_line(item.text, SHOW_LIMIT)}")
    if item.hint is not None:
        retriable = " [retriable: submit --retries]" if item.hint.key in RETRIABLE_KEYS else ""
        print(f"    hint ({item.hint.key}){retriable}: {one_line(item.hint.text)}")


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("logfile", metavar="LOGFILE", help="the log file, or - for stdin")
    p.add_argument(
        "--json",
        action="store_true",
        help='JSON output: {"findings": [{"line", "text", "severity", "hint"}]}',
    )


# A local file: no hosts file, no inventory.
EXPLAIN = Command(
    _arguments,
    lambda a: run_explain(a.logfile, as_json=a.json),
    description="Known failures in a saved log (a driver log, a worker's .err, a "
    "Slurm output file): each finding with its line number, severity and hint, "
    "from the same signatures as the log pane. Exit 0: no error found; 1: errors "
    "found; 2: bad input (missing or unreadable file, a directory, a FIFO). "
    "Failures a retry can heal (submit --retries N; marked [retriable]): "
    + ", ".join(RETRIABLE_KEYS)
    + ".",
)
