"""Running the doctor: every check decided from the probe's facts (`evaluate`), the GCS check,
and the report order with identical host rows folded (`arrange`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from tui.cluster.doctor.findings import CHECKS, MAX_PARALLEL, Finding, _f, _names
from tui.cluster.doctor.gpus import (
    _cpu_findings,
    _gpu_findings,
    health_row,
    nvidia_hosts,
    read_health,
)
from tui.cluster.doctor.host_limits import (
    _clock_findings,
    _hf_findings,
    _memory_findings,
    _mkl_findings,
    _numexpr_findings,
)
from tui.cluster.doctor.network import (
    _gcs_reach,
    _head_port_findings,
    _infiniband_findings,
    _socket_ifname_findings,
)
from tui.cluster.doctor.versions import (
    _interpreter_findings,
    _python_version_findings,
    _ray_findings,
    host_key_findings,
    reach_findings,
)
from tui.cluster.probe import HostFacts, probe_tasks
from tui.config.hosts import Inventory
from tui.transport.fleet import Fleet
from tui.transport.types import HostState

# --------------------------------------------------------------------------- assembly


ORDER = {check: i for i, check in enumerate(CHECKS)}


def evaluate(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    """Every check decided from probe facts alone (all but ssh-reach and gcs-reach)."""
    # Here, not at the top: tui.cluster.tracing reads this package's findings module.
    from tui.cluster.tracing import doctor_findings

    out: list[Finding] = []
    out += _interpreter_findings(inventory, facts)
    out += _python_version_findings(inventory, facts)
    out += _ray_findings(inventory, facts)
    out += _head_port_findings(inventory, facts)
    out += _socket_ifname_findings(inventory, facts)
    out += _infiniband_findings(facts)
    out += _gpu_findings(inventory, facts)
    out += _cpu_findings(inventory, facts)
    out += _hf_findings(facts)
    out += _memory_findings(facts)
    out += _clock_findings(inventory, facts)
    out += _numexpr_findings(facts)
    out += _mkl_findings(facts)
    out += doctor_findings(inventory, facts)
    return out


def _hosts_note(hosts: Sequence[str], n_hosts: int) -> str:
    if len(hosts) == n_hosts:
        return f"all {n_hosts} hosts"
    return f"{len(hosts)} hosts: {_names(hosts)}"


def _fold(group: list[Finding], n_hosts: int) -> list[Finding]:
    """One check's rows: cluster rows, then problems, then ok; identical host rows as one."""
    per_host = [f for f in group if f.host is not None]
    if len({f.host for f in per_host}) != len(per_host):
        return group  # several rows per host (head-ports): each says something else
    out = [f for f in group if f.host is None]
    for status in ("fail", "warn"):
        buckets: dict[tuple[str, str], list[Finding]] = {}
        for f in per_host:
            if f.status == status:
                buckets.setdefault((f.finding, f.fix), []).append(f)
        for rows in buckets.values():
            if len(rows) == 1:
                out.append(rows[0])
            else:
                hosts = [f.host for f in rows if f.host]
                note = _hosts_note(hosts, n_hosts)
                out.append(replace(rows[0], host=None, finding=f"{rows[0].finding} ({note})"))
    oks = [f for f in per_host if f.status == "ok"]
    if len(oks) == 1:
        out.append(oks[0])
    elif oks:
        hosts = [f.host for f in oks if f.host]
        note = _hosts_note(hosts, n_hosts)
        if len({f.finding for f in oks}) == 1:
            text = f"{oks[0].finding} ({note})"
        else:
            text = f"e.g. {oks[0].host}: {oks[0].finding} (ok on {note})"
        out.append(replace(oks[0], host=None, finding=text))
    return out


def arrange(findings: Iterable[Finding], host_order: Sequence[str]) -> list[Finding]:
    """Report order: failures first, then warnings, then ok (as the README promises); within
    each, CHECKS order, then hosts; identical host rows folded.

    With 128 hosts, a row per host per check would bury what differs: rows of one check that
    say the same thing on several hosts become one row (host None) naming those hosts.
    """
    rank = {h: i for i, h in enumerate(host_order)}
    items = sorted(
        findings,
        key=lambda f: (
            ORDER.get(f.check, len(ORDER)),
            -1 if f.host is None else rank.get(f.host, 0),
        ),
    )
    by_check: dict[str, list[Finding]] = {}
    for f in items:
        by_check.setdefault(f.check, []).append(f)
    out: list[Finding] = []
    for group in by_check.values():
        out += _fold(group, len(host_order))
    return sorted(out, key=lambda f: _STATUS_RANK[f.status])  # stable: check order kept


_STATUS_RANK = {"fail": 0, "warn": 1, "ok": 2}


# --------------------------------------------------------------------------- entry point


async def run_doctor(
    fleet: Fleet,
    inventory: Inventory,
    *,
    progress: Callable[[str], None] | None = None,
    timeout: float = 60.0,
) -> list[Finding]:
    """Run every check; findings in report order (see the module docstring for the ids).

    ``fleet`` must be started (``async with Fleet(inv)``). ``timeout`` bounds the connect wait
    and each step; hosts that do not answer in time fail their checks, nothing raises.

    Each host goes through its steps on its own: its probe starts as soon as it is connected,
    its GPU health read and its GCS connect as soon as its probe answered (the GCS connect
    also waits for the head's answer and test listener). No step waits for the slowest host
    of the step before, so the whole takes about one host's connect + probe + check, not the
    sum of each step's slowest host.
    """
    say = progress or (lambda _msg: None)
    start = time.monotonic()

    def left(cap: float) -> float:
        return max(1.0, min(cap, timeout - (time.monotonic() - start)))

    names = [h.name for h in inventory.hosts]
    say(f"connecting to {len(names)} host(s)")
    connect_wait = left(max(1.0, timeout * 0.4))
    probes = probe_tasks(fleet, inventory, timeout=left(30.0))
    slots = asyncio.Semaphore(MAX_PARALLEL)

    async def health(name: str) -> Finding | None:
        facts = await probes[name]
        if not nvidia_hosts({name: facts}):
            return None
        host = inventory.host(name)
        async with slots:
            sample, why = await read_health(fleet, host, left(30.0))
        return health_row(host, sample, why)

    healths = [asyncio.ensure_future(health(n)) for n in names]
    gcs = asyncio.ensure_future(_gcs_reach(fleet, inventory, probes, say, left(30.0)))
    pending = [*probes.values(), *healths, gcs]
    try:
        await fleet.wait_settled(connect_wait)
        findings = reach_findings(
            inventory, {n: fleet.status(n) for n in names}, time.monotonic() - start
        )
        findings += host_key_findings(inventory)
        up = [n for n in names if fleet.status(n).state == HostState.UP]
        say(f"probing {len(up)} host(s)")
        facts = dict(zip(probes, await asyncio.gather(*probes.values()), strict=True))
        findings += evaluate(inventory, facts)
        nvidia = nvidia_hosts(facts)
        if nvidia:
            say(f"reading GPU health on {len(nvidia)} host(s)")
        findings += [f for f in await asyncio.gather(*healths) if f is not None]
        say("testing the GCS port from the workers")
        with contextlib.suppress(asyncio.TimeoutError):
            findings += await asyncio.wait_for(gcs, left(45.0))
        if not any(f.check == "gcs-reach" for f in findings):
            findings.append(_f("gcs-reach", "warn", None, "not finished in time"))
    finally:
        for task in pending:  # cancelled (or a step raised): nothing is left running
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    say("done")
    return arrange(findings, names)
