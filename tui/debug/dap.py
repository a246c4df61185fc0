"""An asyncio client of the Debug Adapter Protocol, for the port a Ray worker opens with
``debugpy.listen`` when a task fails under ``RAY_DEBUG_POST_MORTEM=1``.

The worker (ray/util/debugpy.py) listens on its node's IP, blocks in ``debugpy.wait_for_client``
until a client has attached *and* sent ``configurationDone``, then asks pydevd to stop on the
exception it is handling. pydevd only stops if the client enabled the "uncaught" exception
filter, so ``attach_post_mortem`` sends it before ``configurationDone``.

Every wait here is bounded: a missing reply or a closed socket becomes a ``DapError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.errors import VerlTuiError

log = logging.getLogger(__name__)

EventCallback = Callable[[str, dict[str, Any]], None]

CONNECTION_CLOSED = "connection closed by the debuggee"
DEBUGGEE_ENDED = "the debuggee has ended"
OUTPUT_KEPT = 1000  # output events kept; a training job can print a lot


MAX_MESSAGE_BYTES = 64 << 20  # far above any real variables/stackTrace answer


class DapError(VerlTuiError, title="debugger", kind="unavailable"):
    """A DAP request failed, timed out, or the connection was lost."""


@dataclass(frozen=True)
class Stopped:
    """A ``stopped`` event: why the debuggee is paused and in which thread."""

    thread_id: int | None
    reason: str  # "exception", "breakpoint", "step", "pause", ...
    description: str
    text: str  # for an exception: usually its type name


@dataclass(frozen=True)
class Thread:
    id: int
    name: str


@dataclass(frozen=True)
class Frame:
    """One stack frame; ``path`` is the file as the debuggee sees it (None for no source)."""

    id: int
    name: str
    path: str | None
    line: int
    column: int


@dataclass(frozen=True)
class Scope:
    name: str  # "Locals", "Globals"
    reference: int  # pass to ``variables``
    expensive: bool


@dataclass(frozen=True)
class Variable:
    name: str
    value: str  # the repr, as the adapter formats it
    type: str
    reference: int  # > 0: has children, pass to ``variables``


@dataclass(frozen=True)
class Evaluation:
    result: str
    type: str
    reference: int  # > 0: has children, pass to ``variables``


@dataclass(frozen=True)
class ExceptionInfo:
    exception_id: str  # e.g. "ValueError"
    description: str  # e.g. "bad batch 7"
    break_mode: str  # "unhandled", "always", ...
    stack_trace: str | None  # the formatted traceback when the adapter gives one


def _frame_from(raw: dict[str, Any]) -> Frame:
    source = raw.get("source") or {}
    return Frame(
        id=int(raw["id"]),
        name=str(raw.get("name", "")),
        path=source.get("path"),
        line=int(raw.get("line", 0)),
        column=int(raw.get("column", 0)),
    )


def _variable_from(raw: dict[str, Any]) -> Variable:
    return Variable(
        name=str(raw.get("name", "")),
        value=str(raw.get("value", "")),
        type=str(raw.get("type", "")),
        reference=int(raw.get("variablesReference", 0)),
    )


# pydevd appends this to the exception name when the paused frame is not the raising one
# (always so post mortem: Ray's hook runs in the frame that caught the exception).
_PAUSED_AT_NOTE = re.compile(r"\s*\(note: full exception trace is shown but .*\)\s*$", re.DOTALL)
# What debugpy's adapter answers when the debuggee process died under a request.
_DEBUGGEE_GONE = re.compile(r"^No more messages$|disconnected unexpectedly")


def _exception_name(text: str) -> str:
    return _PAUSED_AT_NOTE.sub("", text)


def _failure_message(command: str, message: dict[str, Any]) -> str:
    # The adapter puts its readable text in body.error.format; "message" is often a short key.
    error = (message.get("body") or {}).get("error") or {}
    text = str(error.get("format") or message.get("message") or "failed")
    if _DEBUGGEE_GONE.search(text):
        return f"{command}: {CONNECTION_CLOSED} ({text})"
    return f"{command}: {text}"


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A failed future nobody awaits (an event we stopped waiting for) must not log
    # "exception was never retrieved" at garbage collection.
    if not future.cancelled():
        future.exception()


class DapClient:
    """One DAP session over a byte stream (TCP to the worker's debugpy port, or any stream).
    Construct it inside a running event loop: it starts its reader task at once."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_event: EventCallback | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.on_event = on_event
        self._seq = 0
        self._pending: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._event_waiters: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        self._closed_reason: str | None = None
        # The latest of these events, for a screen that polls or subscribes late.
        self.stopped: Stopped | None = None
        self.terminated = False
        self.exit_code: int | None = None
        self.output: deque[str] = deque(maxlen=OUTPUT_KEPT)
        self.capabilities: dict[str, Any] = {}
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        timeout: float = 10.0,
        on_event: EventCallback | None = None,
    ) -> DapClient:
        """Open a TCP connection to a debugpy port; DapError if it cannot be reached."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise DapError(f"no connection to {host}:{port} within {timeout:g} s") from exc
        except OSError as exc:
            raise DapError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from exc
        return cls(reader, writer, on_event=on_event)

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    async def __aenter__(self) -> DapClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- wire -----------------------------------------------------------------------------

    async def _read_message(self) -> dict[str, Any]:
        length: int | None = None
        while True:
            header = await self._reader.readuntil(b"\r\n")
            if header == b"\r\n":
                break
            name, _, value = header.decode("ascii", "replace").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length is None:
            raise DapError("DAP message without Content-Length")
        if not 0 <= length <= MAX_MESSAGE_BYTES:  # the debuggee is untrusted: bounded memory
            raise DapError(f"DAP message of {length} bytes (limit {MAX_MESSAGE_BYTES})")
        message = json.loads(await self._reader.readexactly(length))
        if not isinstance(message, dict):
            raise DapError("DAP message that is not a JSON object")
        return message

    async def _read_loop(self) -> None:
        reason = CONNECTION_CLOSED
        try:
            while True:
                self._dispatch(await self._read_message())
        except asyncio.CancelledError:
            reason = "connection closed"
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except Exception as exc:  # bad framing or JSON: nothing after it is usable
            reason = f"bad message from the debuggee: {exc!r}"
        finally:
            self._fail_everything(reason)
            self._writer.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "response":
            entry = self._pending.pop(int(message.get("request_seq", -1)), None)
            if entry is None:
                return
            command, future = entry
            if future.done():
                return
            if message.get("success", False):
                future.set_result(message.get("body") or {})
            else:
                future.set_exception(DapError(_failure_message(command, message)))
        elif kind == "event":
            self._on_event(str(message.get("event", "")), message.get("body") or {})
        elif kind == "request":
            # A reverse request (runInTerminal, startDebugging): we support none; say so
            # rather than let the adapter wait.
            self._send_nowait(
                {
                    "type": "response",
                    "request_seq": message.get("seq"),
                    "command": message.get("command"),
                    "success": False,
                    "message": "not supported by verl-tui",
                }
            )

    def _on_event(self, name: str, body: dict[str, Any]) -> None:
        if name == "stopped":
            thread_id = body.get("threadId")
            self.stopped = Stopped(
                thread_id=int(thread_id) if thread_id is not None else None,
                reason=str(body.get("reason", "")),
                description=str(body.get("description", "")),
                text=_exception_name(str(body.get("text", ""))),
            )
        elif name == "continued":
            self.stopped = None
        elif name == "terminated":
            self.terminated = True
        elif name == "exited":
            self.exit_code = body.get("exitCode")
        elif name == "output":
            self.output.append(str(body.get("output", "")))
        for waiter in self._event_waiters.pop(name, []):
            if not waiter.done():
                waiter.set_result(body)
        if self.on_event is not None:
            try:
                self.on_event(name, body)
            except Exception:  # a screen's bug must not stop the session
                log.exception("DAP event callback failed on %s", name)
        if name == "terminated":
            # The adapter keeps our connection (and itself) alive after the debuggee is gone;
            # nothing can be asked any more, so end the session and let the adapter exit.
            self._fail_everything(DEBUGGEE_ENDED)
            self._writer.close()

    def _fail_everything(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for command, future in self._pending.values():
            if not future.done():
                future.set_exception(DapError(f"{command}: {reason}"))
        self._pending.clear()
        for waiters in self._event_waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(DapError(reason))
        self._event_waiters.clear()

    def _send_nowait(self, message: dict[str, Any]) -> None:
        payload = json.dumps(message).encode("utf-8")
        self._writer.write(b"Content-Length: %d\r\n\r\n" % len(payload) + payload)

    def _expect_event(self, name: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next event called ``name``; create it before the request that
        provokes the event, which may arrive before that request's response."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        if self._closed_reason is not None:
            future.set_exception(DapError(self._closed_reason))
        else:
            self._event_waiters.setdefault(name, []).append(future)
        return future

    async def _send_request(
        self, command: str, arguments: dict[str, Any] | None = None
    ) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send a request; returns its seq and the future of its response body."""
        if self._closed_reason is not None:
            raise DapError(f"{command}: {self._closed_reason}")
        self._seq += 1
        seq = self._seq
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._pending[seq] = (command, future)
        message: dict[str, Any] = {"seq": seq, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        try:
            self._send_nowait(message)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._pending.pop(seq, None)
            raise DapError(f"{command}: {CONNECTION_CLOSED}") from exc
        return seq, future

    @staticmethod
    async def _wait(future: asyncio.Future[Any], timeout: float, error: str) -> Any:
        """The future's result, or DapError(error) after ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            future.cancel()
            raise DapError(error) from None

    async def request(
        self, command: str, arguments: dict[str, Any] | None = None, *, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Send one request and return its response body; DapError if it fails or times out."""
        return await self._request(command, arguments, timeout, f"{timeout:g} s")

    async def _request(
        self, command: str, arguments: dict[str, Any] | None, timeout: float, said: str
    ) -> dict[str, Any]:
        seq, future = await self._send_request(command, arguments)
        try:
            return await self._wait(future, timeout, f"no response to {command} within {said}")
        finally:
            self._pending.pop(seq, None)  # a late response is then dropped

    # --- session --------------------------------------------------------------------------

    async def attach_post_mortem(self, *, timeout: float = 20.0) -> Stopped:
        """The whole handshake with a worker waiting in Ray's post-mortem hook; returns the
        ``stopped`` event of the failing thread (reason "exception"). The same handshake serves
        a worker waiting at ``breakpoint()`` (reason "breakpoint")."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def left() -> float:
            return max(0.0, deadline - loop.time())

        said = f"{timeout:g} s"  # errors name the whole handshake's budget
        self.capabilities = await self._request(
            "initialize",
            {
                "clientID": "verl-tui",
                "clientName": "verl-tui",
                "adapterID": "debugpy",
                "pathFormat": "path",
                "linesStartAt1": True,
                "columnsStartAt1": True,
                "supportsVariableType": True,
                "supportsRunInTerminalRequest": False,
            },
            left(),
            said,
        )
        initialized = self._expect_event("initialized")
        stopped = self._expect_event("stopped")
        # debugpy answers attach only after configurationDone: do not wait for it here.
        attach_seq, attach = await self._send_request("attach", {"justMyCode": False})
        try:
            # A refused attach (another client is attached already) comes instead of
            # "initialized": wait for whichever is first.
            await asyncio.wait(
                {initialized, attach}, timeout=left(), return_when=asyncio.FIRST_COMPLETED
            )
            refused = attach.exception() if attach.done() else None
            if refused is not None:
                raise refused
            await self._wait(initialized, left(), f"no initialized event within {said}")
            # Without the "uncaught" filter pydevd's post-mortem hook returns without stopping.
            await self._request("setExceptionBreakpoints", {"filters": ["uncaught"]}, left(), said)
            await self._request("configurationDone", None, left(), said)
            await self._wait(attach, left(), f"no response to attach within {said}")
            await self._wait(stopped, left(), f"no stopped event within {said}")
        finally:
            self._pending.pop(attach_seq, None)
            for future in (initialized, stopped, attach):
                future.cancel()  # no-op for those done
        assert self.stopped is not None  # _on_event set it before resolving the waiter
        return self.stopped

    async def threads(self, *, timeout: float = 10.0) -> list[Thread]:
        body = await self.request("threads", timeout=timeout)
        return [Thread(int(t["id"]), str(t.get("name", ""))) for t in body.get("threads", [])]

    async def stack_trace(
        self, thread_id: int, *, levels: int = 0, timeout: float = 10.0
    ) -> list[Frame]:
        """Frames of a paused thread, innermost first (``levels=0``: all of them)."""
        arguments: dict[str, Any] = {"threadId": thread_id, "startFrame": 0}
        if levels:
            arguments["levels"] = levels
        body = await self.request("stackTrace", arguments, timeout=timeout)
        return [_frame_from(raw) for raw in body.get("stackFrames", [])]

    async def scopes(self, frame_id: int, *, timeout: float = 10.0) -> list[Scope]:
        body = await self.request("scopes", {"frameId": frame_id}, timeout=timeout)
        return [
            Scope(
                name=str(raw.get("name", "")),
                reference=int(raw.get("variablesReference", 0)),
                expensive=bool(raw.get("expensive", False)),
            )
            for raw in body.get("scopes", [])
        ]

    async def variables(self, reference: int, *, timeout: float = 10.0) -> list[Variable]:
        body = await self.request("variables", {"variablesReference": reference}, timeout=timeout)
        return [_variable_from(raw) for raw in body.get("variables", [])]

    async def evaluate(
        self,
        expression: str,
        frame_id: int | None,  # None: no frame selected, sent as null
        context: str = "repl",
        *,
        timeout: float = 10.0,
    ) -> Evaluation:
        """Evaluate in a frame; an exception raised by the expression is a DapError."""
        body = await self.request(
            "evaluate",
            {"expression": expression, "frameId": frame_id, "context": context},
            timeout=timeout,
        )
        return Evaluation(
            result=str(body.get("result", "")),
            type=str(body.get("type", "")),
            reference=int(body.get("variablesReference", 0)),
        )

    async def exception_info(self, thread_id: int, *, timeout: float = 10.0) -> ExceptionInfo:
        body = await self.request("exceptionInfo", {"threadId": thread_id}, timeout=timeout)
        details = body.get("details") or {}
        return ExceptionInfo(
            exception_id=_exception_name(str(body.get("exceptionId", ""))),
            description=str(body.get("description", "")),
            break_mode=str(body.get("breakMode", "")),
            stack_trace=details.get("stackTrace"),
        )

    async def continue_(self, thread_id: int, *, timeout: float = 10.0) -> bool:
        """Resume; returns whether the adapter resumed all threads."""
        body = await self.request("continue", {"threadId": thread_id}, timeout=timeout)
        self.stopped = None
        return bool(body.get("allThreadsContinued", True))

    async def disconnect(self, *, terminate_debuggee: bool = False, timeout: float = 5.0) -> None:
        """End the session politely (the debuggee resumes unless ``terminate_debuggee``), then
        close. A debuggee already gone is not an error here."""
        try:
            if not self.closed:
                await self.request(
                    "disconnect",
                    {"restart": False, "terminateDebuggee": terminate_debuggee},
                    timeout=timeout,
                )
        except DapError:
            pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Drop the connection; pending requests fail with DapError."""
        self._fail_everything("connection closed")
        self._read_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._read_task
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
