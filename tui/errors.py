"""The one error base of verl-tui: every error a service raises for a user to read derives from
`VerlTuiError`, so the cockpit (`app.report(err)`) and the CLI (`tui.commands.present.fail`)
each show any of them one way, and a caller that means "any of our errors" catches one class.

An error carries:

- `str(err)`: the one line shown, as every caller and test has always read it (a subclass may
  add where it happened: `hosts.yaml:3: ...`);
- `message`: the problem itself (the first argument, unless the subclass sets its own);
- `title`: what failed, a few words for a notification's title or the CLI's line ("cannot
  connect", "bad profile"): a class default (given on the class line:
  `class LockHeld(VerlTuiError, title="cluster busy", kind="refused")`), overridable per error;
- `hint`: the key, command or file:line that fixes it, when the code raising it knows one
  (None otherwise);
- `kind`: what the caller can do about it, which fixes the CLI's exit status (`EXIT_CODES`):
  "bad_input" (2: a file, field or argument to correct), "refused" (3: someone else holds it or
  it needs --force), "unavailable" (1: a host, the dashboard or a tool cannot be reached or is
  missing) and "failed" (1: the action ran and did not succeed).

A leaf: imports no other tui module, so every layer (services, transport, config, CLI, UI) can.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["bad_input", "refused", "unavailable", "failed"]

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2  # what argparse uses too: every bad input exits 2
EXIT_REFUSED = 3  # a lock or lease held by another action, another user's job without --force

EXIT_CODES: dict[Kind, int] = {
    "bad_input": EXIT_BAD_INPUT,
    "refused": EXIT_REFUSED,
    "unavailable": EXIT_FAILED,
    "failed": EXIT_FAILED,
}


class VerlTuiError(Exception):
    """An error a user reads: one line (`str`), a title, maybe a hint, a kind (exit status)."""

    title: str = "error"  # class defaults; an instance may carry its own
    kind: Kind = "failed"
    hint: str | None = None
    message: str

    def __init_subclass__(
        cls, *, title: str | None = None, kind: Kind | None = None, **kwargs: object
    ) -> None:
        # `class LeaseHeld(VerlTuiError, title="cluster supervised", kind="refused")`: a family's
        # defaults on its one class line.
        super().__init_subclass__(**kwargs)
        if title is not None:
            cls.title = title
        if kind is not None:
            cls.kind = kind

    def __init__(
        self,
        *args: object,
        title: str | None = None,
        hint: str | None = None,
        kind: Kind | None = None,
    ) -> None:
        super().__init__(*args)
        if not hasattr(self, "message"):  # a subclass may have set its own before calling here
            self.message = str(args[0]) if args else ""
        if title is not None:
            self.title = title
        if hint is not None:
            self.hint = hint
        if kind is not None:
            self.kind = kind

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


def exit_code(exc: BaseException) -> int:
    """The CLI's exit status for an error: by its kind for ours, 1 for anything else."""
    return exc.exit_code if isinstance(exc, VerlTuiError) else EXIT_FAILED


def title_of(exc: BaseException) -> str:
    """A presenter's title for any exception: ours carry one; an OS error says what it is."""
    if isinstance(exc, VerlTuiError):
        return exc.title
    if isinstance(exc, OSError):
        return "system error"
    return "error"


def hint_of(exc: BaseException) -> str | None:
    return exc.hint if isinstance(exc, VerlTuiError) else None
