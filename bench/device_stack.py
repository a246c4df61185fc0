"""One rank absent from an NCCL all_reduce on two GPUs: what NVML and `verl-tui stack --native`
see (bench/device_stack.sh runs it on the lent 2-GPU machine; `group` reads the result here).

    python3 bench/device_stack.py workload OUTDIR     (there: 2 ranks, rank 1 sleeps)
    python3 bench/device_stack.py sample OUTDIR SECS  (there: nvidia-smi's utilization, 2/s)
    .venv/bin/python bench/device_stack.py group OUTDIR   (here: the dump grouped as `stack` does)

The workload: two processes, one GPU each, NCCL; 20 warm steps (a matmul and an all_reduce
each), then rank 1 sleeps in `skip_collective` while rank 0 enters the all_reduce and waits in
`torch.cuda.synchronize` for a peer that never comes. Each rank writes its pid to OUTDIR.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def skip_collective() -> None:
    while True:
        time.sleep(1)


def train_step(rank: int, x, hang: bool) -> None:
    import torch
    import torch.distributed as dist

    y = x @ x
    if hang and rank == 1:
        skip_collective()
    dist.all_reduce(y)
    torch.cuda.synchronize()


def rank_main(rank: int, outdir: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK=str(rank))
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=600)
    )
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        train_step(rank, x, hang=False)
    Path(outdir, f"rank{rank}.pid").write_text(f"{os.getpid()}\n")
    train_step(rank, x, hang=True)


def workload(outdir: str) -> None:
    import torch.multiprocessing as mp

    mp.start_processes(rank_main, args=(outdir,), nprocs=2, start_method="spawn", join=True)


def sample(outdir: str, seconds: float) -> None:
    """nvidia-smi's utilization.gpu and memory.used of every GPU, twice a second."""
    end = time.monotonic() + seconds
    with Path(outdir, "util.csv").open("w") as out:
        while time.monotonic() < end:
            res = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=index,utilization.gpu,memory.used",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
            )
            out.write(f"{time.time():.2f},{res.stdout.strip().replace(chr(10), ';')}\n")
            out.flush()
            time.sleep(0.5)


def group(outdir: str) -> None:
    """The host program's answer (stack.jsonl) through the cockpit's own parser and grouping,
    and the utilization per GPU while the job hung."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tui.cluster.tracing import TracingFacts
    from tui.stack.model import Problem, StackReport, Target
    from tui.stack.pyspy import HostAnswer, problems_of, take_proc

    lines = [json.loads(ln) for ln in Path(outdir, "stack.jsonl").read_text().splitlines()]
    pids = {
        p["proc"]["pid"]: Target("gpu-host", p["proc"]["pid"], "rank") for p in lines if "proc" in p
    }
    answer = HostAnswer("gpu-host", facts=TracingFacts.parse(lines[-1].get("done")))
    for p in lines:
        if "proc" in p:
            take_proc(answer, p["proc"], pids)
    report = StackReport("device", dumps=answer.dumps, expected=len(pids), native=True)
    report.problems = [Problem("gpu-host", p) for p in problems_of(answer, "python3")]
    print("\n".join(report.text_lines(frames=40)))
    util: dict[str, list[float]] = {}
    for row in Path(outdir, "util.csv").read_text().splitlines():
        for gpu in row.split(",", 1)[1].split(";"):
            idx, u, _mem = (v.strip() for v in gpu.split(","))
            util.setdefault(idx, []).append(float(u))
    for idx, values in sorted(util.items()):
        mean = sum(values) / len(values)
        print(
            f"GPU {idx}: utilization {mean:.0f} % mean, {min(values):.0f}-{max(values):.0f} % "
            f"over {len(values)} samples"
        )


if __name__ == "__main__":
    verb, outdir, *rest = sys.argv[1:]
    {
        "workload": lambda: workload(outdir),
        "sample": lambda: sample(outdir, float(rest[0])),
        "group": lambda: group(outdir),
    }[verb]()
