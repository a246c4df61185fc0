"""Ray's own GPU telemetry: what the head's dashboard serves from its per-node reporter agents.

    python bench/ray_gpu_view.py [--url http://127.0.0.1:8265] [--seconds 20] [--poll 0.25]

Run where the dashboard answers (on the head, or inside its namespace host). Polls
`GET /nodes?view=summary` every --poll s and prints one JSON line: the request's latency
(p50/p95/max), bytes per node, the GPU fields a node's entry has, how often a GPU's values
really change (the reporter's rate, from distinct readings), and the CPU the head's dashboard
and reporter agent processes used meanwhile (% of one core, from /proc). With --load, a torch
duty-cycle load runs on GPU 0 meanwhile, so the values move.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

LOAD = r"""
import time, torch
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    t = time.time()
    while time.time() - t < 0.5:
        y = x @ x
    torch.cuda.synchronize()
    time.sleep(0.5)
"""


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _ray_pids() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"dashboard": [], "reporter_agent": [], "raylet": [], "gcs": []}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "dashboard/dashboard.py" in cmd:
            out["dashboard"].append(int(d.name))
        elif "dashboard/agent.py" in cmd:
            out["reporter_agent"].append(int(d.name))
        elif "/raylet " in cmd or cmd.startswith("raylet") or "/raylet/raylet" in cmd:
            out["raylet"].append(int(d.name))
        elif "gcs_server" in cmd:
            out["gcs"].append(int(d.name))
    return out


def _gpus_of(node: dict) -> list[dict]:
    for key in ("gpus", "GPUs"):
        if isinstance(node.get(key), list):
            return node[key]
    return []


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8265")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--poll", type=float, default=0.25)
    p.add_argument("--load", action="store_true", help="a torch duty-cycle load on GPU 0")
    args = p.parse_args()
    load = None
    if args.load:
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.seconds + 5)])
        time.sleep(3)
    pids = _ray_pids()
    cpu0 = {k: sum(_cpu_s(x) or 0 for x in v) for k, v in pids.items()}
    t_start = time.monotonic()
    lat, sizes, nodes_seen = [], [], 0
    readings: list[tuple[float, tuple]] = []
    fields: set[str] = set()
    node_fields: set[str] = set()
    errors = 0
    while time.monotonic() - t_start < args.seconds:
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(args.url + "/nodes?view=summary", timeout=10) as r:
                body = r.read()
        except OSError:
            errors += 1
            time.sleep(args.poll)
            continue
        lat.append(time.monotonic() - t0)
        doc = json.loads(body)
        nodes = (doc.get("data") or {}).get("summary") or []
        nodes_seen = max(nodes_seen, len(nodes))
        sizes.append(len(body) / max(1, len(nodes)))
        row = []
        for node in nodes:
            node_fields.update(node.keys())
            for g in _gpus_of(node):
                fields.update(g.keys())
                row.append(
                    tuple(
                        g.get(k)
                        for k in ("utilizationGpu", "memoryUsed", "powerUsage", "temperatureGpu")
                    )
                )
        readings.append((time.monotonic(), tuple(row)))
        time.sleep(max(0.0, args.poll - (time.monotonic() - t0)))
    wall = time.monotonic() - t_start
    cpu1 = {k: sum(_cpu_s(x) or 0 for x in v) for k, v in pids.items()}
    if load is not None:
        load.kill()
    changes = [t for i, (t, r) in enumerate(readings) if i and r != readings[i - 1][1]]
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    ms = sorted(x * 1000 for x in lat)
    print(
        json.dumps(
            {
                "nodes": nodes_seen,
                "polls": len(lat),
                "errors": errors,
                "latency_ms": {
                    "p50": round(statistics.median(ms), 1) if ms else None,
                    "p95": round(ms[int(0.95 * (len(ms) - 1))], 1) if ms else None,
                    "max": round(ms[-1], 1) if ms else None,
                },
                "bytes_per_node": round(statistics.median(sizes)) if sizes else None,
                "gpu_fields": sorted(fields),
                "node_fields": sorted(node_fields),
                "value_changes": len(changes),
                "change_interval_s_median": round(statistics.median(gaps), 2) if gaps else None,
                "cpu_percent_of_core": {
                    k: round(100 * (cpu1[k] - cpu0[k]) / wall, 1) for k in pids if pids[k]
                },
                "example_gpu": next(
                    (
                        g
                        for n in (json.loads(body).get("data") or {}).get("summary") or []
                        for g in _gpus_of(n)
                    ),
                    None,
                )
                if lat
                else None,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
