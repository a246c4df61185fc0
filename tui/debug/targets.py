"""What waits for a debugger on the cluster: workers paused by post-mortem debugging (debugpy,
found through the state API over the tunnel) and legacy pdb breakpoints (records in the GCS
internal KV, read by a small script run with the head's interpreter over SSH).

Both lists leave out what belongs to jobs that are no longer running: Ray keeps KV records
of dead jobs, and a paused worker of a stopped job is about to go away.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from typing import Any

from tui.cluster.dashboard import TERMINAL, DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.remote import python_argv
from tui.transport.types import Forward, Transport, TransportError

_PAUSED = {
    "detail": "true",
    "limit": 10000,
    "filter_keys": "num_paused_threads",
    "filter_predicates": "!=",
    "filter_values": 0,
}
_RUNNING_TASKS = {
    "detail": "true",
    "limit": 10000,
    "filter_keys": "state",
    "filter_predicates": "=",
    "filter_values": "RUNNING",
}


@dataclass(frozen=True)
class PausedWorker:
    """A worker whose task raised under RAY_DEBUG_POST_MORTEM: debugpy listens on node_ip:port."""

    host: str
    node_ip: str
    pid: int
    port: int
    worker_id: str
    task: str
    task_id: str
    job: str  # submission id when the job has one, else Ray's job id

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Breakpoint:
    """A legacy (RAY_DEBUG=legacy) pdb session waiting on node_ip's 127.0.0.1:port."""

    key: str
    host: str
    node_ip: str
    port: int
    pdb_host: str
    filename: str
    lineno: int
    task: str
    task_id: str
    job: str
    traceback: str | None
    timestamp: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DebugTargets:
    paused: list[PausedWorker]
    breakpoints: list[Breakpoint]
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "paused": [p.to_json() for p in self.paused],
            "breakpoints": [b.to_json() for b in self.breakpoints],
            "problems": self.problems,
        }


async def _job_names(cluster: RayCluster) -> dict[str, tuple[str, str]]:
    """Ray job id (hex) -> (name to show: submission id or job id, status)."""
    client = await cluster.dashboard()
    out: dict[str, tuple[str, str]] = {}
    for j in await client.list_jobs():  # checked rows (tui/cluster/dashboard_schema.py)
        if j["job_id"]:
            out[j["job_id"]] = (j["submission_id"] or j["job_id"], j["status"])
    return out


async def paused_workers(cluster: RayCluster) -> list[PausedWorker]:
    client = await cluster.dashboard()
    workers, tasks, jobs = await asyncio.gather(
        client.state_rows("workers", _PAUSED),
        client.state_rows("tasks", _RUNNING_TASKS),
        _job_names(cluster),
    )
    task_by_worker = {t.get("worker_id"): t for t in tasks}
    out = []
    for w in workers:
        port = w["debugger_port"] or 0  # checked rows: a missing field is None
        if not port or w["is_alive"] is False:
            continue
        task = task_by_worker.get(w.get("worker_id"), {})
        job_hex = task.get("job_id") or w.get("job_id") or ""
        name, status = jobs.get(job_hex, (job_hex, "?"))
        if status in TERMINAL:
            continue
        ip = w["ip"] or ""
        task_name = task.get("name") or task.get("func_or_class_name") or "?"
        out.append(
            PausedWorker(
                host=cluster.inv.host_of_ip(ip) or ip,
                node_ip=ip,
                pid=w["pid"] or 0,
                port=int(port),
                worker_id=w["worker_id"] or "",
                task=task_name,
                task_id=task.get("task_id") or "",
                job=name,
            )
        )
    return sorted(out, key=lambda p: (p.job, p.host, p.pid))


