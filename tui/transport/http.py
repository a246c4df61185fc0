"""Bounded HTTP: one request, one deadline for the whole of it, a cap on the answer.

The dashboard client (tui/cluster/dashboard.py) and the notify webhook (tui/supervisor/notify.py)
both go through `request`. It is http.client over a socket opened here, so:

- nothing reads http_proxy / https_proxy / all_proxy: a proxy is used only when the caller names
  one in the Endpoint (the webhook does, from the environment; the dashboard never does);
- no redirect is followed: a 3xx comes back as the Response it is, for the caller to name;
- every connect, send and receive gets the time left until one monotonic deadline (the socket
  timeout is set to it before each call, and a call past it is refused), so a server trickling
  one byte a second fails at the deadline rather than after a timeout per byte;
- the answer's Content-Length is checked against the cap before reading, and the bytes are
  counted while reading (chunked or until close): memory stays within the cap. Status and
  header lines are bounded by http.client (64 KiB a line, 100 headers).
"""

from __future__ import annotations

import asyncio
import http.client
import io
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tui import __version__
from tui.errors import VerlTuiError
from tui.fmt import human_size
from tui.sanitize import one_line

READ_CHUNK = 1 << 16
# What an asyncio caller waits past the deadline before giving up on the thread: only name
# resolution (getaddrinfo) can overrun it, and the thread ends on its own when that does.
THREAD_GRACE_S = 1.0


class HttpError(VerlTuiError, title="request failed", kind="unavailable"):
    """The request failed: one line saying why (no URL: the caller names what it asked).
    `sent`: the whole request had been written before it failed (the server may have acted)."""

    def __init__(self, message: str, *, sent: bool = False):
        super().__init__(message)
        self.sent = sent


class HttpTimeout(HttpError, title="request timed out"):
    """The deadline passed before the whole answer arrived."""


class HttpTooLarge(HttpError, title="answer too large"):
    """The answer is larger than the caller's cap."""


class _PastDeadline(TimeoutError):
    pass


@dataclass(frozen=True)
class Endpoint:
    """Where a request goes: a Unix socket (`unix_path`), or `host`:`port` over TCP, with TLS
    for https, through an HTTP `proxy` (host, port) only when one is given."""

    host: str = "localhost"
    port: int = 80
    unix_path: str | None = None
    tls: bool = False
    proxy: tuple[str, int] | None = None

    def describe(self) -> str:
        if self.unix_path is not None:
            return f"unix:{self.unix_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: Mapping[str, str]  # lower-case names; the first of repeated headers
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class _DeadlineSocket:
    """The socket http.client talks through: each send and receive gets the time left."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline

    def arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _PastDeadline()
        self.sock.settimeout(left)

    def sendall(self, data: Any) -> None:
        self.arm()
        self.sock.sendall(data)  # one deadline for the whole call (Python ≥ 3.5)

    def recv_into(self, buf: Any) -> int:
        self.arm()
        return self.sock.recv_into(buf)

    def makefile(self, mode: str = "rb", *_: Any, **__: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self), READ_CHUNK)

    def close(self) -> None:
        """Nothing: http.client closes the connection while the answer is still being read
        (Connection: close); the socket is closed by `request` when it is done."""


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket):
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        return self._sock.recv_into(buf)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _PastDeadline()
    return left


def _open_socket(ep: Endpoint, deadline: float) -> socket.socket:
    if ep.unix_path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(ep.unix_path)
        except BaseException:
            sock.close()
            raise
        return sock
    where = ep.proxy or (ep.host, ep.port)
    sock = socket.create_connection(where, timeout=_left(deadline))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _proxy_connect(sock: socket.socket, ep: Endpoint, deadline: float) -> None:
    """CONNECT host:port through the proxy (for https): its answer's head, deadline-bound."""
    host = f"[{ep.host}]" if ":" in ep.host else ep.host.encode("idna").decode("ascii")
    target = f"{host}:{ep.port}"
    wrapped = _DeadlineSocket(sock, deadline)
    wrapped.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
    resp = http.client.HTTPResponse(wrapped, method="CONNECT")  # type: ignore[arg-type]
    resp.begin()
    if resp.status != 200:
        raise HttpError(
            f"the proxy refused CONNECT: HTTP {resp.status} {one_line(resp.reason, 80)}"
        )


