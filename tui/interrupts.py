"""How a headless command ends on SIGINT/SIGTERM: exit 130/143 and nothing else printed.

A signal is noted once, from wherever it is delivered: our own handler (SIGINT, and SIGTERM
outside an event loop) or a command's event-loop handler (commands turn SIGTERM into a
cancellation of their main task; every loop made while `headless_signals()` is active wraps those
handlers). Noting it points stdout and stderr at /dev/null, so what the command's clean-up prints
(a half-drawn table, asyncio's "exception was never retrieved" from a cancelled gather) never
shows, and arms a watchdog: the process exits 128+signal within GRACE_S even if clean-up
stalls. The command's own clean-up still runs (agents told to exit, connections closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TextIO, cast

GRACE_S = 15.0
_HANDLED = (signal.SIGINT, signal.SIGTERM)


class _State:
    signum: int | None = None
    active: bool = False


_state = _State()


def exit_code() -> int | None:
    """128 + the signal received while headless_signals() was active, else None."""
    return None if _state.signum is None else 128 + _state.signum


def _silence() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # may be mid-write (reentrant) or closed
            stream.flush()
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)


def note(signum: int) -> None:
    """Record the first signal, silence output, arm the exit watchdog."""
    if _state.signum is not None or not _state.active:
        return
    _state.signum = signum
    _silence()
    code = 128 + signum
    timer = threading.Timer(GRACE_S, os._exit, (code,))
    timer.daemon = True
    timer.start()


def _handler(signum: int, frame: Any) -> None:
    note(signum)
    # Like Python's own SIGINT handling: every command already ends cleanly on Ctrl-C.
    raise KeyboardInterrupt


class _Policy(asyncio.DefaultEventLoopPolicy):
    """Loops whose signal handlers note the signal before running the command's callback."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        original = loop.add_signal_handler

        def add_signal_handler(sig: int, callback: Callable[..., object], *args: Any) -> None:
            def noted(*a: Any) -> None:
                note(sig)
                callback(*a)

            original(sig, noted, *args)

        original_remove = loop.remove_signal_handler

        def remove_signal_handler(sig: int) -> bool:
            # asyncio restores SIG_DFL when a loop closes: put ours back, so a signal after
            # the loop (or between two loops) still ends in 130/143, not a death by signal.
            removed = original_remove(sig)
            if sig in _HANDLED and _state.active:
                with contextlib.suppress(ValueError):
                    signal.signal(sig, _handler)
            return removed

        # Wrapped on this loop only; the wrapper's *args is not typeshed's TypeVarTuple form.
        loop.add_signal_handler = add_signal_handler  # type: ignore[method-assign,assignment]
        loop.remove_signal_handler = remove_signal_handler  # type: ignore[method-assign]
        return loop


@contextlib.contextmanager
def headless_signals() -> Iterator[None]:
    """Active around a headless command (main thread only; elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in _HANDLED}
    old_policy = asyncio.get_event_loop_policy()
    _state.signum, _state.active = None, True
    try:
        for sig in _HANDLED:
            signal.signal(sig, _handler)
        asyncio.set_event_loop_policy(_Policy())
        yield
    finally:
        _state.active = False
        asyncio.set_event_loop_policy(old_policy)
        for sig, handler in previous.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class OutputLost(BaseException):
    """Standard output cannot take what a command prints (a closed pipe: `| head`; a full
    device: `> /dev/full`): the command ends there. A BaseException, like KeyboardInterrupt:
    no command's `except Exception` / `except OSError` (a notifier's failure in `watch`, a
    host's error) takes it for a failure of its work and goes on printing into nothing."""

    def __init__(self, exc: OSError):
        self.errno = exc.errno
        reason = exc.strerror or str(exc)
        super().__init__(f"cannot write the output: {reason[:1].lower()}{reason[1:]}")

    @property
    def exit_code(self) -> int:
        # A reader that went away (EPIPE) ends us quietly, as SIGPIPE ends a Unix tool.
        return 128 + signal.SIGPIPE if self.errno == errno.EPIPE else 1


class _GuardedStream:
    """stdout whose write and flush failures become OutputLost (one place for every command)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        try:
            return int(self._stream.write(s))
        except OSError as exc:
            raise OutputLost(exc) from None

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputLost(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _devnull_onto(fd: int) -> None:
    """/dev/null as descriptor `fd`: a closed standard descriptor gets it, so no file we open
    later is given its number (and written to by a stray print); so does a stdout that failed."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_RDWR)
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)


def stdout_closed() -> bool:
    """Whether stdout is closed (`>&-`: nothing may run, its output would go nowhere). Closed
    descriptors 0-2 are pointed at /dev/null either way."""
    closed = sys.stdout is None or not _fd_open(1)
    for fd in (0, 1, 2):
        if not _fd_open(fd):
            _devnull_onto(fd)
    return closed


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """Around a headless command: stdout whose write errors raise OutputLost."""
    previous = sys.stdout
    sys.stdout = cast(TextIO, _GuardedStream(previous))
    try:
        yield
    finally:
        sys.stdout = previous


def output_lost(exc: OutputLost, prog: str = "verl-tui") -> int:
    """End a command whose output cannot be written: stdout pointed at /dev/null (Python's
    own flush at exit must not fail again), one line on stderr unless the reader went away;
    the exit code."""
    _devnull_onto(1)
    if exc.errno != errno.EPIPE:
        with contextlib.suppress(Exception):
            print(f"{prog}: error: {exc}", file=sys.stderr)
    return exc.exit_code


def report_crash(exc: BaseException, prog: str = "verl-tui") -> str:
    """The last-resort line for an exception nobody handled (a bug): the traceback goes to a
    file under the state dir, the terminal gets one line naming it."""
    from tui.sanitize import one_line
    from tui.state import atomic_write_text, state_path

    where = ""
    with contextlib.suppress(Exception):
        path = state_path("crash", None, f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt")
        atomic_write_text(path, "".join(traceback.format_exception(exc)))
        where = f"; traceback in {path}"
    return one_line(
        f"{prog}: internal error (a bug, please report it): {type(exc).__name__}: {exc}{where}", 400
    )
