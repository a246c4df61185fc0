#!/usr/bin/env python3
"""Telemetry fan-in: the real cockpit (VerlTuiApp, headless) against N simulated 8-GPU hosts.

For every size and mode a fresh simulator (bench/simhosts.py, its own process) and a fresh
cockpit worker process (this file with --worker) are started, so runs never share state and
the cockpit's CPU is measured alone. On a machine with 2+ CPUs the simulator is pinned to one
CPU and the cockpit to another.

Modes:
  stream  one long-lived agent stream per host (TelemetryMonitor), relays off: the product's
          way below 64 hosts.
  relay   the same agents, their lines gathered by one relay per 128 hosts (the simulator runs
          the real relay code; tui/cluster/relay_plan.py): the product's way from 64 hosts.
  naive   a new SSH exec of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` per
          host per interval over the same persistent connection (NaiveMonitor below, bench
          only); its rows are turned into the agent format and fed to the normal ingest path,
          so everything from HostTelemetry to the screen is identical.

Per run: warm up until every host has drawn a sample (+ --warmup s), then measure --seconds:
  cpu      process CPU (getrusage user+sys delta / wall delta) as % of one core; includes
           Textual's compositing and the (headless) screen rendering.
  latency  frame-observer call time (after the screen refresh) minus the sample's time:
           stream: the agent's "t" (taken when the line is sent); naive: the poll's start.

    .venv/bin/python bench/telemetry_fanin.py [--hosts 16,64,128] [--modes stream,naive]
                                              [--seconds 20] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import code_version, pct, pin, proc_cpu_s, run_child, self_cpu_s

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
GPUS = 8
GOAL_HOSTS, GOAL_CPU, GOAL_P95_MS = 1024, 25.0, 300.0  # issue 16: 1,024 hosts at 1 Hz

SMI_FIELDS = (
    "index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,power.limit"
)
SMI_ARGV = ["nvidia-smi", "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"]


# ------------------------------------------------------------------------------------------
# helpers


# ------------------------------------------------------------------------------------------
# naive telemetry (bench only): one SSH exec of nvidia-smi per host per interval


def _smi_value(text: str, kind):
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":
        return None
    if kind is str:
        return text
    try:
        return kind(float(text))
    except ValueError:
        return None


def parse_smi_csv(out: str) -> list[dict]:
    """nvidia-smi --format=csv,noheader,nounits rows -> agent-format GPU dicts."""
    mib = 1024 * 1024
    gpus = []
    for line in out.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 10:
            continue
        index = _smi_value(cols[0], int)
        if index is None:
            continue
        used, total = _smi_value(cols[5], float), _smi_value(cols[6], float)
        gpus.append(
            {
                "index": index,
                "name": _smi_value(cols[1], str),
                "uuid": _smi_value(cols[2], str),
                "util_percent": _smi_value(cols[3], float),
                "mem_util_percent": _smi_value(cols[4], float),
                "memory_used_bytes": None if used is None else int(used * mib),
                "memory_total_bytes": None if total is None else int(total * mib),
                "temperature_c": _smi_value(cols[7], float),
                "power_w": _smi_value(cols[8], float),
                "power_limit_w": _smi_value(cols[9], float),
                "processes": None,
                "error": None,
            }
        )
    return gpus


def make_naive_monitor():
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.transport.types import TransportError

    class NaiveMonitor(TelemetryMonitor):
        """Per host: every interval, one `nvidia-smi` exec over the persistent connection."""

        polls = 0
        poll_errors = 0
        poll_rtts: list[float] = []

        async def _follow(self, host) -> None:
            ht = self.hosts[host.name]
            seq = 0
            # Like the agents (and cron-style pollers started at different moments), each
            # host polls at its own phase, so the screen sees the same frame pattern.
            await asyncio.sleep(random.uniform(0, self.interval))
            while True:
                transport = await self.fleet.wait_up(host.name)
                t0 = time.time()
                try:
                    res = await transport.run(SMI_ARGV, timeout=max(5.0, 5 * self.interval))
                except TransportError:
                    NaiveMonitor.poll_errors += 1
                    await asyncio.sleep(self.interval)
                    continue
                NaiveMonitor.polls += 1
                NaiveMonitor.poll_rtts.append(time.time() - t0)
                if res.ok:
                    msg = {
                        "type": "sample",
                        "seq": seq,
                        "t": t0,
                        "source": "nvidia-smi",
                        "error": None,
                        "host": {},
                        "gpus": parse_smi_csv(res.stdout),
                    }
                    seq += 1
                    self._ingest(ht, json.dumps(msg))  # the normal ingest path
                else:
                    NaiveMonitor.poll_errors += 1
                # Never overlapping: the next poll is scheduled only after this one finished.
                await asyncio.sleep(max(0.0, t0 + self.interval - time.time()))

    return NaiveMonitor


def make_full_monitor():
    """The stream without delta lines: a full sample every second (the protocol before)."""
    from tui.cluster.telemetry import TelemetryMonitor

    class FullMonitor(TelemetryMonitor):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw, delta=False)

    return FullMonitor


# ------------------------------------------------------------------------------------------
# worker: one cockpit process, one (mode, size)


class GcClock:
    """gc.callbacks hook: time spent in the cyclic garbage collector, per generation."""

    def __init__(self) -> None:
        self.reset()
        self._t0 = 0.0

    def reset(self) -> None:
        self.total, self.runs = 0.0, {0: 0, 1: 0, 2: 0}
        self.spent = {0: 0.0, 1: 0.0, 2: 0.0}

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            dt = time.perf_counter() - self._t0
            self.total += dt
            self.runs[info["generation"]] += 1
            self.spent[info["generation"]] += dt


class Accounts:
    """--account: wall time inside a few hot functions (wrapped; ~0.3 µs a call added), so
    the cockpit's CPU can be split into SSH+asyncio (the rest), ingest, drawing and GC."""

    SPOTS = (
        ("ingest", "tui.cluster.telemetry", "TelemetryMonitor", "_ingest"),
        ("frame: table+details", "tui.screens.cluster", "ClusterScreen", "apply_changes"),
        ("summary", "tui.screens.cluster", "ClusterScreen", "_refresh_summary"),
        ("compositor", "textual.screen", "Screen", "_compositor_refresh"),
        ("layout", "textual.screen", "Screen", "_refresh_layout"),
    )

    def __init__(self) -> None:
        import importlib

        self.spent = {name: 0.0 for name, *_ in self.SPOTS}
        self.calls = {name: 0 for name, *_ in self.SPOTS}
        self.on = False
        for name, module, cls_name, attr in self.SPOTS:
            cls = getattr(importlib.import_module(module), cls_name)
            setattr(cls, attr, self._wrap(name, getattr(cls, attr)))

    def _wrap(self, name: str, fn):
        spent, calls, clock = self.spent, self.calls, time.perf_counter

        def wrapped(*a, **kw):
            if not self.on:
                return fn(*a, **kw)
            t0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] += clock() - t0
                calls[name] += 1

        return wrapped

    def report(self, wall: float) -> dict:
        return {
            name: {"percent": round(100 * self.spent[name] / wall, 2), "calls": self.calls[name]}
            for name in self.spent
        }