async def legacy_breakpoints(cluster: RayCluster) -> list[Breakpoint]:
    inv = cluster.inv
    head = inv.head
    transport = await cluster.fleet.ready(head.name, 15)
    # tui/remote/ray_pdb_keys.py: Ray's GCS client with the head's interpreter, no ray.init.
    argv = python_argv(head.python, "ray_pdb_keys", f"{head.node_ip}:{inv.ray.port}")
    res = await transport.run(argv, timeout=30, what="list breakpoints")
    if not res.ok:
        tail = (res.stderr or res.stdout).strip().splitlines()
        raise TransportError(
            f"reading breakpoints on {head.name} failed: "
            f"{tail[-1] if tail else f'exit {res.exit_status}'}"
        )
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TransportError(f"reading breakpoints on {head.name}: unexpected output") from None
    node_ip_by_id = await _node_ips(cluster)
    out = []
    for rec in data.get("breakpoints", []):
        addr = str(rec.get("pdb_address", ""))
        pdb_host, _, port = addr.rpartition(":")
        if not port.isdigit():
            continue
        ip = node_ip_by_id.get(rec.get("node_id", ""), "")
        out.append(
            Breakpoint(
                key=rec["key"],
                host=inv.host_of_ip(ip) or ip or "?",
                node_ip=ip,
                port=int(port),
                pdb_host=pdb_host or "localhost",
                filename=str(rec.get("filename", "")),
                lineno=int(rec.get("lineno") or 0),
                task=str(rec.get("proctitle", "")),
                task_id=str(rec.get("task_id", "")),
                job=rec.get("submission_id") or str(rec.get("job_id", "")),
                traceback=rec.get("traceback"),
                timestamp=float(rec.get("timestamp") or 0),
            )
        )
    return sorted(out, key=lambda b: -b.timestamp)


async def _node_ips(cluster: RayCluster) -> dict[str, str]:
    client = await cluster.dashboard()
    return {n["node_id"]: n["node_ip"] for n in await client.nodes()}


async def _none() -> None:
    return None


async def debug_targets(cluster: RayCluster, *, breakpoints: bool = True) -> DebugTargets:
    """Both lists; a failure of one is reported in `problems` and does not hide the other.
    Without `breakpoints` the GCS KV is not read (a Python start on the head) and the
    breakpoint list comes back empty."""
    paused, bps = await asyncio.gather(
        paused_workers(cluster),
        legacy_breakpoints(cluster) if breakpoints else _none(),
        return_exceptions=True,
    )
    problems = []
    for what, value in (("paused workers", paused), ("breakpoints", bps)):
        if isinstance(value, (DashboardError, TransportError)):
            problems.append(f"{what}: {value}")
        elif isinstance(value, BaseException):
            raise value
    return DebugTargets(
        paused if isinstance(paused, list) else [], bps if isinstance(bps, list) else [], problems
    )


async def _debugger_address(
    cluster: RayCluster, target: PausedWorker | Breakpoint
) -> tuple[Transport, str, int]:
    """The transport of the target's host and where its debugger listens as seen from there:
    debugpy on the node's IP, legacy pdb on the node's loopback (unless Ray ran with
    --ray-debugger-external)."""
    if target.host not in {h.name for h in cluster.inv.hosts}:
        raise TransportError(
            f"the debugger is on {target.node_ip or target.host}, which is not "
            f"a host of {cluster.inv.cluster}: add it to the hosts file"
        )
    transport = await cluster.fleet.ready(target.host, 15)
    if isinstance(target, PausedWorker):
        remote = target.node_ip
    else:
        remote = (
            "127.0.0.1" if target.pdb_host in ("localhost", "127.0.0.1", "") else target.pdb_host
        )
    return transport, remote, target.port


async def open_debug_connection(
    cluster: RayCluster, target: PausedWorker | Breakpoint
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to the target's debugger over its host's SSH connection, with no listener
    here: what the cockpit's own DAP client and pdb console use."""
    transport, remote, port = await _debugger_address(cluster, target)
    return await transport.open_connection(remote, port)


async def open_forward(cluster: RayCluster, target: PausedWorker | Breakpoint) -> Forward:
    """A loopback port forwarded to the target's debugger, for a program that needs host:port
    (VS Code's attach); only our own uid's connections get through."""
    transport, remote, port = await _debugger_address(cluster, target)
    return await transport.forward_local_port(remote, port)
