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
MAX_TABLE_BYTES = 64 << 20  # a login node with 400,000 sockets still fits; more is not read
TABLE_CHUNK = 1 << 16

Upstream = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def _fields(host: str, port: int) -> tuple[str, str]:
    """How the kernel prints host:port in /proc/net/tcp and in /proc/net/tcp6: each 32-bit word
    of the address as %08X of its host-order value, then the port as %04X. An IPv4 address
    shows in tcp6 v4-mapped (an AF_INET6 socket talking to 127.0.0.1)."""
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    v6 = ip if isinstance(ip, ipaddress.IPv6Address) else ipaddress.IPv6Address(f"::ffff:{ip}")

    def words(raw: bytes) -> str:
        return "".join(
            f"{int.from_bytes(raw[i : i + 4], sys.byteorder):08X}" for i in range(0, len(raw), 4)
        )

    v4 = f"{words(ip.packed)}:{port:04X}" if isinstance(ip, ipaddress.IPv4Address) else ""
    return v4, f"{words(v6.packed)}:{port:04X}"


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


def _read_table(path: str) -> str:
    """The table's text, at most MAX_TABLE_BYTES (read in pieces: read(n) would allocate n)."""
    parts: list[bytes] = []
    size = 0
    with open(path, "rb", buffering=0) as f:
        while size < MAX_TABLE_BYTES and (part := f.read(TABLE_CHUNK)):
            parts.append(part)
            size += len(part)
    return b"".join(parts).decode("ascii", "replace")


def peer_uid(ours: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """The uid owning the socket at `peer` that is connected to `ours`, or None when no such
    socket is in this network namespace's tables (gone already, or not readable)."""
    # The peer's socket is the row whose local end is `peer` and whose remote end is `ours`.
    rows = zip(PROC_TABLES, _fields(*peer), _fields(*ours), strict=True)
    for table, want_local, want_remote in rows:
        if not want_local:
            continue  # an IPv6 peer is not in the IPv4 table
        try:
            text = _read_table(table)
        except OSError:
            continue  # tcp6 is absent where IPv6 is off
        for row in text.splitlines()[1:]:
            cols = row.split()
            if len(cols) >= 8 and cols[1] == want_local and cols[2] == want_remote:
                try:
                    return int(cols[7])
                except ValueError:
                    return None
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
        task = asyncio.ensure_future(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Whatever the peer sends waits in our buffer until the check is done: nothing is
        # passed on, and no upstream is opened, for a stranger. The kernel walks its whole
        # socket table to print /proc/net/tcp (tens of ms on a busy node): off the loop.
        ours, peer = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        uid = None
        if ours is not None and peer is not None:
            uid = await asyncio.to_thread(peer_uid, ours[:2], peer[:2])
        if uid != os.geteuid():
            self.refused += 1
            writer.transport.abort()  # a reset: the peer learns nothing but "closed"
            return
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