class _Connection(http.client.HTTPConnection):
    """http.client's request writer and answer reader over our own deadline-bound socket."""

    def __init__(self, ep: Endpoint, deadline: float):
        super().__init__(ep.host, ep.port)
        self._ep = ep
        self._deadline = deadline
        self.opened: socket.socket | None = None

    def connect(self) -> None:
        ep, deadline = self._ep, self._deadline
        sock = _open_socket(ep, deadline)
        try:
            if ep.tls:
                if ep.proxy is not None:
                    _proxy_connect(sock, ep, deadline)
                ctx = ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=ep.host, do_handshake_on_connect=False)
                sock.settimeout(_left(deadline))
                sock.do_handshake()  # one deadline for the whole handshake (CPython's ssl)
        except BaseException:
            sock.close()
            raise
        self.opened = sock
        self.sock = _DeadlineSocket(sock, deadline)


# Every request names its client: Ray's dashboard before 2.5x (2.46 measured) reads the
# User-Agent of every request to refuse browser POSTs and answers 500 without one, which
# http.client does not send.
DEFAULT_HEADERS = {"User-Agent": f"verl-tui/{__version__}"}


def request(
    ep: Endpoint,
    method: str,
    target: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    deadline_s: float,
    max_body: int,
) -> Response:
    """Send one request and read its whole answer within `deadline_s` seconds, the answer's
    body at most `max_body` bytes. HttpError (HttpTimeout, HttpTooLarge) with one line."""
    deadline = time.monotonic() + deadline_s
    conn = _Connection(ep, deadline)
    url = target
    if ep.proxy is not None and not ep.tls and ep.unix_path is None:
        url = ep.describe() + target  # absolute form: the proxy's request line names the host
    sent = False
    try:
        conn.request(method, url, body=body, headers={**DEFAULT_HEADERS, **(headers or {})})
        sent = True
        resp = conn.getresponse()
        return Response(
            resp.status,
            resp.reason,
            {k.lower(): v for k, v in reversed(resp.getheaders())},
            _read_capped(resp, max_body, sent=sent),
        )
    except HttpError as exc:
        exc.sent = exc.sent or sent
        raise
    except TimeoutError:  # socket.timeout and our own deadline check
        raise HttpTimeout(f"timed out after {deadline_s:g} s", sent=sent) from None
    except ssl.SSLError as exc:
        raise HttpError(f"TLS: {one_line(exc.reason or exc, 160)}", sent=sent) from None
    except http.client.HTTPException as exc:
        # RemoteDisconnected, BadStatusLine, LineTooLong, IncompleteRead, too many headers …
        why = one_line(str(exc) or type(exc).__name__, 120)
        raise HttpError(f"not a well-formed HTTP answer ({why})", sent=sent) from None
    except OSError as exc:
        phase = (
            "connection broke"
            if sent
            else "cannot connect"
            if conn.opened is None
            else "sending failed"
        )
        why = one_line(exc.strerror or exc, 160)
        raise HttpError(f"{phase}: {why}", sent=sent) from None
    finally:
        conn.close()
        if conn.opened is not None:
            conn.opened.close()


def _read_capped(resp: http.client.HTTPResponse, cap: int, *, sent: bool) -> bytes:
    declared = resp.length  # None when chunked or until close
    if declared is not None and declared > cap:
        raise HttpTooLarge(
            f"answer of {human_size(declared)} is over the {human_size(cap)} limit", sent=sent
        )
    # Chunks, joined once at the end: a growing bytearray needs twice its size while it moves.
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = resp.read(min(READ_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            raise HttpTooLarge(f"answer passed the {human_size(cap)} limit", sent=sent)


async def request_async(
    ep: Endpoint,
    method: str,
    target: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    deadline_s: float,
    max_body: int,
) -> Response:
    """`request` in a worker thread: the event loop never waits on the network."""
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(
                request,
                ep,
                method,
                target,
                body=body,
                headers=headers,
                deadline_s=deadline_s,
                max_body=max_body,
            ),
            deadline_s + THREAD_GRACE_S,
        )
    except asyncio.TimeoutError:  # name resolution overran the deadline
        raise HttpTimeout(f"timed out after {deadline_s:g} s") from None
