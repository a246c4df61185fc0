#!/usr/bin/env python3
"""Micro benchmark: the cockpit's cost of one second of fleet telemetry, decoded.

For --hosts hosts of --gpus GPUs (bench/simhosts.py's samples, one process per GPU): the real
agent's DeltaEncoder turns each host's next sample into a delta line, and the timed part is
`agent_delta.apply_delta` of every host's line onto its base (the delta decoder: the path every
GPU of every host takes every second), the same deltas packed as the agent sends them to the
monitor (`gpu_agent --compact`: `agent_delta.apply_compact`, where the tree has it), and
`agent_schema.parse_line` of every host's full sample (the boundary: one full sample per host
every DELTA_FULL_EVERY seconds). `due_us_per_host`: the full sample due 10 samples later,
with every GPU's health as an NVML host sends it then, as the tree's --compact agent sends it
and its monitor takes it: a repeat line (agent_delta.apply_repeat), or (a tree before them)
the JSON sample, parsed whole. Median of --repeat runs.

    .venv/bin/python bench/agent_delta.py [--hosts 1024] [--gpus 8] [--repeat 15]
    .venv/bin/python bench/agent_delta.py --ab HEAD~1 [--rounds 5]   # same-run A/B

Times are the process's CPU time (time.process_time), not wall time: the numbers hold on a
shared, loaded machine.

--ab REF takes REF's tui/ (git archive) into a temporary folder and runs REF and this tree
alternately, --rounds times each, each run its own process; it prints both medians. --tree DIR
measures the tui/ under DIR (what --ab does for each side).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def measure(hosts: int, gpus: int, repeat: int) -> dict:
    import tui
    from tui.cluster.agent_delta import apply_delta
    from tui.cluster.agent_schema import parse_line
    from tui.remote import gpu_common
    from tui.remote.gpu_common import DeltaEncoder

    # The packed lines the agent sends the monitor (gpu_agent --compact), where the tree has them.
    compact = getattr(gpu_common, "compact_delta", None)
    agent_delta = importlib.import_module("tui.cluster.agent_delta")
    apply_compact = getattr(agent_delta, "apply_compact", None)
    # simhosts puts this checkout first on sys.path: the tree's modules are imported already.
    simhosts = importlib.import_module("simhosts")
    agent_sample = simhosts.agent_sample
    wire_line = getattr(gpu_common, "wire_line", None)
    apply_repeat = getattr(agent_delta, "apply_repeat", None)

    print(f"measuring {Path(tui.__file__).parent}", file=sys.stderr)

    fulls, lines, bases, packed = [], [], [], []
    due_packed, due_json = [], []
    for h in range(hosts):
        first, second = agent_sample(h, gpus, 1, "bench"), agent_sample(h, gpus, 2, "bench")
        for g in (*first["gpus"], *second["gpus"]):
            g["util_window_s"] = 1.0
        enc = DeltaEncoder()
        enc.encode(first)
        delta = enc.encode(second)
        assert delta.get("type") == "delta", "the second sample must go out as a delta"
        full = json.dumps(first, separators=(",", ":"))
        base = parse_line(full, time.time()).sample
        assert base is not None and len(base.gpus) == gpus
        fulls.append(full)
        lines.append(json.dumps(delta, separators=(",", ":")))
        bases.append(base)
        if compact is not None:
            packed.append(compact(delta))
        due = agent_sample(h, gpus, 11, "bench")
        for i, g in enumerate(due["gpus"]):
            g["util_window_s"] = 1.0
            g["health"] = simhosts.gpu_health(i)
        due_json.append(json.dumps(due, separators=(",", ":")))
        if wire_line is not None:
            repeats = DeltaEncoder(repeats=True)
            repeats.encode(first)
            due_packed.append(wire_line(repeats.encode(due), True))
            assert due_packed[-1].startswith("B2 "), "the due sample must go out as a repeat"
    pairs = list(zip(lines, bases, strict=True))
    check = apply_delta(lines[0], bases[0], 0.0)
    assert check.gpus[0].util_percent == json.loads(lines[0])["gpus"][0][0], "decoded wrong"
    plans = [agent_delta.delta_plan(b) for b in bases] if apply_compact is not None else []
    delta_ms, full_ms, compact_ms, due_ms = [], [], [], []
    for _ in range(repeat):
        t0 = time.process_time()
        for line, base in pairs:
            apply_delta(line, base, 0.0)
        delta_ms.append((time.process_time() - t0) * 1e3)
        if apply_compact is not None:
            t0 = time.process_time()
            for line, base, plan in zip(packed, bases, plans, strict=True):
                apply_compact(line, base, 0.0, plan)
            compact_ms.append((time.process_time() - t0) * 1e3)
        t0 = time.process_time()
        for line in fulls:
            parse_line(line, 0.0)
        full_ms.append((time.process_time() - t0) * 1e3)
        t0 = time.process_time()
        if apply_repeat is not None:
            for line, base, plan in zip(due_packed, bases, plans, strict=True):
                apply_repeat(line, base, 0.0, plan)
        else:
            for line in due_json:
                parse_line(line, 0.0)
        due_ms.append((time.process_time() - t0) * 1e3)
    delta, full = statistics.median(delta_ms), statistics.median(full_ms)
    return {
        "hosts": hosts,
        "gpus": gpus,
        "delta_ms_per_fleet": round(delta, 2),
        "delta_us_per_host": round(delta * 1e3 / hosts, 2),
        "full_ms_per_fleet": round(full, 2),
        "full_us_per_host": round(full * 1e3 / hosts, 2),
        # the packed delta lines (gpu_agent --compact): None where the tree has none
        "compact_us_per_host": round(statistics.median(compact_ms) * 1e3 / hosts, 2)
        if compact_ms
        else None,
        "due_us_per_host": round(statistics.median(due_ms) * 1e3 / hosts, 2),
    }


def ab(ref: str, rounds: int, argv: list[str]) -> int:
    from benchlib import ab_results

    for name, results in ab_results(__file__, ref, rounds, argv).items():
        delta = statistics.median(r["delta_us_per_host"] for r in results)
        full = statistics.median(r["full_us_per_host"] for r in results)
        compact = [r["compact_us_per_host"] for r in results if r.get("compact_us_per_host")]
        due = [r["due_us_per_host"] for r in results if r.get("due_us_per_host")]
        print(
            json.dumps(
                {
                    "bench": "agent_delta",
                    "side": name,
                    "rounds": rounds,
                    "delta_us_per_host": round(delta, 2),
                    "full_us_per_host": round(full, 2),
                    "compact_us_per_host": statistics.median(compact) if compact else None,
                    "due_us_per_host": statistics.median(due) if due else None,
                    "runs_due": due,
                    "runs_delta": [r["delta_us_per_host"] for r in results],
                }
            )
        )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=1024)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--tree", help="measure the tui/ under this folder")
    p.add_argument("--ab", metavar="REF", help="same-run A/B against REF's tui/")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    if args.ab:
        own = ["--hosts", str(args.hosts), "--gpus", str(args.gpus), "--repeat", str(args.repeat)]
        return ab(args.ab, args.rounds, own)
    sys.path[:0] = [str(BENCH), args.tree or str(ROOT)]
    out = {"bench": "agent_delta", "tree": args.tree or str(ROOT)}
    out.update(measure(args.hosts, args.gpus, args.repeat))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
