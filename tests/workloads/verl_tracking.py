"""A Ray job that logs training metrics through verl 0.9.1's own `Tracking` class, as verl's
TaskRunner does: from an actor (here on a node other than the driver's, when there is one), with
the backends given (`console`, `file`). The values are scripted (tests/test_metrics_file.py knows
them): finite ones, NaN, +Inf, a huge float, booleans, and the timing_s/* phases of a step.

--dump DIR: after each step the actor also dumps that step's generations (rollout_samples)
through verl 0.9.1's own RayPPOTrainer._dump_generations (tests/workloads/verl_dump.py) into
DIR/{step}.jsonl, which prints verl's "Dumped generations to" line from the actor.

--gate FILE: after --steps steps the actor waits for FILE before logging --more steps, so a test
can read the file while the job still runs. The file logger's root is --root (its
VERL_FILE_LOGGER_ROOT); the project and experiment are --project / --experiment.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import ray


def step_values(step: int) -> dict[str, float]:
    """What step `step` logs (tests/test_metrics_file.py imports this to check the numbers)."""
    values = {
        "critic/score/mean": 0.1 * step + 1 / 3,
        "actor/entropy": 1.0 / (step + 1),
        "actor/grad_norm": 0.5 + step,
        "actor/kl_loss": 1e-4 * step,
        "response_length/clip_ratio": 0.0,
        "perf/throughput": 1234.5 - step,
        "perf/mfu/actor": 0.125,
        "timing_s/gen": 2.0 + step,
        "timing_s/old_log_prob": 0.5,
        "timing_s/update_actor": 3.0,
        "timing_s/step": 5.5 + step,
        "training/epoch": 0,
    }
    if step == 3:
        values["actor/entropy"] = math.nan
        values["actor/grad_norm"] = math.inf
    if step == 4:
        values["actor/kl_loss"] = 1.7976931348623157e308
        values["critic/score/mean"] = -math.inf
    return values


# A long working-out that stops mid-sentence (the step's longest: cut at the length limit).
LONG = " ".join(
    f"then {k * 37 % 101} plus {k * k % 89} gives {k * 37 % 101 + k * k % 89}," for k in range(120)
)


def rollout_samples(step: int) -> dict:
    """What step `step` dumps (tests/test_metrics_file.py checks the samples read back): a
    fine answer, an empty one, one that loops, one cut at the length limit, one with a
    terminal escape and wide text, and a score that is NaN. The prompts are the same each
    step (the Rollouts screen sets a prompt's answers in two steps side by side)."""
    prompts = [f"Q{i}: what is {i} + 7?" for i in range(6)]  # the same prompts every step
    outputs = [f"The answer is {i + 7}, step {step}." if i in (0, 5) else "" for i in range(6)]
    outputs[2] = "I think " + "the answer is 3, wait, " * 30
    outputs[3] = LONG[: 2000 + step]  # the step's longest, cut mid-word
    outputs[4] = "\x1b[31mred\x1b[0m 数学 \u202eevil"
    scores = [1.0, 0.0, 0.0, 0.0, 0.5 * step, float("nan") if step == 2 else 1.0]
    return {
        "inputs": prompts,
        "outputs": outputs,
        "gts": [str(i + 7) for i in range(6)],
        "scores": scores,
        "extras": {"acc": [s == 1.0 for s in scores], "pred": [o[-8:] for o in outputs]},
    }


@ray.remote(num_cpus=0)
class Runner:
    def run(self, args: dict) -> str:
        import numpy as np

        os.environ["VERL_FILE_LOGGER_ROOT"] = args["root"]
        from verl.utils.tracking import Tracking

        tracking = Tracking(args["project"], args["experiment"], args["backends"])
        dumper = None
        if args["dump"]:
            import sys

            sys.path.insert(0, os.path.dirname(os.path.abspath(args["workloads"])))
            from verl_dump import VerlDumper

            dumper = VerlDumper()
        for step in range(1, args["steps"] + args["more"] + 1):
            if step == args["steps"] + 1 and args["gate"]:
                while not os.path.exists(args["gate"]):
                    time.sleep(0.1)
            data = {k: np.float64(v) for k, v in step_values(step).items()}
            data["actor/pg_clipfrac_is_one"] = bool(step % 2)  # a bool, as numpy gives it
            tracking.log(data=data, step=step)
            if dumper is not None:
                d = rollout_samples(step)
                dumper.dump(
                    step,
                    d["inputs"],
                    d["outputs"],
                    d["gts"],
                    d["scores"],
                    d["extras"],
                    args["dump"],
                )
        if dumper is not None:
            dumper.close()
        tracking.finish()
        return ray.util.get_node_ip_address()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--project", default="vt_proj")
    p.add_argument("--experiment", default="vt_exp")
    p.add_argument("--backends", default="console,file")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--more", type=int, default=0)
    p.add_argument("--gate", default="")
    p.add_argument("--dump", default="")
    a = p.parse_args()
    ray.init()
    here = ray.util.get_node_ip_address()
    others = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
    others = [ip for ip in others if ip != here] or [here]
    runner = Runner.options(resources={f"node:{others[0]}": 0.001}).remote()
    args = {**vars(a), "backends": a.backends.split(","), "workloads": __file__}
    print("ran on", ray.get(runner.run.remote(args)), flush=True)
    time.sleep(1.0)  # the actor's last lines reach the driver log


if __name__ == "__main__":
    main()
