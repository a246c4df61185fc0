"""A local listen address (`HOST:PORT`) as hosts.yaml's `prometheus:` and `verl-tui export
--prometheus` give it: loopback only unless the caller allows more."""

from __future__ import annotations

import ipaddress

from tui.errors import VerlTuiError


class ListenError(VerlTuiError, ValueError, title="bad address", kind="bad_input"):
    """One line saying what is wrong with the address."""


def parse_listen(
    text: str, *, public: bool = False, public_hint: str = "verl-tui export --public"
) -> tuple[str, int]:
    """(host, port) of ``127.0.0.1:9400`` / ``[::1]:9400`` / ``localhost:9400``. A
    non-loopback host is refused unless `public` (a scrape endpoint has no authentication)."""
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not host:
        raise ListenError(f"{raw!r}: expected HOST:PORT (e.g. 127.0.0.1:9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ListenError(f"{raw!r}: the port is not a number") from None
    if not 1 <= port <= 65535:
        raise ListenError(f"{raw!r}: the port is out of range 1..65535")
    if host == "localhost":
        return "127.0.0.1", port
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ListenError(f"{raw!r}: the host must be an IP address or localhost") from None
    if not ip.is_loopback and not public:
        raise ListenError(
            f"{raw!r} is not a loopback address: the metrics endpoint has no authentication "
            f"(bind 127.0.0.1:PORT; {public_hint} serves the network on purpose)"
        )
    return str(ip), port
