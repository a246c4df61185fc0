"""Handing a paused post-mortem worker to VS Code: a kept SSH forward to its debugpy port and
a launch.json attach configuration whose pathMappings turn Ray's copy of the job's
working_dir on that node back into the user's folder."""

from __future__ import annotations

import posixpath
from pathlib import Path

from tui.cluster.job_logs import job_info
from tui.cluster.ray_cluster import RayCluster
from tui.debug.targets import PausedWorker, open_forward
from tui.debug.vscode import write_launch_json
from tui.jobs.history import JobHistory
from tui.transport.types import Forward


async def remote_working_dir(cluster: RayCluster, target: PausedWorker) -> str | None:
    """Where Ray unpacked the job's working_dir on the worker's node, or None without one."""
    client = await cluster.dashboard()
    info = await job_info(client, target.job)
    uri = (info.get("runtime_env") or {}).get("working_dir")
    if not uri or "://" not in uri:
        return None
    pkg = posixpath.basename(uri.split("://", 1)[1])
    pkg = pkg[:-4] if pkg.endswith(".zip") else pkg
    transport = await cluster.fleet.ready(target.host, 15)
    res = await transport.run(["readlink", "-f", "/tmp/ray/session_latest"], timeout=10)
    session = res.stdout.strip() if res.ok and res.stdout.strip() else "/tmp/ray/session_latest"
    return posixpath.join(session, "runtime_resources", "working_dir_files", pkg)


def local_working_dir(cluster: RayCluster, job: str, workspace: Path) -> Path:
    """The folder the job was submitted from (our history), else the workspace."""
    rec = JobHistory(cluster.inv.cluster).get(job)
    wd = (rec.runtime_env or {}).get("working_dir") if rec else None
    if wd and "://" not in wd and Path(wd).is_dir():
        return Path(wd)
    return workspace


async def attach_in_vscode(
    cluster: RayCluster, target: PausedWorker, workspace: Path
) -> tuple[Path, Forward]:
    """Open the forward (the caller keeps it open) and write the attach configuration."""
    forward = await open_forward(cluster, target)
    try:
        remote = await remote_working_dir(cluster, target)
        mappings = (
            [(str(local_working_dir(cluster, target.job, workspace)), remote)] if remote else []
        )
        path = write_launch_json(
            workspace,
            name=f"verl-tui: {target.task} ({target.host} pid {target.pid})",
            port=forward.local_port,
            path_mappings=mappings,
        )
    except BaseException:
        forward.close()
        raise
    return path, forward
