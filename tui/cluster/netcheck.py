"""Can host A open a TCP connection to B:port? Asked on A itself, through its interpreter."""

from __future__ import annotations

from tui.transport.types import Transport, TransportError

_CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3])).close()\n"
    "except OSError as e:\n"
    "    print(getattr(e, 'strerror', None) or str(e) or type(e).__name__); sys.exit(1)\n"
)


async def tcp_reachable(transport: Transport, python: str, address: str, port: int,
                        timeout: float = 3.0) -> str | None:
    """None when `address:port` accepts a connection from that host, else the reason."""
    try:
        res = await transport.run([python, "-c", _CONNECT, address, str(port), str(timeout)],
                                  timeout=timeout + 15)
    except TransportError as exc:
        return str(exc)
    if res.ok:
        return None
    err_lines = res.stderr.strip().splitlines()
    return res.stdout.strip() or (err_lines[-1] if err_lines else "connection failed")
