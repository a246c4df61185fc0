"""The browser's way to the dashboard: a loopback listener that lets in only its token's holder.

A browser cannot use the private Unix socket (tui/transport/unix_forward.py), and a plain
127.0.0.1 port is open to every user of a shared login node: anyone could POST a job to Ray's
Jobs API, which has no authentication. So `verl-tui tunnel` serves this gate instead:

- it makes a random token per process and prints the URL with it
  (http://127.0.0.1:PORT/?token=…);
- a request carrying the right token in its query gets a cookie (HttpOnly, SameSite=Strict,
  named for the port) and a redirect to the same address without the token, so the token does
  not stay in the address bar or the history; nothing is forwarded for that request;
- a request with the cookie is let through: its head and then the whole connection are spliced
  to the private socket, so the dashboard's websockets (logs, the tail) work unchanged;
- anything else gets 403 and the connection is closed: nothing of it reaches the dashboard.

The head of each request is read with a size cap and a deadline; tokens are compared in
constant time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from tui.transport.unix_forward import splice

HEAD_CAP = 32 * 1024  # a request's line and headers
HEAD_DEADLINE_S = 10.0
TOKEN_PARAM = "token"


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    headers: list[tuple[str, str]]  # names lower-cased

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]


def parse_head(data: bytes) -> RequestHead | None:
    """The request line and headers of `data` (up to the blank line), or None when malformed."""
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers = []
    for line in lines[1:]:
        if not line:
            break
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers.append((name.lower(), value.strip()))
    return RequestHead(parts[0], parts[1], headers)


def _cookies(head: RequestHead) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in head.header("cookie"):
        for item in value.split(";"):
            name, sep, val = item.strip().partition("=")
            if sep:
                out.setdefault(name, val)
    return out


def _reply(status: str, extra: list[str], text: str) -> bytes:
    body = text.encode()
    lines = [
        f"HTTP/1.1 {status}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class BrowserGate:
    """A 127.0.0.1 listener in front of the private socket `upstream` (see the module doc)."""

    def __init__(self, upstream: str, token: str | None = None):
        self.upstream = upstream
        self.token = token or secrets.token_urlsafe(32)
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.refused = 0  # requests answered 403 (tests and the tunnel's own report)

    @property
    def cookie(self) -> str:
        return f"verl_tui_{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?{TOKEN_PARAM}={self.token}"

    async def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1:`port` (any free port when it is 0 or taken)."""
        try:
            self._server = await asyncio.start_server(
                self._serve, "127.0.0.1", port, limit=HEAD_CAP
            )
        except OSError:
            if not port:
                raise
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_CAP)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()

    def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _token_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_DEADLINE_S)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError, OSError):
            writer.close()
            return
        head = parse_head(data)
        answer = self._decide(head)
        if answer is not None:
            with contextlib.suppress(OSError):
                writer.write(answer)
                await writer.drain()
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
        except OSError:
            with contextlib.suppress(OSError):
                writer.write(_reply("502 Bad Gateway", [], "the dashboard's forward is gone\n"))
            writer.close()
            return
        up_writer.write(data)
        await splice(reader, writer, up_reader, up_writer)

    def _decide(self, head: RequestHead | None) -> bytes | None:
        """None to let the request through; else the answer that ends the connection."""
        if head is None or not head.target.startswith("/"):
            self.refused += 1
            return _reply("400 Bad Request", [], "verl-tui tunnel: not an HTTP request\n")
        parts = urlsplit(head.target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        given = [v for k, v in query if k == TOKEN_PARAM]
        if given and self._token_ok(given[0]):
            rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
            location = parts.path + (f"?{rest}" if rest else "")
            cookie = f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            return _reply(
                "303 See Other",
                [f"Location: {location}", f"Set-Cookie: {cookie}"],
                "signed in\n",
            )
        if self._token_ok(_cookies(head).get(self.cookie)):
            return None
        self.refused += 1
        return _reply(
            "403 Forbidden",
            [],
            "verl-tui tunnel: open the URL `verl-tui tunnel` printed (it carries this "
            "session's token)\n",
        )
