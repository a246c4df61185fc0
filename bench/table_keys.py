#!/usr/bin/env python3
"""The GPU table's answer to a key at --hosts 8-GPU hosts on delta samples (headless GpuTable).

Each host holds a full sample and then a delta sample (the real agent's DeltaEncoder,
bench/simhosts.py's values), as the cockpit holds them between full samples. In a headless
App (200x50) the real GpuTable gets the fleet, then each key's table work is timed, CPU time
(time.process_time) with the collector on as the app runs it (gc.freeze after set-up): sort by
each key (s), reverse (S), a filter typed and cleared, fold one host (enter) and all (z), a
metric sort's 1 Hz re-sort (update_hosts), and a screenful drawn (render_line of 50 lines).
Before each sort and re-sort every host gets a fresh delta sample (untimed), as it does live
each second, in ten frames that each reach the table through update_hosts as the monitor's
frames do, so a metric sort meets GPU objects not yet built. `--packed`: the delta lines
packed as the agent's --compact sends them (live), else JSON deltas.
Median of --repeat.

    .venv/bin/python bench/table_keys.py [--hosts 4096] [--repeat 5] [--packed]
    .venv/bin/python bench/table_keys.py --ab REF [--rounds 3]   # same-run A/B, REF's tui/
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def _fleet(hosts: int, packed: bool = False):
    from tui.cluster.agent_delta import apply_compact, apply_delta, delta_plan
    from tui.cluster.agent_schema import parse_line
    from tui.cluster.models import HostTelemetry
    from tui.remote.gpu_common import DeltaEncoder, compact_delta
    from tui.transport.types import HostState, LinkStatus

    agent_sample = importlib.import_module("simhosts").agent_sample
    fleet, lines = {}, {}
    for h in range(hosts):
        name = f"node{h:05d}"
        first, second = agent_sample(h, 8, 1, "bench"), agent_sample(h, 8, 2, "bench")
        for g in (*first["gpus"], *second["gpus"]):
            g["util_window_s"] = 1.0
        enc = DeltaEncoder()
        enc.encode(first)
        delta = enc.encode(second)
        base = parse_line(json.dumps(first), 0.0).sample
        assert base is not None
        ht = fleet[name] = HostTelemetry(name, LinkStatus(name, HostState.UP), history_len=50)
        ht.record(base)
        line = compact_delta(delta) if packed else None
        if line is not None:  # the agent's --compact line, as live
            plan = delta_plan(base)
            lines[name] = (lambda ln, b, p: lambda t: apply_compact(ln, b, t, p))(line, base, plan)
        else:
            lines[name] = (lambda ln, b: lambda t: apply_delta(ln, b, t))(json.dumps(delta), base)
        ht.record(lines[name](1.0))

    def renew(table=None) -> None:
        """Each host's next second: a new delta sample, its GPU objects not built (live, a
        metric sort reads a fresh sample of every host). With `table`, delivered as live in
        ten frames (GpuTable.update_hosts each, its re-sort held off), untimed."""
        names = list(lines)
        for k in range(10):
            frame = names[k::10]
            for name in frame:
                fleet[name].latest = lines[name](2.0)
            if table is not None:
                table._sorted_at = time.monotonic()
                table.update_hosts(set(frame))
        gc.collect()  # the old samples' collection is the ingest's, not the key's

    return fleet, renew


def measure(hosts: int, repeat: int, packed: bool = False) -> dict:
    from textual.app import App

    import tui
    from tui.widgets.gpu_table import GpuTable

    print(f"measuring {Path(tui.__file__).parent}", file=sys.stderr)
    fleet, renew = _fleet(hosts, packed)
    times: dict[str, list[float]] = {}

    def timed(name: str, fn) -> None:
        t0 = time.process_time()
        fn()
        times.setdefault(name, []).append((time.process_time() - t0) * 1e3)

    class TableApp(App):
        def compose(self):
            yield GpuTable(id="t")

    async def run() -> None:
        app = TableApp()
        async with app.run_test(size=(200, 50)) as pilot:
            table = app.query_one(GpuTable)
            table.set_hosts(fleet)
            await pilot.pause()
            gc.collect()
            gc.freeze()

            def draw() -> None:
                for y in range(50):
                    table.render_line(y)

            def sort(key: str, reverse: bool = False):
                def go() -> None:
                    table.sort_key, table.sort_reverse = key, reverse
                    table.rebuild()

                return go

            def filt(text: str):
                def go() -> None:
                    table.filter_text = text
                    table.rebuild()

                return go

            for _ in range(repeat):
                for key in ("name", "util", "mem", "temp", "power", "state"):
                    renew(table)
                    timed(f"sort {key}", sort(key))
                    timed("draw", draw)
                timed("reverse name", sort("name", True))
                timed("sort name", sort("name"))
                for text in ("n", "no", "nod", "node0", "gpu3"):
                    timed("filter", filt(text))
                timed("filter", filt(""))
                table.cursor = 9 * (hosts // 2)
                timed("fold", table.action_toggle_host)
                timed("fold", table.action_toggle_host)
                timed("fold all", table.action_toggle_all)
                timed("fold all", table.action_toggle_all)
                table.sort_key = "util"
                table.rebuild()
                renew(table)
                table._sorted_at = 0.0
                timed("resort 1 Hz", lambda: table.update_hosts({"node00000"}))
                timed("scroll", lambda: table.action_page(1))
                table.sort_key = "name"
                table.rebuild()
            gc.unfreeze()

    asyncio.run(run())
    return {
        "hosts": hosts,
        "ms": {k: round(statistics.median(v), 1) for k, v in times.items()},
        "p_max_ms": {k: round(max(v), 1) for k, v in times.items()},
    }


def ab(ref: str, rounds: int, argv: list[str]) -> int:
    from benchlib import ab_results

    for name, got in ab_results(__file__, ref, rounds, argv).items():
        keys = got[0]["ms"]
        med = {k: round(statistics.median(r["ms"][k] for r in got), 1) for k in keys}
        rng = {k: [min(r["ms"][k] for r in got), max(r["ms"][k] for r in got)] for k in keys}
        print(json.dumps({"side": name, "rounds": rounds, "median_ms": med, "range_ms": rng}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ab", metavar="REF")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tree", metavar="DIR", help="measure the tui/ under DIR")
    p.add_argument(
        "--packed", action="store_true", help="packed delta lines (agent --compact), as live"
    )
    args = p.parse_args()
    if args.ab:
        argv = ["--hosts", str(args.hosts), "--repeat", str(args.repeat)]
        return ab(args.ab, args.rounds, argv + (["--packed"] if args.packed else []))
    sys.path.insert(0, str(BENCH))
    sys.path.insert(0, args.tree or str(ROOT))
    print(json.dumps(measure(args.hosts, args.repeat, args.packed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