class Recorder:
    def __init__(self, app):
        self.app = app
        self.measuring = False
        self.seen: dict[str, tuple[int, float]] = {}
        self.latencies: list[float] = []
        # where the time goes: t -> received (transport + parse), received -> flush (frame
        # coalescing), flush -> observer (compositing the frame and writing it)
        self.transit: list[float] = []
        self.coalesce: list[float] = []
        self.render_lags: list[float] = []
        self.frames = 0
        self.loop_lags: list[float] = []

    def observe(self, changed: set[str], stamp: float) -> None:
        now = time.time()
        hosts = self.app.monitor.hosts
        new = 0
        for name in changed:
            s = hosts[name].latest
            if s is None:
                continue
            key = (s.seq, s.t)
            if self.seen.get(name) == key:
                continue  # a link/state change, not a new sample
            self.seen[name] = key
            new += 1
            if self.measuring:
                self.latencies.append(now - s.t)
                self.transit.append(s.received - s.t)
                self.coalesce.append(stamp - s.received)
                self.render_lags.append(now - stamp)
        if self.measuring and new:
            self.frames += 1

    async def watch_loop(self, period: float = 0.1) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(period)
            if self.measuring:
                self.loop_lags.append(loop.time() - t - period)


def _start_pyspy(args: argparse.Namespace) -> subprocess.Popen | None:
    """py-spy (a sampling profiler, outside this process) over the window: unlike cProfile
    it barely changes what it measures. Writes bench/results/pyspy-<mode>-<n>.txt (collapsed
    stacks; `flamegraph.pl` or speedscope read it)."""
    if not args.pyspy:
        return None
    out = RESULTS / f"pyspy-{args.worker_mode}-{args.worker_hosts}.txt"
    argv = [
        args.pyspy,
        "record",
        "--pid",
        str(os.getpid()),
        "--duration",
        str(int(args.seconds)),
        "--rate",
        "200",
        "--nonblocking",
        "-f",
        "raw",
        "-o",
        str(out),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def run_worker(args: argparse.Namespace) -> dict:
    import tui.app
    from tui.config.hosts import load_inventory

    naive_cls = None
    if args.worker_mode == "naive":
        naive_cls = make_naive_monitor()
        tui.app.TelemetryMonitor = naive_cls  # the app builds its monitor from this name
    elif args.worker_mode == "full":
        tui.app.TelemetryMonitor = make_full_monitor()
    inventory = load_inventory(args.hosts_file)
    accounts = Accounts() if args.account else None
    app = tui.app.VerlTuiApp(inventory, interval=args.interval)
    rec = Recorder(app)
    app.frame_observer = rec.observe
    result: dict = {"mode": args.worker_mode, "hosts": args.worker_hosts, "gpus": GPUS}
    t_start = time.monotonic()
    async with app.run_test(size=(200, 50)):
        lag_task = asyncio.create_task(rec.watch_loop())
        gc_clock = GcClock()
        gc.callbacks.append(gc_clock)
        deadline = time.monotonic() + args.warmup_timeout
        while True:
            drawn = len(rec.seen)
            if drawn >= args.worker_hosts:
                break
            if time.monotonic() > deadline:
                states: dict[str, int] = {}
                for ht in app.monitor.hosts.values():
                    states[ht.display_state] = states.get(ht.display_state, 0) + 1
                result["error"] = f"warm-up timed out: {drawn} hosts drawn; states {states}"
                print("RESULT " + json.dumps(result), flush=True)
                return result
            await asyncio.sleep(0.2)
        result["all_drawn_after_s"] = round(time.monotonic() - t_start, 2)
        await asyncio.sleep(args.warmup)

        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
        if naive_cls is not None:
            naive_cls.polls, naive_cls.poll_errors = 0, 0
            naive_cls.poll_rtts.clear()
        rss_start = current_rss_mib()
        cpu0, wall0 = self_cpu_s(), time.monotonic()
        sim0 = sims_cpu_s(args.sim_pid)
        rec.measuring = True
        gc_clock.reset()
        if accounts:
            accounts.on = True
        if profiler:
            profiler.enable()
        sampler = None
        if args.sample:
            from sampler import Sampler

            sampler = Sampler(args.sample / 1000)
            sampler.start()
        spy = _start_pyspy(args)
        await asyncio.sleep(args.seconds)
        if profiler:
            profiler.disable()
        if sampler is not None:
            sampler.stop()
        rec.measuring = False
        if spy is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(timeout=30)
        cpu1, wall1 = self_cpu_s(), time.monotonic()
        sim1 = sims_cpu_s(args.sim_pid)
        lag_task.cancel()
        gc_s = gc_clock.total
        gc_runs = {g: [n, round(gc_clock.spent[g] * 1000, 1)] for g, n in gc_clock.runs.items()}
        if accounts:
            accounts.on = False
            result["account"] = accounts.report(wall1 - wall0)

        wall = wall1 - wall0
        lat_ms = [x * 1000 for x in rec.latencies]
        result.update(
            {
                "seconds": round(wall, 2),
                "cpu_percent": round(100 * (cpu1 - cpu0) / wall, 1),
                "sim_cpu_percent": None
                if sim0 is None or sim1 is None
                else round(100 * (sim1 - sim0) / wall, 1),
                "samples": len(lat_ms),
                "samples_per_s": round(len(lat_ms) / wall, 1),
                "frames_per_s": round(rec.frames / wall, 1),
                "latency_ms": {
                    "p50": _round(pct(lat_ms, 0.50)),
                    "p95": _round(pct(lat_ms, 0.95)),
                    "p99": _round(pct(lat_ms, 0.99)),
                    "max": _round(max(lat_ms, default=None)),
                    "mean": _round(statistics.fmean(lat_ms) if lat_ms else None),
                },
                "breakdown_ms": {
                    name: {
                        "p50": _round(pct([x * 1000 for x in xs], 0.5)),
                        "p95": _round(pct([x * 1000 for x in xs], 0.95)),
                    }
                    for name, xs in (
                        ("sample_to_ingest", rec.transit),
                        ("ingest_to_flush", rec.coalesce),
                        ("flush_to_drawn", rec.render_lags),
                    )
                },
                "loop_lag_ms": {
                    "p95": _round(pct([x * 1000 for x in rec.loop_lags], 0.95)),
                    "max": _round(max((x * 1000 for x in rec.loop_lags), default=None)),
                },
                # Python's cyclic GC inside that CPU (every container the samples allocate
                # counts towards its thresholds): seconds per second; per generation: runs, ms
                "gc_percent": round(100 * gc_s / wall, 1),
                "gc_runs": gc_runs,
                "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "rss_mib_start": rss_start,  # resident now, not the peak: after warm-up
                "rss_mib_end": current_rss_mib(),  # and at the end of the window
            }
        )
        if naive_cls is not None:
            rtts = [x * 1000 for x in naive_cls.poll_rtts]
            result["naive"] = {
                "polls_per_s": round(naive_cls.polls / wall, 1),
                "poll_errors": naive_cls.poll_errors,
                "poll_rtt_ms_p50": _round(pct(rtts, 0.5)),
                "poll_rtt_ms_p95": _round(pct(rtts, 0.95)),
            }
        if profiler:
            import io
            import pstats

            RESULTS.mkdir(parents=True, exist_ok=True)
            path = RESULTS / f"profile-{args.worker_mode}-{args.worker_hosts}.txt"
            buf = io.StringIO()
            stats = pstats.Stats(profiler, stream=buf)
            stats.sort_stats("tottime").print_stats(40)
            stats.sort_stats("cumulative").print_stats(60)
            path.write_text(buf.getvalue())
            profiler.dump_stats(str(path.with_suffix(".pstats")))
            result["profile"] = str(path.relative_to(ROOT))
        if sampler is not None:
            from sampler import report

            RESULTS.mkdir(parents=True, exist_ok=True)
            path = RESULTS / f"sample-{args.worker_mode}-{args.worker_hosts}"
            path.with_suffix(".txt").write_text(report(sampler, SAMPLE_BUCKETS))
            path.with_suffix(".collapsed").write_text(sampler.collapsed())
            result["sample"] = sampler.buckets(SAMPLE_BUCKETS)
        print("RESULT " + json.dumps(result), flush=True)
    return result


# --sample: where each CPU sample of the cockpit falls, the innermost of these on its stack.
SAMPLE_BUCKETS = [
    ("delta decode", ("tui.cluster.agent_delta:",)),
    ("ingest (history, state)", ("tui.cluster.telemetry:", "tui.cluster.models:")),
    ("relay line checks", ("tui.cluster.relay_plan:", "hmac:")),
    ("line split", ("tui.transport.lines:", "tui.transport.ssh_process:")),
    ("asyncssh", ("asyncssh.",)),
    ("table", ("tui.widgets.",)),
    ("screen", ("tui.screens.", "tui.app:")),
    ("textual/rich", ("textual.", "rich.")),
    ("asyncio", ("asyncio.",)),
    ("bench", ("__main__:",)),
]


def current_rss_mib() -> float | None:
    """Resident memory now (the peak is ru_maxrss); None where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20), 1)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


# ------------------------------------------------------------------------------------------
# orchestrator


def _cpus() -> tuple[int, list[int]]:
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return os.cpu_count() or 1, allowed


class SimGroup:
    """Several simulator processes serving one hosts.yaml (--sims K: one simulator core
    saturates at a few thousand hosts). `pid` is the first's; `pids` all of them."""

    def __init__(self, procs: list[subprocess.Popen]):
        self.procs = procs
        self.pid = procs[0].pid
        self.pids = [p.pid for p in procs]


def _start_one_sim(argv: list[str]) -> tuple[subprocess.Popen, str]:
    sim = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    assert sim.stdout is not None
    while time.monotonic() < deadline:
        line = sim.stdout.readline()
        if not line:
            break
        if line.startswith("ready "):
            return sim, line.split(" ", 1)[1].strip()
    sim.kill()
    raise RuntimeError("simulator did not become ready")


def _shared_keys(workdir: str) -> str:
    """One host key and one client key for every simulator of a group."""
    import asyncssh

    keys = Path(workdir) / "keys"
    keys.mkdir(exist_ok=True)
    for name in ("host_ed25519", "id_ed25519"):
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(keys / name))
    return str(keys)


