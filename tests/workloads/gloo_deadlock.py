"""A real multi-node training job that deadlocks, for stall detection and `verl-tui stack`.

Run as a Ray job's entrypoint (`verl-tui submit HOSTS -- python tests/workloads/gloo_deadlock.py
…`): the driver places WORLD rank actors on distinct nodes (a STRICT_SPREAD placement group),
they join one torch.distributed gloo group, and the driver runs training steps, each an
all_reduce on every rank, printing a verl-style step line after each (what verl's console
logger prints: `step:N - timing_s/step:… - actor/loss:…`). At step --hang-at, rank --odd-rank
never enters the all_reduce (it sleeps in `skip_collective`) and every other rank waits in
`dist.all_reduce` inside `train_step` for as long as the job lives: the deadlock of a
collective one rank never reached. --hang-at 0 hangs before the first step instead: the odd
rank never joins the group, the others wait in `init_process_group`.

--hang-once FILE hangs only while FILE does not exist (the driver creates it when it plans the
hang), so a resubmitted attempt of the same command runs to its end: what a retry that healed
looks like.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

FOREVER_S = 7 * 86400  # the gloo timeout: the waiting ranks wait, they do not time out


def _iface_of(ip: str) -> str | None:
    """The network interface holding `ip` (gloo binds to the interface it is told)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None


def skip_collective() -> None:
    """The odd rank: never reaches the collective the others wait in."""
    while True:
        time.sleep(1)


@ray.remote(num_cpus=1)
class GlooRank:
    def __init__(self, rank: int, world: int, odd_rank: int) -> None:
        self.rank, self.world, self.odd_rank = rank, world, odd_rank
        self.ip = ray.util.get_node_ip_address()
        self.tensor = None

    def address(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind((self.ip, 0))
            return self.ip, s.getsockname()[1]

    def init_group(self, master: str, port: int, hang: bool) -> str:
        if hang and self.rank == self.odd_rank:
            skip_collective()
        iface = _iface_of(self.ip)
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
        import torch
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{master}:{port}",
            rank=self.rank,
            world_size=self.world,
            timeout=datetime.timedelta(seconds=FOREVER_S),
        )
        self.tensor = torch.ones(1024)
        return f"rank {self.rank} on {self.ip} (pid {os.getpid()})"

    def train_step(self, step: int, hang: bool) -> float:
        import torch.distributed as dist

        if hang and self.rank == self.odd_rank:
            skip_collective()
        dist.all_reduce(self.tensor)
        return float(self.tensor[0])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--step-s", type=float, default=1.0, help="seconds per step")
    ap.add_argument("--hang-at", type=int, default=3, help="0: before the first step")
    ap.add_argument("--odd-rank", type=int, default=-1, help="default: the last rank")
    ap.add_argument("--hang-once", default=None, help="hang only while this file is absent")
    args = ap.parse_args(argv)
    odd = args.odd_rank % args.world
    hang_at = args.hang_at
    if args.hang_once:
        if os.path.exists(args.hang_once):
            hang_at = -1  # a later attempt: runs to its end
        else:
            with open(args.hang_once, "w") as f:
                f.write(f"{os.getpid()}\n")

    ray.init(address="auto")
    pg = placement_group([{"CPU": 1}] * args.world, strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)
    ranks = [
        GlooRank.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
        ).remote(i, args.world, odd)
        for i in range(args.world)
    ]
    master, port = ray.get(ranks[0].address.remote())
    print(f"Total training steps: {args.steps}", flush=True)
    joined = ray.get([r.init_group.remote(master, port, hang_at == 0) for r in ranks])
    print("gloo group:", "; ".join(joined), flush=True)
    for step in range(1, args.steps + 1):
        start = time.monotonic()
        hang = step == hang_at
        if hang:
            print(f"step {step}: rank {odd} skips the all_reduce", flush=True)
        values = ray.get([r.train_step.remote(step, hang) for r in ranks])
        time.sleep(max(0.0, args.step_s - (time.monotonic() - start)))
        took = time.monotonic() - start
        print(
            f"step:{step} - timing_s/step:{took:.3f} - actor/loss:{1.0 / step:.4f} - "
            f"reduce/value:{values[0]:.1f} - training/global_step:{step}",
            flush=True,
        )
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
