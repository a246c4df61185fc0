"""A big job log (1M lines, ~150 MB) on a real Ray head in a namespace host: time to the first
screen and peak RSS of `verl-tui logs`, of the job log pane, and of Ray's own Jobs API GET.

    .venv/bin/python bench/big_log.py [--lines 1000000] [--modes api,cli,pane,follow]

Needs root (tests/harness/nshosts.py). One namespace host runs Ray (`verl-tui up`); two jobs
print the log: `big-done` (ends) and `big-run` (prints the same, then one FOLLOW line every
0.2 s for a while). Each measurement runs in a fresh child process (peak RSS from wait4):

- api: Ray's Jobs API, `GET /api/jobs/<id>/logs` through the SSH tunnel (the anchor: what
  `logs` and the pane did before they read the file over SSH).
- cli: `python -m tui logs HOSTS big-done > pipe`: first byte, last byte.
- pane: a headless App (160x50) with the job log screen on `big-done`: first screen (the
  log's last line taken into the view, following the end), whole log loaded.
- raygpu (not by default): bench/ray_gpu_view.py inside the head's namespace: Ray's own
  per-node GPU telemetry through the dashboard (latency, bytes per node, fields, rate).
- follow: the same on `big-run`: first screen, then whether FOLLOW lines keep arriving in
  order with no gap or duplicate after the whole log is in.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchlib import code_version  # noqa: E402

VENV_PY = str(ROOT / ".venv" / "bin" / "python")
MARKER = "BIG LOG LAST LINE"
BODY_RE = re.compile(r"\bline (\d{7}) of the big log")

JOB_CODE = r"""
import sys, time
n, follow = int(sys.argv[1]), float(sys.argv[2])
w = sys.stdout.write
pad = "x" * 48
for i in range(n):
    if i % 1000 == 0:
        w(f"(TaskRunner pid=4242) step:{i // 1000 + 1} - actor/pg_loss:0.{i % 97:02d} - "
          f"critic/score/mean:0.5 - timing_s/step:1.25 {pad}\n")
    else:
        w(f"(WorkerDict pid=4243, ip=10.200.0.11) INFO 11-24 00:00:00 [worker.py:{i % 500}] "
          f"line {i:07d} of the big log {pad}\n")
w("BIG LOG LAST LINE\n")
sys.stdout.flush()
k = 0
end = time.time() + follow
while time.time() < end:
    print(f"FOLLOW {k:06d}", flush=True)
    k += 1
    time.sleep(0.2)
"""


def _hosts_yaml(cluster, path: Path) -> Path:
    """tests/test_ray_lifecycle.py's hosts.yaml (without importing pytest there)."""
    h = cluster.hosts[0]
    path.write_text(
        "\n".join(
            [
                "cluster: biglog",
                f"python: {VENV_PY}",
                "ssh:",
                "  user: root",
                f"  identity_file: {cluster.client_key}",
                f"  known_hosts: {cluster.known_hosts}",
                "  config: ''",
                "  connect_timeout: 5",
                "ray:",
                "  memory: 1000000000",
                "  object_store_memory: 100000000",
                "  start_timeout: 60",
                "hosts:",
                f"  - name: {h.name}",
                f"    address: {h.address}",
            ]
        )
        + "\n"
    )
    return path


