"""Record the data the snapshot apps replay, from a real run: two OpenSSH hosts in network
namespaces (the test harness), Ray brought up on them by RayCluster, the doctor's real checks,
the demo training job submitted through `verl-tui submit` and read back through the Jobs API,
a host's Ray log files, and verl's real FSDP checkpoint (tests/ckpt) scanned on both hosts.

    .venv/bin/python tests/snapshot_apps/record.py      # root, sshd; ~2 minutes

Writes tests/snapshot_apps/recorded/*.json. Host addresses and temp paths are whatever the run
had; the snapshot apps show them as recorded (they are data, not clock-dependent).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness.nshosts import NsCluster  # noqa: E402

from tui.ckpt.hostcmd import run_op  # noqa: E402
from tui.cluster.dashboard import DashboardClient  # noqa: E402
from tui.cluster.doctor import run_doctor  # noqa: E402
from tui.cluster.job_logs import job_log_chunks  # noqa: E402
from tui.cluster.node_logs import list_logs  # noqa: E402
from tui.cluster.ray_cluster import RayCluster, StepEvent  # noqa: E402
from tui.config.hosts import load_inventory  # noqa: E402
from tui.jobs.service import TERMINAL, list_jobs  # noqa: E402
from tui.screens.ray_progress import ray_up_outcome  # noqa: E402
from tui.transport.fleet import Fleet  # noqa: E402

OUT = HERE / "recorded"
JOB = "grpo-gsm8k-1122"


class RecordingClient(DashboardClient):
    """The real client; every answer is kept by method and path."""

    answers: dict[str, Any] = {}

    def _request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, **kw: Any
    ) -> Any:
        answer = super()._request(method, path, body, raw=raw, **kw)
        if method == "GET":
            RecordingClient.answers[path] = answer
        return answer


def dump(name: str, data: Any) -> None:
    (OUT / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print("wrote", (OUT / name).relative_to(ROOT))


async def record(cluster: NsCluster, hosts: Path, work: Path) -> None:
    inv = load_inventory(hosts)
    fleet = Fleet(inv)
    fleet.start()
    events: list[StepEvent] = []
    ray = RayCluster(fleet, inv, progress=events.append)
    try:
        await asyncio.gather(*(fleet.wait_up(h.name, 30) for h in inv.hosts))
        t0 = time.monotonic()
        status = await ray.bring_up()
        dump(
            "ray_up.json",
            {
                "title": f"Ray up — {inv.cluster}",
                "events": [
                    {
                        "host": e.host,
                        "phase": e.phase,
                        "status": e.status,
                        "message": e.message,
                        "at": round(e.at - t0, 1),
                    }
                    for e in events
                ],
                "outcome": ray_up_outcome(status),  # the cockpit's own last line
            },
        )

        t0 = time.monotonic()
        findings = await run_doctor(fleet, inv)
        dump(
            "doctor.json",
            {
                "elapsed_s": round(time.monotonic() - t0, 1),
                "findings": [f.to_json() for f in findings],
            },
        )

        # The tunnel's client records every GET the services make.
        tunnel_client = await ray.dashboard()
        tunnel_client.__class__ = RecordingClient
        argv = [
            sys.executable,
            "-m",
            "tui",
            "submit",
            str(hosts),
            "--submission-id",
            JOB,
            "--",
            sys.executable,
            str(ROOT / "scripts" / "demo_training_job.py"),
            "60",
        ]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=180)
        if out.returncode:
            raise RuntimeError(f"submit: {out.stderr.strip()}")
        history_dir = Path(os.environ["XDG_STATE_HOME"]) / "verl-tui" / "history"
        from tui.jobs.history import JobHistory

        history = JobHistory(inv.cluster)
        for _ in range(240):
            rows = await list_jobs(ray, history)
            if all(r.status.split()[0] in TERMINAL for r in rows):
                break
            await asyncio.sleep(1)
        await ray.status()
        chunks = [c async for c in job_log_chunks(tunnel_client, JOB, follow=True)]
        assert chunks, "the job's log came back empty"
        records = {p.name: json.loads(p.read_text()) for p in history_dir.rglob("*.json")}
        dump("dashboard.json", {"answers": RecordingClient.answers, "history": records})

        transport = await fleet.wait_up(inv.hosts[1].name, 10)
        files = await list_logs(transport)
        raylet = await transport.run(
            ["tail", "-n", "60", "--", "/tmp/ray/session_latest/logs/raylet.out"], timeout=20
        )
        dump(
            "node_logs.json",
            {
                "files": {
                    inv.hosts[1].name: [
                        {"name": f.name, "size": f.size, "mtime": f.mtime} for f in files
                    ]
                },
                "opened": [inv.hosts[1].name, "raylet.out"],
                "text": raylet.stdout,
            },
        )

        dump("checkpoints.json", await record_checkpoint(cluster, fleet, inv, work))
        await ray.tear_down()
    finally:
        await ray.close()
        await fleet.close()


async def record_checkpoint(cluster: NsCluster, fleet: Fleet, inv, work: Path) -> dict:
    """verl's real FSDP checkpoint, rank 0 (and the driver's files) on the first host, rank 1
    on the second, both behind one path; each host's scan answer as it came back."""
    from ckpt.make_fsdp_checkpoint import files_by_writer, make_fsdp_checkpoint

    root = work / "mnt" / "grpo-qwen" / "checkpoints"
    root.mkdir(parents=True)
    disks = {h.name: work / "disks" / h.name for h in inv.hosts}
    for step in (60, 120):
        made = await asyncio.to_thread(make_fsdp_checkpoint, work / f"made{step}" / "run", step)
        writers = files_by_writer(step)
        # Step 60 was collected onto the first host already; step 120 is spread.
        layout = {
            inv.hosts[0].name: writers["rank0"]
            + writers["driver"]
            + (writers["rank1"] if step == 60 else []),
            inv.hosts[1].name: writers["rank1"],
        }
        for name, rels in layout.items():
            for rel in rels:
                src, dst = made["out_dir"] / rel.rstrip("/"), disks[name] / rel.rstrip("/")
                if dst.exists():
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                (shutil.copytree if rel.endswith("/") else shutil.copy2)(src, dst)
    for ns_host, inv_host in zip(cluster.hosts, inv.hosts, strict=True):
        cluster.exec_in(ns_host.name, ["mount", "--bind", str(disks[inv_host.name]), str(root)])
    scans = {h.name: await run_op(fleet, h.name, "scan", str(root)) for h in inv.hosts}
    return {"root": str(root), "scans": scans}


def main() -> int:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["XDG_STATE_HOME"] = str(work / "state")
        cluster = NsCluster(2, work / "hosts")
        cluster.start()
        try:
            hosts = cluster.write_hosts_yaml(work / "hosts.yaml", python=sys.executable)
            text = hosts.read_text().replace(f"cluster: {cluster.prefix}", "cluster: grpo-demo")
            # Two Ray nodes share this one machine: keep each small.
            text = text.replace(
                "hosts:\n",
                "ray:\n  memory: 1000000000\n  object_store_memory: 100000000\nhosts:\n",
                1,
            )
            hosts.write_text(text)
            asyncio.run(record(cluster, hosts, work))
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
