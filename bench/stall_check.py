#!/usr/bin/env python3
"""Micro benchmark: the stall check's cost per supervisor pass (tui/supervisor/stall.py).

Each pass, for every running job, the supervisor feeds the job's new step/watchdog lines (what
the head's grep sent back: here a verl step line of ~100 metric keys, as verl prints them, and
a few non-step lines that the filter let through), the job's GPUs (8 per host) and judges it.
Synthetic inputs, no I/O: the pure logic the supervisor adds per job and pass. Median of
--repeat timed passes over --jobs jobs.

    .venv/bin/python bench/stall_check.py [--jobs 50] [--gpus 16] [--passes 200] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import code_version

from tui.config.stall import StallOptions
from tui.supervisor.stall import GpuState, JobProgress, judge

GIB = 1 << 30


def step_line(step: int) -> str:
    keys = " - ".join(f"actor/metric_{k}:np.float64({0.5 + k / 1000})" for k in range(96))
    return (
        f"(TaskRunner pid=4242, ip=10.0.0.1) step:{step} - timing_s/step:{60 + step % 7}.5 - "
        f"{keys} - training/global_step:{step}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=16, help="GPUs per job")
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    opts = StallOptions()
    start = 1_800_000_000.0
    noise = [
        "(WorkerDict pid=7) [c10d] The hostname of the client socket cannot be retrieved",
        "(WorkerDict pid=8) timeout of 600 s set for the rollout",
    ]
    lines = [[step_line(s), *noise] for s in range(args.passes)]
    gpus = [
        [
            GpuState(f"n{g // 8}:{g % 8}", 100.0 if p % 3 else 97.0, 61 * GIB)
            for g in range(args.gpus)
        ]
        for p in range(args.passes)
    ]
    per_pass = []
    stalls = 0
    for _ in range(args.repeat):
        jobs = [JobProgress(started_at=start) for _ in range(args.jobs)]
        t0 = time.perf_counter()
        for p in range(args.passes):
            now = start + 10.0 * p
            for job in jobs:
                # A new step every pass: the common case (a job that makes progress).
                job.feed_lines(lines[p], now)
                job.feed_gpus(gpus[p], now)
                stalls += judge(job, opts, now) is not None
        per_pass.append((time.perf_counter() - t0) / args.passes)
    # The other case: a stalled job (no new lines; the evidence is written every pass).
    stuck = [JobProgress(started_at=start) for _ in range(args.jobs)]
    for job in stuck:
        job.feed_lines(lines[0], start)
        job.feed_gpus(gpus[0], start)
    t0 = time.perf_counter()
    for p in range(args.passes):
        now = start + 3600 + p
        for job in stuck:
            job.feed_lines([], now)
            job.feed_gpus(gpus[0], now)
            stalls += judge(job, opts, now) is not None
    stalled_pass = (time.perf_counter() - t0) / args.passes
    med = statistics.median(per_pass)
    print(f"code {code_version()}  jobs {args.jobs}  GPUs/job {args.gpus}  passes {args.passes}")
    print(f"pass, every job stepping: {med * 1e3:.2f} ms = {med / args.jobs * 1e6:.0f} µs/job")
    print(
        f"pass, every job stalled:  {stalled_pass * 1e3:.2f} ms = "
        f"{stalled_pass / args.jobs * 1e6:.0f} µs/job"
    )
    return 0 if stalls else 1  # the stalled jobs must have been judged stalled


if __name__ == "__main__":
    sys.exit(main())
