#!/usr/bin/env python3
"""Micro benchmark: the cost of turning one agent sample line into a HostSample.

The line is bench/simhosts.py's 8-GPU sample (one process per GPU), the shape a real agent sends.
Measures json.loads + validation/coercion per line (the telemetry hot path: 1,024 hosts × 1 Hz
should fit in a quarter core), median of --repeat timed runs of --number lines each.

    .venv/bin/python bench/agent_parse.py [--gpus 8] [--number 20000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import code_version
from simhosts import agent_sample


def parser_fn():
    """The product's line → HostSample function (the boundary schema where it exists)."""
    try:
        from tui.cluster.agent_schema import parse_line
    except ImportError:  # before the boundary schema: json.loads + the dataclass constructors
        from tui.cluster.models import HostSample

        def parse_line(line: str, received: float):
            return HostSample.from_json(json.loads(line), received)

        return "json.loads + HostSample.from_json", parse_line
    return "agent_schema.parse_line", parse_line


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    line = json.dumps(agent_sample(3, args.gpus, 1, "bench"), separators=(",", ":"))
    name, fn = parser_fn()
    fn(line, time.time())  # warm up (imports, caches)
    runs = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for _ in range(args.number):
            fn(line, 0.0)
        runs.append((time.perf_counter() - t0) / args.number * 1e6)
    loads = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for _ in range(args.number):
            json.loads(line)
        loads.append((time.perf_counter() - t0) / args.number * 1e6)
    us = statistics.median(runs)
    out = {
        "bench": "agent_parse",
        "code": code_version(),
        "parser": name,
        "gpus": args.gpus,
        "line_bytes": len(line),
        "us_per_sample": round(us, 2),
        "us_json_loads_only": round(statistics.median(loads), 2),
        "core_percent_1024_hosts_1hz": round(us * 1024 / 1e6 * 100, 2),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
