"""A line console for Ray's legacy debugger (``RAY_DEBUG=legacy``, ray/util/rpdb.py).

The worker's ``_RemotePdb`` accepts one TCP connection and runs plain pdb over it: everything
it writes has CRLF line ends, and it reads lines through a text-mode socket file (universal
newlines), so a line may end in LF or CRLF; we send LF as ``ray debug`` does. A reply ends at
the next ``(Pdb) `` prompt. ``c`` (and ``remote``/``get``) make the worker close the socket:
that is the normal end of a session, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib

from tui.errors import VerlTuiError

PROMPT = b"(Pdb) "
_CHUNK = 65536


class PdbConsoleError(VerlTuiError, title="pdb", kind="unavailable"):
    """The pdb connection failed, or no prompt came in time."""


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").replace("\r\n", "\n")


class PdbConsole:
    """One session with a worker's remote pdb."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.banner = ""  # what pdb printed before its first prompt (where it stopped)
        self.closed = False

    @classmethod
    async def connect(cls, host: str, port: int, *, timeout: float = 10.0) -> PdbConsole:
        """Connect over TCP and read up to the first prompt (kept as ``.banner``)."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (TimeoutError, asyncio.TimeoutError) as exc:
            raise PdbConsoleError(f"no connection to {host}:{port} within {timeout:g} s") from exc
        except OSError as exc:
            raise PdbConsoleError(
                f"cannot connect to {host}:{port}: {exc.strerror or exc}"
            ) from exc
        return await cls.start(reader, writer, where=f"{host}:{port}", timeout=timeout)

    @classmethod
    async def start(
        cls,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        where: str = "the debugger",
        timeout: float = 10.0,
    ) -> PdbConsole:
        """A session over a stream already open (Transport.open_connection: no listener
        here); reads up to the first prompt (kept as ``.banner``)."""
        console = cls(reader, writer)
        try:
            console.banner = await console.read_reply(timeout=timeout)
        except BaseException:
            await console.close()
            raise
        if console.closed:
            raise PdbConsoleError(
                f"{where} closed the connection before a (Pdb) prompt"
                + (f": {console.banner.strip()}" if console.banner.strip() else "")
            )
        return console

    async def read_reply(self, *, timeout: float = 10.0) -> str:
        """Text up to the next prompt (without it), or up to the end of the connection."""
        buffer = bytearray()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # pdb writes its prompt last and then blocks reading a line, so a prompt at the very end
        # of what arrived is the end of the reply (a "(Pdb) " inside printed text is not).
        while not buffer.endswith(PROMPT):
            try:
                chunk = await asyncio.wait_for(
                    self._reader.read(_CHUNK), max(0.0, deadline - loop.time())
                )
            except (TimeoutError, asyncio.TimeoutError):
                raise PdbConsoleError(
                    f"no (Pdb) prompt within {timeout:g} s"
                    + (f"; got: {_text(bytes(buffer))[-200:]!r}" if buffer else "")
                ) from None
            except (ConnectionError, OSError):
                chunk = b""  # a reset after `c` is still the worker ending the session
            if not chunk:
                self.closed = True
                self._writer.close()
                return _text(bytes(buffer))
            buffer += chunk
        return _text(bytes(buffer[: -len(PROMPT)]))

    async def send(self, line: str, *, timeout: float = 10.0) -> str:
        """Send one pdb command and return its reply (CRLF normalised to LF). After ``c`` the
        worker closes the connection: the reply is what it printed and ``closed`` is True."""
        if "\n" in line or "\r" in line:
            raise ValueError("one line at a time")
        if self.closed:
            raise PdbConsoleError("the debuggee has closed the connection")
        try:
            self._writer.write(line.encode("utf-8") + b"\n")
            await asyncio.wait_for(self._writer.drain(), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise PdbConsoleError(f"could not send within {timeout:g} s") from None
        except (ConnectionError, OSError) as exc:
            self.closed = True
            raise PdbConsoleError(f"connection lost: {exc}") from exc
        return await self.read_reply(timeout=timeout)

    async def close(self) -> None:
        """Drop the connection. Send ``c`` first: dropped without it, pdb reads EOF, quits, and
        the task fails with ``bdb.BdbQuit``."""
        self.closed = True
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
