"""Shared by the bench scripts (run as `python bench/NAME.py`, so this imports by name)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_version() -> str:
    """HEAD's short hash, with '+dirty' when tui/ has uncommitted changes (BENCH_CODE_VERSION
    names it where the tree has no .git: a copy on the device machine)."""
    if os.environ.get("BENCH_CODE_VERSION"):
        return os.environ["BENCH_CODE_VERSION"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "tui"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of values, linearly interpolated; None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
