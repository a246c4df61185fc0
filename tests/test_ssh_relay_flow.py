"""The relay's flow control (tui/transport/ssh_relay.py) over a real socket pair: the channel is
paused only while the socket pair's transport says its buffer is full, and never left paused.

A channel left paused stops a checkpoint copy dead: nothing calls resume_writing again, and the
copy waits out its 300 s I/O bound (a CI run lost a test to it)."""

from __future__ import annotations

import asyncio
import socket

from tui.transport.ssh_relay import _PairSide


class _Channel:
    """Stands for the SSH channel: records whether the relay left it paused."""

    def __init__(self) -> None:
        self.paused = False
        self.written = bytearray()

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data


async def _pair() -> tuple[_PairSide, _Channel, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    _, side = await asyncio.get_running_loop().connect_accepted_socket(_PairSide, sock=theirs)
    chan = _Channel()
    side.chan = chan  # type: ignore[assignment]
    return side, chan, ours


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_full_buffer_pauses_the_channel_until_it_drains():
    side, chan, ours = await _pair()
    assert side.transport is not None
    side.transport.set_write_buffer_limits(high=1 << 16)
    block = b"x" * (1 << 20)
    while not chan.paused:  # the host keeps sending; nobody reads our end
        side.transport.write(block)
        await _turns()
    assert side.transport.get_write_buffer_size() > 0
    got = 0
    while side.transport.get_write_buffer_size():
        got += len(await asyncio.get_running_loop().sock_recv(ours, 1 << 20))
    await _turns()
    assert not chan.paused and got > 0
    side.transport.close()
    ours.close()


async def test_a_resume_in_the_same_turn_as_the_pause_leaves_the_channel_running():
    side, chan, ours = await _pair()
    assert side.transport is not None
    # Some bytes still buffered (below the low-water mark), as after a partial send.
    side.transport.set_write_buffer_limits(high=1 << 16)
    while side.transport.get_write_buffer_size() == 0:
        side.transport.write(b"y" * (1 << 20))
    # The transport paused, then drained below its low-water mark before the deferred pause
    # ran: its resume_writing is the last call it makes.
    side.pause_writing()
    side.resume_writing()
    await _turns()
    assert side.transport.get_write_buffer_size() > 0
    assert not chan.paused, "channel left paused after the transport resumed"
    side.transport.close()
    ours.close()
