"""Notifications of the supervisor's decisions: job end, failure, retry, queue start.

Each such decision becomes (1) a line in the cockpit and the terminal bell, through the
`show`/`bell` callbacks the cockpit gives (`verl-tui watch` prints its decisions anyway), and
(2) a JSON payload to hosts.yaml's `notify:` targets (tui/config/notify.py): a `command` (an
argv run without a shell, the payload on its stdin, ended after `timeout`) and/or a `webhook`
(an http/https POST of the payload, no redirects followed, `timeout` per request). A notifier
that fails or hangs is reported (an "error" Decision through `report`, and a warning line in
the cockpit), never raised: a dead webhook must not stop the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

from tui import __version__
from tui.config.notify import DEFAULT_EVENTS, NotifyOptions
from tui.sanitize import one_line
from tui.supervisor.events import Decision

# What the cockpit's line looks like for each kind (Textual's notify severities).
SEVERITY = {
    "job-failed": "error",
    "no-retry": "warning",
    "error": "warning",
    "retry": "warning",
}
BELL_KINDS = frozenset({"job-end", "job-failed", "retry", "queue-start"})
STDERR_TAIL = 300

Show = Callable[[str, str], None]  # (one line, severity)
Report = Callable[[Decision], "Awaitable[None] | None"]


class NotifyError(Exception):
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
    """Run `argv` (no shell) with `body` on stdin; NotifyError on a non-zero exit, a missing
    program or `timeout` (the process is killed then)."""
    name = one_line(argv[0], 120)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C in the cockpit's terminal is not its signal
        )
    except OSError as exc:
        raise NotifyError(f"notify command {name}: {one_line(exc.strerror or exc, 200)}") from None
    try:
        _out, err = await asyncio.wait_for(proc.communicate(body), timeout)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await proc.wait()
        raise NotifyError(f"notify command {name}: no exit within {timeout:g} s (killed)") from None
    if proc.returncode != 0:
        tail = one_line((err or b"").decode("utf-8", "replace").strip()[-STDERR_TAIL:], 300)
        raise NotifyError(
            f"notify command {name}: exit status {proc.returncode}" + (f": {tail}" if tail else "")
        )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook's redirect is not followed (it would turn the POST into a GET elsewhere)."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> None:
        raise urllib.error.HTTPError(newurl, code, f"redirect ({code}) not followed", headers, fp)


def _post(url: str, body: bytes, timeout: float) -> int:
    opener = urllib.request.build_opener(_NoRedirect)
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": f"verl-tui/{__version__}"},
    )
    with opener.open(req, timeout=timeout) as resp:
        resp.read(65536)
        return int(resp.status)


def _where(url: str) -> str:
    """The webhook as shown in a message: scheme and host only (its path may be a secret)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    # Not its user:password@ either.
    return one_line(f"{parts.scheme}://{host}{port}/…", 120)


async def post_webhook(url: str, body: bytes, timeout: float) -> None:
    """POST `body` as JSON (stdlib urllib in a thread); NotifyError on a failure or an HTTP
    status ≥ 300."""
    try:
        await asyncio.wait_for(asyncio.to_thread(_post, url, body, timeout), timeout + 1)
    except urllib.error.HTTPError as exc:
        why = f"HTTP {exc.code} {one_line(exc.reason, 100)}"
        raise NotifyError(f"webhook {_where(url)}: {why}") from None
    except (urllib.error.URLError, OSError, asyncio.TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc or "timed out"
        raise NotifyError(f"webhook {_where(url)}: {one_line(reason, 200)}") from None


class Notifier:
    """ctx.notify for a supervisor: `await notifier(decision)`. Never raises."""

    def __init__(
        self,
        options: NotifyOptions | None,
        cluster: str,
        *,
        show: Show | None = None,
        bell: Callable[[], None] | None = None,
        report: Report | None = None,
    ) -> None:
        self.options = options
        self.cluster = cluster
        self.show = show
        self.bell = bell
        self.report = report
        self.failures: list[Decision] = []  # the notifier failures reported (newest last)
        self.sent = 0  # payloads delivered to external targets

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(self.options.events) if self.options else DEFAULT_EVENTS

    async def __call__(self, decision: Decision) -> None:
        if decision.kind not in self.events and decision.kind != "error":
            return
        self._local(decision)
        if decision.kind not in self.events or self.options is None:
            return  # errors reach the cockpit; external targets get only the chosen events
        if decision.details.get("notifier_failure"):
            return  # a notifier's own failure is never sent on (no loops)
        body = json.dumps(payload(decision, self.cluster)).encode()
        jobs: list[Awaitable[None]] = []
        if self.options.command:
            jobs.append(run_command(self.options.command, body, self.options.timeout))
        if self.options.webhook:
            jobs.append(post_webhook(self.options.webhook, body, self.options.timeout))
        for result in await asyncio.gather(*jobs, return_exceptions=True):
            if isinstance(result, BaseException):
                await self._failed(decision, result)
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

    async def _failed(self, decision: Decision, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, NotifyError) else f"{type(exc).__name__}: {exc}"
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

    notifier = Notifier(
        getattr(ctx.inv, "notify", None), ctx.inv.cluster, show=show, bell=bell, report=report
    )
    ctx.notify = notifier
    return notifier
