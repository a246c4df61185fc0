"""On a machine with an NVIDIA GPU: does the agent's utilization mean the whole interval?

    python3 scripts/util_interval_check.py OUTDIR [--seconds 20] [--interval 1.0] [--agent FILE]

Puts a duty-cycle load on GPU 0 (a matmul loop busy for 100 ms, then 100 ms asleep; each
burst's wall-clock span and CUDA-event time are logged), runs the agent as a host runs it
(the shipped text, tui/remote/gpu_agent.py joined with its parts, saved as OUTDIR/gpu_agent.py:
``python3 -u OUTDIR/gpu_agent.py --interval 1``), and at each sample it prints records,
within milliseconds: the agent's reading (the mean over the interval, util_window_s), an
instantaneous nvmlDeviceGetUtilizationRates, nvidia-smi's utilization.gpu, a 50 ms poll of the
instantaneous value averaged over the same interval (the issue's reference), and the true duty
of the load over that interval from the burst log. Then a few ``--once`` runs (what
``verl-tui gpus --once`` asks each host). It also collects NVML's raw utilization samples
(nvmlDeviceGetSamples) to show their spacing and compare equal with time weighting.

Writes OUTDIR/util_interval.txt (the report) and OUTDIR/util_interval_raw.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOAD = r"""
import json, sys, time, torch
busy_s, idle_s, log = float(sys.argv[1]), float(sys.argv[2]), open(sys.argv[3], "w")
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
for _ in range(20):
    a @ b
torch.cuda.synchronize()
time.sleep(1.0)
while True:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start.record()
    while time.time() - t0 < busy_s:
        for _ in range(2):  # ~1.4 ms each on an H100: launches keep ahead, syncs bound the burst
            a @ b
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    t1 = time.time()
    log.write(json.dumps([t0, t1, start.elapsed_time(end) / 1000.0]) + "\n")
    log.flush()
    time.sleep(max(0.0, idle_s - (time.time() - t1)))
"""


def busy_in(bursts: list[list[float]], a: float, b: float) -> float | None:
    """Fraction of [a, b] covered by the load's bursts (wall clock), in percent."""
    if b <= a or not bursts or bursts[0][0] > a:
        return None
    covered = sum(max(0.0, min(b, t1) - max(a, t0)) for t0, t1, _ in bursts)
    return 100.0 * covered / (b - a)


def smi_util() -> float | None:
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=utilization.gpu",
                "-i",
                "0",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return float(out)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


