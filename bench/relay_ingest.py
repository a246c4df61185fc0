#!/usr/bin/env python3
"""Micro benchmark: the cockpit's side of relayed telemetry, without SSH: one second of --hosts
hosts' relay output through the real path, in CPU time.

Every host's agent sample (bench/simhosts.py's values, 8 GPUs) goes through the agent's own
DeltaEncoder; each leaf signs its delta line with its key (relay_wire.sign), and the real relay
(gpu_relay.Relay) gathers its group's lines into the bytes it writes to the cockpit. Timed:
those bytes fed, in the relay's writes, through what the cockpit runs for a relay's stdout
(the transport's LineSink, RelayHub._relay_line: shape, replay and signature checks, then the
monitor's ingest: delta decode, history, state). Not timed: SSH (decryption, asyncssh's packet
handling), the frames. The mean of --repeat seconds, each a new second of samples (every tenth
with each host's full sample, as the agent sends one every 10 s; --health: with every GPU's
health on it, as an NVML host's agent sends it then).

    .venv/bin/python bench/relay_ingest.py [--hosts 1024] [--repeat 10] [--profile] [--health]
    .venv/bin/python bench/relay_ingest.py --ab REF [--rounds 5]   # same-run A/B

--ab REF runs REF's tui/ (git archive) and this tree alternately, each run its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
GPUS = 8


def _inventory(n: int, workdir: str):
    from tui.config.hosts import load_inventory

    lines = ["cluster: bench", "telemetry:", "  relay: on", "hosts:"]
    for i in range(n):
        lines += [f"  - name: h{i:05d}", "    address: 127.0.0.1"]
    path = Path(workdir) / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path)


async def measure(hosts: int, repeat: int, profile: bool, health: bool = False) -> dict:
    import secrets

    import tui
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.remote.gpu_common import DeltaEncoder
    from tui.remote.gpu_relay import Relay
    from tui.remote.relay_wire import sign
    from tui.transport.fleet import Fleet
    from tui.transport.lines import LineSink

    simhosts = importlib.import_module("simhosts")
    agent_sample = simhosts.agent_sample
    gpu_common = importlib.import_module("tui.remote.gpu_common")
    # What this tree's agent sends (--delta --compact): its wire_line and repeats where the
    # tree has them, its compact deltas where it has those, JSON before.
    wire_line = getattr(gpu_common, "wire_line", None)
    compact = getattr(gpu_common, "compact_delta", None)

    def encoder() -> DeltaEncoder:
        return DeltaEncoder(repeats=True) if wire_line else DeltaEncoder()

    def text_of(msg: dict) -> str:
        if wire_line is not None:
            return wire_line(msg, True)
        packed = compact(msg) if compact and msg["type"] == "delta" else None
        return packed or json.dumps(msg, separators=(",", ":"))

    print(f"measuring {Path(tui.__file__).parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as workdir:
        inventory = _inventory(hosts, workdir)
    fleet = Fleet(inventory)
    monitor = TelemetryMonitor(fleet, inventory)
    hub = monitor.relays
    changed: set[str] = set()
    monitor.add_listener(changed.add)  # what the app's frame coalescing does
    sinks, relays = [], []
    encoders: dict[str, tuple[DeltaEncoder, list[int]]] = {}  # leaf -> its encoder, counter
    for group in hub.groups:
        group.relay_host = group.hosts[0].name
        out: list[bytes] = []
        relays.append((group, Relay(b"k" * 32, len(group.leaves), out.append), out))
        sinks.append(LineSink(lambda line, g=group: hub._relay_line(g, line), 1 << 21))
        for leaf in group.leaves:
            leaf.key, leaf.counter, leaf.state = secrets.token_bytes(32), 0, "relayed"
            leaf.stream = object()  # type: ignore[assignment]  # only checked for None
            encoders[leaf.name] = (encoder(), [0])
    seq = 0

    def second() -> list[list[bytes]]:
        """One second of every relay's output (a full sample per host the first time)."""
        nonlocal seq
        seq += 1
        writes = []
        for group, relay, out in relays:
            for leaf in group.leaves:
                enc, counter = encoders[leaf.name]
                sample = agent_sample(leaf.index, GPUS, seq, leaf.name)
                for i, g in enumerate(sample["gpus"]):
                    g["util_window_s"] = 1.0
                    if health and seq % 10 == 1:  # with the full samples, as NVML hosts do
                        g["health"] = simhosts.gpu_health(i)
                line = text_of(enc.encode(sample)).encode()
                counter[0] += 1
                sig = sign(leaf.key, counter[0], line)
                relay._add(b"%d %d %s %s\n" % (leaf.index, counter[0], sig, line))
                if len(relay.buf) >= 8:  # the relay's 50 ms writes: ~8 lines of 128 hosts
                    relay.write(relay.take())
            relay.write(relay.take())
            writes.append(list(out))
            out.clear()
        return writes

    def feed(writes: list[list[bytes]]) -> None:
        for sink, chunks in zip(sinks, writes, strict=True):
            for chunk in chunks:
                sink.feed(chunk)

    feed(second())  # the full samples (bases)
    assert all(ht.latest is not None for ht in monitor.hosts.values()), "a host got no sample"
    rounds = [second() for _ in range(repeat)]
    # What the app does once every host answered (app.freeze_after_warm_up): the collector
    # leaves what exists alone, and young passes come every 10,000 allocations.
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    before = sum(ht.samples for ht in monitor.hosts.values())
    times = []
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    for writes in rounds:
        changed.clear()
        t0 = time.process_time()
        feed(writes)
        times.append(time.process_time() - t0)
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    got = sum(ht.samples for ht in monitor.hosts.values()) - before
    assert got == hosts * repeat, f"{got} samples taken, {hosts * repeat} sent"
    mean = statistics.fmean(times)  # not the median: the full samples' second counts
    return {
        "hosts": hosts,
        "gpus": GPUS,
        "health": health,
        "ms_per_second": round(mean * 1e3, 2),
        "us_per_host": round(mean * 1e6 / hosts, 2),
    }


def ab(ref: str, rounds: int, argv: list[str]) -> int:
    from benchlib import ab_results

    for name, got in ab_results(__file__, ref, rounds, argv).items():
        values = [r["us_per_host"] for r in got]
        print(f"{name}: median {statistics.median(values):.1f} us/host  runs {values}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=10, help="seconds timed (each 10th: full)")
    p.add_argument("--profile", action="store_true", help="cProfile the timed part")
    p.add_argument("--ab", metavar="REF", help="same-run A/B: REF's tui/ against this tree")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tree", help="measure the tui/ under this folder")
    p.add_argument(
        "--health", action="store_true", help="every GPU's health on the full samples (NVML)"
    )
    args = p.parse_args()
    if args.ab:
        own = ["--hosts", str(args.hosts), "--repeat", str(args.repeat)]
        return ab(args.ab, args.rounds, own + (["--health"] if args.health else []))
    sys.path.insert(0, str(BENCH))
    sys.path.insert(0, args.tree or str(ROOT))
    got = measure(args.hosts, args.repeat, args.profile, args.health)
    print(json.dumps(asyncio.run(got)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
