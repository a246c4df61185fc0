"""Signatures of failures of the cluster: the network between ranks (NCCL, InfiniBand, Gloo,
torch's c10d store), Ray's GCS and nodes, and GPUs Ray cannot place. A retry may heal the
network and node failures (retriable.py); each hint still names what to check and set.

Order matters: a line of NCCL's that names a dead peer or an InfiniBand completion error also
says the communicator was aborted, and must get the peer/link hint, not the timeout's.
Patterns follow tui/logs/sigdef.py's rules (bounded wildcards only)."""

from __future__ import annotations

import re

from tui.logs.sigdef import CLUSTER, JOB, NEUTRAL, WARNING, Signature, group, sig

IFNAME = (
    "set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME in hosts.yaml ray.env to the interface the "
    "nodes share (not lo or docker0)"
)


def _gpus_short_hint(m: re.Match[str]) -> str:
    want, have = group(m, "want"), group(m, "have")
    need = f"the job wants {want} GPUs but Ray has {have} free" if want else "too few GPUs"
    return (
        f"{need}: make trainer.nnodes × trainer.n_gpus_per_node (and any separate reward or "
        "rollout pools) fit the cluster — all nodes up? another job holding GPUs? "
        "(`ray status`, verl-tui status)"
    )


CLUSTER_SIGNATURES: tuple[Signature, ...] = (
    sig(
        "nccl_ib",
        r"NET/IB ?: .{0,200}?(?:[Cc]ompletion|[Ee]rror|failed)|Got completion from peer"
        r"|IBV_WC_[A-Z_]{2,40}|transport retry counter exceeded|local catastrophic error"
        r"|ibv_(?:poll_cq|modify_qp|create_qp|reg_mr)\w{0,20} failed",
        "an InfiniBand/RoCE link between the nodes failed (a completion error: retries "
        "exhausted, a flapping link or the wrong port): check `ibstat` (ports Active) on both "
        "nodes; pin NCCL_IB_HCA to the working HCAs, raise NCCL_IB_TIMEOUT (22) and "
        "NCCL_IB_RETRY_CNT (13), for RoCE set NCCL_IB_GID_INDEX, all in hosts.yaml ray.env; "
        "NCCL_IB_DISABLE=1 falls back to TCP",
        "an InfiniBand link error",
        CLUSTER,
    ),
    sig(
        "nccl_peer_lost",
        r"NCCL WARN .{0,200}?(?:Broken pipe|Connection closed by remote peer|Connection reset by"
        r" peer)|ncclRemoteError|remote process exited or there was a network error"
        r"|Net : Connection closed by remote peer",
        "the NCCL connection to another rank dropped: that rank's process most often died "
        "first — find its own error above (out of memory, killed, a segfault) — else the "
        f"network between the nodes failed: {IFNAME} and check the link (verl-tui check)",
        "a NCCL peer disconnected (broken pipe)",
        CLUSTER,
    ),
    sig(
        "nccl_timeout",
        r"Watchdog caught collective operation timeout|NCCL operations have failed or timed out"
        r"|ProcessGroupNCCL.{0,300}?\b(?:[Tt]imeout|timed out)|Timeout at NCCL work"
        r"|NCCL communicator was aborted"
        r"|(?:ncclUniqueId|NCCL communicator).{0,300}?(?:Socket Timeout|timed out)",
        "an NCCL collective timed out: a rank died or hung first (look for its error above) or "
        "the nodes cannot reach each other; set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME in "
        "hosts.yaml ray.env to the interface the nodes share, check IB ports (verl-tui check); "
        "NCCL_DEBUG=INFO says more",
        "NCCL collective timeout / watchdog",
        CLUSTER,
    ),
    sig(
        "c10d_timeout",
        r"client socket has timed out after|client socket has failed to connect to .{0,200}?"
        r"(?:timed out|No route to host)|DistStoreError|Timed out initializing process group"
        r"|waiting for clients\. \d{1,6}/\d{1,6} clients joined|TCPStore.{0,100}?timed out"
        r"|store->get\(.{0,60}?\) got error: (?:Connection reset by peer|Broken pipe"
        r"|Connection refused)",
        "the ranks could not reach torch's rendezvous store (c10d TCPStore at "
        "MASTER_ADDR:MASTER_PORT): rank 0 died or started late, or the address/port is not "
        "reachable from every node — check the first rank's error, that MASTER_ADDR is not "
        f"127.0.0.1 across nodes and the port is open; {IFNAME}",
        "torch distributed rendezvous timeout",
        CLUSTER,
    ),
    sig(
        "gloo_full_mesh",
        r"connectFullMesh failed",
        "the ranks could not connect to each other (Gloo): set GLOO_SOCKET_IFNAME and "
        "NCCL_SOCKET_IFNAME in hosts.yaml ray.env to the interface the nodes share (not lo or "
        "docker0); check IB ports and firewalls (verl-tui check)",
        "Gloo connectFullMesh failed (ranks could not connect)",
        CLUSTER,
    ),
    sig(
        "nccl_duplicate_gpu",
        r"Duplicate GPU detected",
        "two ranks landed on the same GPU: do not set CUDA_VISIBLE_DEVICES in hosts.yaml "
        "ray.env or the job env (Ray assigns each worker its GPUs), and check that Ray counts "
        "each node's GPUs once (`ray status`)",
        "two ranks on one GPU",
        JOB,
    ),
    sig(
        "nccl_cuda",
        r"unhandled cuda error|ncclUnhandledCudaError",
        "NCCL hit a CUDA error: an earlier CUDA fault or out-of-memory in the same process "
        "(look above), or GPU peer-to-peer that does not work on this machine — try "
        "NCCL_P2P_DISABLE=1 (or NCCL_CUMEM_ENABLE=0) in hosts.yaml ray.env; NCCL_DEBUG=INFO "
        "names the failing call",
        "a CUDA error inside NCCL",
        NEUTRAL,
    ),
    sig(
        "nccl_network",
        r"NCCL WARN (?:NET/|[Ss]ocket|Call to (?:ibv_|connect)|Bootstrap)|unhandled system error"
        r"|ncclSystemError",
        "NCCL could not set up its network: point NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) in "
        "hosts.yaml ray.env at the interface the nodes share; for InfiniBand check NCCL_IB_HCA "
        "and that the IB ports are up (verl-tui check)",
        "NCCL network/system error between nodes",
        CLUSTER,
    ),
    sig(
        "vllm_pg_gpus",
        r"number of required GPUs exceeds the total number of available GPUs in the placement "
        r"group|Tensor parallel size \(\d+\) exceeds available GPUs",
        "vLLM's tensor parallel group does not fit the GPUs of its placement group: make "
        "actor_rollout_ref.rollout.tensor_model_parallel_size ≤ trainer.n_gpus_per_node (and "
        "the GPUs Ray sees on each node, `ray status`)",
        "the rollout does not fit the placement group",
        JOB,
    ),
    sig(
        "gpus_short",
        r"Total available GPUs (?P<have>[\d.]{1,12}) is less than total desired GPUs "
        r"(?P<want>[\d.]{1,12})|Not enough GPUs|(?:not enough|insufficient) (?:GPU|CPU) resources",
        _gpus_short_hint,
        "the job wants more GPUs than the cluster has",
        JOB,
        ignore_case=True,
    ),
    sig(
        "placement_pending",
        r"cannot be scheduled right now|No available node types can fulfill"
        r"|pending placement groups?\b|Waiting for (?:creating a )?placement group",
        "Ray cannot place the job's placement group, so the job waits forever: every node needs "
        "trainer.n_gpus_per_node free GPUs and 3 × n_gpus_per_node free CPUs (verl reserves 3 "
        "CPUs per GPU); `ray status` (verl-tui status) shows the node short of GPUs/CPUs or a job "
        "still holding them; else lower trainer.nnodes / n_gpus_per_node",
        "the placement group cannot be scheduled",
        NEUTRAL,
        WARNING,  # Ray's own level: it may pass while a runtime_env installs
    ),
    sig(
        "gcs_connect",
        r"Failed to connect to (?:the )?GCS|Unable to connect to GCS"
        r"|Failed to get cluster ID from GCS|Timed out while waiting for GCS"
        r"|GCS may have been killed|Could not find any running Ray instance",
        "the job cannot reach Ray's GCS on the head (port 6379 unless hosts.yaml ray.port says "
        "otherwise): is Ray up (verl-tui status)? can every node reach the head's node_ip "
        "through the firewall, with the same Ray version?",
        "Ray's GCS cannot be reached",
        NEUTRAL,
    ),
    sig(
        "ray_connection",
        r"Couldn't reconnect to GCS|Failed to reconnect to (?:the )?GCS"
        r"|GCS has been disconnected|(?:lost|lose) (?:the )?connection to (?:the )?(?:raylet|GCS)"
        r"|GCS (?:server )?(?:connection|client) (?:lost|failed|timed out)"
        r"|RaySystemError: System error: .{0,200}?(?:raylet|GCS)"
        r"|Failed to connect to (?:the )?raylet",
        "the connection to Ray's GCS on the head (or to the local raylet) was lost mid-run: the "
        "head's gcs_server died (its gcs_server.out; often the head ran out of RAM — keep heavy "
        "work off it) or the network dropped; verl-tui status shows whether Ray is up; "
        "verl-tui up --restart, then resubmit (submit --retries does this)",
        "connection to the raylet or Ray's GCS lost",
        CLUSTER,
    ),
    sig(
        "node_died",
        r"NodeDiedError|RayletDiedError|node (?:\S{1,100} )?(?:has been|was) marked dead"
        r"|raylet (?:has )?died|Raylet is terminated|node (?:\S{1,100} )?died unexpectedly",
        "a Ray node died or was marked dead (its raylet stopped: the host rebooted, ran out of "
        "memory or was cut off): check that host (verl-tui status, its dmesg and raylet.out) "
        "and bring it back (verl-tui up); submit --retries resubmits from the last checkpoint",
        "a Ray node was marked dead / its raylet died",
        CLUSTER,
        ignore_case=True,
    ),
    sig(
        "worker_register",
        r"have not registered within the timeout|Failed to register worker",
        "Ray's worker processes took too long to start (a loaded node, slow imports from a "
        "shared filesystem, a wrong python:): raise RAY_worker_register_timeout_seconds (e.g. "
        "600) in hosts.yaml ray.env and restart Ray (verl-tui up --restart)",
        "Ray workers did not start in time",
        CLUSTER,
    ),
    sig(
        "actor_died",
        r"actor died unexpectedly before finishing this task|ActorDiedError"
        r"|actor is dead because its worker process has died"
        r"|worker died or was killed while executing a task",
        "a Ray worker process died without a Python error: most often the host's OOM killer "
        "(`dmesg` or raylet.out on that node; a 'running low on memory' line above), else a "
        "segfault or `ray stop`; the first error above or the worker's .err log names it",
        "a Ray actor or worker process died",
        CLUSTER,
    ),
)
