"""The head's dashboard and Jobs API, reached through a private forward to its loopback.

The forward is a Unix socket in a fresh 0700 folder of ours (tui/transport/unix_forward.py):
another user of a shared login node cannot connect to it, and the Jobs API runs code for
whoever can. Requests go through tui/transport/http.py (no proxies, no redirects, one deadline
for the whole request, a cap on the answer's size), in a thread: importing Ray's own client
costs 1–2 s and pulls in half of Ray, for a handful of JSON calls. Every answer is checked
against its schema (tui/cluster/dashboard_schema.py) by the typed methods below before any
service reads it; a wrong one is one DashboardError line naming the request and the field.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from tui.cluster import dashboard_schema as schema
from tui.cluster.dashboard_schema import SUBMISSION_ID_RE, SUBMISSION_ID_RULE, AnswerError
from tui.config.yamlfile import ConfigError
from tui.errors import VerlTuiError
from tui.fmt import human_size
from tui.sanitize import one_line
from tui.transport.http import Endpoint, HttpError, HttpTooLarge, Response, request
from tui.transport.types import PathForward, TransportError

if TYPE_CHECKING:
    from websockets.asyncio.client import connect as WsConnect

    from tui.transport.fleet import Fleet


class DashboardError(VerlTuiError, title="dashboard", kind="unavailable"):
    """The dashboard could not be reached or answered with an error. `sent`: the request had
    been written out in full (the head may have acted on it)."""

    sent = False


class DashboardHTTPError(DashboardError):
    """The dashboard answered with an HTTP error status (`status`)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class SubmitUncertain(DashboardError, title="submission uncertain"):
    """The job's POST was sent, then something failed: the head may have the job. The message
    names the id to look for before submitting again."""

    def __init__(self, message: str, submission_id: str):
        super().__init__(message)
        self.submission_id = submission_id


__all__ = ["SUBMISSION_ID_RE", "SUBMISSION_ID_RULE"]


class BadJobId(ConfigError, DashboardError, title="bad job id"):
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


MIB = 1 << 20
ANSWER_CAP = 32 * MIB  # a job list, the state API's rows: the largest JSON answers
LOG_CAP = 64 * MIB  # a whole driver log (one string) and one message of its tail
JOB_CAP = 8 * MIB  # one job (its runtime_env and metadata included)
# Decoded JSON can take far more memory than its text ("[{},{},…" is 24x): an answer may hold
# at most this many values, counted before decoding as the bytes that can start or separate
# one (`{`, `[`, `,`; those inside strings count too, so this is an upper bound). 10,000 Ray
# tasks with details are ~300,000.
MAX_JSON_ITEMS = 2_000_000
SMALL_CAP = 64 * 1024  # submit / stop / delete / metadata answers, an existence check
LOG_DEADLINE_S = 60.0  # a whole log (up to LOG_CAP) over a slow link
UPLOAD_FLOOR_BPS = 1 * MIB  # a package upload gets its timeout plus size at this rate


