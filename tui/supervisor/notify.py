"""Notifications of the supervisor's decisions: job end, failure, retry, queue start.

Each such decision becomes (1) a line in the cockpit and the terminal bell, through the
`show`/`bell` callbacks the cockpit gives (`verl-tui watch` prints its decisions anyway), and
(2) hosts.yaml's `notify:` targets (tui/config/notify.py; one or a list, each with its own
events): a `command` (an argv run without a shell, the JSON payload on its stdin, ended after
`timeout`) and/or a `webhook` (an http/https POST, no redirects followed, `timeout` for the
whole request, through the environment's http proxy if any) whose body is the target's
`format:` (tui/supervisor/webhook_formats.py: raw JSON, slack, discord, ntfy). A notifier
that fails or hangs is reported (an "error" Decision through `report`, and a warning line in
the cockpit), never raised: a dead webhook must not stop the supervisor.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import inspect
import json
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from tui import __version__
from tui.config.notify import DEFAULT_EVENTS, NotifyOptions
from tui.errors import VerlTuiError
from tui.jobs.owner import me, valid_owner
from tui.sanitize import one_line
from tui.supervisor.event_log import Cursor, SharedEvents, event_log, shared_kinds, unread
from tui.supervisor.events import Decision
from tui.supervisor.webhook_formats import FORMATS, BodyFormat
from tui.transport.http import Endpoint, HttpError, request_async
from tui.transport.local import end_group

# What the cockpit's line looks like for each kind (Textual's notify severities).
SEVERITY = {
    "job-failed": "error",
    "job-stalled": "error",
    "job-unhealthy": "warning",
    "no-retry": "warning",
    "error": "warning",
    "retry": "warning",
}
BELL_KINDS = frozenset(
    {"job-end", "job-failed", "job-stalled", "job-unhealthy", "retry", "queue-start"}
)
SHARED_KINDS = shared_kinds()
APPENDED_KEPT = 512
STDERR_TAIL = 300  # characters of a failed command's stderr in its line
STDERR_KEEP = 16 * 1024  # bytes of its stderr kept while reading (the rest is dropped)
READ_CHUNK = 1 << 16
EXIT_POLL_S = 0.05
TERM_GRACE_S = 0.5  # a timed-out command's group: TERM, then KILL after this
ANSWER_CAP = 64 * 1024  # a webhook's answer body (read, then dropped)
ANSWER_SHOWN = 200  # characters of a refusing webhook's answer in its line (Slack's `no_text`)

Show = Callable[[str, str], None]  # (one line, severity)
Report = Callable[[Decision], "Awaitable[None] | None"]


class NotifyError(VerlTuiError, title="notification failed", kind="unavailable"):
    """One notifier failed: one line naming it and why."""


def payload(decision: Decision, cluster: str) -> dict[str, Any]:
    """What a command gets on stdin and a webhook in its body."""
    return {
        "source": "verl-tui",
        "version": __version__,
        "cluster": cluster,
        "event": decision.kind,
        "submission_id": decision.submission_id,
        "message": decision.message,
        "at": decision.at,
        "details": decision.details,
    }


async def run_command(argv: tuple[str, ...], body: bytes, timeout: float) -> None:
    """Run `argv` (no shell, in a process group of its own) with `body` on stdin; NotifyError
    on a non-zero exit, a missing program or `timeout`. Once the command has exited, or at the
    timeout, its whole group is ended (TERM, then KILL): a child it left running neither holds
    the caller nor outlives it. Its stderr is read as it comes; only the tail is kept."""
    name = one_line(argv[0], 120)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own group: killed whole; a Ctrl-C here is not its
        )
    except OSError as exc:
        raise NotifyError(f"notify command {name}: {one_line(exc.strerror or exc, 200)}") from None
    tail = bytearray()

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(OSError):  # a command that does not read its stdin
            proc.stdin.write(body)
            await proc.stdin.drain()
            proc.stdin.close()

    async def read_stderr() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(READ_CHUNK):
            tail.extend(chunk)
            del tail[:-STDERR_KEEP]

    async def exited() -> None:
        # Not proc.wait(): asyncio's waits for the pipes to close too, which a child holding
        # stderr delays until it ends (the hang this replaces).
        while proc.returncode is None:
            await asyncio.sleep(EXIT_POLL_S)

    reader = asyncio.ensure_future(read_stderr())
    try:
        await asyncio.wait_for(asyncio.gather(feed(), exited()), timeout)
        timed_out = False
    except asyncio.TimeoutError:
        timed_out = True
    finally:
        await end_group(proc, term_grace=TERM_GRACE_S)
        # The group is gone, so its stderr ends now (unless a child left the group).
        await asyncio.wait([reader], timeout=TERM_GRACE_S)
        reader.cancel()
    if timed_out:
        raise NotifyError(f"notify command {name}: no exit within {timeout:g} s (killed)")
    if proc.returncode != 0:
        text = bytes(tail).decode("utf-8", "replace").strip()[-STDERR_TAIL:]
        tail_line = one_line(text, 300)
        raise NotifyError(
            f"notify command {name}: exit status {proc.returncode}"
            + (f": {tail_line}" if tail_line else "")
        )


def _where(url: str) -> str:
    """The webhook as shown in a message: scheme and host only (its path may be a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    # Not its user:password@ either.
    return one_line(f"{parts.scheme}://{host}{port}/…", 120)


def _proxy(scheme: str, host: str) -> tuple[str, int] | None:
    """The http:// proxy the environment names for a webhook (http_proxy / https_proxy /
    all_proxy, minus no_proxy), or None; a proxy of another kind is a NotifyError. Only the
    webhook uses one: a login node often reaches the outside only through it."""
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if not url or bypass(host, proxies):
        return None
    parts = urlsplit(url if "://" in url else "http://" + url)
    try:
        port = parts.port or 80
    except ValueError:
        port = -1
    if parts.scheme != "http" or not parts.hostname or port < 0:
        raise NotifyError(
            f"proxy {one_line(parts.scheme, 20)}://… for {scheme}: only http:// proxies"
        )
    return parts.hostname, port


def webhook_request(url: str) -> tuple[Endpoint, str, dict[str, str]]:
    """Where a webhook's POST goes: the endpoint, the request target, extra headers."""
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError:
        raise NotifyError(f"webhook {_where(url)}: not a valid port") from None
    host = parts.hostname or ""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Content-Type": "application/json", "User-Agent": f"verl-tui/{__version__}"}
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    return Endpoint(host, port, tls=tls, proxy=_proxy(parts.scheme, host)), target, headers


async def post_webhook(
    url: str,
    body: bytes,
    timeout: float,
    *,
    fmt: BodyFormat = FORMATS["raw"],
    headers: Mapping[str, str] | None = None,
) -> None:
    """POST `body` as `fmt`'s content type with `headers` (tui/transport/http.py: `timeout`
    for the whole request, no redirect followed, the answer capped); NotifyError on a failure
    or a status that `fmt`'s service does not answer on delivery (with the start of its
    answer: Slack's `no_text`, Discord's JSON error)."""
    try:
        ep, target, base = webhook_request(url)
        sent = {**base, **(headers or {}), "Content-Type": fmt.content_type}
        resp = await request_async(
            ep, "POST", target, body=body, headers=sent, deadline_s=timeout, max_body=ANSWER_CAP
        )
    except HttpError as exc:
        raise NotifyError(f"webhook {_where(url)}: {exc}") from None
    except NotifyError as exc:
        raise NotifyError(f"webhook {_where(url)}: {exc}") from None
    if resp.status not in fmt.delivered:
        why = f"HTTP {resp.status} {one_line(resp.reason, 100)}"
        if 300 <= resp.status < 400:
            why += " (a redirect: not followed)"
        elif answer := one_line(resp.body.decode("utf-8", "replace").strip(), ANSWER_SHOWN):
            why += f": {answer}"
        raise NotifyError(f"webhook {_where(url)} ({fmt.name}): {why}")


async def send_webhook(target: NotifyOptions, data: dict[str, Any]) -> None:
    """The payload to `target`'s webhook, in its `format:`."""
    assert target.webhook is not None
    fmt = FORMATS[target.format]
    body, headers = fmt.build(data)
    await post_webhook(target.webhook, body, target.timeout, fmt=fmt, headers=headers)


class Notifier:
    """ctx.notify for a supervisor: `await notifier(decision)`. Never raises."""

    def __init__(
        self,
        options: NotifyOptions | Sequence[NotifyOptions] | None,
        cluster: str,
        *,
        show: Show | None = None,
        bell: Callable[[], None] | None = None,
        report: Report | None = None,
        owner_of: Callable[[Decision], str | None] | None = None,
        shared: SharedEvents | None = None,
        cursor: Cursor | None = None,
    ) -> None:
        self.owner_of = owner_of or (lambda d: valid_owner(d.details.get("owner")))
        # The cluster's shared event log (tui/supervisor/event_log.py): a job's events go there
        # and reach its owner's targets through the owner's own supervisor; None: delivered
        # here (one account's cluster).
        self.shared = shared
        self.cursor = cursor
        self.me = me()
        # The decisions this process put in the log, by event id: shown here already, and sent
        # whole (the log keeps large details trimmed). The newest APPENDED_KEPT.
        self._appended: dict[str, Decision] = {}
        self._unread: str | None = None  # why the log could not be read (said once)
        if isinstance(options, NotifyOptions):
            options = (options,)
        self.targets: tuple[NotifyOptions, ...] = tuple(options or ())
        self.cluster = cluster
        self.show = show
        self.bell = bell
        self.report = report
        self.failures: list[Decision] = []  # the notifier failures reported (newest last)
        self.sent = 0  # payloads delivered to external targets

    @property
    def events(self) -> tuple[str, ...]:
        """The events shown in the cockpit: every target's (the default with no target)."""
        if not self.targets:
            return DEFAULT_EVENTS
        return tuple(dict.fromkeys(e for t in self.targets for e in t.events))

    async def __call__(self, decision: Decision) -> None:
        owner = self.owner_of(decision)
        if (
            self.shared is not None
            and owner
            and decision.submission_id
            and decision.kind in SHARED_KINDS
        ):
            # A job's news goes to the log, whatever this account's targets want: its owner's
            # supervisor delivers it to the owner's targets (`catch_up`).
            if decision.kind in self.events:
                self._local(decision)
            try:
                self._appended[await self.shared.append(decision, owner)] = decision
                for old in list(self._appended)[:-APPENDED_KEPT]:
                    del self._appended[old]
                return
            except OSError as exc:
                await self._failed(decision, exc, "shared event log: ")
                if owner != self.me:
                    return  # its owner's supervisor cannot hear of it; said above
                await self._deliver(decision, lambda choice: self._hears(choice, owner))
                return
        if decision.kind not in self.events and decision.kind != "error":
            return
        self._local(decision)
        if decision.details.get("notifier_failure"):
            return  # a notifier's own failure is never sent on (no loops)
        await self._deliver(decision, lambda choice: owner_wanted(choice, owner, self.me))

    async def catch_up(self) -> int:
        """Deliver the shared log's events past this account's cursor that its targets want
        (see tui/supervisor/event_log.py); the number delivered. One process of the account
        delivers at a time; the cursor moves after each event. OSError when the log cannot
        be read (the head unreachable): the caller says so."""
        if self.shared is None or self.cursor is None:
            return 0
        if not self.targets and self.show is None and self.bell is None:
            return 0  # nobody here to tell (`watch` with no notify:): the head is not asked
        cursor = self.cursor
        with cursor.held() as deliverer:
            if not deliverer:
                return 0  # another process of this account (a cockpit, a watch) delivers
            page = await self.shared.read()
            done = 0
            for event in unread(page, cursor.read()):
                if any(self._hears(t.owner, event.owner) for t in self.targets) or (
                    event.owner == self.me
                ):
                    decision = event.decision
                    if event.id in self._appended:  # made here: whole, with the log's id
                        made = self._appended[event.id]
                        decision = Decision(
                            made.kind,
                            made.submission_id,
                            made.message,
                            made.at,
                            {**made.details, "owner": event.owner, "event_id": event.id},
                        )
                    elif event.owner == self.me and decision.kind in self.events:
                        self._local(decision)  # news of my job another supervisor made
                    await self._deliver(decision, functools.partial(self._hears, owner=event.owner))
                    done += 1
                cursor.write(page.epoch, event.seq)
            return done

    def _hears(self, choice: str | None, owner: str) -> bool:
        """Whether a target of this account (its `owner:` choice) gets a logged job event of
        `owner`."""
        return owner_wanted(choice, owner, self.me)

    async def _deliver(self, decision: Decision, wanted: Callable[[str | None], bool]) -> None:
        """`decision` to every target that wants its kind and whose owner choice `wanted`."""
        data = payload(decision, self.cluster)
        body = json.dumps(data).encode()
        jobs: list[Awaitable[None]] = []
        names: list[str] = []  # which hosts.yaml entry each job is, when there are several
        for i, target in enumerate(self.targets):
            if decision.kind not in target.events:
                continue  # errors reach the cockpit; each target gets only its chosen events
            if not wanted(target.owner):
                continue  # a target of one owner's jobs (tui/jobs/owner.py)
            name = f"notify[{i}] " if len(self.targets) > 1 else ""
            if target.command:
                jobs.append(run_command(target.command, body, target.timeout))
                names.append(name)
            if target.webhook:
                jobs.append(send_webhook(target, data))
                names.append(name)
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                await self._failed(decision, result, name)
            else:
                self.sent += 1

    def _local(self, decision: Decision) -> None:
        if self.show is not None:
            # A closing UI: the line is lost, nothing else.
            with contextlib.suppress(Exception):
                self.show(decision.line(), SEVERITY.get(decision.kind, "information"))
        if self.bell is not None and decision.kind in BELL_KINDS:
            with contextlib.suppress(Exception):
                self.bell()

    async def _failed(self, decision: Decision, exc: BaseException, name: str = "") -> None:
        why = str(exc) if isinstance(exc, NotifyError) else f"{type(exc).__name__}: {exc}"
        why = name + why
        failure = Decision(
            "error",
            decision.submission_id,
            f"notifier failed for {decision.kind}: {why}",
            details={"notifier_failure": True, "event": decision.kind},
        )
        self.failures.append(failure)
        if self.show is not None:
            with contextlib.suppress(Exception):
                self.show(failure.line(), "warning")
        if self.report is not None:
            try:
                result = self.report(failure)
                if inspect.isawaitable(result):
                    await result
            except Exception:  # reporting must not fail the supervisor either
                pass


def install(
    ctx: Any,
    *,
    show: Show | None = None,
    bell: Callable[[], None] | None = None,
    echo: Callable[[Decision], None] | None = None,
) -> Notifier:
    """Make a Notifier from the context's hosts.yaml `notify:` and set it as `ctx.notify`; a
    notifier's failure is recorded through `ctx.record` and handed to `echo` (`verl-tui
    watch`'s printer) and `show`. The cockpit passes `show=lambda line, sev:
    app.notify(line, severity=sev)` and `bell=app.bell`; `watch` passes `echo` only (it
    prints every decision itself). Call it after the Supervisor set `ctx.record`."""

    def report(d: Decision) -> None:
        ctx.record(d)
        if echo is not None:
            echo(d)

    def owner_of(d: Decision) -> str | None:
        """The decision's job's owner: this pass's rows (Ray's metadata), else its details."""
        rows = getattr(ctx, "jobs", None) or ()
        row = next((r for r in rows if r.submission_id == d.submission_id), None)
        owner = getattr(row, "owner", None) if d.submission_id else None
        return owner or valid_owner(d.details.get("owner"))

    from tui.supervisor.core import supervisor_dir

    shared = event_log(ctx.inv, ctx.fleet)
    notifier = Notifier(
        getattr(ctx.inv, "notify", None),
        ctx.inv.cluster,
        show=show,
        bell=bell,
        report=report,
        owner_of=owner_of,
        shared=shared,
        cursor=Cursor(supervisor_dir(ctx)) if shared is not None else None,
    )
    ctx.notify = notifier
    return notifier


def owner_wanted(choice: str | None, owner: str | None, mine: str | None = None) -> bool:
    """Whether a target whose `owner:` is `choice` gets news of a job of `owner` (None: news
    about no job — the lease, the cluster — or a job not sent by verl-tui). Unset: this
    account's jobs and what has no owner; `mine`: this account's jobs; `all`: everything;
    USER@HOST: that owner's jobs. `mine` is this account (user@host)."""
    if choice == "all":
        return True
    if owner is None:
        return choice is None
    if choice is None or choice == "mine":
        return owner == (mine or me())
    return owner == choice
