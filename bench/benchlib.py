"""Shared by the bench scripts (run as `python bench/NAME.py`, so this imports by name)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
from collections.abc import Sequence
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


def self_cpu_s() -> float:
    """This process's user+system CPU, seconds."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def proc_cpu_s(pid: int | None) -> float | None:
    """utime+stime of another process, seconds (Linux /proc); None if unknown."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def pin(cpu: int | None) -> None:
    """Run this process on one CPU (benches pin the simulator and the cockpit apart)."""
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


def run_child(
    argv: Sequence[str], *, timeout: float, cwd: Path = ROOT
) -> tuple[dict | None, str, int | None]:
    """A bench's worker process (the repository first on its PYTHONPATH), run to its end (or
    the timeout): (its result, the last `RESULT {json}` line of its stdout, or None; its
    stderr; its exit status, None if killed)."""
    path = os.pathsep.join(p for p in (str(cwd), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
        )
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = None
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    return result, err, rc


def ab_results(script: str, ref: str, rounds: int, argv: Sequence[str]) -> dict[str, list[dict]]:
    """Same-run A/B of a bench that measures the tui/ under `--tree DIR`: REF's tui/ (git
    archive) against this tree's, alternating, `rounds` times; each run's last output line
    (its JSON result), by side ("A REF", "B this tree")."""
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "tui"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-C", tmp, "-x"], input=archive, check=True)
        sides = {f"A {ref}": tmp, "B this tree": str(ROOT)}
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, tree in sides.items():
                out = subprocess.run(
                    [sys.executable, script, "--tree", tree, *argv],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                runs[name].append(json.loads(out.strip().splitlines()[-1]))
    return runs
