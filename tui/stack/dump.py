"""`dump_job_stacks`: every process of a job on every host dumped with py-spy at once.

The processes come from Ray: the job's live actors (verl's TaskRunner and workers) and running
task workers from the state API, the driver from the Jobs API, each node's IP mapped to its
host in hosts.yaml. Each host then runs tui/remote/stack_dump.py once over its existing SSH
connection with its pids (py-spy beside the host's interpreter, else on PATH), all hosts in
parallel, each within one deadline; what a host sends back is bounded by the request (bytes per
process) and parsed at one boundary (tui/stack/pyspy.py). Ray's view of the job
(tui/stack/ray_view.py) is asked meanwhile. A host that is down, a py-spy that is missing, a
ptrace that is refused: each is one problem line naming its host and its fix, never an
exception out of here (except a job id that is not one, or a job Ray does not know).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tui.cluster.dashboard import TERMINAL, DashboardError, check_job_id
from tui.cluster.tracing import TracingFacts
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.stack.model import Problem, StackReport, Target
from tui.stack.pyspy import HostAnswer, problems_of, take_proc
from tui.stack.ray_view import RayView, job_query, ray_view
from tui.transport.deadline import CommandTimeout, within
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.dashboard import DashboardClient
    from tui.config.hosts import Inventory
    from tui.transport.fleet import Fleet

DEADLINE_S = 60.0  # the whole dump, every host
PER_PROCESS_S = 20.0  # one py-spy run (it stops the process while it reads it)
PARALLEL = 8  # py-spy runs at once on one host
PROCESS_BYTES = 256 * 1024  # one process's dump as it travels
HOST_BYTES = 16 << 20  # one host's whole answer
MAX_PROCESSES = 4096  # per host
CONNECT_S = 15.0


class JobNotRunning(DashboardError, title="job not running"):
    """The job has no processes to dump (not started yet, or ended): one line saying which."""


async def job_targets(
    client: DashboardClient, inv: Inventory, job: str
) -> tuple[str, list[Target], list[Problem]]:
    """Ray's job id, the job's processes (driver, live actors, running task workers) and the
    nodes that are not hosts of hosts.yaml."""
    info = await client.job_info(check_job_id(job, "JOB"))
    job_hex = info["job_id"]
    if not job_hex:
        raise JobNotRunning(f"job {job} has no Ray job id yet ({info['status']}): nothing runs")
    actors, tasks, nodes = await asyncio.gather(
        client.state_rows("actors", job_query("job_id", job_hex)),
        client.state_rows("tasks", job_query("job_id", job_hex, detail=False)),
        client.nodes(),
    )
    ip_of_node = {n["node_id"]: n["node_ip"] for n in nodes}
    targets: dict[tuple[str, int], Target] = {}
    unknown: dict[str, int] = {}

    def add(ip: str | None, pid: int | None, role: str, actor: str = "") -> None:
        if not ip or not pid:
            return
        host = inv.host_of_ip(ip)
        if host is None:
            unknown[ip] = unknown.get(ip, 0) + 1
            return
        targets.setdefault((host, pid), Target(host, pid, role, actor))

    driver = info["driver_info"] or {}
    if info["status"] in ("RUNNING", "PENDING"):
        add(driver.get("node_ip_address"), driver.get("pid"), "driver")
    for a in actors:
        if a["state"] == "ALIVE":
            role = one_line(a["class_name"] or "actor", 80)
            add(ip_of_node.get(a["node_id"]), a["pid"], role, one_line(a["name"] or "", 120))
    for t in tasks:
        if t["state"] == "RUNNING" and t["type"] in (None, "NORMAL_TASK"):
            name = one_line(t["name"] or t["func_or_class_name"] or "?", 80)
            add(ip_of_node.get(t["node_id"]), t["worker_pid"], f"task {name}")
    if not targets and info["status"] in TERMINAL:
        raise JobNotRunning(
            f"job {job} is {info['status']}: nothing runs to dump (its log: verl-tui logs HOSTS "
            f"{job})"
        )
    problems = [
        Problem(
            one_line(ip, 80),
            f"{n} process(es) of the job on node {one_line(ip, 80)}, which is not a host of "
            "hosts.yaml (add it, with node_ip: if Ray knows it by another address)",
        )
        for ip, n in sorted(unknown.items())
    ]
    return job_hex, list(targets.values()), problems


async def dump_host(
    fleet: Fleet,
    host: str,
    targets: Sequence[Target],
    *,
    native: bool = False,
    deadline_s: float = DEADLINE_S,
    per_process_s: float = PER_PROCESS_S,
) -> HostAnswer:
    """One host's processes dumped there; never raises for the host's own trouble."""
    answer = HostAnswer(host)
    python = fleet.inventory.host(host).python
    by_pid = {t.pid: t for t in targets[:MAX_PROCESSES]}
    req = {
        "pids": list(by_pid),
        "native": native,
        "timeout": per_process_s,
        "max_bytes": max(4096, min(PROCESS_BYTES, HOST_BYTES // max(1, len(by_pid)))),
        "parallel": PARALLEL,
    }
    start = time.monotonic()
    try:
        transport = await fleet.ready(host, min(CONNECT_S, deadline_s))
        left = max(1.0, deadline_s - (time.monotonic() - start))
        res = await transport.run(
            python_argv(python, "stack_dump", site=False),
            input=json.dumps(req),
            timeout=left,
            what="py-spy dump",
        )
    except CommandTimeout as exc:
        answer.error = f"{exc.detail}: a host this slow to answer may itself be the hang"
        return answer
    except TransportError as exc:
        answer.error = one_line(str(exc).removeprefix(f"{host}: "), 300)
        return answer
    for raw in res.stdout.splitlines():
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            answer.bad_lines += 1
            continue
        if isinstance(doc, dict) and isinstance(doc.get("proc"), dict):
            take_proc(answer, doc["proc"], by_pid)
        elif isinstance(doc, dict) and isinstance(doc.get("done"), dict):
            answer.facts = TracingFacts.parse(doc["done"])
        elif isinstance(doc, dict) and isinstance(doc.get("error"), str):
            answer.error = one_line(doc["error"], 300)
        else:
            answer.bad_lines += 1
    if answer.facts is None and not answer.error:
        why = (res.stderr.strip().splitlines() or [f"exit status {res.exit_status}"])[-1]
        answer.error = one_line(f"{python}: {why}", 300)
    return answer


def _by_host(targets: Sequence[Target]) -> dict[str, list[Target]]:
    out: dict[str, list[Target]] = {}
    for t in targets:
        out.setdefault(t.host, []).append(t)
    return out


async def dump_targets(
    fleet: Fleet,
    targets: Sequence[Target],
    report: StackReport,
    *,
    deadline_s: float = DEADLINE_S,
    per_process_s: float = PER_PROCESS_S,
) -> None:
    """Every host's targets dumped at once into `report` (dumps and problems), hosts in
    hosts.yaml's order."""
    groups = _by_host(targets)
    order = [h.name for h in fleet.inventory.hosts if h.name in groups]
    answers = await asyncio.gather(
        *(
            dump_host(
                fleet,
                h,
                groups[h],
                native=report.native,
                deadline_s=deadline_s,
                per_process_s=per_process_s,
            )
            for h in order
        )
    )
    for a in answers:
        report.dumps += a.dumps
        python = fleet.inventory.host(a.host).python
        report.problems += [Problem(a.host, p) for p in problems_of(a, python)]


