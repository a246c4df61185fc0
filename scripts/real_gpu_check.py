"""On a machine with NVIDIA GPUs: compare the agent with nvidia-smi under load, time a sweep,
and save a screenshot of the Cluster screen showing the real GPUs.

    python scripts/real_gpu_check.py OUTDIR

Puts a torch matmul loop on GPU 0, then at the same moment runs `verl-tui gpus --once --json`
(localhost, local transport, the real agent and pynvml) and `nvidia-smi --query-gpu`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
keep = torch.empty(int(20e9) // 2, dtype=torch.bfloat16, device="cuda:0")  # ~20 GB resident
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
"""
SMI_FIELDS = (
    "index,name,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,"
    "power.draw,power.limit"
)


def at_once(*argvs: list[str]) -> list[subprocess.CompletedProcess]:
    results: list = [None] * len(argvs)

    def run(i: int, argv: list[str]) -> None:
        results[i] = subprocess.run(argv, capture_output=True, text=True, timeout=120)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(argvs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def sweep_cost(n: int = 200) -> dict:
    """Median and p99 of one NVML sweep of every GPU, in-process, as the agent does it."""
    import pynvml

    from tui.remote import gpu_nvml as agent  # the agent's NVIDIA part (a bundle part)

    backend = agent.NvmlBackend(pynvml)
    backend.sweep()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        gpus = backend.sweep()
        times.append(time.perf_counter() - t0)
    times.sort()
    ngpu = max(1, len(gpus))
    return {
        "gpus": len(gpus),
        "sweep_median_us": statistics.median(times) * 1e6,
        "sweep_p99_us": times[int(0.99 * len(times)) - 1] * 1e6,
        "per_gpu_median_us": statistics.median(times) * 1e6 / ngpu,
    }


async def screenshot(out: Path) -> None:
    from tui.app import VerlTuiApp
    from tui.config.hosts import local_inventory

    app = VerlTuiApp(local_inventory(), interval=0.5)
    async with app.run_test(size=(150, 30)) as pilot:
        await asyncio.sleep(12)
        await pilot.press("j")
        await pilot.pause(0.6)
        app.save_screenshot(str(out / "cluster_real_gpus.svg"))


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout)
    load = subprocess.Popen([sys.executable, "-c", LOAD, "60"])
    time.sleep(8)  # let the load and its memory settle
    ours, smi = at_once(
        [sys.executable, "-m", "tui", "gpus", "--once", "--json"],
        ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
    )
    print("verl-tui gpus exit", ours.returncode, ours.stderr[-500:])
    doc = json.loads(ours.stdout)
    (out / "verl_tui_gpus.json").write_text(json.dumps(doc, indent=1))
    (out / "nvidia_smi.csv").write_text(smi.stdout)
    host = doc["hosts"][0]
    print(f"host state={host['state']} source={host['source']} driver={host['driver']}")
    rows = [r.split(", ") for r in smi.stdout.strip().splitlines()]
    print(f"{'gpu':>3} {'field':<12} {'verl-tui':>12} {'nvidia-smi':>12}")
    for g, r in zip(host["gpus"], rows, strict=True):
        pairs = [
            ("util %", g["util_percent"], r[3]),
            ("mem MiB", g["memory_used_bytes"] / 2**20, r[4]),
            ("total MiB", g["memory_total_bytes"] / 2**20, r[5]),
            ("temp C", g["temperature_c"], r[6]),
            ("power W", g["power_w"], r[7]),
            ("limit W", g["power_limit_w"], r[8]),
        ]
        for name, mine, theirs in pairs:
            print(f"{g['index']:>3} {name:<12} {mine:>12.1f} {theirs:>12}")
        print(
            f"{g['index']:>3} {'procs':<12} {len(g['processes'] or [])!s:>12}"
            f" {'(uuid match: ' + str(g['uuid'] == r[2]) + ')':>12}"
        )
    print("sweep cost", json.dumps(sweep_cost()))
    asyncio.run(screenshot(out))
    load.wait()
    return 0 if ours.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
