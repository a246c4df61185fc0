"""A stack dump of 16 hosts × 8 processes (`verl-tui stack`'s fan-out), over simulated hosts.

    .venv/bin/python bench/stack_dump.py [--hosts 16] [--procs-per-host 8] [--native]

Starts bench/bringup_sim.py's simulated SSH hosts (in-process asyncssh servers; the last one is
down, as on a real cluster now and then) and 8 real Python processes here: 7 wait in one
function, 1 sleeps in another (a rank that never entered the collective). Every host is asked,
over its own SSH connection, to dump those 8 pids with the real host program
(tui/remote/stack_dump.py runs py-spy for real on the first request each simulator gets; the
other hosts replay that answer, since real hosts run py-spy on their own CPUs, in parallel, where
here they would all share this machine's). Prints the time to connect the fleet and the time of
the dump itself (every host's answer parsed, grouped), which must stay under 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bringup_sim import _sims  # noqa: E402

LIMIT_S = 10.0
WORKER = """
import sys, time
def all_reduce():
    sys.stdout.write("up\\n"); sys.stdout.flush(); time.sleep(600)
def dataloader_next():
    sys.stdout.write("up\\n"); sys.stdout.flush(); time.sleep(600)
def train_step(odd):
    (dataloader_next if odd else all_reduce)()
train_step(sys.argv[1] == "odd")
"""


def start_workers(n: int) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        p = subprocess.Popen(
            [sys.executable, "-S", "-c", WORKER, "odd" if i == n - 1 else "wait"],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "up\n"
    return procs


async def measure(hosts_yaml: str, pids: list[int], hosts: int, native: bool) -> dict:
    from tui.config.hosts import load_inventory
    from tui.stack.dump import dump_targets
    from tui.stack.model import StackReport, Target
    from tui.transport.fleet import Fleet

    inv = load_inventory(hosts_yaml)
    names = [h.name for h in inv.hosts][:hosts]
    t0 = time.monotonic()
    async with Fleet(inv) as fleet:
        await asyncio.gather(*(fleet.ready(n, 60) for n in names))
        connected = time.monotonic() - t0
        targets = [
            Target(name, pid, "WorkerDict", rank=h * len(pids) + i)
            for h, name in enumerate(names)
            for i, pid in enumerate(pids)
        ]
        report = StackReport("bench", native=native, expected=len(targets))
        t1 = time.monotonic()
        await dump_targets(fleet, targets, report)
        groups = report.groups
        dumped = time.monotonic() - t1
    return {
        "hosts": len(names),
        "processes": len(targets),
        "dumped": len(report.dumps),
        "groups": [g.summary for g in groups],
        "problems": [str(p) for p in report.problems],
        "connect_s": round(connected, 2),
        "dump_s": round(dumped, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--procs-per-host", type=int, default=8)
    # One simulator process: two would each run the host program on the same local pids at
    # the same moment (a process takes one tracer at a time), which real hosts never do.
    ap.add_argument("--sim-procs", type=int, default=1, help="simulator processes")
    ap.add_argument("--native", action="store_true")
    args = ap.parse_args()
    workers = start_workers(args.procs_per_host)
    work = tempfile.mkdtemp(prefix="vt-stackbench-")
    sims, hosts_yaml = _sims(args.hosts + 1, work, args.sim_procs, cache=True)
    try:
        out = asyncio.run(measure(hosts_yaml, [p.pid for p in workers], args.hosts, args.native))
    finally:
        for s in sims:
            s.terminate()
        for p in workers:
            p.kill()
    print(f"stack dump: {out['dumped']} of {out['processes']} processes on {out['hosts']} hosts")
    for line in out["groups"]:
        print(f"  {line}")
    for line in out["problems"]:
        print(f"  problem: {line}")
    print(f"connect {out['connect_s']:.2f} s; dump {out['dump_s']:.2f} s (limit {LIMIT_S:g} s)")
    ok = out["dumped"] == out["processes"] and out["dump_s"] <= LIMIT_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