def _merge_hosts(files: list[str], out: Path) -> str:
    """The first hosts.yaml with every simulator's hosts (and known_hosts) appended."""
    texts = [Path(f).read_text() for f in files]
    head, _, first_hosts = texts[0].partition("\nhosts:\n")
    hosts = [first_hosts] + [t.partition("\nhosts:\n")[2] for t in texts[1:]]
    known = "".join((Path(f).parent / "known_hosts").read_text() for f in files)
    (out / "known_hosts").write_text(known)
    head = re.sub(r"known_hosts: .*", f"known_hosts: {out / 'known_hosts'}", head)
    merged = out / "hosts.yaml"
    merged.write_text(head + "\nhosts:\n" + "".join(hosts))
    return str(merged)


def start_sim(
    n: int,
    workdir: str,
    interval: float,
    cpu: int | list[int] | None,
    keepalive: str = "",
    relay: str = "off",
    sims: int = 1,
) -> tuple[subprocess.Popen | SimGroup, str]:
    """`sims` simulator processes (n hosts split evenly, in relay-group-sized runs), each
    pinned to its own CPU of `cpu` (a list, used round-robin), one hosts.yaml for all."""
    cpus = cpu if isinstance(cpu, list) else [cpu]
    keys = _shared_keys(workdir) if sims > 1 else None
    procs, files = [], []
    try:
        for j in range(sims):
            count = n // sims + (1 if j < n % sims else 0)
            sub = str(Path(workdir) / f"sim{j}") if sims > 1 else workdir
            argv = [
                sys.executable,
                str(ROOT / "bench" / "simhosts.py"),
                "--hosts",
                str(count),
                "--dir",
                sub,
                "--interval",
                str(interval),
                "--gpus",
                str(GPUS),
                "--exit-on-stdin-eof",
                "--relay",
                relay,
            ]
            if sims > 1:
                argv += ["--keys", str(keys), "--prefix", f"s{j}-"]
            if cpus[j % len(cpus)] is not None:
                argv += ["--cpu", str(cpus[j % len(cpus)])]
            if keepalive:
                interval_s, _, count_max = keepalive.partition(",")
                argv += ["--keepalive-interval", interval_s]
                argv += ["--keepalive-count", count_max] if count_max else []
            proc, hosts_yaml = _start_one_sim(argv)
            procs.append(proc)
            files.append(hosts_yaml)
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    if sims == 1:
        return procs[0], files[0]
    return SimGroup(procs), _merge_hosts(files, Path(workdir))


