"""The compare screen over three fixed runs (no cluster): charts, summary, config diff."""

import math

from snapshot_apps.replay import ScreenApp

from tui.archive.compare import Run, config_diff
from tui.screens.compare import CompareScreen

KEYS = (
    "critic/score/mean",
    "actor/kl_loss",
    "actor/entropy",
    "response_length/mean",
    "perf/throughput",
    "timing_s/step",
)


def fixed_run(sid: str, rate: float, lr: str, batch: str | None, steps: int) -> Run:
    series = {
        "critic/score/mean": [(s, 0.9 * (1 - math.exp(-rate * s))) for s in range(1, steps + 1)],
        "actor/kl_loss": [(s, 0.001 * s * rate) for s in range(1, steps + 1)],
        "actor/entropy": [(s, 1.2 - 0.02 * s) for s in range(1, steps + 1)],
        "response_length/mean": [(s, 180 + 4 * s * rate) for s in range(1, steps + 1)],
        "perf/throughput": [(s, 1500 + 100 * rate + (s % 3)) for s in range(1, steps + 1)],
        "timing_s/step": [(s, 40 / (1 + rate)) for s in range(1, steps + 1)],
    }
    overrides = [f"actor_rollout_ref.actor.optim.lr={lr}", "trainer.total_training_steps=30"]
    if batch:
        overrides.append(f"data.train_batch_size={batch}")
    meta = {
        "submission_id": sid,
        "status": "SUCCEEDED",
        "start_time": 1_764_000_000.0,
        "end_time": 1_764_000_000.0 + steps * 40 / (1 + rate),
        "gpu_use": {
            "util_mean": 40 + 10 * rate,
            "mem_mean_bytes": 30 << 30,
            "gpus": ["a:0", "a:1"],
        },
        "hosts": ["gpu-node-1"],
    }
    return Run(sid, "SUCCEEDED", series, meta, overrides, 30)


RUNS = [
    fixed_run("grpo-lr1e-6", 0.10, "1e-6", None, 30),
    fixed_run("grpo-lr3e-6", 0.20, "3e-6", None, 30),
    fixed_run("grpo-lr1e-6-b128", 0.15, "1e-6", "128", 24),
]
DIFF = config_diff(RUNS, defaults={"data.train_batch_size": 1024})

app = ScreenApp(lambda app: CompareScreen(RUNS, DIFF))
