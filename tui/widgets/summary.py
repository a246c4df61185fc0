"""The strip above the table: cluster totals (insecure host keys: tui.widgets.banner)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from tui.cluster.models import HostTelemetry
from tui.fmt import GIB
from tui.sanitize import one_line


def summary_text(
    cluster: str,
    hosts: Mapping[str, HostTelemetry],
    sort_key: str,
    sort_reverse: bool,
    filter_text: str,
    ray: tuple[str, str] | None = None,
) -> Text:
    up = sum(1 for h in hosts.values() if h.display_state in ("up", "no NVML", "stale"))
    gpus = [
        g
        for h in hosts.values()
        if h.latest and h.display_state == "up"
        for g in h.latest.gpus
        if not g.error
    ]
    utils = [g.util_percent for g in gpus if g.util_percent is not None]
    used = sum(g.memory_used_bytes or 0 for g in gpus)
    total = sum(g.memory_total_bytes or 0 for g in gpus)
    power = sum(g.power_w or 0 for g in gpus)
    problems = sum(
        1 for h in hosts.values() if h.display_state not in ("up", "connecting", "starting")
    )

    t = Text()
    t.append(" verl-tui ", "bold reverse")
    t.append(f"  {one_line(cluster)}  ", "bold")
    t.append(f"hosts {up}/{len(hosts)} up", "bold green" if up == len(hosts) else "bold yellow")
    if problems:
        t.append(f"  {problems} with problems", "bold red")
    t.append(f"   GPUs {len(gpus)}")
    if utils:
        t.append(f"   util {sum(utils) / len(utils):.0f}%")
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
