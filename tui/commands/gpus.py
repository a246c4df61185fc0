"""`verl-tui gpus`: every host's GPUs, once or continuously, as text or JSON."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING

from tui.commands import Command, seconds
from tui.commands.output import json_text
from tui.fmt import GIB
from tui.sanitize import one_line, pad

if TYPE_CHECKING:  # imported where used: `verl-tui gpus --help` stays light
    from tui.cluster.models import HostTelemetry
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.config.hosts import Inventory


def snapshot(monitor: TelemetryMonitor, waited: float | None = None) -> dict:
    hosts = []
    for ht in monitor.hosts.values():
        doc = _host_json(ht)  # problems: list of str
        if doc["error"] is None:
            doc["error"] = _unanswered(ht, waited)
        hosts.append(doc)
    return {"cluster": monitor.inventory.cluster, "time": time.time(), "hosts": hosts}


def _unanswered(ht: HostTelemetry, waited: float | None) -> str | None:
    """What a one-shot read says of a host with no sample and no error of its own."""
    if waited is None or ht.answered or ht.display_error:
        return None
    return f"no sample in {waited:g} s (host stalled?)"


def _host_json(ht: HostTelemetry) -> dict:
    """The host's JSON with GPU health judged: each GPU's `health` object gets its `level`
    (error/warn/ok, null when nothing was read) and the host its `gpu_health` findings."""
    from tui.cluster.gpu_health import gpu_level, judge_host

    out = ht.to_json()
    gpus = ht.latest.gpus if ht.latest is not None and out["gpus"] else ()
    for gpu, data in zip(gpus, out["gpus"], strict=True):
        if data.get("health") is not None:
            data["health"]["level"] = gpu_level(gpu, len(gpus) > 1)
    out["gpu_health"] = [f.to_json() for f in judge_host(gpus)]
    return out


_FLAGS = {"error": "  health ERROR", "warn": "  health warn", "ok": "  health ok"}


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def format_text(hosts: list[HostTelemetry], waited: float | None = None) -> str:
    """Every host and GPU, one line each; everything from outside goes through one_line.
    `waited`: a one-shot read's timeout, named for a host that sent nothing in it."""
    from tui.cluster.gpu_health import gpu_level, judge_host

    out = []
    now = time.time()
    for ht in hosts:
        head = f"{ht.name}  [{ht.display_state}]"
        error = ht.display_error or _unanswered(ht, waited)
        if error:
            head += f"  {error}"
        out.append(one_line(head))
        out += [f"  problem: {one_line(p)}" for p in ht.current_problems(now)]
        if ht.latest is None or ht.display_state not in ("up", "no NVML", "stale"):
            continue
        for g in ht.latest.gpus:
            if g.error:
                out.append(f"  gpu{g.index}  {one_line(g.error)}")
                continue
            used = None if g.memory_used_bytes is None else g.memory_used_bytes / GIB
            total = None if g.memory_total_bytes is None else g.memory_total_bytes / GIB
            level = gpu_level(g, len(ht.latest.gpus) > 1)
            out.append(
                f"  gpu{g.index:<2} {pad(g.name or '?', 24)}"
                f" util {_num(g.util_percent, '3.0f', '%')}"
                f"  mem {_num(used, '5.1f')}/{_num(total, '.1f')} GiB"
                f"  {_num(g.temperature_c, '3.0f', '°C')}  {_num(g.power_w, '4.0f', ' W')}"
                + (_FLAGS.get(level, "") if level else "")
            )
        for f in judge_host(ht.latest.gpus):
            if f.level in ("error", "warn"):
                fix = f" (fix: {one_line(f.fix)})" if f.fix else ""
                out.append(f"  health {f.level}: {one_line(f.message)}{fix}")
            else:
                out.append(f"  health: {one_line(f.message)}")
    return "\n".join(out)


async def _run(
    inventory: Inventory, once: bool, as_json: bool, interval: float | None, timeout: float
) -> int:
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.transport.fleet import Fleet

    fleet = Fleet(inventory)
    monitor = TelemetryMonitor(fleet, inventory, interval=interval, relays=not once)
    # SIGTERM (a script stopping us) and SIGHUP (its terminal closed) end like Ctrl-C: the
    # agents are stopped (their process groups killed if they hang), links closed.
    main_task = asyncio.current_task()
    assert main_task is not None  # we run in one
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signum, main_task.cancel)
    fleet.start()
    monitor.start()
    try:
        await monitor.wait_first(timeout)
        while True:
            hosts = list(monitor.hosts.values())
            waited = timeout if once else None
            if as_json:
                doc = snapshot(monitor, waited)
                print(json_text(doc, inventory, separators=(",", ":")), flush=True)
            else:
                print(format_text(hosts, waited) + ("" if once else "\n"), flush=True)
            if once:
                return 0 if all(ht.answered for ht in hosts) else 1
            await asyncio.sleep(monitor.interval)
    finally:
        await monitor.close()
        await fleet.close()


def run_gpus(
    inventory: Inventory, *, once: bool, as_json: bool, interval: float | None, timeout: float
) -> int:
    try:
        return asyncio.run(_run(inventory, once, as_json, interval, timeout))
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:  # SIGTERM
        return 143
    except BrokenPipeError:
        sys.stderr.close()  # `verl-tui gpus | head`: the reader left; exit quietly
        return 0


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="JSON output (one object per line)")
    p.add_argument(
        "--interval",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="seconds between samples (default: hosts.yaml telemetry.interval)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=20.0,
        metavar="SECONDS",
        help="seconds to wait for every host's first sample (default 20)",
    )


def _run_args(args: argparse.Namespace) -> int:
    return run_gpus(
        args.inventory,
        once=args.once,
        as_json=args.json,
        interval=args.interval,
        timeout=args.timeout,
    )


GPUS = Command(
    _arguments,
    _run_args,
    hosts="optional",
    description="Print every host's GPUs: utilization, memory, temperature, power. "
    "Exit 1 with --once when a host did not answer.",
)
