"""The CLI's one presenter of errors: `fail(err, prog)` prints the error's line on stderr and
returns the exit status its kind gives (tui/errors.py: bad input 2, refused 3, otherwise 1).

The line is `verl-tui CMD: message (hint)`, the command that failed standing where a title
would (scripts and the docs grep these lines, and the message already says what failed; the
error's `title` is the cockpit's notification title). Without a command — an error before one
ran, a hosts file that does not load — it is argparse's `verl-tui: error: message`. The text is
sanitized here as well as by the output guard: a message quotes what a host or a file said.
"""

from __future__ import annotations

import sys

from tui.errors import Kind, VerlTuiError, exit_code, hint_of
from tui.sanitize import one_line

PROG = "verl-tui"
MAX_LINE = 2000  # cells of one line: room for a path and a host's reason, not a log


def error_line(err: BaseException, prog: str | None = None) -> str:
    """What `fail` prints: one line; an error made of lines (a bring-up's hosts, each on its
    own line under the first) keeps them, each sanitized, the hint on the first."""
    first, *more = str(err).splitlines() or [""]
    hint = hint_of(err)
    if hint and hint not in first:
        first = f"{first} ({hint})"
    head = f"{prog}: {first}" if prog else f"{PROG}: error: {first}"
    return "\n".join(one_line(line, MAX_LINE) for line in [head, *more])


def fail(err: BaseException, prog: str | None = None) -> int:
    """Print `err` for the user (stderr) and return the command's exit status for it."""
    print(error_line(err, prog), file=sys.stderr)
    return exit_code(err)


def fail_with(
    prog: str, message: str, *, kind: Kind = "failed", title: str = "error", hint: str | None = None
) -> int:
    """`fail` for a problem the command finds itself (no job of that id, a bad --grep): the
    same line and exit status an error of that kind gets."""
    return fail(VerlTuiError(message, title=title, hint=hint, kind=kind), prog)


def fail_job(err: BaseException, prog: str, job: str, *, looked: str = "on the head") -> int:
    """A job's command failing: the head's 404 for an id it does not know is said as the job
    that is not there (`looked`: where it was looked for), with the command that lists jobs."""
    if getattr(err, "status", None) == 404 or "HTTP 404" in str(err):
        return fail_with(
            prog, f"no job {job!r} {looked}", title="no such job", hint="verl-tui jobs lists them"
        )
    return fail(err, prog)
