"""The strip above the table: cluster totals (insecure host keys: tui.widgets.banner)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from tui.cluster.models import GpuTotals, HostTelemetry
from tui.fmt import GIB
from tui.sanitize import one_line

_ANSWERING = frozenset(("up", "no NVML", "stale"))  # counted as hosts up
_UNREMARKABLE = frozenset(("up", "connecting", "starting"))  # not counted as problems


def summary_text(
    cluster: str,
    hosts: Mapping[str, HostTelemetry],
    sort_key: str,
    sort_reverse: bool,
    filter_text: str,
    ray: tuple[str, str] | None = None,
) -> Text:
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
    used, total, power = fleet.memory_used_bytes, fleet.memory_total_bytes, fleet.power_w

    t = Text()
    t.append(" verl-tui ", "bold reverse")
    t.append(f"  {one_line(cluster)}  ", "bold")
    t.append(f"hosts {up}/{len(hosts)} up", "bold green" if up == len(hosts) else "bold yellow")
    if problems:
        t.append(f"  {problems} with problems", "bold red")
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
