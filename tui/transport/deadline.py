"""How long a remote command may take, and what happens when it does not answer in time.

One mechanism for every transport: `run` has a deadline for the whole answer (the caller's
`timeout`, else the host's `ssh.command_timeout`); a stream whose protocol starts with a line
(a helper's "held", "ready") has a deadline for that first complete line, watched by
`FirstLineWatch`. When a deadline passes, the transport ends the command (its process group on
the host, its channel) and raises `CommandTimeout`: one line naming the host and the command.

`within` is the wait they use instead of asyncio.wait_for: before Python 3.12, wait_for returns
the result when the awaited thing finishes in the same loop turn as a cancel of the caller, and
that cancel is lost. A task that runs "until cancelled" around a host whose link flaps (every
exec ends as its connection drops) then never ends, and neither does the command waiting for it.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tui.sanitize import one_line
from tui.transport.types import TransportError

T = TypeVar("T")

CANCEL_GRACE_S = 1.0  # what `within` gives a timed-out awaitable to end before leaving it
_WORD_CHARS = 40
_LABEL_CHARS = 80


class CommandTimeout(TransportError, title="host timed out"):
    """A command (or its first line) did not come within its deadline; the command was ended.
    `answered`: it had printed something (it is slow, not silent)."""

    def __init__(self, host: str, what: str, seconds: float, *, answered: bool):
        self.host = host
        self.what = what
        self.seconds = seconds
        self.answered = answered
        took = f"{round(seconds, 1):g} s"
        if answered:
            detail = f"`{what}` did not finish in {took}"
        else:
            detail = f"`{what}` gave no answer in {took} (host stalled?)"
        self.detail = one_line(detail, 300)  # without the host, for a line that names it
        super().__init__(f"{host}: {self.detail}")


def describe(argv: Sequence[str]) -> str:
    """A short label for a command line: the program's file name, `-c …` for a shipped
    program's source, long words cut; what a CommandTimeout names when the caller gave none."""
    words = []
    for i, word in enumerate(argv):
        if i == 0:
            word = posixpath.basename(word) or word
        if "\n" in word:
            word = "…"
        elif len(word) > _WORD_CHARS:
            word = word[: _WORD_CHARS - 1] + "…"
        words.append(word)
    return one_line(" ".join(words), _LABEL_CHARS)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" on the terminal


async def within(aw: Awaitable[T], seconds: float) -> T:
    """`aw`'s result, or asyncio.TimeoutError once `seconds` have passed (`aw` is then
    cancelled and given CANCEL_GRACE_S to end, never waited for longer). A cancel of the caller
    always reaches it, even when `aw` finishes in the same loop turn (see the module text)."""
    task = asyncio.ensure_future(aw)
    try:
        await asyncio.wait({task}, timeout=max(seconds, 0.0))
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    if task.done():
        return task.result()
    task.cancel()
    task.add_done_callback(_retrieve)
    await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
    raise asyncio.TimeoutError


class FirstLineWatch:
    """Armed when a stream starts; its first complete stdout line (`seen`) disarms it. If no
    line came within `seconds`, `error` is set and `on_miss` runs: the transport ends the
    command, and the reader gets `error` instead of the rest (a half line is never handed on)."""

    def __init__(self, host: str, what: str, seconds: float, on_miss: Callable[[], None]):
        self.host = host
        self.what = what
        self.seconds = seconds
        self.error: CommandTimeout | None = None
        self._on_miss = on_miss
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            seconds, self._fire
        )

    @property
    def fired(self) -> bool:
        return self.error is not None

    def seen(self) -> None:
        """A first line came in time (or the stream is being closed): stand down."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self.error = CommandTimeout(self.host, self.what, self.seconds, answered=False)
        self._on_miss()