def _stop_one(sim: subprocess.Popen) -> dict:
    with contextlib.suppress(Exception):
        sim.terminate()
    try:
        out, _ = sim.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        sim.kill()
        out, _ = sim.communicate()
    for line in out.splitlines():
        if line.startswith("stats "):
            return json.loads(line[6:])
    return {}


def stop_sim(sim: subprocess.Popen | SimGroup) -> dict:
    if isinstance(sim, subprocess.Popen):
        return _stop_one(sim)
    total: dict = {}
    for proc in sim.procs:
        for k, v in _stop_one(proc).items():
            total[k] = total.get(k, 0) + v
    return total


def sim_pids(sim: subprocess.Popen | SimGroup) -> str:
    """The --sim-pid argument: every simulator's pid, comma-separated."""
    return ",".join(str(p) for p in (sim.pids if isinstance(sim, SimGroup) else [sim.pid]))


def sims_cpu_s(pids: str | None) -> float | None:
    """CPU seconds of every simulator process named in `pids` (comma-separated)."""
    if not pids:
        return None
    times = [proc_cpu_s(int(p)) for p in pids.split(",") if p]
    return None if any(t is None for t in times) else sum(t for t in times if t is not None)


def run_one(
    mode: str,
    n: int,
    args: argparse.Namespace,
    cpu_sim: int | list[int] | None,
    cpu_cockpit: int | None,
) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"verl-tui-sim{n}-") as workdir:
        # relay: the product's default above 64 hosts; the other modes have relays off.
        relay = "on" if mode == "relay" else "off"
        sims = max(1, min(args.sims, n // 64 or 1))
        sim, hosts_yaml = start_sim(
            n, workdir, args.interval, cpu_sim, args.keepalive, relay, sims=sims
        )
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            mode,
            str(n),
            "--hosts-file",
            hosts_yaml,
            "--seconds",
            str(args.seconds),
            "--warmup",
            str(args.warmup),
            "--interval",
            str(args.interval),
            "--sim-pid",
            sim_pids(sim),
        ]
        if cpu_cockpit is not None:
            argv += ["--cpu", str(cpu_cockpit)]
        if args.profile:
            argv.append("--profile")
        if args.pyspy:
            argv += ["--pyspy", args.pyspy]
        if args.account:
            argv.append("--account")
        if args.sample:
            argv += ["--sample", str(args.sample)]
        timeout = args.warmup_timeout + args.warmup + args.seconds + 60
        result: dict = {"mode": mode, "hosts": n, "gpus": GPUS}
        t0 = time.monotonic()
        got, err, rc = run_child(
            [*argv, "--warmup-timeout", str(args.warmup_timeout)],
            timeout=timeout,
        )
        result = got or result
        result["worker_exit"] = rc
        if rc != 0:  # e.g. a traceback while the app shut down, after the measurement
            lines = [ln for ln in err.splitlines() if ln.strip()]
            result["worker_stderr_tail"] = "\n".join(lines[-3:])
        result["worker_wall_s"] = round(time.monotonic() - t0, 1)
        if "cpu_percent" not in result and "error" not in result:
            result["error"] = f"worker gave no result (rc {rc}): {err.strip()[-600:]}"
        result["sim"] = stop_sim(sim)
    return result


def fmt(x, unit: str = "") -> str:
    return "-" if x is None else f"{x:g}{unit}"


def _per_sample_us(r: dict) -> float | None:
    """Cockpit CPU per drawn sample, microseconds (everything: SSH, parse, ingest, drawing)."""
    if not r.get("samples_per_s"):
        return None
    return round(r["cpu_percent"] / 100 / r["samples_per_s"] * 1e6, 1)


def print_table(runs: list[dict], ratios: dict, machine: dict) -> None:
    print()
    print(
        f"machine: {machine['cpu_count']} CPUs (allowed {machine['cpus_allowed']}); "
        f"simulator pinned to CPU {machine['cpu_sim']}, cockpit to CPU {machine['cpu_cockpit']}"
        f"; python {machine['python']}, textual {machine['textual']}, "
        f"asyncssh {machine['asyncssh']}; code {machine['code']}"
    )
    head = (
        f"{'hosts':>5} {'GPUs':>5} {'mode':<7} {'CPU %core':>9} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'max ms':>8} {'drawn/s':>8} {'frames/s':>8} {'loop lag p95':>12} {'sim CPU %':>9}"
        f" {'us/sample':>9} {'RSS MiB':>8} {'GC %':>5}"
    )
    print(head)
    print("-" * len(head))
    for r in runs:
        if "account" in r:
            parts = "  ".join(f"{k} {v['percent']}%" for k, v in r["account"].items())
            print(f"  [{r['hosts']} {r['mode']}] of one core: {parts}  GC {r.get('gc_percent')}%")
        if "sample" in r:
            parts = "  ".join(f"{k} {v}%" for k, v in r["sample"].items())
            print(f"  [{r['hosts']} {r['mode']}] CPU samples: {parts}")
    for r in runs:
        if "error" in r and "cpu_percent" not in r:
            print(f"{r['hosts']:>5} {r['hosts'] * GPUS:>5} {r['mode']:<7} ERROR: {r['error']}")
            continue
        lat = r["latency_ms"]
        print(
            f"{r['hosts']:>5} {r['hosts'] * GPUS:>5} {r['mode']:<7} {r['cpu_percent']:>9.1f} "
            f"{fmt(lat['p50']):>8} {fmt(lat['p95']):>8} {fmt(lat['max']):>8} "
            f"{r['samples_per_s']:>8.1f} {r['frames_per_s']:>8.1f} "
            f"{fmt(r['loop_lag_ms']['p95']):>12} {fmt(r['sim_cpu_percent']):>9}"
            f" {fmt(_per_sample_us(r)):>9} {fmt(r.get('max_rss_mib')):>8}"
            f" {fmt(r.get('gc_percent')):>5}"
        )
    if ratios:
        print()
        print(
            "CPU ratio naive / stream:  "
            + "   ".join(
                f"{n} hosts: {v:.1f}x" if v is not None else f"{n} hosts: -"
                for n, v in ratios.items()
            )
        )
    for r in runs:
        if r.get("worker_exit") != 0:
            print(
                f"WARNING: {r['mode']} {r['hosts']} hosts: cockpit worker exited "
                f"{r.get('worker_exit')} (after its measurement): "
                f"{r.get('worker_stderr_tail', '').splitlines()[-1:]}"
            )
    for r in runs:
        if r.get("naive"):
            nv = r["naive"]
            print(
                f"naive {r['hosts']:>3} hosts: {nv['polls_per_s']} polls/s, "
                f"{nv['poll_errors']} errors, exec round trip p50 {fmt(nv['poll_rtt_ms_p50'])} "
                f"ms / p95 {fmt(nv['poll_rtt_ms_p95'])} ms"
            )


def goals(runs: list[dict]) -> dict:
    """The goal at GOAL_HOSTS, judged on what the product runs there: relays, when measured."""
    out = {}
    goal_mode = "relay" if any(r["mode"] == "relay" for r in runs) else "stream"
    for r in runs:
        if r["hosts"] == GOAL_HOSTS and r["mode"] == goal_mode and "cpu_percent" in r:
            cpu_ok = r["cpu_percent"] <= GOAL_CPU
            p95 = r["latency_ms"]["p95"]
            lat_ok = p95 is not None and p95 <= GOAL_P95_MS
            out = {
                "hosts": GOAL_HOSTS,
                "mode": goal_mode,
                "cpu_percent": r["cpu_percent"],
                "cpu_goal": GOAL_CPU,
                "cpu_ok": cpu_ok,
                "p95_ms": p95,
                "p95_goal_ms": GOAL_P95_MS,
                "p95_ok": lat_ok,
            }
    return out


def orchestrate(args: argparse.Namespace) -> int:
    import asyncssh
    import textual

    sizes = [int(x) for x in args.hosts.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    ncpu, allowed = _cpus()
    cpu_sim: int | list[int] | None = None
    cpu_cockpit = None
    if len(allowed) >= 2 and not args.no_pin:
        # the cockpit on the first CPU, each simulator on one of the others (round-robin)
        cpu_cockpit, cpu_sim = allowed[0], allowed[1 : 1 + max(1, args.sims)]
    machine = {
        "cpu_count": ncpu,
        "cpus_allowed": allowed,
        "cpu_sim": cpu_sim,
        "cpu_cockpit": cpu_cockpit,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "textual": textual.__version__,
        "asyncssh": asyncssh.__version__,
        "code": code_version(),
    }
    print(
        f"telemetry fan-in: sizes {sizes}, modes {modes}, {GPUS} GPUs/host, interval "
        f"{args.interval} s, measure {args.seconds} s after warm-up; {ncpu} CPUs "
        f"(simulator on CPU {cpu_sim}, cockpit on CPU {cpu_cockpit})",
        flush=True,
    )
    runs = []
    t_all = time.monotonic()
    for n in sizes:
        for mode in modes:
            print(f"  {mode:<6} {n:>3} hosts ... ", end="", flush=True)
            r = run_one(mode, n, args, cpu_sim, cpu_cockpit)
            runs.append(r)
            if "cpu_percent" in r:
                print(
                    f"cpu {r['cpu_percent']}%  p95 {r['latency_ms']['p95']} ms  "
                    f"({r['worker_wall_s']} s)",
                    flush=True,
                )
            else:
                print(f"ERROR {r.get('error')}", flush=True)
    ratios = {}
    for n in sizes:
        by = {r["mode"]: r for r in runs if r["hosts"] == n and "cpu_percent" in r}
        # naive against what the product runs at this size (relays above 64 hosts if measured)
        ours = by.get("relay") if n >= 64 and "relay" in by else by.get("stream")
        if ours and "naive" in by and ours["cpu_percent"] > 0:
            ratios[n] = round(by["naive"]["cpu_percent"] / ours["cpu_percent"], 2)
        elif "naive" in modes:
            ratios[n] = None
    print_table(runs, ratios, machine)
    g = goals(runs)
    if g:
        print(
            f"\ngoal at {GOAL_HOSTS} hosts ({g['mode']}): CPU {g['cpu_percent']}% of one core "
            f"(≤{GOAL_CPU:g}%: {'PASS' if g['cpu_ok'] else 'FAIL'}), sample→screen p95 "
            f"{g['p95_ms']} ms (≤{GOAL_P95_MS:g} ms: {'PASS' if g['p95_ok'] else 'FAIL'})"
        )
    if args.profile:
        print("\n(profiled run: cProfile inflates CPU; see bench/results/profile-*.txt)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("telemetry_fanin-profile.json" if args.profile else "telemetry_fanin.json")
    out.write_text(
        json.dumps(
            {
                "machine": machine,
                "params": {
                    "sizes": sizes,
                    "modes": modes,
                    "gpus_per_host": GPUS,
                    "interval_s": args.interval,
                    "seconds": args.seconds,
                    "warmup_s": args.warmup,
                    "screen": [200, 50],
                    "profiled": args.profile,
                },
                "runs": runs,
                "cpu_ratio_naive_over_stream": ratios,
                "goal": g,
                "total_wall_s": round(time.monotonic() - t_all, 1),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {out.relative_to(ROOT)} ({time.monotonic() - t_all:.0f} s total)")
    return 0 if all("cpu_percent" in r for r in runs) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", default="16,64,128", help="comma-separated host counts")
    p.add_argument(
        "--modes",
        default="stream,naive",
        help="stream (delta lines, one SSH stream a host), relay (delta lines through relays, "
        "the default above 64 hosts), full (a full sample every second), naive; comma-separated",
    )
    p.add_argument("--seconds", type=float, default=20.0, help="measurement window")
    p.add_argument(
        "--warmup",
        type=float,
        default=3.0,
        help="extra seconds after every host has drawn a sample",
    )
    p.add_argument("--warmup-timeout", type=float, default=90.0)
    p.add_argument("--interval", type=float, default=1.0, help="telemetry interval, s")
    p.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the cockpit during the window (inflates CPU)",
    )
    p.add_argument(
        "--pyspy",
        default="",
        metavar="PATH",
        help="py-spy binary: sample the cockpit during the window (bench/results/pyspy-*.txt)",
    )
    p.add_argument(
        "--account",
        action="store_true",
        help="split the cockpit's CPU: time inside ingest, frames, summary, compositor (+GC)",
    )
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    p.add_argument(
        "--sample",
        type=float,
        default=0,
        metavar="MS",
        help="sample the cockpit's stack every MS ms of its CPU (bench/sampler.py; 4: the "
        "kernel's tick): bench/results/sample-MODE-N.txt, .collapsed",
    )
    p.add_argument(
        "--sims",
        type=int,
        default=1,
        help="simulator processes (one core each; one saturates at a few thousand hosts)",
    )
    p.add_argument(
        "--keepalive",
        default="",
        metavar="S[,N]",
        help="hosts.yaml ssh.keepalive_interval (and keepalive_count_max) for the run",
    )
    # worker (internal)
    p.add_argument("--worker", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--hosts-file", help=argparse.SUPPRESS)
    p.add_argument("--sim-pid", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.worker_mode, args.worker_hosts = args.worker[0], int(args.worker[1])
        if args.worker_mode not in ("stream", "relay", "full", "naive"):
            p.error("worker mode is stream, relay, full or naive")
        pin(args.cpu)
        sys.path.insert(0, str(ROOT))
        result = asyncio.run(run_worker(args))
        return 0 if "cpu_percent" in result else 1
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