async def dump_job_stacks(
    fleet: Fleet,
    client: DashboardClient,
    job: str,
    *,
    native: bool = False,
    deadline_s: float = DEADLINE_S,
    per_process_s: float = PER_PROCESS_S,
) -> StackReport:
    """Every process of `job` (a submission id) on every host, dumped with py-spy in parallel,
    grouped by stack, with Ray's view of the job. BadJobId for an id that is not one;
    DashboardError when Ray cannot be asked for the job's processes (JobNotRunning when the job
    has none). Everything after that is a problem line in the report."""
    start = time.monotonic()
    report = StackReport(job=job, native=native)
    job_hex, targets, problems = await job_targets(client, fleet.inventory, job)
    report.expected = len(targets)
    report.problems += problems

    async def view() -> RayView:
        try:
            return await within(ray_view(client, fleet.inventory, job_hex), deadline_s)
        except (DashboardError, asyncio.TimeoutError) as exc:
            return RayView(error=one_line(str(exc) or "no answer in time", 300))

    ray, _ = await asyncio.gather(
        view(),
        dump_targets(fleet, targets, report, deadline_s=deadline_s, per_process_s=per_process_s),
    )
    report.ray = ray.to_json()
    report.ray_lines = ray.lines()
    report.seconds = time.monotonic() - start
    return report
