"""Per-job GPU use on a real GPU: a torch "worker" process keeps GPU 0 busy, another process
(not the job's) holds memory on it; the GPU agent (tui/remote/gpu_agent.py, real NVML) streams
samples with each GPU's process list; JobGpuUse counts only the worker's pid. Printed next to
nvidia-smi's view, so the join by pid is checked on a real driver (and in a container, where
NVML may report pids of another pid namespace).

Run on a GPU machine from the repository root: python bench/gpu_use_device.py [SECONDS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.getcwd())

from tui.archive.gpu_use import JobGpuUse
from tui.cluster.agent_schema import parse_line
from tui.remote import python_argv

BUSY = """
import sys, time, torch
x = torch.randn(8192, 8192, device="cuda:0")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
"""
IDLE = """
import sys, time, torch
x = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
time.sleep(float(sys.argv[1]))
"""


def smi(query: str, kind: str) -> str:
    out = subprocess.run(
        ["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    worker = subprocess.Popen([sys.executable, "-c", BUSY, str(seconds + 10)])
    other = subprocess.Popen([sys.executable, "-c", IDLE, str(seconds + 10)])
    agent = subprocess.Popen(
        python_argv(sys.executable, "gpu_agent", "--interval", "1"),
        stdin=subprocess.PIPE,  # the agent runs until its stdin closes
        stdout=subprocess.PIPE,
        text=True,
    )
    use = JobGpuUse()
    seen_pids: set[int] = set()
    smi_util: list[float] = []
    time.sleep(8)  # CUDA contexts up
    end = time.monotonic() + seconds
    assert agent.stdout is not None
    try:
        for line in agent.stdout:
            msg = parse_line(line, time.time())
            if msg.kind != "sample" or msg.sample is None:
                continue
            gpu0 = msg.sample.gpus[0] if msg.sample.gpus else None
            if gpu0 is not None:
                seen_pids |= {p.pid for p in gpu0.processes or ()}
            use.add("this-host", msg.sample, {worker.pid})
            u = smi("utilization.gpu", "gpu").splitlines()
            if u:
                smi_util.append(float(u[0]))
            if time.monotonic() > end:
                break
        apps = smi("pid,used_memory", "compute-apps")
    finally:
        for p in (agent, worker, other):
            p.kill()
    doc = {
        "worker_pid": worker.pid,
        "other_pid": other.pid,
        "nvml_pids_seen_on_gpu0": sorted(seen_pids),
        "nvidia_smi_compute_apps": apps.splitlines(),
        "job_gpu_use": use.to_json(),
        "nvidia_smi_util_mean": sum(smi_util) / len(smi_util) if smi_util else None,
    }
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
