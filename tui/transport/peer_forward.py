"""A loopback TCP forward that only its owner can use.

An in-process client never needs a listener (Transport.open_connection gives it a stream over
the existing connection). A TCP listener is opened only for an outside program that can speak
nothing else (VS Code's debugpy attach wants host:port), and 127.0.0.1 is open to every user of
a shared login node: whoever connects to a debugger's forward runs code on the cluster as us.

So each accepted connection's peer is looked up in /proc/net/tcp and /proc/net/tcp6 — the row
whose local address:port is the peer's and whose remote address:port is our end — and its uid
column must be ours (root is no exception). Anything else is reset before the upstream is even
opened, so not one byte reaches the remote side. Where those tables cannot be read (not Linux,
a restricted /proc) no such listener is opened: TransportError says why.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import sys
from collections.abc import Awaitable, Callable

from tui.transport.types import TransportError
from tui.transport.unix_forward import splice

PROC_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
MAX_TABLE_BYTES = 64 << 20  # a login node with a million sockets still fits; more is not read

Upstream = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def _address(field: str) -> Address:
    """'0100007F:1F90' (the kernel prints each 32-bit word of the address in host order)."""
    host, _, port = field.partition(":")
    raw = b"".join(
        int(host[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(host), 8)
    )
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, int(port, 16)  # an AF_INET6 socket talking to 127.0.0.1
    return ip, int(port, 16)


def _normal(host: str, port: int) -> Address:
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, port
    return ip, port


def tables_unreadable() -> str | None:
    """Why a peer cannot be checked here (one line), or None when /proc/net/tcp reads."""
    try:
        with open(PROC_TABLES[0], "rb") as f:
            header = f.readline()
    except OSError as exc:
        return f"{PROC_TABLES[0]}: {exc.strerror or exc}"
    if b"uid" not in header:
        return f"{PROC_TABLES[0]} has no uid column"
    return None


def peer_uid(ours: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """The uid owning the socket at `peer` that is connected to `ours`, or None when no such
    socket is in this network namespace's tables (gone already, or not readable)."""
    want_local, want_remote = _normal(*peer), _normal(*ours)
    for table in PROC_TABLES:
        try:
            with open(table, "rb") as f:
                text = f.read(MAX_TABLE_BYTES).decode("ascii", "replace")
        except OSError:
            continue  # tcp6 is absent where IPv6 is off
        for row in text.splitlines()[1:]:
            cols = row.split()
            if len(cols) < 8:
                continue
            try:
                if _address(cols[1]) == want_local and _address(cols[2]) == want_remote:
                    return int(cols[7])
            except ValueError:
                continue
    return None


class PeerCheckedForward:
    """127.0.0.1:local_port whose connections, from our own uid only, are spliced to what
    `upstream()` opens (a channel of the host's SSH connection)."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.local_port = 0
        self.refused = 0  # connections closed because their peer was not ours

    @classmethod
    async def open(
        cls, upstream: Upstream, local_port: int = 0, *, what: str = "the forward"
    ) -> PeerCheckedForward:
        why = tables_unreadable()
        if why is not None:
            raise TransportError(
                f"{what} is not opened: a loopback port would be open to every user of this "
                f"machine and its peers cannot be checked ({why})"
            )
        fwd = cls(upstream)
        try:
            fwd._server = await asyncio.start_server(fwd._accept, "127.0.0.1", local_port)
        except OSError as exc:
            raise TransportError(
                f"{what}: cannot listen on 127.0.0.1:{local_port}: {exc.strerror or exc}"
            ) from None
        fwd.local_port = fwd._server.sockets[0].getsockname()[1]
        return fwd

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Checked here, before any await: nothing is read or opened for a stranger.
        ours, peer = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        if ours is None or peer is None or peer_uid(ours[:2], peer[:2]) != os.geteuid():
            self.refused += 1
            writer.transport.abort()  # a reset: the peer learns nothing but "closed"
            return
        task = asyncio.ensure_future(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await self._upstream()
        except (TransportError, OSError):
            writer.close()
            return
        await splice(reader, writer, up_reader, up_writer)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
