"""A Ray job whose ranks deadlock in a gloo all_reduce, for `verl-tui stack`'s tests.

Run as a Ray job's entrypoint: WORLD rank actors spread over the nodes (a SPREAD placement group,
so several ranks share a node as verl's workers do), each started with RANK / LOCAL_RANK /
WORLD_SIZE in its environment as verl's worker group sets them, join one torch.distributed gloo
group; the driver then runs steps, each an all_reduce on every rank. At step --hang-at the rank
--odd-rank never enters the all_reduce (it sleeps in `skip_collective`) and every other rank
waits in `dist.all_reduce` inside `train_step` for as long as the job lives. The driver prints
`HANG rank R` when it starts that step.
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


def skip_collective() -> None:
    """The odd rank: never reaches the collective the others wait in."""
    while True:
        time.sleep(1)


@ray.remote(num_cpus=1)
class Rank:
    def __init__(self) -> None:
        self.rank = int(os.environ["RANK"])
        self.ip = ray.util.get_node_ip_address()
        self.tensor = None

    def address(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind((self.ip, 0))
            return self.ip, s.getsockname()[1]

    def init_group(self, master: str, port: int) -> int:
        import psutil
        import torch
        import torch.distributed as dist

        for name, addrs in psutil.net_if_addrs().items():  # gloo binds where it is told
            if any(a.family == socket.AF_INET and a.address == self.ip for a in addrs):
                os.environ["GLOO_SOCKET_IFNAME"] = name
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{master}:{port}",
            rank=self.rank,
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=datetime.timedelta(seconds=FOREVER_S),
        )
        self.tensor = torch.ones(16)
        return os.getpid()

    def train_step(self, hang_rank: int) -> float:
        import torch.distributed as dist

        if self.rank == hang_rank:
            skip_collective()
        dist.all_reduce(self.tensor)
        return float(self.tensor[0])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--hang-at", type=int, default=2)
    ap.add_argument("--odd-rank", type=int, default=-1, help="default: the last rank")
    args = ap.parse_args(argv)
    odd = args.odd_rank % args.world
    ray.init(address="auto")
    pg = placement_group([{"CPU": 1}] * args.world, strategy="SPREAD")
    ray.get(pg.ready(), timeout=120)
    ranks = []
    for i in range(args.world):
        env = {"RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(args.world)}
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
        ranks.append(
            Rank.options(
                name=f"stack_rank_{i}", scheduling_strategy=strategy, runtime_env={"env_vars": env}
            ).remote()
        )
    master, port = ray.get(ranks[0].address.remote())
    pids = ray.get([r.init_group.remote(master, port) for r in ranks])
    print("gloo group:", pids, flush=True)
    for step in range(1, 1_000_000):
        hang = odd if step == args.hang_at else -1
        if hang >= 0:
            print(f"HANG rank {odd}", flush=True)
        ray.get([r.train_step.remote(hang) for r in ranks])
        print(f"step:{step} - timing_s/step:0.1", flush=True)
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
