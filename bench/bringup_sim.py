"""`verl-tui check` on N simulated hosts, and `verl-tui up` refusing when one host is down.

    .venv/bin/python bench/bringup_sim.py [--hosts 128] [--repeat 3]

bench/simhosts.py (--procs processes, so the hosts' side is not the limit) serves N asyncssh
hosts on 127.0.0.1 that run the cockpit's commands here (`--exec-real`: the real probe, under
/bin/sh; `ray start/stop` always refused; each distinct probe runs once per simulator and its
answer is replayed for the other hosts, since real hosts probe on their own CPUs in parallel:
`--real-everywhere` runs every one here), plus one host, last in hosts.yaml, whose port nothing
listens on (connection refused). Times, each in a fresh CLI process:

- check: `python -m tui check HOSTS` over the N reachable hosts (exit status and wall time;
  goal ≤ 3 s at 128 hosts);
- up, one down: `python -m tui up HOSTS+1` (the N hosts and the down one): how long until it
  refuses, and whether the refusal names the down host (goal ≤ 2 s). Nothing is started: the
  refusal must come before any `ray start` (the simulator would refuse one anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import code_version

ROOT = Path(__file__).resolve().parents[1]


def _sims(n: int, workdir: str, procs: int, cache: bool) -> tuple[list[subprocess.Popen], str]:
    """`procs` simulator processes sharing one host key and client key, N hosts in all, and one
    hosts.yaml for all of them with the down host last (the last to be connected)."""
    import asyncssh

    keys = Path(workdir) / "keys"
    keys.mkdir()
    for name in ("host_ed25519", "id_ed25519"):
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(keys / name))
    sims, yamls = [], []
    per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    for i, count in enumerate(per):
        d = Path(workdir) / f"sim{i}"
        argv = [sys.executable, str(ROOT / "bench" / "simhosts.py"), "--hosts", str(count)]
        argv += ["--dir", str(d), "--exec-real", "--exit-on-stdin-eof", "--keys", str(keys)]
        argv += ["--python", sys.executable, "--prefix", f"s{i}h"]
        argv += ["--cache-real"] if cache else []
        argv += ["--unreachable", "1"] if i == procs - 1 else []
        sims.append(
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    deadline = time.monotonic() + 120
    for sim in sims:
        assert sim.stdout is not None
        while time.monotonic() < deadline:
            line = sim.stdout.readline()
            if line.startswith("ready "):
                yamls.append(Path(line.split(" ", 1)[1].strip()))
                break
            if not line:
                raise SystemExit("simulator did not start")
    known = Path(workdir) / "known_hosts"
    known.write_text("".join((y.parent / "known_hosts").read_text() for y in yamls))
    head, _, _ = yamls[0].read_text().partition("hosts:\n")
    entries = "".join(y.read_text().partition("hosts:\n")[2] for y in yamls)
    head = "\n".join(
        f"  known_hosts: {known}" if ln.startswith("  known_hosts:") else ln
        for ln in head.splitlines()
    )
    merged = Path(workdir) / "hosts.yaml"
    merged.write_text(head + "\nhosts:\n" + entries)
    return sims, str(merged)


TREE = ROOT  # --tree: where `python -m tui` runs (another copy of tui/: a before/after pair)


def _cli(*args: str, timeout: float = 120) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="vt-simstate-"))
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=TREE,
        env=env,
    )
    return time.monotonic() - t0, res


def _up_timed(hosts: str, down: str) -> dict:
    """`python -m tui up` with its output lines timestamped as they arrive: when the refusal
    naming `down` was printed (and the command's own clock in it), and when the process ended;
    the difference to the wall time is interpreter start, imports and exit."""
    env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="vt-simstate-"))
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui", "up", hosts],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=TREE,
        env=env,
    )
    assert proc.stdout is not None
    lines, named_at = [], None
    for line in proc.stdout:
        lines.append(line)
        if named_at is None and down in line:
            named_at = time.monotonic() - t0
    proc.wait(timeout=60)
    took = time.monotonic() - t0
    first_event = next((ln for ln in lines if ln.startswith("[")), "")
    named = [ln.strip() for ln in lines if down in ln][:2]
    return {
        "s": round(took, 2),
        "rc": proc.returncode,
        "named_at_s": None if named_at is None else round(named_at, 2),
        "first_event": first_event.strip()[:120],
        "names_down_host": bool(named),
        "started_ray": any("ray start" in ln for ln in lines)
        and not any("refused" in ln or "not starting" in ln for ln in lines),
        "message": named or [ln.strip() for ln in lines[-3:]],  # else how it ended
    }


def _phases(*args: str) -> dict:
    """One CLI run through bench/cli_phases.py: its marks, the interpreter's start-up before
    its first line, and the exit after its last mark (both on the system-wide monotonic clock)."""
    env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="vt-simstate-"))
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cli_phases.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TREE,
        env=env,
    )
    end = time.monotonic()
    line = next((ln for ln in res.stderr.splitlines() if ln.startswith("phases ")), None)
    if line is None:
        return {"error": res.stderr[-500:]}
    doc = json.loads(line[7:])
    marks = doc["marks"]
    return {
        "wall_s": round(end - t0, 3),
        "start_s": round(doc["t0"] - t0, 3),  # interpreter start-up, before our first line
        "marks": marks,
        "exit_s": round(end - doc["t0"] - (marks[-1][0] if marks else 0), 3),
        "rc": doc["rc"],
    }


def _importtime(*args: str) -> dict:
    """`python -X importtime -m tui ARGS`: the modules' total and the ten costliest top-level
    imports (cumulative, ms)."""
    env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="vt-simstate-"))
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tui", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TREE,
        env=env,
    )
    top: list[tuple[int, str]] = []
    total = 0
    for ln in res.stderr.splitlines():
        if not ln.startswith("import time:") or "self [us]" in ln:
            continue
        self_us, cum, name = ln.removeprefix("import time:").split("|")
        total += int(self_us)
        if not name.startswith("  "):  # top level (one space): imported by __main__ itself
            top.append((int(cum), name.strip()))
    top.sort(reverse=True)
    return {"total_ms": round(total / 1000), "top_ms": [[n, round(c / 1000)] for c, n in top[:10]]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--real-everywhere",
        action="store_true",
        help="every simulated host runs its own probe here (all on this machine's CPUs)",
    )
    p.add_argument(
        "--procs",
        type=int,
        default=max(1, min(8, (os.cpu_count() or 2) // 2)),
        help="simulator processes (one core each at most: the hosts' side must not be the limit)",
    )
    p.add_argument("--tree", help="run `python -m tui` in this copy of the repository")
    p.add_argument(
        "--phases",
        action="store_true",
        help="also one check and one up through bench/cli_phases.py (where the wall time goes) "
        "and `python -X importtime -m tui check`",
    )
    args = p.parse_args()
    global TREE
    TREE = Path(args.tree).resolve() if args.tree else ROOT
    out: dict = {"bench": "bringup_sim", "code": code_version(), "hosts": args.hosts}
    out["tree"] = args.tree or "."
    out["cpus"] = os.cpu_count()
    out["sim_procs"] = args.procs
    out["probes"] = "real on every host" if args.real_everywhere else "first real, replayed"
    t_import, _ = _cli("--help")
    out["cli_help_s"] = round(t_import, 2)
    with tempfile.TemporaryDirectory(prefix="vt-bsim-") as work:
        sims, hosts = _sims(args.hosts, work, args.procs, not args.real_everywhere)
        try:
            text = Path(hosts).read_text()
            # The reachable hosts alone (for check), and with the down one (for up).
            ok_hosts = Path(work) / "ok.yaml"
            ok_hosts.write_text(text.split("  - name: down000")[0])  # down000 comes last
            checks, ups = [], []
            for _ in range(args.repeat):
                took, res = _cli("check", str(ok_hosts))
                checks.append({"s": round(took, 2), "rc": res.returncode})
                last = (res.stdout.strip().splitlines() or [""])[-1]
                ups.append(_up_timed(hosts, "down000"))
            out["check"] = checks
            out["check_last_line"] = last
            out["up_one_down"] = ups
            if args.phases:
                out["phases"] = {"check": _phases("check", str(ok_hosts))}
                out["phases"]["up_one_down"] = _phases("up", hosts)
                out["importtime_check"] = _importtime("check", str(ok_hosts))
        finally:
            out["sim"] = []
            for sim in sims:
                try:  # communicate() closes its stdin: the simulator's cue to stop
                    stats = sim.communicate(timeout=30)[0]
                except subprocess.TimeoutExpired:
                    sim.kill()
                    stats = ""
                out["sim"] += [
                    json.loads(ln[6:]) for ln in stats.splitlines() if ln.startswith("stats ")
                ]
    c = [x["s"] for x in out["check"]]
    u = [x["s"] for x in out["up_one_down"]]
    print(json.dumps(out))
    print(
        f"\n{args.hosts} simulated hosts (code {out['code']}, load {os.getloadavg()[0]:.1f}): "
        f"check median {statistics.median(c):.2f} s (runs {c}, exit {out['check'][0]['rc']}; "
        f"goal ≤ 3 s); up with one host down: refused in median {statistics.median(u):.2f} s "
        f"(runs {u}, named after {[x['named_at_s'] for x in out['up_one_down']]} s, "
        f"exit {out['up_one_down'][0]['rc']}, names it: "
        f"{all(x['names_down_host'] for x in out['up_one_down'])}; goal ≤ 2 s); "
        f"`python -m tui --help` {out['cli_help_s']} s"
    )
    res_dir = ROOT / "bench" / "results"
    res_dir.mkdir(exist_ok=True)
    (res_dir / "bringup_sim.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
