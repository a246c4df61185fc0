#!/usr/bin/env python3
"""Bring-up: wall time of `verl-tui up` with 1, 2 and 4 workers on namespace hosts, against the
seeds' serial way (head, `sleep 10`, then each worker followed by `sleep 5`) in the same run.

One NsCluster of 5 real OpenSSH hosts (tests/harness/nshosts.py: network/uts/pid/mount
namespaces, private /tmp/ray and /dev/shm) is started once; node1 is the head, node2..node5 the
workers. For every repeat and every worker count k, three bring-ups, each from a clean state:

  verl-tui up     `.venv/bin/python -m tui up HOSTS.yaml` (head + k workers), wall clock of the
                  subprocess; must exit 0 and print "k+1 nodes alive". Then `python -m tui down`
                  (not timed), and every namespace must be free of raylet/gcs_server.
  serial+sleeps   the seeds' scripts over the real `ssh` client: `ray start --head` (the flags of
                  our head_argv), `sleep 10`, then per worker `ray start --address=HEAD:6379`
                  followed by `sleep 5`; stopped when the last worker's sleep ends. Then the
                  head's dashboard must list k+1 ALIVE nodes (not timed); `ray stop --force`.
  serial no sleep the same commands back to back; stopped when the last `ray start` returned
                  (the time until the head lists k+1 ALIVE nodes is recorded too).

The serial way with sleeps runs once per k by default (--sleeps-repeat; ≥ 75 % of it is sleep).

Where the time goes: /proc/stat is sampled all along (machine-wide CPU busy %, runnable tasks)
and every process's CPU time every 0.25 s, labelled by what it is (`ray start` CLI, per-node
agents, log_monitor, ...) and whether it is ours (inside our hosts' pid namespaces or below this
process) or another session's; `verl-tui up`'s progress lines are timestamped as they arrive, so
its phases (interpreter start, probe, head, workers, wait for ALIVE) and every "joined in X s"
can be compared across k. On a shared machine each run first waits (up to --quiet-wait s) until
other processes use < 5 % of it, and runs that still saw ≥ 5 % are flagged.

    .venv/bin/python bench/bringup.py [--workers 1,2,4] [--repeat 2]      # ~7 min on 2 cores
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
VENV_PY = str(ROOT / ".venv" / "bin" / "python")
RAY = [VENV_PY, "-m", "ray.scripts.scripts"]
sys.path.insert(0, str(ROOT / "tests"))

from benchlib import code_version  # noqa: E402
from harness.nshosts import SSHD, NsCluster  # noqa: E402

GOAL_RATIO = 1.3
HOSTS = 5  # at least (more when --workers asks for more)
MAX_WORKERS = 15
PORT, DASH_PORT = 6379, 8265
MEMORY, OBJECT_STORE = 1_000_000_000, 100_000_000  # as tests/test_ray_lifecycle.py: small nodes
START_TIMEOUT = 120
HEAD_SLEEP, WORKER_SLEEP = 10, 5
RAY_NAMES = ("raylet", "gcs_server")
CLK_TCK = os.sysconf("SC_CLK_TCK")

# [  12.3s] ✓ node2            worker   joined in 4.1 s
EVENT_RE = re.compile(r"^\[\s*([\d.]+)s\] (\S) (\S+)\s+(\S+)\s+(.*)$")

NODES_PY = (
    "import json, sys, urllib.request\n"
    "try:\n"
    "    url = 'http://127.0.0.1:%d/api/v0/nodes?limit=10000&detail=true' % int(sys.argv[1])\n"
    "    d = json.load(urllib.request.urlopen(url, timeout=5))\n"
    "    r = d['data']['result']\n"
    "    rows = r['result'] if isinstance(r, dict) else r\n"
    "    print(json.dumps(sorted(n['node_ip'] for n in rows if n.get('state') == 'ALIVE')))\n"
    "except Exception as e:\n"
    "    print(json.dumps({'error': str(e)[:200]}))\n"
)


# ------------------------------------------------------------------------------------------
# helpers


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


OUR_PIDNS: set[int] = set()  # pid-namespace inodes of our hosts (set once they run)


def _pidns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _ours(pid: int) -> bool | None:
    """Whether `pid` is this bench's: inside one of our hosts' pid namespaces, or a descendant
    of this process (ssh clients, nsenter, `python -m tui`); None for kernel threads."""
    if OUR_PIDNS and _pidns(pid) in OUR_PIDNS:
        return True
    me, seen = os.getpid(), 0
    while pid not in (0, 1) and seen < 64:
        if pid == me:
            return True
        if pid == 2:
            return None
        parent = _ppid(pid)
        if parent is None:
            return False
        pid, seen = parent, seen + 1
    return False


def _label(pid: int, comm: str) -> str:
    """What a process is, for the CPU attribution (Ray's Python processes by their script).
    Processes that are not ours are 'other: COMM' (another session's tests, say)."""
    ours = _ours(pid)
    if ours is None:
        return "kernel threads"
    if not ours:
        return f"other: {comm}"
    if comm.startswith("ray-dashboard"):
        return "dashboard (head)"
    if comm.startswith("ray::DashboardA"):  # comm is cut at 15 characters
        return "dashboard agent (ray::, per node)"
    if comm.startswith("ray::RuntimeEnv"):
        return "runtime_env agent (ray::, per node)"
    if comm.startswith("ray::"):
        return "ray:: worker processes"
    if comm in ("raylet", "gcs_server", "sshd", "ssh"):
        return comm
    if pid == os.getpid():
        return "this bench"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    words = [a.decode(errors="replace") for a in argv if a]
    line = " ".join(words)
    if not words or ("python" not in comm and "python" not in words[0]):
        return comm
    for needle, label in (
        ("ray.scripts.scripts start", "`ray start` CLI"),
        ("ray.scripts.scripts stop", "`ray stop` CLI"),
        ("dashboard/agent.py", "dashboard agent"),
        ("runtime_env/agent/main.py", "runtime_env agent"),
        ("dashboard/dashboard.py", "dashboard (head)"),
        ("log_monitor.py", "log_monitor"),
        ("autoscaler/_private/monitor.py", "autoscaler monitor (head)"),
        ("-m tui", "verl-tui CLI"),
        ("default_worker.py", "ray:: worker processes"),
        ("ray.util.client.server", "ray client server (head)"),
    ):
        if needle in line:
            return label
    if len(words) > 1 and words[1] == "-c":
        return "python -c (probe, netcheck, ps)"
    return "python (other)"


class CpuSampler:
    """/proc/stat every `period` s in a thread: machine-wide busy jiffies and runnable tasks;
    every `proc_period` s also every process's utime+stime, labelled by what it is (costs
    ≈ 2 % of one core)."""

    def __init__(self, period: float = 0.1, proc_period: float = 0.25):
        self.period = period
        self.proc_period = proc_period
        self.samples: list[tuple[float, int, int, int]] = []  # (t, busy, total, procs_running)
        self.proc_samples: list[tuple[float, dict[int, int]]] = []
        self.labels: dict[int, str] = {}
        self._comms: dict[int, str] = {}
        self._next_proc = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def read() -> tuple[int, int, int]:
        busy = total = running = 0
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu "):
                    v = [int(x) for x in line.split()[1:]]
                    idle = v[3] + v[4]  # idle + iowait
                    total = sum(v[:8])  # guest time is already inside user/nice
                    busy = total - idle
                elif line.startswith("procs_running"):
                    running = int(line.split()[1])
        return busy, total, running

    def _read_procs(self) -> dict[int, int]:
        ticks = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks[pid] = int(fields[11]) + int(fields[12])
            if self._comms.get(pid) != comm:  # new, or exec'ed since (sshd -> python)
                self._comms[pid] = comm
                self.labels[pid] = _label(pid, comm)
        return ticks

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            self.samples.append((now, *self.read()))
            if now >= self._next_proc:
                self.proc_samples.append((now, self._read_procs()))
                self._next_proc = now + self.proc_period
            self._stop.wait(self.period)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, a: float, b: float) -> dict | None:
        """CPU busy % of the machine between monotonic times a and b, and busy CPU-seconds."""
        inside = [s for s in self.samples if a - self.period <= s[0] <= b + self.period]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        dbusy, dtotal = last[1] - first[1], last[2] - first[2]
        runnable = [s[3] for s in inside]
        return {
            "busy_pct": 100.0 * dbusy / dtotal if dtotal else None,
            "busy_cpu_s": dbusy / CLK_TCK,
            "runnable_avg": statistics.fmean(runnable),
            "seconds": last[0] - first[0],
        }

    def by_process(self, a: float, b: float) -> dict[str, float]:
        """CPU-seconds per process label between a and b (a process seen first inside the
        window counts from 0; one that exits counts until its last sample)."""
        before = [s for s in self.proc_samples if s[0] <= a]
        base = before[-1][1] if before else {}
        used: dict[int, int] = {}
        for t, ticks in self.proc_samples:
            if a < t <= b + self.proc_period:
                for pid, v in ticks.items():
                    used[pid] = v - base.get(pid, 0)
        out: dict[str, float] = {}
        for pid, v in used.items():
            label = self.labels.get(pid, "?")
            out[label] = out.get(label, 0.0) + v / CLK_TCK
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def foreign(self, a: float, b: float) -> dict:
        """CPU used between a and b by processes that are not this bench's (another session's
        tests on the same machine), in CPU-s and in % of the machine."""
        procs = self.by_process(a, b)
        cpu_s = sum(v for k, v in procs.items() if k.startswith("other: "))
        top = {
            k.removeprefix("other: "): round(v, 2)
            for k, v in procs.items()
            if k.startswith("other: ") and v >= 0.05
        }
        cpus = os.cpu_count() or 1
        return {
            "cpu_s": cpu_s,
            "pct_of_machine": 100 * cpu_s / ((b - a) * cpus) if b > a else 0.0,
            "top": dict(list(top.items())[:5]),
        }


# ------------------------------------------------------------------------------------------
# the hosts


class Bench:
    def __init__(self, cluster: NsCluster, workdir: Path):
        self.cluster = cluster
        self.workdir = workdir
        self.head = cluster.hosts[0]
        self.workers = cluster.hosts[1:]
        self.cpus = os.cpu_count() or 1

    def hosts_yaml(self, k: int) -> Path:
        hosts = [self.head, *self.workers[:k]]
        lines = [
            "cluster: bringup",
            f"python: {VENV_PY}",
            "ssh:",
            "  user: root",
            f"  identity_file: {self.cluster.client_key}",
            f"  known_hosts: {self.cluster.known_hosts}",
            "  config: ''",
            "  connect_timeout: 5",
            "ray:",
            f"  port: {PORT}",
            f"  dashboard_port: {DASH_PORT}",
            f"  memory: {MEMORY}",
            f"  object_store_memory: {OBJECT_STORE}",
            f"  start_timeout: {START_TIMEOUT}",
            "hosts:",
        ]
        for h in hosts:
            lines += [f"  - name: {h.name}", f"    address: {h.address}"]
        path = self.workdir / f"hosts-{k}.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    # -- state checks -----------------------------------------------------------------------

    def ray_processes(self) -> dict[str, list[str]]:
        out = {}
        for h in self.cluster.hosts:
            ps = self.cluster.exec_in(h.name, ["ps", "-eo", "comm="])
            names = [n for n in ps.stdout.split() if n in RAY_NAMES or n.startswith("ray::")]
            if names:
                out[h.name] = names
        return out

    def force_stop_all(self, k: int | None = None) -> None:
        """`ray stop --force` on the head and the first k workers (default: every namespace);
        workers in parallel, then the head."""

        def stop(name: str) -> None:
            with contextlib.suppress(subprocess.SubprocessError):
                self.cluster.exec_in(name, [*RAY, "stop", "--force"], timeout=90)

        workers = self.workers if k is None else self.workers[:k]
        with ThreadPoolExecutor(len(workers)) as pool:
            list(pool.map(stop, [w.name for w in workers]))
        stop(self.head.name)

    def assert_clean(self, after: str) -> None:
        left = self.ray_processes()
        if left:
            self.force_stop_all()
            raise RuntimeError(f"Ray processes left after {after}: {left}")

    # -- verl-tui up --------------------------------------------------------------------------

    def run_verl_tui(self, k: int, sampler: CpuSampler, after_up_s: float) -> dict:
        path = self.hosts_yaml(k)
        lines: list[tuple[float, str]] = []
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [VENV_PY, "-m", "tui", "up", str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            bufsize=1,
        )
        err_chunks: list[str] = []
        err_thread = threading.Thread(
            target=lambda: err_chunks.append(proc.stderr.read()), daemon=True
        )
        err_thread.start()
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))
        rc = proc.wait(timeout=START_TIMEOUT * 3)
        t1 = time.monotonic()
        err_thread.join(10)
        stdout = "\n".join(text for _, text in lines)
        stderr = "".join(err_chunks)
        ok = rc == 0 and f"{k + 1} nodes alive" in stdout
        result: dict = {"method": "verl-tui", "workers": k, "wall_s": t1 - t0, "rc": rc, "ok": ok}
        result["foreign"] = sampler.foreign(t0, t1)
        if not ok:
            result["stdout_tail"] = stdout[-3000:]
            result["stderr_tail"] = stderr[-3000:]
            return result

        # Phases, on our clock (lines are flushed as the events happen).
        events = []
        for at, text in lines:
            m = EVENT_RE.match(text)
            if m:
                events.append(
                    {"at": at - t0, "mark": m[2], "host": m[3], "phase": m[4], "message": m[5]}
                )

        def first(pred) -> float | None:
            return next((e["at"] for e in events if pred(e)), None)

        def last(pred) -> float | None:
            hits = [e["at"] for e in events if pred(e)]
            return hits[-1] if hits else None

        marks = {
            "first_line": events[0]["at"] if events else None,
            "check_ok": first(lambda e: e["phase"] == "check"),
            "head_ok": first(lambda e: e["phase"] == "head" and e["mark"] == "✓"),
            "workers_ok": last(lambda e: e["phase"] == "worker" and e["mark"] == "✓"),
            "alive_ok": first(lambda e: e["phase"] == "wait" and e["mark"] == "✓"),
            "done": first(lambda e: e["phase"] == "done"),
        }
        m = marks
        result["phases_s"] = {
            "interpreter+imports": m["first_line"],
            "probe": _sub(m["check_ok"], m["first_line"]),
            "head (start + dashboard)": _sub(m["head_ok"], m["check_ok"]),
            "workers": _sub(m["workers_ok"], m["head_ok"]),
            "wait ALIVE": _sub(m["alive_ok"], m["workers_ok"]),
            "status + exit": _sub(result["wall_s"], m["alive_ok"]),
        }
        joins = {}
        for e in events:
            jm = re.match(r"joined in ([\d.]+) s", e["message"])
            if e["phase"] == "worker" and jm:
                joins[e["host"]] = float(jm[1])
        hm = next(
            (
                re.match(r"started in ([\d.]+) s", e["message"])
                for e in events
                if e["phase"] == "head" and e["mark"] == "✓"
            ),
            None,
        )
        result["head_started_s"] = float(hm[1]) if hm else None
        result["joined_s"] = joins
        result["cpu"] = sampler.window(t0, t1)
        result["cpu_by_process_up"] = sampler.by_process(t0, t1)
        if m["head_ok"] is not None and m["workers_ok"] is not None:
            a, b = t0 + m["head_ok"], t0 + m["workers_ok"]
            result["cpu_workers_phase"] = sampler.window(a, b)
            if result["cpu_workers_phase"]:
                result["cpu_workers_phase"]["ours_cpu_s"] = (
                    result["cpu_workers_phase"]["busy_cpu_s"] - sampler.foreign(a, b)["cpu_s"]
                )
            result["cpu_by_process_workers_phase"] = sampler.by_process(a, b)
        result["events"] = events
        if after_up_s > 0:  # Ray keeps settling after `ray start` returned
            a = time.monotonic()
            time.sleep(after_up_s)
            b = time.monotonic()
            result["cpu_after_up"] = sampler.window(a, b)
            if result["cpu_after_up"]:
                fo = sampler.foreign(a, b)["cpu_s"]
                result["cpu_after_up"]["ours_busy_pct"] = (
                    100 * (result["cpu_after_up"]["busy_cpu_s"] - fo) / ((b - a) * self.cpus)
                )
            result["cpu_by_process_after_up"] = sampler.by_process(a, b)

        down = subprocess.run(
            [VENV_PY, "-m", "tui", "down", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        result["down_rc"] = down.returncode
        if down.returncode != 0:
            result["down_stderr"] = down.stderr[-2000:]
        self.assert_clean("verl-tui down")
        return result

    # -- the seeds' serial way ----------------------------------------------------------------

    def _ray_start(self, host, extra: list[str]) -> float:
        argv = [
            *RAY,
            "start",
            *extra,
            f"--node-ip-address={host.address}",
            "--num-gpus=0",
            "--disable-usage-stats",
            f"--memory={MEMORY}",
            f"--object-store-memory={OBJECT_STORE}",
        ]
        line = f"PATH={shlex.quote(os.path.dirname(VENV_PY))}:$PATH " + shlex.join(argv)
        t = time.monotonic()
        res = self.cluster.ssh(host.name, line, connect_timeout=5, timeout=START_TIMEOUT)
        took = time.monotonic() - t
        if res.returncode != 0:
            raise RuntimeError(
                f"{host.name}: ray start exited {res.returncode}:\n"
                f"{(res.stderr + res.stdout)[-2000:]}"
            )
        return took

    def alive_ips(self) -> list[str] | None:
        res = self.cluster.ssh(
            self.head.name, shlex.join([VENV_PY, "-c", NODES_PY, str(DASH_PORT)]), timeout=30
        )
        with contextlib.suppress(ValueError, IndexError):
            doc = json.loads(res.stdout.strip().splitlines()[-1])
            if isinstance(doc, list):
                return doc
        return None

    def wait_alive(self, want: set[str], timeout: float) -> float | None:
        """Seconds until the head lists every address in `want` ALIVE; None on timeout."""
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            ips = self.alive_ips()
            if ips is not None and want <= set(ips):
                return time.monotonic() - t
            time.sleep(0.25)
        return None

    def run_serial(self, k: int, sleeps: bool, sampler: CpuSampler) -> dict:
        workers = self.workers[:k]
        result: dict = {"method": "serial+sleeps" if sleeps else "serial", "workers": k}
        t0 = time.monotonic()
        try:
            result["head_start_s"] = self._ray_start(
                self.head,
                [
                    "--head",
                    f"--port={PORT}",
                    "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={DASH_PORT}",
                ],
            )
            if sleeps:
                time.sleep(HEAD_SLEEP)
            joins, windows = {}, {}
            for w in workers:
                a = time.monotonic()
                joins[w.name] = self._ray_start(w, [f"--address={self.head.address}:{PORT}"])
                b = time.monotonic()
                windows[w.name] = sampler.window(a, b)
                if windows[w.name]:  # the machine's busy time, less other sessions' share
                    windows[w.name]["ours_cpu_s"] = (
                        windows[w.name]["busy_cpu_s"] - sampler.foreign(a, b)["cpu_s"]
                    )
                if sleeps:
                    time.sleep(WORKER_SLEEP)
            t1 = time.monotonic()
            result.update(
                wall_s=t1 - t0,
                joined_s=joins,
                cpu=sampler.window(t0, t1),
                cpu_per_worker_start=windows,
                foreign=sampler.foreign(t0, t1),
            )
            # Not timed: did it work? (the seeds' scripts never looked)
            want = {self.head.address, *(w.address for w in workers)}
            after = self.wait_alive(want, 60)
            result["alive_after_end_s"] = after
            result["ok"] = after is not None
            if not sleeps and after is not None:
                result["wall_to_alive_s"] = t1 - t0 + after
        except (RuntimeError, subprocess.SubprocessError) as exc:
            result.update(ok=False, error=str(exc)[-2000:])
        finally:
            self.force_stop_all(k)
        self.assert_clean("ray stop --force")
        return result


def wait_quiet(sampler: CpuSampler, max_wait: float, threshold_pct: float = 5.0) -> float:
    """Wait (up to `max_wait` s) until processes that are not ours used < threshold_pct of the
    machine over the last second; returns the seconds waited."""
    t = time.monotonic()
    while True:
        now = time.monotonic()
        if sampler.foreign(now - 1.0, now)["pct_of_machine"] < threshold_pct:
            return now - t
        if now - t >= max_wait:
            return now - t
        time.sleep(0.5)


def _merge_other(procs: dict[str, float]) -> dict[str, float]:
    """Another session's processes as one entry, for printing."""
    out: dict[str, float] = {}
    for name, v in procs.items():
        key = "other sessions' processes" if name.startswith("other: ") else name
        out[key] = out.get(key, 0.0) + v
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


# ------------------------------------------------------------------------------------------
# main


def wait_for_product(timeout: float) -> bool:
    """`tui.cluster.probe` is being finished elsewhere: poll until `import tui.commands.ray`
    works (every 120 s, up to `timeout`)."""
    t = time.monotonic()
    while True:
        res = subprocess.run(
            [VENV_PY, "-c", "import tui.commands.ray"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if res.returncode == 0:
            return True
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        if "tui.cluster.probe" not in res.stderr or time.monotonic() - t > timeout:
            print(f"verl-tui cannot be imported: {last}", file=sys.stderr)
            return False
        print(f"  waiting for tui.cluster.probe ({last}); retry in 120 s", flush=True)
        time.sleep(120)


NOISY_PCT = 5.0  # a run during which other processes used this much of the machine is flagged


def _noisy(r: dict) -> bool:
    return (r.get("foreign") or {}).get("pct_of_machine", 0) >= NOISY_PCT


def _usable(runs: list[dict], method: str, k: int) -> list[dict]:
    """The successful runs of (method, k) that other processes left alone; all successful
    ones when none was left alone."""
    ok = [r for r in runs if r["method"] == method and r["workers"] == k and r.get("ok")]
    return [r for r in ok if not _noisy(r)] or ok


def summarize(runs: list[dict], counts: list[int]) -> dict:
    methods = ("verl-tui", "serial+sleeps", "serial")
    table: dict = {}
    flagged_used = dict.fromkeys(methods, 0)
    for meth in methods:
        for k in counts:
            used = _usable(runs, meth, k)
            flagged_used[meth] += sum(1 for r in used if _noisy(r))
            walls = [r["wall_s"] for r in used]
            every = [
                r["wall_s"]
                for r in runs
                if r["method"] == meth and r["workers"] == k and r.get("ok")
            ]
            table.setdefault(meth, {})[k] = {
                "median_s": _median(walls),
                "used_s": walls,
                "runs_s": every,
            }
    to_alive = {
        k: _median(
            [r["wall_to_alive_s"] for r in _usable(runs, "serial", k) if r.get("wall_to_alive_s")]
        )
        for k in counts
    }
    ratios = {}
    lo, hi = min(counts), max(counts)
    for meth in methods:
        a, b = table[meth][lo]["median_s"], table[meth][hi]["median_s"]
        ratios[meth] = b / a if a and b else None
    ratios_of_min = {}
    for meth in methods:
        a, b = table[meth][lo]["runs_s"], table[meth][hi]["runs_s"]
        ratios_of_min[meth] = min(b) / min(a) if a and b else None
    return {
        "table": table,
        "serial_to_alive_s": to_alive,
        "ratios": ratios,
        "ratios_of_min": ratios_of_min,
        "ratio_label": f"T({hi})/T({lo})",
        "flagged_runs_in_medians": flagged_used,
    }


def analysis(runs: list[dict], counts: list[int], cpus: int) -> dict:
    """Where `verl-tui up`'s time goes, per k (medians over repeats)."""
    out: dict = {
        "phases_s": {},
        "join_s": {},
        "cpu": {},
        "serial_join_s": {},
        "cpu_by_process_workers_phase": {},
        "cpu_by_process_after_up": {},
    }
    for k in counts:
        vt = _usable(runs, "verl-tui", k)
        if not vt:
            continue
        names = vt[0]["phases_s"].keys()
        out["phases_s"][k] = {
            n: _median([r["phases_s"][n] for r in vt if r["phases_s"][n] is not None])
            for n in names
        }
        joins = [v for r in vt for v in r["joined_s"].values()]
        out["join_s"][k] = {
            "mean": statistics.fmean(joins) if joins else None,
            "max": max(joins) if joins else None,
            "head_started": _median([r["head_started_s"] for r in vt if r.get("head_started_s")]),
        }
        out["cpu"][k] = {
            "up_busy_pct": _median([r["cpu"]["busy_pct"] for r in vt if r.get("cpu")]),
            "workers_phase_busy_pct": _median(
                [r["cpu_workers_phase"]["busy_pct"] for r in vt if r.get("cpu_workers_phase")]
            ),
            "workers_phase_runnable": _median(
                [r["cpu_workers_phase"]["runnable_avg"] for r in vt if r.get("cpu_workers_phase")]
            ),
            "workers_phase_cpu_s": _median(
                [r["cpu_workers_phase"]["busy_cpu_s"] for r in vt if r.get("cpu_workers_phase")]
            ),
            "after_up_busy_pct": _median(
                [r["cpu_after_up"]["ours_busy_pct"] for r in vt if r.get("cpu_after_up")]
            ),
        }
        # "Alone": the seeds' way with sleeps, one start at a time after the others settled.
        ser = _usable(runs, "serial+sleeps", k)
        sj = [v for r in ser for v in r["joined_s"].values()]
        scpu = [c["ours_cpu_s"] for r in ser for c in r["cpu_per_worker_start"].values() if c]
        out["serial_join_s"][k] = {
            "mean": statistics.fmean(sj) if sj else None,
            "cpu_s_per_start": statistics.fmean(scpu) if scpu else None,
        }
        procs: dict[str, float] = {}
        for r in vt:
            for label, v in (r.get("cpu_by_process_workers_phase") or {}).items():
                procs[label] = procs.get(label, 0.0) + v / len(vt)
        out["cpu_by_process_workers_phase"][k] = dict(sorted(procs.items(), key=lambda kv: -kv[1]))
        after: dict[str, float] = {}
        for r in vt:
            for label, v in (r.get("cpu_by_process_after_up") or {}).items():
                after[label] = after.get(label, 0.0) + v / len(vt)
        out["cpu_by_process_after_up"][k] = dict(sorted(after.items(), key=lambda kv: -kv[1]))
    # A CPU model. Everything but the workers phase (interpreter, probe, head, wait, status) is
    # the fixed part F. One worker start costs C CPU-seconds (our processes' busy time in the
    # workers phase with `lo` workers, / lo); k starts on `cpus` cores cannot take less than
    # k*C/cpus, nor less than the workers phase with `lo` workers (W_lo).
    lo, hi = min(counts), max(counts)
    vt = [r for k in counts for r in _usable(runs, "verl-tui", k) if r.get("phases_s")]
    fixed = [
        r["wall_s"] - r["phases_s"]["workers"]
        for r in vt
        if r["phases_s"].get("workers") is not None
    ]
    per_start = [
        r["cpu_workers_phase"]["ours_cpu_s"] / lo
        for r in vt
        if r["workers"] == lo and r.get("cpu_workers_phase")
    ]
    w_lo = (out["phases_s"].get(lo) or {}).get("workers")
    if fixed and per_start and w_lo:
        f, c = statistics.median(fixed), statistics.median(per_start)
        floor_w = {k: max(w_lo, k * c / cpus) for k in counts}
        out["cpu_model"] = {
            "fixed_s": f,
            "fixed_range_s": [min(fixed), max(fixed)],
            "cpu_s_per_worker_start": c,
            "cpus": cpus,
            "workers_phase_floor_s": floor_w,
            "workers_phase_measured_s": {
                k: (out["phases_s"].get(k) or {}).get("workers") for k in counts
            },
            "best_ratio": (f + floor_w[hi]) / (f + floor_w[lo]),
            "goal_workers_phase_max_s": GOAL_RATIO * (f + w_lo) - f,
        }
    return out


def report(
    runs: list[dict], counts: list[int], cpus: int, args: argparse.Namespace
) -> tuple[dict, dict]:
    """Print the table, the ratios and where the time goes; returns (summary, analysis)."""
    summ = summarize(runs, counts)
    ana = analysis(runs, counts, cpus)
    tab = summ["table"]
    print(
        f"\nwall time, median of {args.repeat} ({args.sleeps_repeat} with sleeps) less runs"
        " that other processes slowed, s; serial = the seeds' scripts over the real ssh client"
    )
    print(
        f"  {'workers':>7} | {'verl-tui up':>11} | {'serial with sleeps':>18} | "
        f"{'serial without sleeps':>21} | {'(… until ALIVE)':>15}"
    )
    for k in counts:
        print(
            f"  {k:>7} | {_fmt(tab['verl-tui'][k]['median_s']):>11} | "
            f"{_fmt(tab['serial+sleeps'][k]['median_s']):>18} | "
            f"{_fmt(tab['serial'][k]['median_s']):>21} | "
            f"{_fmt(summ['serial_to_alive_s'][k]):>15}"
        )
    label = summ["ratio_label"]
    rv, rs, rn = (summ["ratios"][m] for m in ("verl-tui", "serial+sleeps", "serial"))
    busy_runs = [r for r in runs if _noisy(r)]
    fo_cpu = sum((r.get("foreign") or {}).get("cpu_s", 0) for r in runs)
    fo_wall = sum(r.get("wall_s") or 0 for r in runs)
    summ["foreign_pct_of_machine"] = fo = 100 * fo_cpu / (fo_wall * cpus) if fo_wall else None
    # Another session's load makes single runs slower at random: then a verdict means little.
    noisy = summ["flagged_runs_in_medians"]["verl-tui"] > 0
    verdict = "-" if rv is None else ("PASS" if rv <= GOAL_RATIO else "FAIL")
    summ["verdict"] = verdict + (
        " (unreliable: other processes slowed a verl-tui run in it)" if noisy else ""
    )
    print(
        f"\n{label}: verl-tui up {_fmt(rv, 2)} (goal ≤ {GOAL_RATIO}: {summ['verdict']}), "
        f"serial with sleeps {_fmt(rs, 2)}, serial without sleeps {_fmt(rn, 2)}; machine: "
        f"{cpus} CPU cores shared by all {max(counts) + 1} Ray nodes"
    )
    rmin = summ["ratios_of_min"]["verl-tui"]
    if rmin is not None:
        print(f"  verl-tui up, best run of each: {label} {rmin:.2f}")
    print(
        f"  other processes on this machine (not this bench) used {_fmt(fo, 0)} % of it "
        "during the timed runs"
        + (
            f"; {len(busy_runs)} runs had ≥ {NOISY_PCT:g} % and are left out of the medians "
            f"where a quieter run of the same kind exists "
            f"({sum(summ['flagged_runs_in_medians'].values())} stayed in)"
            if busy_runs
            else ""
        )
    )

    print("\nwhere verl-tui up's time goes (medians, s; phases from its progress lines):")
    names = next(iter(ana["phases_s"].values()), {}).keys()
    print(f"  {'workers':>7} | " + " | ".join(f"{n:>{max(len(n), 5)}}" for n in names))
    for k, ph in ana["phases_s"].items():
        print(f"  {k:>7} | " + " | ".join(f"{_fmt(ph[n]):>{max(len(n), 5)}}" for n in names))
    print(
        f"\n  {'workers':>7} | {'joined in (mean/max)':>20} | {'ray start alone':>15} |"
        f" {'CPU busy, workers phase':>23} | {'runnable':>8} | {'CPU busy after up':>17}"
    )
    for k in counts:
        j, sj, c = ana["join_s"].get(k, {}), ana["serial_join_s"].get(k, {}), ana["cpu"].get(k, {})
        print(
            f"  {k:>7} | {_fmt(j.get('mean')) + ' / ' + _fmt(j.get('max')):>20} | "
            f"{_fmt(sj.get('mean')):>15} | {_fmt(c.get('workers_phase_busy_pct'), 0) + ' %':>23}"
            f" | {_fmt(c.get('workers_phase_runnable')):>8} | "
            f"{_fmt(c.get('after_up_busy_pct'), 0) + ' %':>17}"
        )
    print(
        "  (joined in: each worker's `ray start` in verl-tui up, k in parallel; ray start alone:"
        " the seeds' way with sleeps, one at a time; runnable: tasks ready to run, avg;\n"
        "   CPU busy after up: this bench's processes in the 2 s after `up` returned)"
    )
    for k in (min(counts), max(counts)):
        procs = ana["cpu_by_process_workers_phase"].get(k)
        if procs:
            wp = ana["phases_s"][k]["workers"]
            print(
                f"\n  CPU-seconds by process during verl-tui's workers phase, k={k} "
                f"({_fmt(wp)} s x {cpus} cores = {_fmt(wp * cpus if wp else None)} CPU-s): "
                + ", ".join(f"{n} {v:.1f}" for n, v in list(_merge_other(procs).items())[:8])
            )
    after = ana["cpu_by_process_after_up"].get(max(counts))
    if after:
        print(
            f"  in the {args.after_up:g} s after up returned ({max(counts) + 1} nodes), CPU-s: "
            + ", ".join(f"{n} {v:.2f}" for n, v in list(_merge_other(after).items())[:6])
        )
    heads = [
        r["head_start_s"]
        for r in runs
        if r["method"] != "verl-tui" and r.get("ok") and r.get("head_start_s")
    ]
    vt_head = [
        r["head_started_s"]
        for r in runs
        if r["method"] == "verl-tui" and r.get("ok") and r.get("head_started_s")
    ]
    if heads and vt_head:
        print(
            f"\n  head: `ray start --head` over ssh (serial runs) "
            f"{statistics.median(heads):.1f} s; verl-tui's head step (start + dashboard answers) "
            f"{statistics.median(vt_head):.1f} s: the same for every k"
        )
    lo, hi = min(counts), max(counts)
    model = ana.get("cpu_model")
    if model:
        c, f = model["cpu_s_per_worker_start"], model["fixed_s"]
        fl, me = model["workers_phase_floor_s"], model["workers_phase_measured_s"]
        f_lo, f_hi = model["fixed_range_s"]
        print(
            f"\n  CPU model: everything but the workers phase takes {f:.1f} s at every k (runs:"
            f" {f_lo:.1f}–{f_hi:.1f} s, mostly the head); one "
            f"worker start costs ≈ {c:.1f} CPU-s of our processes (k={lo}), so k parallel starts "
            f"on {cpus} cores need ≈ k·{c:.1f}/{cpus} s or more: workers phase floor "
            + ", ".join(f"k={k} {fl[k]:.1f} s (measured {_fmt(me[k])})" for k in counts)
        )
        print(
            f"  {label} ≤ {GOAL_RATIO} needs the k={hi} workers phase ≤ "
            f"{model['goal_workers_phase_max_s']:.1f} s; with perfect overlap on this machine "
            f"the best {label} is ≈ {model['best_ratio']:.2f}"
        )
    if rv is not None and rv > GOAL_RATIO:
        print(
            f"\n  {label} misses {GOAL_RATIO}: {cpus} cores for {hi + 1} Ray nodes; the workers"
            " phase is CPU-bound (busy % above), parallel starts queue for the same cores."
        )
    return summ, ana


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--workers", default="1,2,4", help=f"worker counts, comma separated (max {MAX_WORKERS})"
    )
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument(
        "--sleeps-repeat",
        type=int,
        default=1,
        help="repeats of the serial way with sleeps (≥ 75 %% of it is `sleep`; "
        "default 1, to keep the run under 8 min)",
    )
    p.add_argument(
        "--after-up",
        type=float,
        default=2.0,
        help="seconds of CPU sampling right after each `verl-tui up` returned",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        help="before each run, wait up to this long until other processes use < 5 %% "
        "of the machine (a shared machine: another session's tests)",
    )
    p.add_argument(
        "--wait-product",
        type=float,
        default=1200.0,
        help="seconds to wait for tui.cluster.probe to become importable",
    )
    p.add_argument(
        "--sshd", default=SSHD, help="the hosts' OpenSSH sshd (absolute path; default %(default)s)"
    )
    p.add_argument(
        "--report-from",
        metavar="JSON",
        help="print the report of a saved bench/results/bringup.json again (and "
        "recompute its summary); runs nothing",
    )
    args = p.parse_args()
    if args.report_from:
        path = Path(args.report_from)
        doc = json.loads(path.read_text())
        prm = doc["params"]
        ns = argparse.Namespace(
            repeat=prm["repeat"],
            sleeps_repeat=prm["sleeps_repeat"],
            after_up=prm.get("after_up_s", 2.0),
        )
        print(
            f"report of {path} (code {doc['machine']['code']}, {doc['machine']['cpu_count']} CPUs)"
        )
        doc["summary"], doc["analysis"] = report(
            doc["runs"], prm["workers"], doc["machine"]["cpu_count"], ns
        )
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        return 0
    counts = sorted({int(x) for x in args.workers.split(",") if x.strip()})
    if not counts or min(counts) < 1 or max(counts) > MAX_WORKERS:
        p.error(f"--workers: counts between 1 and {MAX_WORKERS}")
    nhosts = max(HOSTS, max(counts) + 1)  # the head and the most workers asked for
    if os.geteuid() != 0:
        print("bringup.py needs root (network namespaces)", file=sys.stderr)
        return 2
    cpus = os.cpu_count() or 1
    # At the start: other people may commit while this runs. BENCH_CODE_VERSION names it where
    # the tree has no .git (a copy on another machine: bench/device_bringup.sh).
    code = os.environ.get("BENCH_CODE_VERSION") or code_version()
    print(
        f"bring-up: verl-tui up vs the seeds' serial scripts, {', '.join(map(str, counts))} "
        f"workers x {args.repeat}, {nhosts} namespace hosts; {cpus} CPUs, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; "
        f"code {code}",
        flush=True,
    )
    if not wait_for_product(args.wait_product):
        return 1

    runs: list[dict] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vt-bringup-") as tmp, CpuSampler() as sampler:
        cluster = NsCluster(nhosts, Path(tmp) / "hosts", sshd=args.sshd)
        try:
            cluster.start()
            bench = Bench(cluster, Path(tmp))
            OUR_PIDNS.update(
                i
                for i in (_pidns(h.sshd_pid) for h in cluster.hosts if h.sshd_pid)
                if i is not None
            )
            bench.assert_clean("start")
            for rep in range(args.repeat):
                # Alternate the order across repeats, so drift does not favour one method.
                order = ["verl-tui", "serial+sleeps", "serial"]
                if rep % 2:
                    order.reverse()
                for k in counts:
                    for meth in order:
                        if meth == "serial+sleeps" and rep >= args.sleeps_repeat:
                            continue
                        waited = wait_quiet(sampler, args.quiet_wait)
                        if meth == "verl-tui":
                            r = bench.run_verl_tui(k, sampler, args.after_up)
                        else:
                            r = bench.run_serial(k, meth == "serial+sleeps", sampler)
                        r["repeat"] = rep
                        r["waited_for_quiet_s"] = waited
                        runs.append(r)
                        extra = ""
                        if r.get("joined_s"):
                            extra = "  joins " + " ".join(
                                f"{v:.1f}" for v in r["joined_s"].values()
                            )
                        if r.get("wall_to_alive_s"):
                            extra += f"  (all ALIVE at {r['wall_to_alive_s']:.1f} s)"
                        if meth == "serial+sleeps" and r.get("alive_after_end_s") is not None:
                            extra += (
                                f"  (all ALIVE {r['alive_after_end_s']:.1f} s after the last sleep)"
                            )
                        fo = r.get("foreign") or {}
                        if fo.get("pct_of_machine", 0) >= 2:
                            extra += (
                                f"  [other processes used {fo['pct_of_machine']:.0f} % "
                                f"of the machine: {', '.join(list(fo['top'])[:3])}]"
                            )
                        status = "ok" if r.get("ok") else "FAILED"
                        print(
                            f"  [{time.monotonic() - t_start:5.0f}s] repeat {rep + 1} "
                            f"k={k} {meth:<14} {_fmt(r.get('wall_s'))} s {status}{extra}",
                            flush=True,
                        )
                        if not r.get("ok"):
                            print(
                                "    "
                                + (
                                    r.get("error")
                                    or r.get("stderr_tail", "")
                                    or r.get("stdout_tail", "")
                                )[-1500:].replace("\n", "\n    "),
                                flush=True,
                            )
        finally:
            with contextlib.suppress(Exception):
                if cluster.hosts and all(cluster.is_running(h.name) for h in cluster.hosts):
                    Bench(cluster, Path(tmp)).force_stop_all()
            cluster.stop()

    summ, ana = report(runs, counts, cpus, args)

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bringup.json"
    out.write_text(
        json.dumps(
            {
                "machine": {
                    "cpu_count": cpus,
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "code": code,
                    "code_at_end": os.environ.get("BENCH_CODE_VERSION") or code_version(),
                },
                "params": {
                    "workers": counts,
                    "repeat": args.repeat,
                    "sleeps_repeat": args.sleeps_repeat,
                    "after_up_s": args.after_up,
                    "quiet_wait_s": args.quiet_wait,
                    "hosts": nhosts,
                    "memory": MEMORY,
                    "object_store_memory": OBJECT_STORE,
                    "head_sleep_s": HEAD_SLEEP,
                    "worker_sleep_s": WORKER_SLEEP,
                    "goal_ratio": GOAL_RATIO,
                },
                "summary": summ,
                "analysis": ana,
                "runs": runs,
                "total_s": time.monotonic() - t_start,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"\nwrote {out.relative_to(ROOT)} (total {time.monotonic() - t_start:.0f} s)")
    ok = all(r.get("ok") for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
