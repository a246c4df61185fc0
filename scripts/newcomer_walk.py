"""The newcomer's walk of the front page (issue 24's done-when), replayed in a real terminal.

A fresh clone of this repository's HEAD (or the working tree, --worktree); three OpenSSH sshd
hosts in network namespaces (tests/harness) whose interpreter is this venv's Python (ray, verl,
torch CPU; no GPU, no data, no model, no vLLM); hosts.yaml written once as the README's step 3
shows it, with its "No GPUs" keys; the cockpit launched once in tmux at 120x40 and driven with
`tmux send-keys`, as the README says: `u`, then `2`, `n`, `enter`, `ctrl+s` (and `ctrl+s` again
when the job preflight lists what the hosts lack). Each key waits for the screen a person would
read before pressing it; every screen is saved under --out.

Prints the keys pressed after Ray is up, the seconds from Ray up to the job's row on the Jobs
screen ("submitted": Ray accepted it), the seconds to its hint, the cockpit launches (1) and
the hosts.yaml edits after the first write (0), and exits 1 when the walk does not get there.

Needs root (namespaces) and tmux. Usage: .venv/bin/python scripts/newcomer_walk.py [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from harness.nshosts import NsCluster  # noqa: E402

COLS, ROWS = 120, 40
PRESET = "grpo-gsm8k-qwen2.5-0.5b"
RAY_UP_S = 420  # a loaded 2-core machine starts three Ray nodes in 1-3 minutes
RAY_UP_TRIES = 6  # the failure line says "u tries again": a newcomer does


class WalkFailed(RuntimeError):
    """The walk did not reach the screen it waited for; the message holds that screen."""


def hosts_yaml(cluster: NsCluster) -> str:
    """The README's step 3 for these hosts, with its "No GPUs" keys, written once."""
    lines = [
        "cluster: newcomer",
        f"python: {sys.executable}",
        f"ssh: {{user: root, identity_file: {cluster.client_key}, "
        f"known_hosts: {cluster.known_hosts}}}",
        "ray: {num_cpus: 3}",
        "hosts:",
    ]
    for host in cluster.hosts:
        lines += [f"  - name: {host.name}", f"    address: {host.address}", "    num_gpus: 1"]
    return "\n".join(lines) + "\n"


