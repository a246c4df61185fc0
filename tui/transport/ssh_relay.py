"""An SSH direct-tcpip channel handed to the caller as asyncio streams, with no listener.

The channel is joined to one end of a socket pair; the caller gets asyncio streams on the other
end (what the DAP client, the pdb console and the checkpoint collector already read and write).

Flow control is ours, not asyncssh's stream reader's: asyncssh refills a channel's window each
time it delivers a packet, even while packets it holds back for a paused reader stay buffered, so
a reader that pauses often (a fast host sending to a slow one) lets the buffer grow without end
(a 50 MiB checkpoint shard held 42 MiB). Here the channel is paused only after the packets it held
back have all been delivered (the pause is deferred to the next loop turn), so what waits in
memory is bounded by the socket pair's write buffer and two windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import asyncssh

WINDOW = 1 << 20  # the channel's receive window: the most a host may send ahead of us


class _PairSide(asyncio.Protocol):
    """Our end of the socket pair: what the caller writes goes into the channel."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chan: asyncssh.SSHTCPChannel[bytes] | None = None
        self._writing_paused = False  # between the transport's pause_writing and resume_writing
        self._pause_pending = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.chan is not None:
            self.chan.write(data)

    def eof_received(self) -> bool:
        if self.chan is not None:
            with contextlib.suppress(OSError, asyncssh.Error):
                self.chan.write_eof()
        return True  # the other direction stays open until the host closes

    def connection_lost(self, exc: Exception | None) -> None:
        if self.chan is not None:
            self.chan.close()

    # The caller reads slower than the host sends: stop the channel, once what it holds is out.
    def pause_writing(self) -> None:
        self._writing_paused = True
        if not self._pause_pending:
            self._pause_pending = True
            asyncio.get_running_loop().call_soon(self._pause_channel)

    def _pause_channel(self) -> None:
        self._pause_pending = False
        # A resume_writing that came first (the buffer drained in the same loop turn) is the
        # last call the transport makes: pausing now would stop the channel for good.
        if self._writing_paused and self.chan is not None:
            self.chan.pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self.chan is not None:
            self.chan.resume_reading()


class _ChannelSide(asyncssh.SSHTCPSession[bytes]):
    """The channel: what the host sends goes into the socket pair."""

    def __init__(self, pair: _PairSide) -> None:
        self._pair = pair

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self._pair.transport is not None:
            self._pair.transport.write(data)

    def eof_received(self) -> bool:
        if self._pair.transport is not None and self._pair.transport.can_write_eof():
            self._pair.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pair.transport is not None:
            self._pair.transport.close()

    # The host reads slower than the caller writes: stop reading the caller's end.
    def pause_writing(self) -> None:
        if self._pair.transport is not None:
            self._pair.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._pair.transport is not None:
            self._pair.transport.resume_reading()


async def open_channel_streams(
    conn: asyncssh.SSHClientConnection, remote_host: str, remote_port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open the channel (asyncssh.Error or OSError when the host refuses) and the streams."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    try:
        _, pair = await loop.connect_accepted_socket(_PairSide, sock=theirs)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    try:
        chan, _ = await conn.create_connection(
            lambda: _ChannelSide(pair), remote_host, remote_port, window=WINDOW
        )
        pair.chan = chan
        return await asyncio.open_connection(sock=ours)
    except BaseException:
        ours.close()
        if pair.transport is not None:
            pair.transport.close()
        raise
