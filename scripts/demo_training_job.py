"""A Ray job for the screenshots: prints what a verl GRPO run prints (verl's console metric
format, `step:N - key:value - …`, with Ray's actor prefix), then fails the way runs do (CUDA
out of memory), so the log, hint and metric panes have real content to show.

Not a test fixture and not used by the product: scripts/screenshots.py submits it as a job.
"""

from __future__ import annotations

import math
import random
import sys
import time

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
TOTAL = 240
P = "(TaskRunner pid=48213) "


def main() -> int:
    rnd = random.Random(7)
    print(f"{P}Using dataset class: RLHFDataset")
    print(f"{P}dataset len: 7473")
    print(f"{P}Size of train dataloader: 29, Size of val dataloader: 1")
    print(f"{P}Total training steps: {TOTAL}")
    print(f"{P}WARNING: NCCL_SOCKET_IFNAME is not set; NCCL picks an interface itself")
    for step in range(1, STEPS + 1):
        t = step / STEPS
        score = 0.18 + 0.55 * (1 - math.exp(-3 * t)) + rnd.uniform(-0.03, 0.03)
        entropy = 0.92 - 0.35 * t + rnd.uniform(-0.02, 0.02)
        kl = 0.0008 + 0.004 * t + rnd.uniform(0, 0.0008)
        length = 210 + 140 * t + rnd.uniform(-12, 12)
        step_s = 41.5 + rnd.uniform(-2.5, 2.5)
        fields = {
            "training/global_step": step,
            "training/epoch": step // 29,
            "actor/entropy": entropy,
            "actor/kl_loss": kl,
            "actor/pg_loss": rnd.uniform(-0.02, 0.02),
            "actor/ppo_kl": kl / 3,
            "actor/grad_norm": 0.31 + rnd.uniform(-0.05, 0.05),
            "actor/lr": 1e-6,
            "critic/score/mean": score,
            "critic/score/max": 1.0,
            "critic/rewards/mean": score,
            "critic/advantages/mean": rnd.uniform(-0.01, 0.01),
            "response_length/mean": length,
            "response_length/max": 1024,
            "response_length/clip_ratio": 0.004 * t,
            "prompt_length/mean": 104.2,
            "timing_s/gen": step_s * 0.55,
            "timing_s/update_actor": step_s * 0.3,
            "timing_s/step": step_s,
            "perf/throughput": 1850 + 420 * t + rnd.uniform(-40, 40),
            "perf/max_memory_allocated_gb": 31.4,
        }
        body = " - ".join(
            f"{k}:{v}" if isinstance(v, int) else f"{k}:{v:.4g}" for k, v in fields.items()
        )
        print(f"{P}step:{step} - {body}")
        if step % 10 == 0:
            print(f"{P}Saved checkpoint to /mnt/ckpt/grpo/global_step_{step}")
        sys.stdout.flush()
        time.sleep(0.05)
    print(f"{P}Traceback (most recent call last):")
    print(f'{P}  File "verl/workers/fsdp_workers.py", line 912, in generate_sequences')
    print(f"{P}    output = self.rollout.generate_sequences(prompts=prompts)")
    print(
        f"{P}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.34 GiB. GPU 3 "
        "has a total capacity of 79.19 GiB of which 1.02 GiB is free."
    )
    sys.stdout.flush()
    return 1


if __name__ == "__main__":
    sys.exit(main())