class Pollers:
    """The 50 ms instantaneous poll and the raw-sample collector, on threads of this process."""

    def __init__(self, nv, handle) -> None:
        self.nv, self.h = nv, handle
        self.polls: list[tuple[float, int]] = []
        self.raw: dict[int, int] = {}  # timestamp µs -> value
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._poll, daemon=True),
            threading.Thread(target=self._collect, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _poll(self) -> None:
        while not self.stop.wait(0.05):
            self.polls.append((time.time(), self.nv.nvmlDeviceGetUtilizationRates(self.h).gpu))

    def _collect(self) -> None:
        last = 0
        while True:
            try:
                _, samples = self.nv.nvmlDeviceGetSamples(self.h, 1, last)
                for s in samples:
                    self.raw[int(s.timeStamp)] = int(s.sampleValue.uiVal)
                    last = max(last, int(s.timeStamp))
            except self.nv.NVMLError:
                pass
            if self.stop.wait(0.5):
                return

    def poll_mean(self, a: float, b: float) -> float | None:
        vals = [v for t, v in self.polls if a < t <= b]
        return statistics.fmean(vals) if vals else None

    def raw_means(self, a: float, b: float, offset: float) -> tuple:
        """Equal- and time-weighted means of the raw samples stamped in (a, b] (wall seconds;
        offset: sample clock minus wall clock)."""
        ts = sorted(t for t in self.raw if a + offset < t / 1e6 <= b + offset)
        if not ts:
            return None, None, 0
        eq = statistics.fmean(self.raw[t] for t in ts)
        every = sorted(self.raw)
        prev = {t: p for p, t in itertools.pairwise(every)}
        weights = [t - prev.get(t, t) for t in ts]
        tw = (
            sum(w * self.raw[t] for w, t in zip(weights, ts, strict=False)) / sum(weights)
            if sum(weights) > 0
            else None
        )
        return eq, tw, len(ts)


def fmt(v: float | None, width: int = 6) -> str:
    return f"{v:{width}.1f}" if v is not None else " " * (width - 2) + "--"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--busy", type=float, default=0.1)
    ap.add_argument("--idle", type=float, default=0.1)
    ap.add_argument("--once-runs", type=int, default=6)
    ap.add_argument(
        "--agent", type=Path, default=None, help="the agent file to run (default: the shipped text)"
    )
    args = ap.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.agent is None:  # what hosts get: gpu_agent.py joined with its parts (tui/remote)
        sys.path.insert(0, str(ROOT))
        from tui.remote import source

        args.agent = args.outdir / "gpu_agent.py"
        args.agent.write_text(source("gpu_agent"))
    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    name, driver = nv.nvmlDeviceGetName(h), nv.nvmlSystemGetDriverVersion()
    pollers = Pollers(nv, h)
    time.sleep(2.5)  # idle samples first: their spacing and values with nothing running
    burst_log = args.outdir / "bursts.jsonl"
    load_started = time.time()
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD, str(args.busy), str(args.idle), str(burst_log)]
    )
    rows, once_rows = [], []
    try:
        while not burst_log.exists() or burst_log.stat().st_size == 0:
            time.sleep(0.05)
        time.sleep(2.0)  # a few cycles in before the first reading
        agent = subprocess.Popen(
            [sys.executable, "-u", str(args.agent), "--interval", str(args.interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        end = time.time() + args.seconds + args.interval
        prev_t = None
        for line in agent.stdout:
            msg = json.loads(line)
            if msg["type"] != "sample":
                continue
            now = time.time()
            instant = nv.nvmlDeviceGetUtilizationRates(h).gpu
            smi = smi_util()
            gpu = msg["gpus"][0]
            rows.append(
                {
                    "t": msg["t"],
                    "read_at": now,
                    "prev_t": prev_t,
                    "agent": gpu["util_percent"],
                    "window_s": gpu.get("util_window_s"),
                    "instant": instant,
                    "smi": smi,
                }
            )
            prev_t = msg["t"]
            if now > end:
                break
        agent.stdin.close()
        agent.wait(10)
        for _ in range(args.once_runs):
            time.sleep(0.37)  # off the load's period: each run lands at another phase
            proc = subprocess.run(
                [sys.executable, "-u", str(args.agent), "--once"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            now = time.time()
            sample = json.loads(proc.stdout.splitlines()[-1])
            once_rows.append(
                {
                    "t": sample["t"],
                    "agent": sample["gpus"][0]["util_percent"],
                    "window_s": sample["gpus"][0].get("util_window_s"),
                    "instant": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                    "smi": smi_util(),
                    "read_at": now,
                }
            )
    finally:
        load.terminate()
        load.wait(10)
    time.sleep(1.0)
    pollers.stop.set()
    for t in pollers.threads:
        t.join(5)

    bursts = [json.loads(x) for x in burst_log.read_text().splitlines() if x.strip()]
    raw_ts = sorted(pollers.raw)
    # NVML stamps samples in CPU microseconds; if that clock is the wall clock (the newest
    # sample is a fraction of a second old), intervals line up with time.time() directly.
    offset = (raw_ts[-1] / 1e6 - time.time()) if raw_ts else 0.0
    if abs(offset) < 2.0:
        offset = 0.0
    gaps_ms = [(b - a) / 1000 for a, b in itertools.pairwise(raw_ts)]
    total_wall = bursts[-1][1] - bursts[0][0]
    duty_events = 100.0 * sum(b[2] for b in bursts[:-1]) / (bursts[-1][0] - bursts[0][0])
    duty_wall = 100.0 * sum(b[1] - b[0] for b in bursts[:-1]) / (bursts[-1][0] - bursts[0][0])

    out = []
    out.append(
        f"# util_interval_check  commit={os.environ.get('COMMIT', '?')}  "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
    )
    out.append(
        f"# GPU 0: {name}, driver {driver}; agent interval {args.interval} s; "
        f"load {args.busy * 1000:.0f} ms busy / {args.idle * 1000:.0f} ms idle"
    )
    out.append(
        f"# load: {len(bursts)} bursts over {total_wall:.1f} s; duty {duty_wall:.1f} % "
        f"(wall clock of bursts), {duty_events:.1f} % (CUDA events)"
    )
    if gaps_ms:
        out.append(
            f"# NVML utilization samples: {len(raw_ts)} collected; spacing ms "
            f"min {min(gaps_ms):.1f} median {statistics.median(gaps_ms):.1f} "
            f"max {max(gaps_ms):.1f}; sample clock - wall clock = {offset:+.3f} s"
        )
    out.append("#")
    out.append(
        "# each reading: true = the load's duty over (previous t, t]; agent = the new "
        "reading (mean of NVML's samples since the last sweep); instant = "
        "nvmlDeviceGetUtilizationRates read at the same moment; smi = nvidia-smi "
        "utilization.gpu right after; poll50 = 50 ms polls of the instantaneous value "
        "averaged over the interval; raw_eq / raw_tw = the raw samples stamped in the "
        "interval, equal / time-weighted"
    )
    out.append(
        f"{'t':>8} {'true':>6} {'agent':>6} {'win_s':>6} {'instant':>7} {'smi':>6} "
        f"{'poll50':>6} {'raw_eq':>6} {'raw_tw':>6} {'n':>3} {'agent-true':>10}"
    )
    errs = {"agent": [], "instant": [], "smi": [], "poll50": [], "raw_eq": [], "raw_tw": []}
    t0 = rows[0]["t"] if rows else 0.0
    for r in rows:
        if r["prev_t"] is None:  # the first sample's interval began before the agent did
            true = busy_in(bursts, r["t"] - args.interval, r["t"])
        else:
            true = busy_in(bursts, r["prev_t"], r["t"])
        a = r["prev_t"] if r["prev_t"] is not None else r["t"] - args.interval
        poll = pollers.poll_mean(a, r["t"])
        eq, tw, n = pollers.raw_means(a, r["t"], offset)
        r.update(true=true, poll50=poll, raw_eq=eq, raw_tw=tw, n=n)
        if true is not None:
            for key in errs:
                if r[key] is not None:
                    errs[key].append(r[key] - true)
        diff = r["agent"] - true if true is not None and r["agent"] is not None else None
        out.append(
            f"{r['t'] - t0:8.2f} {fmt(true)} {fmt(r['agent'])} {fmt(r['window_s'])} "
            f"{fmt(r['instant'], 7)} {fmt(r['smi'])} {fmt(poll)} {fmt(eq)} {fmt(tw)} "
            f"{n:3d} {fmt(diff, 10)}"
        )
    out.append("#")
    out.append(
        "# error against the true duty, points: mean |err|, max |err|, readings within ±5 points"
    )
    for key, e in errs.items():
        if e:
            within = sum(abs(x) <= 5.0 for x in e)
            out.append(
                f"#   {key:8s} mean|err| {statistics.fmean(abs(x) for x in e):5.1f}  "
                f"max|err| {max(abs(x) for x in e):5.1f}  within ±5: {within}/{len(e)}"
            )
    out.append("#")
    out.append(
        "# --once runs (what `gpus --once` asks a host): true = duty over the last "
        "interval before t"
    )
    out.append(f"{'t':>8} {'true':>6} {'agent':>6} {'win_s':>6} {'instant':>7} {'smi':>6}")
    for r in once_rows:
        true = busy_in(bursts, r["t"] - args.interval, r["t"])
        r["true"] = true
        out.append(
            f"{r['t'] - t0:8.2f} {fmt(true)} {fmt(r['agent'])} {fmt(r['window_s'])} "
            f"{fmt(r['instant'], 7)} {fmt(r['smi'])}"
        )
    idle_vals = [pollers.raw[t] for t in raw_ts if t / 1e6 - offset < load_started]
    if idle_vals:
        out.append(
            f"# idle before the load: {len(idle_vals)} raw samples, values "
            f"{sorted(set(idle_vals))[:10]}"
        )
    text = "\n".join(out) + "\n"
    print(text)
    (args.outdir / "util_interval.txt").write_text(text)
    (args.outdir / "util_interval_raw.json").write_text(
        json.dumps(
            {
                "rows": rows,
                "once": once_rows,
                "bursts": bursts,
                "offset_s": offset,
                "raw": [[t, pollers.raw[t]] for t in raw_ts],
                "polls": pollers.polls,
            }
        )
    )
    nv.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
