"""The strip above the table: cluster totals (insecure host keys: tui.widgets.banner)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from rich.text import Text
from textual.widgets import Static

from tui.cluster.models import GpuTotals, HostTelemetry
from tui.fmt import GIB
from tui.sanitize import one_line

_ANSWERING = frozenset(("up", "no NVML", "stale"))  # counted as hosts up
_UNREMARKABLE = frozenset(("up", "connecting", "starting"))  # not counted as problems


class FleetTally(NamedTuple):
    """What the summary adds up over every host: counted at most once a second (as the
    samples come), not for each sort or filter key, which change only the words after it."""

    hosts: int
    up: int
    problems: int
    totals: GpuTotals


def fleet_tally(hosts: Mapping[str, HostTelemetry]) -> FleetTally:
    # One pass over the hosts, adding each sample's cached totals: at 1,024 hosts walking
    # every GPU here was a quarter of the cockpit's CPU.
    up = problems = 0
    fleet = GpuTotals()
    for h in hosts.values():
        state = h.display_state
        if state in _ANSWERING:
            up += 1
        if state not in _UNREMARKABLE:
            problems += 1
        if state == "up" and h.latest:
            fleet.add(h.latest.totals())
    return FleetTally(len(hosts), up, problems, fleet)


def summary_text(
    cluster: str,
    tally: FleetTally,
    sort_key: str,
    sort_reverse: bool,
    filter_text: str,
    ray: tuple[str, str] | None = None,
) -> Text:
    """The line, from the fleet's tally (fleet_tally) and the table's sort and filter."""
    fleet, up = tally.totals, tally.up
    used, total, power = fleet.memory_used_bytes, fleet.memory_total_bytes, fleet.power_w

    t = Text()
    t.append(" verl-tui ", "bold reverse")
    t.append(f"  {one_line(cluster)}  ", "bold")
    t.append(
        f"hosts {up:d}/{tally.hosts:d} up", "bold green" if up == tally.hosts else "bold yellow"
    )
    if tally.problems:
        t.append(f"  {tally.problems:d} with problems", "bold red")
    t.append(f"   GPUs {fleet.gpus:d}")
    if fleet.util_count:
        t.append(f"   util {fleet.util_sum / fleet.util_count:.0f}%")
    if total:
        t.append(f"   memory {used / GIB:,.0f}/{total / GIB:,.0f} GiB")
    if power:
        t.append(f"   power {power / 1000:.1f} kW" if power >= 1000 else f"   power {power:.0f} W")
    if ray is not None:
        text, style = ray
        t.append(f"   Ray {one_line(text)}", style)
    arrow = "↑" if sort_reverse else "↓"
    t.append(f"   sort {one_line(sort_key)}{arrow}", "dim")
    if filter_text:
        t.append(f"   filter “{one_line(filter_text)}”", "bold cyan")
    return t


class ClusterSummary(Static):
    DEFAULT_CSS = """
    ClusterSummary { height: 1; background: $panel; }
    """
