"""Asking every host for what a job needs (tui/remote/job_preflight.py, in parallel over SSH)
and answering as doctor Findings: the hosts half of the job preflight; needs.py says what the
job needs, evaluate.py judges the answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tui.cluster.doctor.findings import MAX_PARALLEL, Finding, Status
from tui.cluster.doctor.runner import arrange
from tui.config.hosts import Host, Inventory
from tui.jobs.preflight.evaluate import evaluate_answers
from tui.jobs.preflight.needs import DEFAULT_TIMEOUT, JobNeeds, _f, entrypoint_of, needs_for
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

# ---- asking the hosts ---------------------------------------------------------------------


async def _ask(fleet: Fleet, host: Host, req: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The remote part's answer, or {"error": why}."""
    try:
        transport = await fleet.ready(host.name, timeout)
        res = await transport.run(
            python_argv(host.python, "job_preflight"),
            input=json.dumps(req),
            timeout=timeout,
            what="job preflight",
        )
    except TransportError as exc:
        return {"error": one_line(str(exc), 300)}
    except (TimeoutError, asyncio.TimeoutError):
        return {"error": f"no answer within {timeout:.0f} s"}
    line = res.stdout.strip().splitlines()[-1:] if res.stdout else []
    try:
        data = json.loads(line[0]) if line else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        why = one_line(res.stderr or res.stdout or f"exit status {res.exit_status}", 300)
        return {"error": f"{host.python}: {why}"}
    return data


async def ask_hosts(
    fleet: Fleet, inv: Inventory, needs: JobNeeds, *, timeout: float = DEFAULT_TIMEOUT
) -> dict[str, dict[str, Any]]:
    """Every host's answer (in parallel, bounded), by host name."""
    req = needs.request(timeout)
    req["resolve"] = sorted({h.node_ip for h in inv.hosts})
    slots = asyncio.Semaphore(MAX_PARALLEL)

    async def one(h: Host) -> tuple[str, dict[str, Any]]:
        async with slots:
            try:
                return h.name, await asyncio.wait_for(_ask(fleet, h, req, timeout), timeout + 5)
            except (TimeoutError, asyncio.TimeoutError):
                return h.name, {"error": f"no answer within {timeout:.0f} s"}

    return dict(await asyncio.gather(*(one(h) for h in inv.hosts)))


async def run_preflight(
    fleet: Fleet,
    inv: Inventory,
    needs: JobNeeds,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    unasked: Status = "fail",
) -> list[Finding]:
    """The job's findings on every host, in report order (identical host rows folded).
    `unasked`: the status of a host that did not answer (evaluate_answers)."""
    answers = await ask_hosts(fleet, inv, needs, timeout=timeout)
    found = evaluate_answers(inv, needs, answers, unasked=unasked)
    return arrange(found, [h.name for h in inv.hosts])


async def preflight_submission(
    fleet: Fleet,
    inv: Inventory,
    sub: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    unasked: Status = "fail",
) -> list[Finding]:
    """The preflight of one verl Submission (tui.jobs.submit) on every host of `inv`. A config
    that no longer composes here (a resubmission where this Python has no verl) is one
    failed row, not an exception. `unasked`: the status of a host that did not answer."""
    from tui.jobs.verl_select import SchemaError

    try:
        entry = entrypoint_of(getattr(sub, "entrypoint_argv", []))
        needs = await asyncio.to_thread(
            needs_for, inv, sub.overrides, sub.env_vars, sub.working_dir, entry
        )
    except SchemaError as exc:
        why = one_line(str(exc), 300)
        fix = "verl-tui check HOSTS --profile P, or --skip-preflight"
        return [_f("preflight", "job preflight", "fail", None, f"not checked: {why}", fix)]
    return await run_preflight(fleet, inv, needs, timeout=timeout, unasked=unasked)