class DashboardClient:
    """The Jobs and state APIs of one head's dashboard, each answer checked by its schema.

    `target` is an Endpoint (the private Unix socket of open_tunnel) or an http://host:port URL
    (a dashboard reached directly, as tests do). `label` names the dashboard in messages."""

    def __init__(self, target: Endpoint | str, timeout: float = 10.0, *, label: str = ""):
        if isinstance(target, str):
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                raise DashboardError(f"not an http:// dashboard address: {one_line(target, 120)}")
            target = Endpoint(parts.hostname, parts.port or 80)
        self.endpoint = target
        self.timeout = timeout
        self.label = label or target.describe()

    @property
    def base_url(self) -> str:
        return self.endpoint.describe()

    # -- the one round trip (the seam tests replay) --------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        max_body: int = ANSWER_CAP,
        deadline_s: float | None = None,
        parse: bool = True,
        max_items: int | None = MAX_JSON_ITEMS,
    ) -> Any:
        """One request, its JSON answer (None for an empty one, or when not `parse`);
        `max_items` None for an answer that is one big string (a log)."""
        if not _PATH_OK.fullmatch(path) or "/../" in path + "/" or "/./" in path + "/":
            raise DashboardError(
                f"refusing a request path not built by api_path: {one_line(path, 120)}"
            )
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        ctype = "application/octet-stream" if raw is not None else "application/json"
        where = f"{method} {path}: the dashboard at {self.label}"
        try:
            resp = request(
                self.endpoint,
                method,
                path,
                body=data,
                headers={"Content-Type": ctype, "Accept": "application/json"},
                deadline_s=deadline_s or self.timeout,
                max_body=max_body,
            )
        except HttpTooLarge as exc:
            raise _failed(f"{where} sent too much: {exc}", sent=exc.sent) from None
        except HttpError as exc:
            raise _failed(f"{where}: {exc}", sent=exc.sent) from None
        _check_status(resp, method, path, self.label)
        if not parse or not resp.body:
            return None
        if max_items is not None:
            items = sum(resp.body.count(c) for c in (b"{", b"[", b","))
            if items > max_items:
                raise _failed(
                    f"{where} sent too much: over {max_items:,} JSON values "
                    f"({human_size(len(resp.body))})",
                    sent=True,
                )
        try:
            return json.loads(resp.body)
        except (ValueError, RecursionError):
            ctype = one_line(resp.header("Content-Type") or "no content type", 60)
            start = one_line(resp.body[:60].decode("utf-8", "replace"), 60)
            raise _failed(f"{where} answered {ctype}, not JSON: {start!r}", sent=True) from None

    async def _call(
        self, method: str, path: str, check: Any = None, body: Any = None, **options: Any
    ) -> Any:
        """`_request` in a thread, its answer through `check` (a schema: AnswerError → one
        DashboardError line naming the request and the field)."""

        def run() -> Any:
            value = self._request(method, path, body, **options)
            if check is None:
                return value
            try:
                return check(value)
            except AnswerError as exc:
                raise _failed(
                    f"{method} {path}: the dashboard at {self.label} answered what Ray does "
                    f"not: {exc}",
                    sent=True,
                ) from None

        return await asyncio.to_thread(run)

    # -- the Jobs API ----------------------------------------------------------------------------

    async def list_jobs(self) -> list[dict[str, Any]]:
        """Every job the head knows (Ray's JobDetails, checked fields only)."""
        path = api_path("api", "jobs", trailing_slash=True)
        return await self._call("GET", path, lambda v: schema.list_of(v, schema.JOB))

    async def job_info(self, sid: str) -> dict[str, Any]:
        path = job_path(sid)
        return await self._call(
            "GET", path, lambda v: schema.check_object(v, schema.JOB), max_body=JOB_CAP
        )

    async def job_logs(self, sid: str) -> str:
        """The job's whole driver log as the Jobs API has it (up to LOG_CAP)."""
        answer = await self._call(
            "GET",
            job_path(sid, "logs"),
            lambda v: schema.check_object(v, schema.LOGS),
            deadline_s=max(self.timeout, LOG_DEADLINE_S),
            max_body=LOG_CAP,
            max_items=None,
        )
        return answer["logs"]

    async def submit_job(self, body: Mapping[str, Any]) -> str:
        """POST the job; its submission id. A failure once the request was sent is
        SubmitUncertain (the head may have the job), unless the dashboard refused it (4xx)."""
        sid = check_job_id(body.get("submission_id"), "submission id")
        path = api_path("api", "jobs", trailing_slash=True)
        try:
            answer = await self._call(
                "POST",
                path,
                lambda v: schema.check_object(v, schema.SUBMITTED),
                dict(body),
                max_body=SMALL_CAP,
            )
        except DashboardError as exc:
            refused = isinstance(exc, DashboardHTTPError) and 400 <= exc.status < 500
            if not exc.sent or refused:
                raise
            raise SubmitUncertain(f"{exc}; {_look_for(sid)}", sid) from None
        if answer["submission_id"] != sid:
            raise SubmitUncertain(
                f"POST {path}: the dashboard at {self.label} answered submission id "
                f"{one_line(answer['submission_id'], 80)} for {sid}; {_look_for(sid)}",
                sid,
            )
        return sid

    async def stop_job(self, sid: str) -> bool:
        answer = await self._call(
            "POST",
            job_path(sid, "stop"),
            lambda v: schema.check_object(v, schema.STOPPED),
            max_body=SMALL_CAP,
        )
        return answer["stopped"]

    async def delete_job(self, sid: str) -> bool:
        answer = await self._call(
            "DELETE",
            job_path(sid),
            lambda v: schema.check_object(v, schema.DELETED),
            max_body=SMALL_CAP,
        )
        return answer["deleted"]

    async def exists(self, path: str) -> bool:
        """GET that tells 200 from 404 (other errors raise); a body, if any, must be JSON (a
        page of HTML is not Ray saying yes)."""
        try:
            await self._call("GET", path, max_body=SMALL_CAP)
        except DashboardHTTPError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def job_exists(self, sid: str) -> bool:
        """Whether the head knows job `sid`: its checked info (True) or a 404 (False)."""
        try:
            await self.job_info(sid)
        except DashboardHTTPError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def put_bytes(self, path: str, data: bytes) -> None:
        """PUT a package; the time allowed grows with its size."""
        deadline = self.timeout + len(data) / UPLOAD_FLOOR_BPS
        await self._call(
            "PUT", path, raw=data, max_body=SMALL_CAP, deadline_s=deadline, parse=False
        )

    def websocket(self, path: str, **options: Any) -> WsConnect:
        """A websocket to `path` over the same endpoint (never through a proxy)."""
        import websockets

        if not _PATH_OK.fullmatch(path):
            raise DashboardError(f"refusing a websocket path: {one_line(path, 120)}")
        ep = self.endpoint
        if ep.unix_path is not None:
            return websockets.unix_connect(
                ep.unix_path, "ws://localhost" + path, proxy=None, **options
            )
        host = f"[{ep.host}]" if ":" in ep.host else ep.host
        return websockets.connect(f"ws://{host}:{ep.port}{path}", proxy=None, **options)

    # -- the state API ---------------------------------------------------------------------------

    async def state_rows(self, kind: str, query: Mapping[str, object]) -> list[dict[str, Any]]:
        """The rows of /api/v0/{kind} (nodes, workers, tasks, actors), each checked."""
        if kind not in schema.STATE_ROWS:
            raise ValueError(f"no schema for the state API's {kind}")
        path = api_path("api", "v0", kind, query=query)
        return await self._call("GET", path, lambda v: schema.state_rows(v, kind))

    async def nodes(self) -> list[dict[str, Any]]:
        return await self.state_rows("nodes", {"limit": 10000, "detail": "true"})

    async def alive_nodes(self) -> list[dict[str, Any]]:
        return [n for n in await self.nodes() if n["state"] == "ALIVE"]

    async def cluster_metadata(self) -> dict[str, Any]:
        path = api_path("api", "v0", "cluster_metadata")
        return await self._call(
            "GET",
            path,
            lambda v: schema.check_object(schema.envelope(v), schema.METADATA, "data"),
            max_body=SMALL_CAP,
        )

    async def cluster_status(self) -> dict[str, Any]:
        """/api/cluster_status (the autoscaler's load report): the whole answer, an object whose
        `data` is an object (its inside is read by jobs/queue.py's free_from_report)."""
        return await self._call("GET", api_path("api", "cluster_status"), schema.cluster_status)


