"""The pane under the table: everything about the selected host or GPU."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import Static

from tui.cluster.gpu_health import HealthFinding, judge_host
from tui.cluster.models import GpuHealth, HostTelemetry
from tui.sanitize import one_line, pad, styled
from tui.widgets.gauges import gib

MAX_PROBLEMS_SHOWN = 2  # the pane is a few lines high; --json lists every problem
MAX_HEALTH_SHOWN = 2  # GPU health findings in the pane; `verl-tui gpus` / `check` list all
HEALTH_STYLES = {"error": "bold red", "warn": "yellow", "ok": "dim", "na": "dim"}


def _health_lines(t: Text, found: list[HealthFinding], more: str) -> None:
    """GPU health findings, worst first: a few lines, then how many more and where."""
    for f in found[:MAX_HEALTH_SHOWN]:
        label = "GPU health" if f.level in ("ok", "na") else f"GPU health {f.level}"
        t.append(f"\n{label}: {one_line(f.message, 200)}", HEALTH_STYLES[f.level])
    if len(found) > MAX_HEALTH_SHOWN:
        t.append(f"  (+{len(found) - MAX_HEALTH_SHOWN} more: {more})", "dim")


def _readings(h: GpuHealth) -> str:
    """One GPU's health readings as one line; n/a where NVML did not answer."""

    def v(value: object) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, bool):
            return "yes" if value else "no"
        return str(value)

    ecc = "n/a" if h.ecc_mode is None else ("on" if h.ecc_mode else "off")
    clocks = "n/a" if h.clock_reasons is None else (", ".join(h.clock_reasons) or "none")
    return (
        f"ECC {ecc}, uncorrectable {v(h.ecc_volatile_uncorrected)} "
        f"(life {v(h.ecc_aggregate_uncorrected)})  remap pending {v(h.remap_pending)}, "
        f"failed {v(h.remap_failure)}  clocks: {clocks}  PCIe gen {v(h.pcie_gen)}/"
        f"{v(h.pcie_gen_max)} x{v(h.pcie_width)}/{v(h.pcie_width_max)}  persistence "
        f"{v(h.persistence)}  XID {v(h.xid_count)}"
    )


def host_details(ht: HostTelemetry) -> Text:
    t = Text()
    t.append(f"{ht.name}", "bold")
    if ht.hostname and ht.hostname != ht.name:
        t.append(f" ({ht.hostname})")
    t.append(f"  state: {ht.display_state}")
    if ht.container:
        t.append(f"  in {ht.container}")
    if ht.route:
        t.append(f"  via {ht.route}", style="dim")
    if ht.driver:
        t.append(f"  driver {ht.driver}")
    s = ht.latest
    if s is not None:
        t.append(f"  telemetry: {s.source}")
        if s.ncpu:
            t.append(f"  {s.ncpu} CPUs")
    error = ht.display_error
    if error:
        t.append("\n")
        t.append(one_line(error, 300), "bold red")
    problems = ht.current_problems(time.time())
    for problem in problems[-MAX_PROBLEMS_SHOWN:]:  # the most recent ones
        t.append("\n")
        t.append(one_line(problem, 200), "yellow")
    if len(problems) > MAX_PROBLEMS_SHOWN:
        t.append(f"  (+{len(problems) - MAX_PROBLEMS_SHOWN} more: verl-tui gpus --json)", "dim")
    if s is not None and ht.display_state in ("up", "stale"):
        _health_lines(t, judge_host(s.gpus), "verl-tui gpus")
    if ht.link.attempts:
        t.append(f"\nreconnect attempts: {ht.link.attempts}", "dim")
    return styled(t)  # agent text (names, errors): cleaned, styles kept


def gpu_details(ht: HostTelemetry, index: int) -> Text:
    t = Text()
    s = ht.latest
    gpu = next((g for g in s.gpus if g.index == index), None) if s else None
    if gpu is None:
        return Text(f"{one_line(ht.name)} gpu{index:d}: no data")
    t.append(f"{ht.name} gpu{gpu.index}", "bold")
    t.append(f"  {gpu.name or '?'}  {gpu.uuid or ''}")
    if gpu.error:
        t.append("\n")
        t.append(gpu.error, "bold red")
        return styled(t)
    parts = []
    if gpu.mem_util_percent is not None:
        parts.append(f"memory bandwidth {gpu.mem_util_percent:.0f}%")
    if gpu.power_limit_w is not None:
        parts.append(f"power limit {gpu.power_limit_w:.0f} W")
    hist = ht.util_history.get(index)
    if hist:
        parts.append(
            f"util over last {len(hist)} samples: mean {sum(hist) / len(hist):.0f}%, "
            f"max {max(hist):.0f}%"
        )
    t.append("\n" + "   ".join(parts), "dim")
    if gpu.health is not None:
        t.append(f"\nhealth: {_readings(gpu.health)}", "dim")
        found = [f for f in judge_host(s.gpus) if f.gpu == index] if s else []
        _health_lines(t, found, "verl-tui gpus")
    if gpu.processes is None:
        t.append(f"\nprocesses: not reported by {s.source if s else 'the agent'}", "dim")
    elif not gpu.processes:
        t.append("\nno compute processes", "dim")
    else:
        for p in gpu.processes[:4]:
            t.append(f"\n  pid {p.pid:<8d} {pad(p.name or '?', 24)} {gib(p.memory_bytes, 2)} GiB")
        if len(gpu.processes) > 4:
            t.append(f"\n  … {len(gpu.processes) - 4} more", "dim")
    return styled(t)  # agent text (names, errors): cleaned, styles kept


class DetailsPane(Static):
    DEFAULT_CSS = """
    DetailsPane {
        height: 7;
        border-top: solid $primary 50%;
        padding: 0 1;
        background: $surface;
    }
    """
