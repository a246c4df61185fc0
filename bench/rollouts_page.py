"""A 200 MB rollout dump paged over SSH (issue 29, item 4): time per page and the cockpit's
memory.

    .venv/bin/python bench/rollouts_page.py [--mb 200] [--pages 20]

Needs root (tests/harness/nshosts.py): one namespace host with a real OpenSSH sshd holds the
file, written by verl 0.9.1's own RayPPOTrainer._dump_generations (tests/workloads/
verl_dump.py) in batches of 512 samples: GSM8K-length prompts and ~2 KB answers, one step
file of --mb MB. The cockpit side is this process: tui/rollouts over asyncssh, as the Rollouts
screen uses it. Measured: the first page in file order (what the screen shows at once: the first
50 lines indexed and read), the one index pass (the host reads the file once and sends line
offsets, scores, output lengths, prompt keys), then --pages pages of 50 samples each at random
places in score order (byte-range reads on the host), and a grep on the host; the cockpit's peak
RSS (ru_maxrss) against its RSS before the first read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "workloads"))

from benchlib import code_version  # noqa: E402

VENV_PY = str(ROOT / ".venv" / "bin" / "python")
WORDS = [
    "the",
    "answer",
    "is",
    "so",
    "we",
    "add",
    "then",
    "multiply",
    "each",
    "of",
    "apples",
    "she",
    "he",
    "sold",
    "bought",
    "total",
    "left",
    "half",
    "twice",
    "more",
    "less",
    "per",
    "hour",
    "minutes",
    "pages",
    "friends",
    "money",
    "needs",
]


def write_dump(folder: Path, step: int, megabytes: int) -> int:
    """The step file through verl's own dump; returns the samples written."""
    from verl_dump import VerlDumper

    rng = random.Random(0)
    dumper = VerlDumper()
    path = folder / f"{step}.jsonl"
    n = 0
    while not path.exists() or path.stat().st_size < megabytes << 20:
        batch = 512
        inputs = [" ".join(rng.choices(WORDS, k=60)) + f" #{n + i}?" for i in range(batch)]
        outputs = [" ".join(rng.choices(WORDS, k=rng.randint(200, 500))) for _ in range(batch)]
        scores = [rng.choice((0.0, 0.0, 1.0)) for _ in range(batch)]
        # verl writes each step's file whole ("w"): a batch per call, appended here by hand
        # would not be verl's; so each batch is one dump of a scratch step, then appended.
        dumper.dump(10**6 + n, inputs, outputs, ["42"] * batch, scores, {}, str(folder))
        dumper.close()
        dumper = VerlDumper()
        scratch = folder / f"{10**6 + n}.jsonl"
        with open(path, "ab") as out, open(scratch, "rb") as src:
            out.write(src.read())
        scratch.unlink()
        n += batch
    dumper.close()
    return n


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def measure(hosts: Path, folder: str, pages: int) -> dict:
    from tui.config.hosts import load_inventory
    from tui.rollouts.reader import PAGE, DumpDir, first_page, turn_page, view_step
    from tui.transport.fleet import Fleet

    inv = load_inventory(hosts)
    async with Fleet(inv) as fleet:
        host = inv.hosts[0]
        transport = await fleet.ready(host.name, 30)
        dump = DumpDir(transport, host.python, host.name, folder)
        before = rss_mb()
        t0 = time.perf_counter()
        steps = await dump.steps()
        list_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        head = await first_page(dump, steps[0][0])
        first_page_s = time.perf_counter() - t0
        assert len(head.samples) == PAGE
        t0 = time.perf_counter()
        view = await view_step(dump, steps[0][0], sort="score")
        first_s = time.perf_counter() - t0
        index_s = first_s  # the index pass and the first page
        rng = random.Random(1)
        times = []
        for _ in range(pages):
            start = rng.randrange(0, max(1, len(view.order) - PAGE))
            t0 = time.perf_counter()
            await turn_page(dump, view, start)
            times.append(time.perf_counter() - t0)
            assert len(view.samples) == PAGE
        t0 = time.perf_counter()
        grep = await dump.index(steps[0][0], r"#1234\d?")
        grep_s = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {
            "samples": len(view.order),
            "file_mb": round(steps[0][1] / 2**20, 1),
            "list_s": round(list_s, 3),
            "first_page_s": round(first_page_s, 3),
            "index_and_first_page_s": round(index_s, 2),
            "page_s_median": round(sorted(times)[len(times) // 2], 3),
            "page_s_max": round(max(times), 3),
            "grep_s": round(grep_s, 2),
            "grep_matches": len(grep.samples),
            "rss_before_mb": round(before, 1),
            "rss_peak_mb": round(peak, 1),
            "rss_after_mb": round(rss_mb(), 1),
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--pages", type=int, default=20)
    p.add_argument("--write", metavar="DIR", help=argparse.SUPPRESS)  # the child that writes
    a = p.parse_args()
    if a.write:
        print(write_dump(Path(a.write), 7, a.mb))
        return 0
    from harness.nshosts import NsCluster

    work = Path(tempfile.mkdtemp(prefix="verl-tui-rollouts-"))
    folder = work / "dump"
    folder.mkdir()
    t0 = time.perf_counter()
    # Written by a child process: this one's peak RSS is the cockpit's alone.
    child = [sys.executable, __file__, "--write", str(folder), "--mb", str(a.mb)]
    samples = int(
        subprocess.run(child, check=True, capture_output=True, text=True).stdout.split()[-1]
    )
    print(
        f"wrote {samples} samples with verl's _dump_generations in {time.perf_counter() - t0:.0f} s"
    )
    cluster = NsCluster(1, work / "hosts")
    cluster.start()
    try:
        h = cluster.hosts[0]
        hosts = work / "hosts.yaml"
        hosts.write_text(
            "cluster: rolloutbench\n"
            f"python: {VENV_PY}\n"
            "ssh:\n  user: root\n"
            f"  identity_file: {cluster.client_key}\n"
            f"  known_hosts: {cluster.known_hosts}\n"
            "  config: ''\n"
            "hosts:\n"
            f"  - name: {h.name}\n    address: {h.address}\n"
        )
        result = asyncio.run(measure(hosts, str(folder), a.pages))
    finally:
        cluster.stop()
        for f in folder.iterdir():
            f.unlink()
    result["code"] = code_version()
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
