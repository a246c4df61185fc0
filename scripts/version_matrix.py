"""Ray and verl of other eras on the hosts: tests/test_ray_eras.py (two namespace sshd hosts,
`up`, `status`, a job and its log, a stop, `profile check --hosts` reading the head's verl, `down`)
run once per (Ray, verl) pair, each release the real wheel from PyPI (cached). Prints one row
per pair: passed, or the first failing test and its last line.

Needs root (namespaces). Usage:
    .venv/bin/python scripts/version_matrix.py [RAY:VERL ...]
    (default: 2.41.0:0.4.1 2.46.0:0.5.0 2.49.2:0.7.1 2.52.1:0.9.1)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ("2.41.0:0.4.1", "2.46.0:0.5.0", "2.49.2:0.7.1", "2.52.1:0.9.1")
PAIR = re.compile(r"\A(\d+\.\d+\.\d+):(\d+\.\d+\.\d+)\Z")


def run_pair(ray: str, verl: str) -> tuple[bool, str, float]:
    env = {**os.environ, "VERL_TUI_ERA_RAY": ray, "VERL_TUI_ERA_VERL": verl}
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "tests/test_ray_eras.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    took = time.monotonic() - t0
    lines = done.stdout.splitlines()
    if done.returncode == 0:
        summary = next((ln for ln in reversed(lines) if " passed" in ln), "passed")
        return True, summary, took
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    why = next((ln for ln in lines if ln.startswith("E ")), "")
    return False, " ".join([*(failed[:1] or ["failed"]), why])[:300], took


def main(argv: list[str]) -> int:
    pairs = argv or list(PAIRS)
    bad = [p for p in pairs if not PAIR.match(p)]
    if bad:
        print(f"version_matrix: not RAY:VERL (2.46.0:0.5.0): {' '.join(bad)}", file=sys.stderr)
        return 2
    failures = 0
    print(f"{'ray':8} {'verl':7} {'result':6} {'s':>5}  detail")
    for pair in pairs:
        ray, verl = pair.split(":")
        ok, detail, took = run_pair(ray, verl)
        failures += not ok
        print(f"{ray:8} {verl:7} {'ok' if ok else 'FAIL':6} {took:5.0f}  {detail}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
