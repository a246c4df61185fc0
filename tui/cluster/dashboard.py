"""The head's dashboard and jobs API, reached through an SSH forward to its loopback.

Plain HTTP with the standard library, run in a thread: importing Ray's own client costs 1–2 s
and pulls in half of Ray, for a handful of JSON calls.
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tui.transport.fleet import Fleet
from tui.transport.types import Forward, TransportError


class DashboardError(Exception):
    """The dashboard could not be reached or answered with an error."""


def _free_local_port(preferred: int) -> int:
    """`preferred` when nothing on this machine listens there, else 0 (any free port)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            return 0
    return preferred


class DashboardClient:
    def __init__(self, base_url: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None, *,
                 raw: bytes | None = None) -> Any:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        ctype = "application/octet-stream" if raw is not None else "application/json"
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace").strip().splitlines()
            raise DashboardError(
                f"{method} {path}: HTTP {exc.code} {detail[-1] if detail else exc.reason}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DashboardError(f"dashboard at {self.base_url} unreachable: {reason}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    async def get(self, path: str) -> Any:
        return await asyncio.to_thread(self._request, "GET", path)

    async def post(self, path: str, body: Any = None) -> Any:
        return await asyncio.to_thread(self._request, "POST", path, body)

    async def delete(self, path: str) -> Any:
        return await asyncio.to_thread(self._request, "DELETE", path)

    async def put_bytes(self, path: str, data: bytes) -> Any:
        return await asyncio.to_thread(lambda: self._request("PUT", path, raw=data))

    async def exists(self, path: str) -> bool:
        """GET that tells 200 from 404 (other errors raise)."""
        try:
            await self.get(path)
        except DashboardError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True

    async def alive_nodes(self) -> list[dict[str, Any]]:
        data = await self.get("/api/v0/nodes?limit=10000&detail=true")
        result = (data or {}).get("data", {}).get("result", {})
        rows = result.get("result", []) if isinstance(result, dict) else result
        return [n for n in rows if n.get("state") == "ALIVE"]

    async def cluster_metadata(self) -> dict[str, Any]:
        data = await self.get("/api/v0/cluster_metadata")
        return (data or {}).get("data", {}) if isinstance(data, dict) else {}


@dataclass
class Tunnel:
    """A kept-open local forward to the head's dashboard port, and a client over it."""

    forward: Forward
    client: DashboardClient

    @property
    def url(self) -> str:
        return self.client.base_url

    def close(self) -> None:
        self.forward.close()


async def open_tunnel(fleet: Fleet, *, timeout: float = 15.0) -> Tunnel:
    """Forward 127.0.0.1:PORT here to the head's 127.0.0.1:dashboard_port (PORT = the same
    number when free here, so the URL is the one people expect)."""
    inv = fleet.inventory
    head = inv.head
    transport = await fleet.wait_up(head.name, timeout)
    remote = inv.ray.dashboard_port
    try:
        forward = await transport.forward_local_port(
            "127.0.0.1", remote, _free_local_port(remote))
    except TransportError as exc:
        raise DashboardError(str(exc)) from None
    return Tunnel(forward, DashboardClient(f"http://127.0.0.1:{forward.local_port}"))


async def wait_for_dashboard(client: DashboardClient, timeout: float) -> None:
    """Until the state API answers (it comes up a moment after `ray start` returns)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            await client.alive_nodes()
            return
        except DashboardError as exc:
            if loop.time() >= deadline:
                raise DashboardError(f"no answer within {timeout:.0f} s: {exc}") from None
        await asyncio.sleep(0.5)