def _failed(message: str, *, sent: bool) -> DashboardError:
    exc = DashboardError(message)
    exc.sent = sent
    return exc


def _look_for(sid: str) -> str:
    return (
        f"the job was sent and may exist on the head: look for {sid} (`verl-tui jobs`) "
        "before submitting it again"
    )


def _check_status(resp: Response, method: str, path: str, label: str) -> None:
    """DashboardError for anything but a 2xx: a redirect is named, never followed."""
    if 200 <= resp.status < 300:
        return
    reason = one_line(resp.reason, 60)
    if 300 <= resp.status < 400:
        to = one_line(resp.header("Location") or "nowhere", 160)
        err = _failed(
            f"{method} {path}: the dashboard at {label} answered {resp.status} {reason}, a "
            f"redirect to {to} (not followed: requests go to the dashboard only)",
            sent=True,
        )
        raise err
    lines = [ln for ln in resp.body[-4096:].decode("utf-8", "replace").splitlines() if ln.strip()]
    detail = one_line(lines[-1].strip(), 200) if lines else reason
    exc = DashboardHTTPError(
        f"{method} {path}: HTTP {resp.status} from the dashboard at {label}: {detail}", resp.status
    )
    exc.sent = True
    raise exc


@dataclass
class Tunnel:
    """A kept-open private forward to the head's dashboard port, and a client over it."""

    forward: PathForward
    client: DashboardClient

    @property
    def url(self) -> str:
        """Where commands reach the dashboard: the private socket (a browser uses `verl-tui
        tunnel`'s token URL instead)."""
        return f"unix:{self.forward.path}"

    def close(self) -> None:
        self.forward.close()


async def open_tunnel(fleet: Fleet, *, timeout: float = 15.0) -> Tunnel:
    """A Unix socket in a fresh 0700 folder here, forwarded to the head's
    127.0.0.1:dashboard_port: only this user can reach the dashboard through it."""
    inv = fleet.inventory
    head = inv.head
    transport = await fleet.ready(head.name, timeout)
    remote = inv.ray.dashboard_port
    try:
        forward = await transport.forward_local_path("127.0.0.1", remote)
    except TransportError as exc:
        raise DashboardError(str(exc)) from None
    label = f"{head.name}:{remote}"
    return Tunnel(forward, DashboardClient(Endpoint(unix_path=forward.path), label=label))


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
