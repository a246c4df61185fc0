#!/usr/bin/env python3
"""Cold start: wall time from spawning `verl-tui` in a real pseudo-terminal to its first frame.

Each run forks `.venv/bin/verl-tui` (no arguments: the built-in localhost inventory) on a new
pty (TERM=xterm-256color, 120x40), reads the terminal output and stops the clock at the first
chunk, after the switch to the alternate screen, that contains "verl-tui" (the summary line) or
"HOST / GPU" (the column header). Then it types "q" and times the exit too.

Also printed: the 10 heaviest imports of `import tui.app` (python -X importtime, cumulative)
and whether heavy modules (ray, torch, ...) are imported by it.

    .venv/bin/python bench/cold_start.py [--runs 7] [--warmup-runs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from benchlib import code_version

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
VENV_BIN = ROOT / ".venv" / "bin"
ROWS, COLS = 40, 120
ALT_SCREEN = b"\x1b[?1049h"
MARKERS = (b"verl-tui", b"HOST / GPU")
GOAL_S = 1.0
HEAVY = (
    "ray",
    "torch",
    "numpy",
    "pandas",
    "asyncssh",
    "cryptography",
    "pynvml",
    "pydantic",
    "yaml",
    "rich",
    "textual",
)


def _drain(fd: int, until: float) -> bool:
    """Read and discard pty output until EOF (True) or the deadline (False)."""
    while time.perf_counter() < until:
        ready = select.select([fd], [], [], 0.05)[0]
        if not ready:
            continue
        try:
            if not os.read(fd, 65536):
                return True
        except OSError:  # EIO: the child side is closed
            return True
    return False


def one_run(exe: str, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # child: size the terminal, then become verl-tui
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
            os.execve(exe, [exe], env)
        finally:
            os._exit(127)
    result: dict = {"first_frame_s": None, "alt_screen_s": None}
    buf = b""
    alt_at = None
    deadline = t0 + timeout
    eof = False
    try:
        while time.perf_counter() < deadline:
            if not select.select([fd], [], [], 0.05)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            now = time.perf_counter()
            if not chunk:
                eof = True
                break
            buf += chunk
            if alt_at is None:
                idx = buf.find(ALT_SCREEN)
                if idx >= 0:
                    alt_at = idx
                    result["alt_screen_s"] = now - t0
            if alt_at is not None:
                tail = buf[alt_at:]
                if any(m in tail for m in MARKERS):
                    result["first_frame_s"] = now - t0
                    break
        if result["first_frame_s"] is None:
            result["error"] = ("exited before a frame" if eof else f"no frame in {timeout} s") + (
                f"; output tail: {buf[-300:]!r}"
            )
        # Quit like a person would, and time how long that takes.
        tq = time.perf_counter()
        if not eof:
            with contextlib.suppress(OSError):
                os.write(fd, b"q")
            _drain(fd, tq + 10.0)
        status = None
        while time.perf_counter() < tq + 10.0:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            result["error"] = result.get("error", "") + " did not exit 10 s after 'q' (killed)"
        result["quit_s"] = time.perf_counter() - tq
        result["exit_status"] = os.waitstatus_to_exitcode(status) if status is not None else None
    finally:
        os.close(fd)
    return result


def import_times(python: str, module: str = "tui.app") -> list[dict]:
    """`python -X importtime -c 'import MODULE'`: every import with self/cumulative µs."""
    proc = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        try:
            self_us, cum_us, name = line[len("import time:") :].split("|")
            rows.append(
                {
                    "module": name.strip(),
                    "depth": (len(name) - len(name.lstrip())) // 2,
                    "self_ms": int(self_us) / 1000,
                    "cumulative_ms": int(cum_us) / 1000,
                }
            )
        except ValueError:
            continue
    return rows


def loaded_modules(python: str) -> dict:
    code = (
        "import sys, time; t = time.perf_counter(); import tui.app; "
        "dt = time.perf_counter() - t; import json; "
        f"print(json.dumps({{'import_s': dt, 'modules': len(sys.modules), "
        f"'heavy': {{m: m in sys.modules for m in {list(HEAVY)!r}}}}}))"
    )
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument(
        "--warmup-runs",
        type=int,
        default=1,
        help="unmeasured runs first (so .pyc files and the page cache are warm)",
    )
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for a frame")
    p.add_argument("--exe", default=str(VENV_BIN / "verl-tui"))
    args = p.parse_args()
    python = str(VENV_BIN / "python")

    print(
        f"cold start: {args.exe} in a {COLS}x{ROWS} pty (TERM=xterm-256color), "
        f"{args.runs} runs after {args.warmup_runs} warm-up; {os.cpu_count()} CPUs; "
        f"code {code_version()}",
        flush=True,
    )
    for _ in range(args.warmup_runs):
        one_run(args.exe, args.timeout)
    runs = []
    for i in range(args.runs):
        r = one_run(args.exe, args.timeout)
        runs.append(r)
        ff = r["first_frame_s"]
        alt = r["alt_screen_s"]
        print(
            f"  run {i + 1}: first frame "
            f"{'-' if ff is None else f'{ff * 1000:.0f} ms'}  (alternate screen at "
            f"{'-' if alt is None else f'{alt * 1000:.0f} ms'}; quit took "
            f"{r['quit_s'] * 1000:.0f} ms, exit {r['exit_status']})"
            + (f"  ERROR {r['error']}" if r.get("error") else ""),
            flush=True,
        )
    frames = [r["first_frame_s"] for r in runs if r["first_frame_s"] is not None]
    summary = {}
    if frames:
        summary = {
            "min_s": min(frames),
            "median_s": statistics.median(frames),
            "max_s": max(frames),
        }
        print(
            f"\nfirst frame: min {summary['min_s'] * 1000:.0f} ms, median "
            f"{summary['median_s'] * 1000:.0f} ms, max {summary['max_s'] * 1000:.0f} ms "
            f"({len(frames)}/{len(runs)} runs drew a frame)"
        )
        ok = summary["median_s"] <= GOAL_S and len(frames) == len(runs)
        print(
            f"goal: first frame ≤ {GOAL_S:.1f} s (median): {'PASS' if ok else 'FAIL'}"
            f"; worst run {'≤' if summary['max_s'] <= GOAL_S else '>'} {GOAL_S:.1f} s"
        )
    else:
        print("\nno run drew a frame")

    import_times(python)  # once to warm caches; the second is the one reported
    rows = import_times(python)
    top = sorted(rows, key=lambda r: r["cumulative_ms"], reverse=True)[:10]
    total = next((r["cumulative_ms"] for r in rows if r["module"] == "tui.app"), None)
    print(
        f"\n`python -X importtime -c 'import tui.app'`: {len(rows)} imports, tui.app "
        f"cumulative {total:.0f} ms; top 10 by cumulative time:"
    )
    print(f"  {'cumulative ms':>13} {'self ms':>8}  module")
    for r in top:
        print(
            f"  {r['cumulative_ms']:>13.1f} {r['self_ms']:>8.1f}  {'  ' * r['depth']}{r['module']}"
        )
    by_self = sorted(rows, key=lambda r: r["self_ms"], reverse=True)[:5]
    print(
        "  heaviest by self time: "
        + ", ".join(f"{r['module']} {r['self_ms']:.1f} ms" for r in by_self)
    )

    mods = loaded_modules(python)
    heavy = mods["heavy"]
    print(
        f"\nafter `import tui.app` ({mods['import_s'] * 1000:.0f} ms in-process, "
        f"{mods['modules']} modules): ray imported: {heavy['ray']}, torch imported: "
        f"{heavy['torch']}"
    )
    print(
        "  also loaded: "
        + ", ".join(m for m, v in heavy.items() if v and m not in ("ray", "torch"))
        + "; not loaded: "
        + ", ".join(m for m, v in heavy.items() if not v)
    )

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "cold_start.json"
    out.write_text(
        json.dumps(
            {
                "machine": {
                    "cpu_count": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "code": code_version(),
                },
                "params": {
                    "runs": args.runs,
                    "warmup_runs": args.warmup_runs,
                    "size": [COLS, ROWS],
                    "exe": args.exe,
                },
                "runs": runs,
                "first_frame": summary,
                "goal_s": GOAL_S,
                "importtime_top10": top,
                "import_tui_app": mods,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0 if frames and len(frames) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
