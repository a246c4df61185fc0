"""NVML health on a real GPU (bench/device_gpu_health.sh runs this on the device machine).

    python3 bench/device_gpu_health.py cost      # health-sweep cost, from the shipped agent text
    python3 bench/device_gpu_health.py load S    # keep GPU 0 busy for S seconds (torch matmuls)
    python3 bench/device_gpu_health.py show FILE # the health objects in an agent's output
    .venv/bin/python bench/device_gpu_health.py judge FILE  # here: the cockpit's verdicts on it

Stdlib + pynvml (+ torch for `load`): the device has those, not the cockpit's packages
(`judge` runs here, with them: the boundary schema, HostTelemetry and the judge).
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


def judge(path: str) -> None:
    sys.path.insert(0, str(ROOT))
    from tui.cluster.agent_schema import parse_line
    from tui.cluster.gpu_health import gpu_level, judge_host
    from tui.cluster.models import HostTelemetry
    from tui.transport.types import HostState, LinkStatus

    ht = HostTelemetry("device", LinkStatus("device", HostState.UP))
    for line in Path(path).read_text().splitlines():
        msg = parse_line(line, time.time())
        for field, problem in msg.problems:
            print("problem:", field, problem)
        if msg.sample is None:
            continue
        carried = any(g.health is not None for g in msg.sample.gpus)
        ht.record(msg.sample)
        if carried:
            gpus = ht.latest.gpus if ht.latest else ()
            flags = [gpu_level(g, len(gpus) > 1) for g in gpus]
            found = [f"{f.level}: {f.message}" for f in judge_host(gpus)]
            print(f"seq {msg.sample.seq:>3} flags {flags} findings {found}")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cost"
    if what == "cost":
        cost()
    elif what == "load":
        load(float(sys.argv[2]))
    elif what == "judge":
        judge(sys.argv[2])
    else:
        show(sys.argv[2])
