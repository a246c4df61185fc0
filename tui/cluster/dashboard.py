"""The head's dashboard and jobs API, reached through an SSH forward to its loopback.

Plain HTTP with the standard library, run in a thread: importing Ray's own client costs 1–2 s
and pulls in half of Ray, for a handful of JSON calls.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from tui.config.yamlfile import ConfigError
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import Forward, TransportError


class DashboardError(Exception):
    """The dashboard could not be reached or answered with an error."""


# Ray 2.60 itself accepts any string as a submission id (JobSubmitRequest only checks the type),
# then uses it as a URL path segment (/api/jobs/{id}/...), an actor name and a file name
# (logs/job-driver-{id}.log). Its own ids are `raysubmit_` + 16 of [A-Za-z0-9] (job_manager.
# generate_job_id) and driver job ids are hex ("02000000"). We accept exactly what is safe in
# all three places: letters, digits, '_', '-', '.', not starting with '.', at most 200
# characters (the log file name stays under 255 bytes), starting with a letter, digit or '_'
# (so it is never read as an option or a dot segment).
SUBMISSION_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
SUBMISSION_ID_RULE = (
    "letters, digits, '_', '-', '.'; starting with a letter, digit or '_'; at most 200 characters"
)


class BadJobId(ConfigError, DashboardError):
    """A submission id that Ray's rules (as we enforce them) do not allow: one line. A
    ConfigError (the CLI exits 2) and a DashboardError (screens already show those)."""


def check_job_id(value: object, what: str = "job id") -> str:
    """`value` when it is a valid submission id, else BadJobId naming it (shown escaped)."""
    if isinstance(value, str) and SUBMISSION_ID_RE.fullmatch(value):
        return value
    shown = one_line(repr(value), 80)
    raise BadJobId(f"{what} {shown}: not a Ray submission id ({SUBMISSION_ID_RULE})")


def is_job_id(value: object) -> bool:
    return isinstance(value, str) and SUBMISSION_ID_RE.fullmatch(value) is not None


def api_path(
    *segments: str, query: Mapping[str, object] | None = None, trailing_slash: bool = False
) -> str:
    """`/seg/seg…?k=v&…` with every segment and query value percent-encoded (nothing a value
    holds can add a segment, a query or a fragment). The one way a request path is built."""
    path = "/" + "/".join(quote(str(s), safe="") for s in segments)
    if trailing_slash:
        path += "/"
    if query:
        path += "?" + "&".join(
            f"{quote(str(k), safe='')}={quote(str(v), safe='')}" for k, v in query.items()
        )
    return path


# A Ray job's statuses that never change again (the Jobs API's JobStatus.is_terminal()).
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def job_path(sid: str, *rest: str) -> str:
    """/api/jobs/{sid}[/rest…] for a checked id (BadJobId otherwise)."""
    return api_path("api", "jobs", check_job_id(sid), *rest)


# What a request path may hold once built: encoded segments and a query, nothing that a
# server or urllib reads as structure beyond that (no spaces, controls, fragments, dot segments).
_PATH_OK = re.compile(r"/api/[A-Za-z0-9._~%/-]*(\?[A-Za-z0-9._~%=&!-]*)?")


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

    def _request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
    ) -> Any:
        if not _PATH_OK.fullmatch(path) or "/../" in path + "/" or "/./" in path + "/":
            raise DashboardError(
                f"refusing a request path not built by api_path: {one_line(path, 120)}"
            )
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        ctype = "application/octet-stream" if raw is not None else "application/json"
        req = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={"Content-Type": ctype}
        )
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
        data = await self.get(
            api_path("api", "v0", "nodes", query={"limit": 10000, "detail": "true"})
        )
        result = (data or {}).get("data", {}).get("result", {})
        rows = result.get("result", []) if isinstance(result, dict) else result
        return [n for n in rows if n.get("state") == "ALIVE"]

    async def cluster_metadata(self) -> dict[str, Any]:
        data = await self.get(api_path("api", "v0", "cluster_metadata"))
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
    transport = await fleet.ready(head.name, timeout)
    remote = inv.ray.dashboard_port
    try:
        forward = await transport.forward_local_port("127.0.0.1", remote, _free_local_port(remote))
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
