"""Can host A open a TCP connection to B:port? Asked on A itself, through its interpreter."""

from __future__ import annotations

from tui.remote import python_argv
from tui.transport.types import Transport, TransportError


async def tcp_reachable(
    transport: Transport, python: str, address: str, port: int, timeout: float = 3.0
) -> str | None:
    """None when `address:port` accepts a connection from that host, else the reason."""
    try:
        argv = python_argv(python, "tcp_connect", address, str(port), str(timeout), site=False)
        res = await transport.run(argv, timeout=timeout + 15, what=f"connect to {address}:{port}")
    except TransportError as exc:
        return str(exc)
    if res.ok:
        return None
    err_lines = res.stderr.strip().splitlines()
    return res.stdout.strip() or (err_lines[-1] if err_lines else "connection failed")
