"""Training metrics parsed from verl's console logger lines (plain Python, no Textual)."""

from tui.metrics.parse import parse_metrics_line, parse_total_steps, parse_value
from tui.metrics.series import MetricsTracker

__all__ = ["MetricsTracker", "parse_metrics_line", "parse_total_steps", "parse_value"]
