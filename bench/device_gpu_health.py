"""NVML health on a real GPU (bench/device_gpu_health.sh runs this on the device machine).

    python3 bench/device_gpu_health.py cost      # health-sweep cost, from the shipped agent text
    python3 bench/device_gpu_health.py load S    # keep GPU 0 busy for S seconds (torch matmuls)
    python3 bench/device_gpu_health.py show FILE # the health objects in an agent's output

Stdlib + pynvml (+ torch for `load`): the device has those, not the cockpit's packages.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def agent_namespace() -> dict:
    """The shipped agent text (tui/remote BUNDLES joined) executed as a module, main not run."""
    sys.path.insert(0, str(ROOT))
    from tui.remote import source

    ns: dict = {"__name__": "gpu_agent_bench"}
    exec(compile(source("gpu_agent"), "<gpu_agent>", "exec"), ns)
    return ns


def cost() -> None:
    import pynvml

    ns = agent_namespace()
    backend = ns["NvmlBackend"](pynvml, 1.0)
    if not backend.ok:
        print("NVML not usable:", backend.error)
        return
    print("driver", backend.driver, "nvml", backend.nvml_version, "pynvml", pynvml.__file__)
    t0 = time.perf_counter()
    backend.sweep()  # the first sweep: handles, names, event registration
    first = time.perf_counter() - t0
    plain, health = [], []
    for i in range(40):
        backend.next_health = 0.0 if i % 2 else float("inf")
        t0 = time.perf_counter()
        backend.sweep()
        (health if i % 2 else plain).append(time.perf_counter() - t0)
    ms = lambda v: f"{v * 1e3:.2f} ms"  # noqa: E731
    print(f"first sweep (with health, XID registration): {ms(first)}")
    print(
        f"sweep without health: median {ms(statistics.median(plain))}, max {ms(max(plain))}; "
        f"with health: median {ms(statistics.median(health))}, max {ms(max(health))} "
        f"({len(backend.static)} GPU(s), 20 each)"
    )
    backend.close()


def load(seconds: float) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
        n += 20
    print(f"load: {n} 8192² bf16 matmuls in {seconds:.0f} s")


def show(path: str) -> None:
    for line in Path(path).read_text().splitlines():
        msg = json.loads(line)
        if msg.get("type") == "hello":
            print("hello:", {k: msg[k] for k in ("source", "driver", "nvml_version", "error")})
        for gpu in msg.get("gpus") or []:
            if "health" in gpu:
                print(
                    f"seq {msg['seq']:>3} gpu{gpu['index']} util {gpu['util_percent']}% "
                    f"health {json.dumps(gpu['health'], separators=(',', ':'))}"
                )


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cost"
    if what == "cost":
        cost()
    elif what == "load":
        load(float(sys.argv[2]))
    else:
        show(sys.argv[2])
