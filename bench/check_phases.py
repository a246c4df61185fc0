"""Where `verl-tui check` and `up`'s refusal spend their time on N simulated hosts.

    .venv/bin/python bench/check_phases.py [--hosts 128] [--procs K] [--connects N] [--profile]
    .venv/bin/python bench/check_phases.py --evaluate --hosts 1024 [--ab REF --rounds 3]

Starts the simulators of bench/bringup_sim.py (probe replayed; other commands run here) and,
in this process, runs the doctor's steps with a progress callback timestamped as it fires:
connect (every host settled), probe, GPU health, GCS reach. Since e58846c each host goes
through these steps on its own, so a mark says when the doctor stopped waiting for the step
before on every host (the steps overlap), not when the next began. It also times the fleet alone
until every host is up, and until the down host (last in hosts.yaml) has failed, and reports
this process's CPU time and the simulators' for each. `--connects` sets the fleet's connect
cap (the product default when left out). `--profile` writes cProfile of the doctor run to
bench/results/check_phases.pstats. VT_TREE=DIR (or --tree DIR) measures the tui/ in DIR.

`--evaluate`: no hosts, the doctor's serial part alone, in CPU time: the work `check` does
after every probe has answered and before it exits (every check decided from N hosts' facts,
`evaluate`; the rows folded, `arrange`; the table printed, `format_table`; the JSON), on N
copies of this machine's own probe answer. `--ab REF`: that, REF's tui/ against this tree's,
alternating (benchlib.ab_results).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# VT_TREE or --tree: another copy of tui/ to measure (a before/after pair in one session).
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else None
sys.path.insert(0, _TREE or os.environ.get("VT_TREE", str(ROOT)))

from benchlib import code_version  # noqa: E402
from bringup_sim import _sims  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _sim_cpu(sims: list[subprocess.Popen]) -> float:
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for s in sims:
        with open(f"/proc/{s.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


async def _fleet_times(hosts_yaml: str, connects: int | None) -> dict:
    from tui.config.hosts import load_inventory
    from tui.transport.fleet import Fleet
    from tui.transport.types import HostState

    inv = load_inventory(hosts_yaml)
    kw = {} if connects is None else {"max_concurrent_connects": connects}
    t0, c0 = time.monotonic(), _cpu()
    out: dict = {}
    async with Fleet(inv, **kw) as fleet:
        down = inv.hosts[-1].name
        while fleet.status(down).state in (HostState.CONNECTING,):
            await asyncio.sleep(0.005)
        out["down_failed_s"] = round(time.monotonic() - t0, 3)
        await fleet.wait_settled(60)
        out["all_settled_s"] = round(time.monotonic() - t0, 3)
        out["fleet_cpu_s"] = round(_cpu() - c0, 2)
    return out


async def _health(hosts_yaml: str) -> dict:
    """The doctor's GPU health step alone: every host's read timed (the agent run once)."""
    from tui.cluster.doctor.gpus import read_health
    from tui.config.hosts import load_inventory
    from tui.transport.fleet import Fleet

    inv = load_inventory(hosts_yaml)
    async with Fleet(inv) as fleet:
        await fleet.wait_settled(60)
        took: list[float] = []
        why: dict[str, int] = {}
        sem = asyncio.Semaphore(32)

        async def one(h) -> None:
            async with sem:
                t = time.monotonic()
                sample, reason = await read_health(fleet, h, 30)
                took.append(time.monotonic() - t)
                key = "sample" if sample is not None else (reason or "?")[:80]
                why[key] = why.get(key, 0) + 1

        t0 = time.monotonic()
        await asyncio.gather(*(one(h) for h in inv.hosts))
        took.sort()
    return {
        "total_s": round(time.monotonic() - t0, 3),
        "per_read_s": [round(took[int(q * (len(took) - 1))], 3) for q in (0, 0.5, 0.95, 1)],
        "outcomes": why,
    }


async def _doctor(hosts_yaml: str, connects: int | None) -> dict:
    from tui.cluster.doctor import run_doctor, summarize
    from tui.config.hosts import load_inventory
    from tui.transport.fleet import Fleet

    inv = load_inventory(hosts_yaml)
    kw = {} if connects is None else {"max_concurrent_connects": connects}
    t0 = time.monotonic()
    marks: list[tuple[float, str]] = []

    def progress(msg: str) -> None:
        marks.append((round(time.monotonic() - t0, 3), msg))

    async with Fleet(inv, **kw) as fleet:
        findings = await run_doctor(fleet, inv, progress=progress)
    total = time.monotonic() - t0
    return {"total_s": round(total, 3), "marks": marks, "summary": summarize(findings)}


def _evaluate(n: int, repeat: int) -> dict:
    """The doctor's serial part on N hosts' facts (this machine's probe answer for each), CPU
    time in ms, median of `repeat`."""
    import statistics

    import tui
    from tui.cluster.doctor import arrange, evaluate
    from tui.cluster.probe import facts_from_json, probe_argv
    from tui.commands.check import format_table, to_json
    from tui.commands.output import json_text
    from tui.config.hosts import load_inventory

    print(f"measuring {Path(tui.__file__).parent}", file=sys.stderr)
    out = subprocess.run(probe_argv(sys.executable, (6379, 8265)), capture_output=True, text=True)
    data = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    with tempfile.TemporaryDirectory(prefix="vt-cph-") as work:
        lines = ["cluster: bench", "ssh:", "  user: bench", "hosts:"]
        for i in range(n):
            lines += [f"  - name: node{i:05d}", f"    address: 10.{i >> 8}.{i & 255}.1"]
        path = Path(work) / "hosts.yaml"
        path.write_text("\n".join(lines) + "\n")
        inventory = load_inventory(path)
    facts = {
        h.name: facts_from_json(h.name, data, rtt_s=0.05, clock_offset_s=0.0)
        for h in inventory.hosts
    }
    names = [h.name for h in inventory.hosts]
    times: dict[str, list[float]] = {}
    for _ in range(repeat):
        t0 = time.process_time()
        found = evaluate(inventory, facts)
        t1 = time.process_time()
        rows = arrange(found, names)
        t2 = time.process_time()
        format_table(rows)
        t3 = time.process_time()
        json_text(to_json(rows), inventory, indent=2)
        t4 = time.process_time()
        for name, a, b in (
            ("evaluate", t0, t1),
            ("arrange", t1, t2),
            ("table", t2, t3),
            ("json", t3, t4),
        ):
            times.setdefault(name, []).append((b - a) * 1e3)
        times.setdefault("total", []).append((t4 - t0) * 1e3)
    return {
        "bench": "check_phases --evaluate",
        "hosts": n,
        "rows": len(rows),
        "ms": {k: round(statistics.median(v), 1) for k, v in times.items()},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=128)
    p.add_argument("--procs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    p.add_argument("--connects", type=int, default=None)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--fleet-only", action="store_true", help="time the connects alone")
    p.add_argument("--evaluate", action="store_true", help="the doctor's serial part alone")
    p.add_argument("--ab", metavar="REF", help="--evaluate: REF's tui/ against this tree's")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tree", metavar="DIR", help="measure the tui/ under DIR (as VT_TREE)")
    args = p.parse_args()
    if args.evaluate and args.ab:
        import statistics

        from benchlib import ab_results

        argv = ["--evaluate", "--hosts", str(args.hosts), "--repeat", str(args.repeat)]
        for side, got in ab_results(__file__, args.ab, args.rounds, argv).items():
            keys = got[0]["ms"]
            med = {k: round(statistics.median(r["ms"][k] for r in got), 1) for k in keys}
            rng = {k: [min(r["ms"][k] for r in got), max(r["ms"][k] for r in got)] for k in keys}
            print(
                json.dumps({"side": side, "rounds": args.rounds, "median_ms": med, "range_ms": rng})
            )
        return 0
    if args.evaluate:
        print(json.dumps(_evaluate(args.hosts, args.repeat)))
        return 0
    import tui.cli as cli_main
    import tui.commands.check as check_cli

    out: dict = {"bench": "check_phases", "code": code_version(), "hosts": args.hosts}
    out["connects"] = args.connects or "default"
    with tempfile.TemporaryDirectory(prefix="vt-cph-") as work:
        sims, hosts = _sims(args.hosts, work, args.procs, True)
        try:
            ok = Path(work) / "ok.yaml"
            ok.write_text(Path(hosts).read_text().split("  - name: down000")[0])
            out["fleet"], out["doctor"] = [], []
            for _ in range(args.repeat):
                s0, c0 = _sim_cpu(sims), _cpu()
                r = asyncio.run(_fleet_times(hosts, args.connects))
                r["sim_cpu_s"] = round(_sim_cpu(sims) - s0, 2)
                out["fleet"].append(r)
                if args.fleet_only:
                    continue
                s0, c0 = _sim_cpu(sims), _cpu()
                prof = cProfile.Profile() if args.profile else None
                if prof:
                    prof.enable()
                # As `check` runs it: the collector settings the CLI gives every command (an
                # older tree: check's own, or none).
                batch = getattr(cli_main, "few_collections", None) or getattr(
                    check_cli, "few_collections", None
                )
                with batch() if batch else contextlib.nullcontext():
                    r = asyncio.run(_doctor(str(ok), args.connects))
                if prof:
                    prof.disable()
                    (ROOT / "bench" / "results").mkdir(exist_ok=True)
                    prof.dump_stats(str(ROOT / "bench" / "results" / "check_phases.pstats"))
                r["cpu_s"] = round(_cpu() - c0, 2)
                r["sim_cpu_s"] = round(_sim_cpu(sims) - s0, 2)
                out["doctor"].append(r)
            s0 = _sim_cpu(sims)
            if not args.fleet_only:
                out["health"] = asyncio.run(_health(str(ok)))
                out["health"]["sim_cpu_s"] = round(_sim_cpu(sims) - s0, 2)
        finally:
            out["sim"] = []
            for sim in sims:
                try:
                    text = sim.communicate(timeout=30)[0]
                except subprocess.TimeoutExpired:
                    sim.kill()
                    text = ""
                stats = [ln[6:] for ln in text.splitlines() if ln.startswith("stats ")]
                out["sim"] += [json.loads(x) for x in stats]
    out["load1"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
