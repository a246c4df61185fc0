"""The telemetry relay's wire rules, a part of the GPU agent and of the relay (tui/remote BUNDLES).

Above ~64 hosts the cockpit's cost is one SSH packet per host per second. A relay (gpu_relay.py,
one per group of hosts) takes its group's agent lines over TCP and sends them to the cockpit in
one write every --flush-ms (the cockpit starts it with 50: relay_plan.RELAY_FLUSH_MS), so the
cockpit receives a few packets a second per group instead.

Leaf -> relay, one TCP connection per agent:
  ``HELLO <index> <token>\\n``  token = hello_token(relay key, index); the relay answers ``OK\\n``
  (or closes), then ``<counter> <sig> <line>\\n`` per agent line, counter 1, 2, ..., and
  sig = sign(leaf key, counter, line).
Relay -> cockpit (its stdout): ``<index> <counter> <sig> <line>\\n`` as received, and control
lines that start with ``{`` (JSON).

The relay knows its own key (to admit leaves) but never a leaf's key: that goes from the
cockpit to the leaf over the leaf's own SSH channel, so a hostile relay host can drop its
leaves' lines (they then go direct) but never forge or replay one. The cockpit reads the
relay's lines in tui/cluster/relay_plan.py (RelayHub._relay_line): its signature_ok follows the
same rule as sign() here, from each leaf key's MAC state (keyed_mac), and a counter not above
the leaf's last accepted one is refused as a replay.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import socket

SIG_HEX = 32  # a signature: keyed BLAKE2b of 128 bits, as hex
MAX_RELAY_LINE = 1 << 20  # an agent line longer than this is not relayed (it goes direct)
CONNECT_TIMEOUT_S = 3.0
SEND_TIMEOUT_S = 2.0  # a relay that stops reading for this long is given up (lines go direct)


def hello_token(key: bytes, index: int) -> str:
    """What leaf `index` shows the relay to be admitted."""
    return hmac.new(key, b"hello:%d" % index, hashlib.sha256).hexdigest()


def sign(key: bytes, counter: int, line: bytes) -> bytes:
    """A leaf's signature of its `counter`-th line: BLAKE2b in its keyed mode, a MAC by design
    (RFC 7693), one pass where HMAC-SHA256 takes two, and for the cockpit, which checks every
    relayed line of a fleet, one C call in place of HMAC's Python wrapper."""
    mac = hashlib.blake2b(b"%d %s" % (counter, line), key=key, digest_size=SIG_HEX // 2)
    return mac.hexdigest().encode()


class RelayLink:
    """A leaf's connection to its relay (blocking socket, bounded waits). send() raises OSError
    when the relay is gone or stalls: the caller goes back to stdout."""

    def __init__(self, host: str, port: int, index: int, token: str, key: bytes):
        self.address = f"{host}:{port}"
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        try:
            sock.sendall(b"HELLO %d %s\n" % (index, token.encode("ascii")))
            answer = b""
            while not answer.endswith(b"\n") and len(answer) < 16:
                got = sock.recv(16 - len(answer))
                if not got:
                    break
                answer += got
            if answer != b"OK\n":
                raise OSError("the relay refused this host")
            sock.settimeout(SEND_TIMEOUT_S)
        except BaseException:
            sock.close()
            raise
        self.sock, self.key, self.counter = sock, key, 0

    def send(self, line: str) -> None:
        data = line.encode("utf-8")
        if len(data) > MAX_RELAY_LINE:
            raise OSError("line too long to relay")
        self.counter += 1
        self.sock.sendall(b"%d %s %s\n" % (self.counter, sign(self.key, self.counter, data), data))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
