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

--nccl is the same job on GPUs (bench/device_stall.sh, on the lent 2-GPU machine): a rank
actor per GPU (num_gpus=1, a PACK placement group, so one node will do), an NCCL group, the
tensor on the GPU and `torch.cuda.synchronize()` after the all_reduce, each rank holding
--hold-gib of GPU memory (the model). At the hang the waiting rank's NCCL kernel spins (its
GPU reads ~100 % busy) while the odd rank sleeps (0 %), and the waiting rank's thread sits in
cudaDeviceSynchronize.
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

FOREVER_S = 7 * 86400  # the group's timeout: the waiting ranks wait, they do not time out
# NVLink multicast stays off on the lent machines (their rule: it can take the host's GPUs out
# of service); set in the rank itself, whatever environment Ray's workers were started with.
NCCL_SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


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
    def __init__(
        self, rank: int, world: int, odd_rank: int, nccl: bool = False, hold_gib: float = 0.0
    ) -> None:
        self.rank, self.world, self.odd_rank = rank, world, odd_rank
        self.nccl, self.hold_gib = nccl, hold_gib
        self.ip = ray.util.get_node_ip_address()
        self.tensor = None
        self.weights = None  # --nccl: the GPU memory a model would hold

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
            if self.nccl:
                os.environ["NCCL_SOCKET_IFNAME"] = iface  # NCCL's bootstrap, as gloo's
        import torch
        import torch.distributed as dist

        device = None
        if self.nccl:
            os.environ.update(NCCL_SAFE_ENV)
            torch.cuda.set_device(0)  # Ray shows the actor its one GPU as cuda:0
            device = torch.device("cuda", 0)
        dist.init_process_group(
            "nccl" if self.nccl else "gloo",
            init_method=f"tcp://{master}:{port}",
            rank=self.rank,
            world_size=self.world,
            timeout=datetime.timedelta(seconds=FOREVER_S),
            **({"device_id": device} if device is not None else {}),
        )
        self.tensor = torch.ones(1024, device=device)
        where = ""
        if device is not None:
            self.weights = torch.empty(int(self.hold_gib * (1 << 30)) // 4, device=device)
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "?")
            where = f", GPU {gpu} holding {self.hold_gib:g} GiB"
        return f"rank {self.rank} on {self.ip} (pid {os.getpid()}{where})"

    def train_step(self, step: int, hang: bool) -> float:
        import torch.distributed as dist

        if hang and self.rank == self.odd_rank:
            skip_collective()
        dist.all_reduce(self.tensor)
        if self.nccl:
            import torch

            # The CPU waits for the collective's kernel: where a hung rank's thread sits.
            torch.cuda.synchronize()
        return float(self.tensor[0])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--step-s", type=float, default=1.0, help="seconds per step")
    ap.add_argument("--hang-at", type=int, default=3, help="0: before the first step")
    ap.add_argument("--odd-rank", type=int, default=-1, help="default: the last rank")
    ap.add_argument("--hang-once", default=None, help="hang only while this file is absent")
    ap.add_argument("--nccl", action="store_true", help="one GPU a rank, NCCL (default: gloo)")
    ap.add_argument("--hold-gib", type=float, default=1.0, help="--nccl: GPU memory a rank holds")
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
    if args.nccl:  # a GPU a rank, all on one node if it has them
        bundle, strategy, gpus = {"CPU": 1, "GPU": 1}, "PACK", 1
    else:  # a rank a node
        bundle, strategy, gpus = {"CPU": 1}, "STRICT_SPREAD", 0
    pg = placement_group([bundle] * args.world, strategy=strategy)
    ray.get(pg.ready(), timeout=120)
    ranks = [
        GlooRank.options(
            num_gpus=gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i
            ),
        ).remote(i, args.world, odd, args.nccl, args.hold_gib)
        for i in range(args.world)
    ]
    master, port = ray.get(ranks[0].address.remote())
    print(f"Total training steps: {args.steps}", flush=True)
    joined = ray.get([r.init_group.remote(master, port, hang_at == 0) for r in ranks])
    print("nccl group:" if args.nccl else "gloo group:", "; ".join(joined), flush=True)
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
