#!/usr/bin/env python3
"""verl-tui GPU telemetry relay: gathers a group of hosts' agent lines, one write per 100 ms.

Shipped as ``python3 -u -S -c SOURCE --bind ADDR --leaves N`` joined with relay_wire.py (the
wire rules are there). stdin's first line is the relay key (hex); the relay listens on ADDR
(the host's node address, port chosen by the kernel), prints
``{"type":"relay","address":ADDR,"port":P,"pid":PID}``, then relays: each admitted leaf's
lines become ``<index> <line>`` on stdout, batched. Every 10 s a
``{"type":"relay-stats",...}`` line. It exits when stdin reaches EOF (the SSH channel
closed), on SIGTERM/SIGHUP or a broken pipe. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import os
import signal
import sys
import threading

from tui.remote.relay_wire import MAX_RELAY_LINE, SIG_HEX, hello_token

HELLO_TIMEOUT_S = 5.0
STATS_EVERY_S = 10.0
MAX_BUFFER = 32 << 20  # bytes waiting for the next write; past it, lines are dropped and counted


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class Relay:
    """The relay's state; `write` takes the bytes for stdout (the in-process simulator in
    bench/simhosts.py passes its SSH channel's writer)."""

    def __init__(self, key, leaves, write, flush_s=0.1):
        self.key, self.max_leaves, self.write, self.flush_s = key, leaves, write, flush_s
        self.tokens = {}  # index -> expected hello token, computed on first use
        self.connected = {}  # index -> the leaf's writer
        self.buf, self.size = [], 0
        self.lines = self.refused = self.dropped = self.bad = 0

    def _admit(self, hello):
        words = hello.split()
        if len(words) != 3 or words[0] != b"HELLO" or not words[1].isdigit():
            return None
        index = int(words[1])
        if index >= self.max_leaves or index in self.connected:
            return None
        want = self.tokens.get(index)
        if want is None:
            want = self.tokens[index] = hello_token(self.key, index).encode("ascii")
        return index if hmac.compare_digest(words[2], want) else None

    async def handle(self, reader, writer):
        index = None
        try:
            hello = await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S)
            index = self._admit(hello)
            if index is None:
                self.refused += 1
                return
            self.connected[index] = writer
            writer.write(b"OK\n")
            prefix, add = b"%d " % index, self._add
            while True:
                line = await reader.readline()
                if not line.endswith(b"\n"):
                    break  # EOF (a partial last line is not relayed)
                # "<counter> <sig> <line>": the shape only; the cockpit checks the signature.
                first = line.find(b" ")
                if first < 1 or line[first + 1 + SIG_HEX : first + 2 + SIG_HEX] != b" ":
                    self.bad += 1
                    break
                add(prefix + line)
        except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # ValueError: a line over the reader's limit
        finally:
            if index is not None and self.connected.get(index) is writer:
                del self.connected[index]
            writer.close()

    def _add(self, data):
        if self.size + len(data) > MAX_BUFFER:
            self.dropped += 1
            return
        self.buf.append(data)
        self.size += len(data)
        self.lines += 1

    def take(self):
        """The bytes gathered since the last call (b"" when none)."""
        if not self.buf:
            return b""
        data = b"".join(self.buf)
        self.buf, self.size = [], 0
        return data

    def stats_line(self):
        stats = {
            "type": "relay-stats",
            "leaves": len(self.connected),
            "lines": self.lines,
            "refused": self.refused,
            "dropped": self.dropped,
            "bad": self.bad,
        }
        return (json.dumps(stats, separators=(",", ":")) + "\n").encode()

    async def pump(self, stop):
        """Write what was gathered every flush_s, and the stats every STATS_EVERY_S."""
        loop = asyncio.get_running_loop()
        next_stats = loop.time() + STATS_EVERY_S
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.flush_s)
            data = self.take()
            if loop.time() >= next_stats:
                data += self.stats_line()
                next_stats = loop.time() + STATS_EVERY_S
            if data:
                self.write(data)


async def serve(relay, bind, stop, ready):
    """Listen on `bind` (port 0), call ready(port), relay until `stop` is set."""
    server = await asyncio.start_server(
        relay.handle, bind, 0, limit=MAX_RELAY_LINE + 128, backlog=1024
    )
    try:
        ready(server.sockets[0].getsockname()[1])
        await relay.pump(stop)
    finally:
        server.close()
        for writer in list(relay.connected.values()):
            writer.close()


def _stdout_write(data):
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _emit(obj):
    _stdout_write((json.dumps(obj, separators=(",", ":")) + "\n").encode())


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpu_relay", description="verl-tui telemetry relay")
    parser.add_argument("--bind", required=True, help="the address leaves connect to")
    parser.add_argument("--leaves", type=int, required=True, help="leaf indexes: 0..N-1")
    parser.add_argument("--flush-ms", type=int, default=100, help="ms between writes")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 1 <= args.leaves <= 65536 or not 10 <= args.flush_ms <= 5000:
        parser.error("--leaves must be 1..65536 and --flush-ms 10..5000")
    try:
        key = bytes.fromhex(sys.stdin.buffer.readline().decode("ascii").strip())
    except ValueError:
        key = b""
    if len(key) < 16:
        _emit({"type": "error", "error": "no relay key on stdin"})
        return 2

    loop = asyncio.new_event_loop()

    async def run():
        stop = asyncio.Event()  # made inside the loop (Python < 3.10 binds it at creation)
        for name in ("SIGTERM", "SIGHUP"):
            with contextlib.suppress(AttributeError, ValueError, NotImplementedError):
                loop.add_signal_handler(getattr(signal, name), stop.set)

        def watch_stdin():
            with contextlib.suppress(OSError, ValueError):
                while os.read(0, 4096):
                    pass
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch_stdin, daemon=True).start()
        relay = Relay(key, args.leaves, _stdout_write, args.flush_ms / 1000.0)

        def ready(port):
            _emit({"type": "relay", "address": args.bind, "port": port, "pid": os.getpid()})

        await serve(relay, args.bind, stop, ready)

    try:
        loop.run_until_complete(run())
    except BrokenPipeError:
        return 0
    except OSError as err:  # cannot listen there (address not on this host, ...)
        with contextlib.suppress(OSError):
            _emit({"type": "error", "error": f"cannot listen on {args.bind}: {_one_line(err)}"})
        return 1
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