class Pane:
    """One tmux session running the cockpit: keys in, screens out, each screen saved."""

    def __init__(self, name: str, out: Path):
        self.name, self.out = name, out
        self.t0 = time.monotonic()
        self.shots = 0
        self.log: list[dict[str, object]] = []

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise WalkFailed(f"tmux {shlex.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def launch(self, cwd: Path, argv: list[str], env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        line = f"env {exports} {shlex.join(argv)}; echo EXITED:$?; sleep 3600"
        self.tmux(
            "new-session", "-d", "-s", self.name, "-x", str(COLS), "-y", str(ROWS),
            "-c", str(cwd), line,
        )  # fmt: skip

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def save(self, label: str) -> str:
        text = self.screen()
        self.shots += 1
        (self.out / f"{self.shots:02d}-{re.sub(r'[^a-z0-9]+', '-', label.lower())}.txt").write_text(
            text
        )
        return text

    def wait(self, test: Callable[[str], bool], what: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if _EXITED.search(text):
                raise WalkFailed(f"the cockpit exited while waiting for {what}:\n{text}")
            if test(text):
                return text
            if time.monotonic() > deadline:
                raise WalkFailed(f"no {what} after {timeout:.0f} s:\n{text}")
            time.sleep(0.25)

    def press(self, key: str, why: str) -> None:
        self.tmux("send-keys", "-t", self.name, key)
        self.log.append({"key": key, "why": why, "at_s": round(time.monotonic() - self.t0, 1)})


_RAY_STATUS = re.compile(r"\b(PENDING|RUNNING|SUCCEEDED|FAILED|STOPPED)\b")
_ENDED = re.compile(r"\b(SUCCEEDED|FAILED|STOPPED)\b")
_EXITED = re.compile(r"^EXITED:\d+", re.M)  # the shell's line after the cockpit ends
_FRAME = re.compile(r"[\u2580-\u259f\u2500-\u257f]")  # box and block characters


def flat(text: str) -> str:
    """The screen as one line of words, a dialog's or a toast's lines without the screen
    beside them, so a message they wrap reads as it was written."""
    lines = []
    for line in text.splitlines():
        if line.count("█") >= 2:  # inside a dialog's frame
            line = line[line.index("█") + 1 : line.rindex("█")]
        elif "▌" in line:  # a toast's left edge: the screen under it is on the left
            line = line[line.rindex("▌") + 1 :]
        lines.append(line)
    return " ".join(_FRAME.sub(" ", " ".join(lines)).split())


def has(*needles: str) -> Callable[[str], bool]:
    return lambda text: all(n in flat(text) for n in needles)


def walk(out: Path, worktree: bool) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="newcomer-"))
    clone = work / "verl-tui"
    if worktree:  # uncommitted changes too
        shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".venv", ".git"))
    else:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    home = work / "home"  # no history, drafts or cached verl config from an earlier run
    home.mkdir()
    cluster = NsCluster(3, work / "hosts")
    cluster.start()
    pane = Pane(f"newcomer-{work.name[-6:]}", out)
    try:
        path = clone / "hosts.yaml"
        path.write_text(hosts_yaml(cluster))
        written = hashlib.sha256(path.read_bytes()).hexdigest()
        # `python -m tui` from the clone runs the clone's code (the README's venv: this one).
        pane.launch(
            clone,
            [sys.executable, "-m", "tui", "hosts.yaml"],
            {"HOME": str(home), "TERM": "xterm-256color", "PATH": "/usr/bin:/bin"},
        )
        launches = 1
        pane.wait(has("u Ray up"), "Cluster screen", 120)
        pane.save("cluster screen")

        tries, restart = 0, False
        while True:  # before Ray is up: not counted
            tries += 1
            if restart:  # Ray left half-started: "R restarts Ray", after a question
                pane.press("R", "Ray restart")
                pane.wait(has("Restart Ray on every host?"), "the restart question", 60)
                pane.press("y", "yes")
            else:
                pane.press("u", "Ray up")
            pane.wait(
                lambda t: any(w in flat(t) for w in ("running…", "alive, Ray", "u tries again")),
                "the bring-up under way",
                60,
            )
            text = flat(
                pane.wait(
                    lambda t: any(w in flat(t) for w in ("alive, Ray offers", "u tries again")),
                    "Ray's outcome",
                    RAY_UP_S,
                )
            )
            pane.save(f"ray up try {tries}")
            if "alive, Ray offers" in text:
                break
            if tries == RAY_UP_TRIES:
                raise WalkFailed(f"Ray did not come up in {tries} tries: {text}")
            pane.press("Escape", "close the failed bring-up (its line says: u tries again)")
            pane.wait(lambda t: "u tries again" not in flat(t), "the view closed", 30)
            restart = "--restart" in text
        ray_up = time.monotonic()
        counted_from = len(pane.log)

        pane.press("2", "Jobs (the bring-up line says: 2 Jobs, then n)")
        pane.wait(has("Jobs —", "n New job"), "Jobs screen", 30)
        pane.press("n", "a new job from a preset")
        pane.save("jobs screen")
        pane.wait(has("New job from a profile", PRESET), "preset picker", 30)
        pane.save("preset picker")
        pane.press("Enter", "the first preset, the smallest")
        text = pane.wait(has("checked in"), "the form checked against the cluster", 240)
        pane.save("form checked")
        if "ready" not in flat(text):
            raise WalkFailed(f"the form is not ready to submit:\n{text}")
        pane.press("C-s", "submit")
        text = flat(
            pane.wait(
                lambda t: "submit again" in flat(t) or "Jobs —" in t,
                "preflight or Jobs screen",
                180,
            )
        )
        pane.save("after ctrl+s")
        if "submit again" in text:
            pane.press("C-s", "the preflight's refusal says: submit again to send it anyway")
        pane.wait(has("Jobs —", PRESET), "the job's row on the Jobs screen", 120)
        pane.save("job row")
        # Submitted: Ray accepted it (the row shows SUBMITTING while the POST is under way).
        pane.wait(lambda t: bool(_RAY_STATUS.search(t)), "Ray's status of the job", 180)
        submitted = time.monotonic()
        keys = [str(k["key"]) for k in pane.log[counted_from:]]
        pane.save("submitted")
        text = pane.wait(lambda t: bool(_ENDED.search(t)), "the job's end", 600)
        ended = pane.save("job ended")
        pane.press("l", "the job's log, with the hint")
        log_screen = pane.wait(
            lambda t: "Jobs —" not in t and not re.search(r"^\s*0 lines", t, re.M),
            "the job's log lines",
            60,
        )
        pane.save("job log")
        hinted = time.monotonic()

        edits = 0 if hashlib.sha256(path.read_bytes()).hexdigest() == written else 1
        return {
            "keys_after_ray_up": keys,
            "key_count": len(keys),
            "seconds_ray_up_to_submitted": round(submitted - ray_up, 1),
            "seconds_ray_up_to_log": round(hinted - ray_up, 1),
            "ray_up_tries": tries,
            "launches": launches,
            "hosts_yaml_edits_after_first_write": edits,
            "jobs_screen_at_end": ended.splitlines(),
            "log_screen": log_screen.splitlines(),
            "all_keys": pane.log,
        }
    finally:
        subprocess.run(["tmux", "kill-session", "-t", pane.name], capture_output=True)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # the walk's finally stops tmux and the hosts


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("newcomer-walk"), help="screens go here")
    parser.add_argument(
        "--worktree", action="store_true", help="walk the working tree, not a clone of HEAD"
    )
    args = parser.parse_args()
    if not shutil.which("tmux"):
        print("newcomer_walk: tmux is required", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        result = walk(args.out, args.worktree)
    except WalkFailed as exc:
        print(f"newcomer_walk: {exc}", file=sys.stderr)
        return 1
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"keys after Ray up: {result['key_count']}  ({' '.join(result['keys_after_ray_up'])})")
    print(f"seconds from Ray up to submitted: {result['seconds_ray_up_to_submitted']}")
    print(f"seconds from Ray up to the job's log: {result['seconds_ray_up_to_log']}")
    print(f"Ray up tries: {result['ray_up_tries']}")
    print(f"launches: {result['launches']}")
    print(f"hosts.yaml edits after the first write: {result['hosts_yaml_edits_after_first_write']}")
    ok = result["key_count"] <= 10 and result["launches"] == 1
    return 0 if ok and not result["hosts_yaml_edits_after_first_write"] else 1


if __name__ == "__main__":
    sys.exit(main())