def _cli(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [VENV_PY, "-m", "tui", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _wait_status(env: dict, hosts: Path, sid: str, want: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        doc = json.loads(_cli(env, "jobs", str(hosts), "--json").stdout or "{}")
        for j in doc.get("jobs", []):
            if j["submission_id"] == sid:
                status = j["status"]
        if status in want:
            return status
        time.sleep(1)
    raise SystemExit(f"{sid}: still {status} after {timeout} s")


def _rss_of_last_child() -> float:
    import resource

    # RUSAGE_CHILDREN's maxrss is the largest over all waited children: each mode's child is
    # run in its own fresh grandparent below, so this is that child's own peak.
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def measure(mode: str, hosts: Path, sid: str, env: dict, lines: int) -> dict:
    """One mode in a fresh process tree (so RUSAGE_CHILDREN holds only its peak)."""
    argv = [VENV_PY, __file__, "--measure", mode, "--hosts", str(hosts), "--sid", sid]
    argv += ["--lines", str(lines)]
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if not rows:
        return {"mode": mode, "error": (res.stderr or res.stdout)[-1500:]}
    return json.loads(rows[-1])


def _vmrss() -> float:
    for ln in Path("/proc/self/status").read_text().splitlines():
        if ln.startswith("VmRSS:"):
            return int(ln.split()[1]) / 1024
    return 0.0


def _vmhwm() -> float:
    for ln in Path("/proc/self/status").read_text().splitlines():
        if ln.startswith("VmHWM:"):
            return int(ln.split()[1]) / 1024
    return 0.0


def run_mode(mode: str, hosts: Path, sid: str, lines: int) -> dict:
    """Runs inside the per-mode process: spawns the measured child and waits for it."""
    env = dict(os.environ)
    t0 = time.monotonic()
    if mode == "cli":
        proc = subprocess.Popen(
            [VENV_PY, "-m", "tui", "logs", str(hosts), sid],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        first = None
        total = 0
        tail = b""
        while True:
            chunk = proc.stdout.read1(1 << 20)
            if not chunk:
                break
            if first is None:
                first = time.monotonic() - t0
            total += len(chunk)
            tail = (tail + chunk)[-4096:]
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.wait()
        return {
            "mode": mode,
            "first_byte_s": first,
            "all_s": time.monotonic() - t0,
            "bytes": total,
            "last_line_ok": MARKER.encode() in tail,
            "rc": proc.returncode,
            "stderr": err[-500:],
            "peak_rss_mb": _rss_of_last_child(),
        }
    argv = [VENV_PY, __file__, "--inner", mode, "--hosts", str(hosts), "--sid", sid]
    argv += ["--lines", str(lines)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=500, cwd=ROOT)
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    doc = json.loads(rows[-1]) if rows else {"error": out.stderr[-1500:]}
    doc["mode"] = mode
    doc["peak_rss_mb"] = _rss_of_last_child()
    return doc


async def inner_api(hosts: Path, sid: str) -> dict:
    from tui.cluster.job_logs import job_log_snapshot
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.transport.fleet import Fleet

    inv = load_inventory(hosts)
    t0 = time.monotonic()
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)
        try:
            client = await cluster.dashboard()
            t_conn = time.monotonic() - t0
            text = await job_log_snapshot(client, sid)
            t_all = time.monotonic() - t0
        finally:
            await cluster.close()
    return {
        "connect_s": t_conn,
        "first_screen_s": t_all,  # nothing to show before the whole body is in
        "all_s": t_all,
        "chars": len(text),
        "last_line_ok": MARKER in text[-4096:],
        "rss_after_mb": _vmrss(),
    }


async def inner_pane(hosts: Path, sid: str, lines: int, follow: bool) -> dict:
    from textual.app import App

    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.screens.logs.job_logs import JobLogsScreen
    from tui.transport.fleet import Fleet

    inv = load_inventory(hosts)
    result: dict = {}
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv)

        class Bench(App):
            def on_mount(self) -> None:
                self.push_screen(JobLogsScreen(cluster, sid))

        app = Bench()
        try:
            async with app.run_test(size=(160, 50)) as pilot:
                t0 = time.monotonic()
                first = full = None
                rss_first = 0.0
                deadline = t0 + (400 if not follow else 300)
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                    screen = app.screen
                    if not isinstance(screen, JobLogsScreen):
                        continue
                    view = screen.pane.log_view
                    store = view.store
                    n = view._n  # lines the view has taken in (what it can draw)
                    if first is None and n:
                        recent = [store.plain(i) for i in range(max(0, n - 60), n)]
                        if any(MARKER in r or r.startswith("FOLLOW ") for r in recent):
                            await pilot.pause()  # the frame that draws it
                            first = time.monotonic() - t0
                            rss_first = _vmrss()
                    if first is not None and full is None and len(store) > lines:
                        full = time.monotonic() - t0
                    if full is not None and (not follow or time.monotonic() - t0 > full + 3):
                        break
                # Peak RSS of the loading itself, before the checks below read every line.
                result = {
                    "first_screen_s": first,
                    "all_s": full,
                    "rss_first_mb": rss_first,
                    "peak_rss_loading_mb": _vmhwm(),
                }
                store = screen.pane.store
                n = len(store)
                result["lines"] = n
                last, in_order, count, markers = -1, True, 0, 0
                follow_seen: list[int] = []
                for i in range(n):
                    t = store.plain(i)
                    m = BODY_RE.search(t)
                    if m:
                        k = int(m.group(1))
                        in_order = in_order and k > last
                        last, count = k, count + 1
                    markers += MARKER in t
                    if follow and t.startswith("FOLLOW "):
                        follow_seen.append(int(t.split()[1]))
                result["body_in_order"] = in_order and count == lines - (lines + 999) // 1000
                result["marker_count"] = markers
                if follow:
                    result["follow_lines"] = len(follow_seen)
                    result["follow_no_gap_no_dup"] = bool(follow_seen) and follow_seen == list(
                        range(follow_seen[0], follow_seen[0] + len(follow_seen))
                    )
                    result["follow_from_zero"] = bool(follow_seen) and follow_seen[0] == 0
                result["rss_end_mb"] = _vmrss()
        finally:
            await cluster.close()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--modes", default="api,cli,pane,follow")
    p.add_argument("--follow-s", type=float, default=240.0, help="how long big-run goes on")
    p.add_argument("--gpu-load", action="store_true", help="raygpu: a torch load on GPU 0")
    p.add_argument("--sshd", help="the sshd the namespace hosts run (default /usr/sbin/sshd)")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    p.add_argument("--inner", help=argparse.SUPPRESS)
    p.add_argument("--hosts", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--sid", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(run_mode(args.measure, args.hosts, args.sid, args.lines)))
        return 0
    if args.inner:
        if args.inner == "api":
            doc = asyncio.run(inner_api(args.hosts, args.sid))
        else:
            doc = asyncio.run(
                inner_pane(args.hosts, args.sid, args.lines, follow=args.inner == "follow")
            )
        print(json.dumps(doc))
        return 0

    from harness.nshosts import SSHD, NsCluster

    modes = [m for m in args.modes.split(",") if m]
    work = Path(tempfile.mkdtemp(prefix="verl-tui-biglog-"))
    cluster = NsCluster(1, work / "hosts", sshd=args.sshd or SSHD)
    cluster.start()
    hosts = _hosts_yaml(cluster, work / "hosts.yaml")
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    results: list[dict] = []
    size = "0"
    try:
        up = _cli(env, "up", str(hosts), timeout=300)
        if up.returncode:
            raise SystemExit(up.stdout + up.stderr)
        for sid, follow in (("big-done", 0.0), ("big-run", args.follow_s)):
            if sid == "big-run" and "follow" not in modes:
                continue
            sub = _cli(
                env, "submit", str(hosts), "--submission-id", sid, "--",
                "python", "-c", JOB_CODE, str(args.lines), str(follow),
            )  # fmt: skip
            if sub.returncode:
                raise SystemExit(sub.stdout + sub.stderr)
        _wait_status(env, hosts, "big-done", {"SUCCEEDED"}, 300)
        size = cluster.exec_in(
            "node1", ["stat", "-c", "%s", "/tmp/ray/session_latest/logs/job-driver-big-done.log"]
        ).stdout.strip()
        print(f"driver log: {args.lines:,} lines, {int(size) / 1e6:.1f} MB", flush=True)
        for mode in modes:
            if mode == "raygpu":  # Ray's own GPU view, asked inside the head's namespace
                argv = [VENV_PY, str(ROOT / "bench" / "ray_gpu_view.py"), "--seconds", "20"]
                res = cluster.exec_in("node1", argv + (["--load"] if args.gpu_load else []))
                rows = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
                doc = json.loads(rows[-1]) if rows else {"error": res.stderr[-1500:]}
                doc["mode"] = mode
                results.append(doc)
                print(json.dumps(doc), flush=True)
                continue
            sid = "big-run" if mode == "follow" else "big-done"
            if mode == "follow":
                _wait_status(env, hosts, sid, {"RUNNING"}, 120)
            load = os.getloadavg()[0]
            doc = measure(mode, hosts, sid, env, args.lines)
            doc["load1"] = load
            results.append(doc)
            print(json.dumps(doc), flush=True)
    finally:
        _cli(env, "down", str(hosts), timeout=120)
        cluster.stop()
    summary = {
        "bench": "big_log",
        "code": os.environ.get("BENCH_CODE_VERSION") or code_version(),
        "lines": args.lines,
        "log_bytes": int(size or 0),
        "results": results,
    }
    out = ROOT / "bench" / "results" / "big_log.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(f"\n{'mode':<8} {'first screen s':>15} {'all s':>8} {'peak RSS MB':>12}", end="")
    print(f"  code {summary['code']}, load {os.getloadavg()[0]:.1f}")
    for r in results:
        first = r.get("first_screen_s", r.get("first_byte_s"))
        print(
            f"{r['mode']:<8} {first if first is None else round(first, 2)!s:>15} "
            f"{r.get('all_s') if r.get('all_s') is None else round(r['all_s'], 2)!s:>8} "
            f"{round(r.get('peak_rss_loading_mb', r.get('peak_rss_mb', 0))):>12}  "
            f"{r.get('error', '')[:200]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
