"""Ray's view of one job beside its stacks: its actors and their states (who died and why, who
restarted), its tasks that wait and on what, its placement groups that wait and what they need
against what each node has free. From the state API through the tunnel; every row was checked
by tui/cluster/dashboard_schema.py, and every text kept here is one cleaned, bounded line.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.sanitize import one_line

if TYPE_CHECKING:
    from tui.cluster.dashboard import DashboardClient
    from tui.config.hosts import Inventory

LIMIT = 10000
# What a task's pending state waits on, in words (Ray's TaskStatus names).
WAITS_ON = {
    "PENDING_ARGS_AVAIL": "waits for its arguments (an upstream task or object)",
    "PENDING_NODE_ASSIGNMENT": "waits for a node with the resources it asks for",
    "PENDING_OBJ_STORE_MEM_AVAIL": "waits for object store memory",
    "PENDING_ARGS_FETCH": "waits for its arguments to arrive from another node",
    "SUBMITTED_TO_WORKER": "sent to a worker, not started (the worker busy or starting)",
    "PENDING_ACTOR_TASK_ARGS_DELAYED": "waits for its arguments (an actor task)",
    "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY": "waits behind the actor's earlier calls",
}
MAX_ROWS = 200  # actors / task kinds / placement groups shown
TEXT = 300


def job_query(key: str, value: str, *, detail: bool = True) -> dict[str, object]:
    return {
        "limit": LIMIT,
        "detail": "true" if detail else "false",
        "filter_keys": key,
        "filter_predicates": "=",
        "filter_values": value,
    }


def death_text(cause: Any) -> str:
    """One line out of Ray's death_cause (a nested context whose inside varies by version)."""
    if not isinstance(cause, dict):
        return ""
    for ctx in cause.values():
        if isinstance(ctx, dict):
            for key in ("error_message", "reason"):
                if isinstance(ctx.get(key), str) and ctx[key].strip():
                    return one_line(ctx[key], TEXT)
    return ""


@dataclass(frozen=True)
class ActorRow:
    name: str  # the actor's name, else its class
    state: str
    host: str
    pid: int | None
    restarts: int
    death: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "state": self.state,
            "host": self.host,
            "pid": self.pid,
            "restarts": self.restarts,
        }
        if self.death:
            out["death"] = self.death
        return out

    @property
    def line(self) -> str:
        where = f" on {self.host}" + (f" pid {self.pid}" if self.pid else "") if self.host else ""
        restarts = f", restarted {self.restarts}×" if self.restarts else ""
        death = f": {self.death}" if self.death else ""
        return one_line(f"{self.name} {self.state}{where}{restarts}{death}", 400)


@dataclass(frozen=True)
class WaitingPG:
    pg_id: str
    name: str
    state: str
    bundles: tuple[dict[str, float], ...]
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.pg_id,
            "name": self.name,
            "state": self.state,
            "bundles": [dict(b) for b in self.bundles],
            "why": self.why,
        }


@dataclass
class RayView:
    actors: list[ActorRow] = field(default_factory=list)
    pending: list[tuple[str, str, int]] = field(default_factory=list)  # (name, state, count)
    running: int = 0
    placement_groups: list[WaitingPG] = field(default_factory=list)
    free: dict[str, dict[str, float]] = field(default_factory=dict)  # node → free GPU/CPU
    error: str = ""  # Ray could not be asked (the stacks may still be there)

    def to_json(self) -> dict[str, Any]:
        states = Counter(a.state for a in self.actors)
        return {
            "actors": [a.to_json() for a in self.actors[:MAX_ROWS]],
            "actor_states": dict(sorted(states.items())),
            "tasks_running": self.running,
            "tasks_pending": [
                {"name": n, "state": s, "count": c} for n, s, c in self.pending[:MAX_ROWS]
            ],
            "placement_groups_waiting": [p.to_json() for p in self.placement_groups],
            "free": self.free,
            **({"error": self.error} if self.error else {}),
        }

    def lines(self) -> list[str]:
        """The view as lines: troubled actors first, then a count of the rest; waiting tasks;
        waiting placement groups with why."""
        out = []
        if self.error:
            out.append(f"Ray: {self.error}")
        trouble = [a for a in self.actors if a.state != "ALIVE" or a.restarts]
        out += [a.line for a in trouble[:MAX_ROWS]]
        alive = sum(1 for a in self.actors if a.state == "ALIVE")
        out.append(f"{alive} of {len(self.actors)} actor(s) alive; {self.running} task(s) running")
        for name, state, count in self.pending[:MAX_ROWS]:
            why = WAITS_ON.get(state, "")
            out.append(
                one_line(f"{count} task(s) {name}: {state}" + (f", {why}" if why else ""), 300)
            )
        out += [
            one_line(f"placement group {p.name or p.pg_id}: {p.why}", 400)
            for p in self.placement_groups
        ]
        return out


def _fmt_res(res: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(res.items()) if v)


def pg_why(bundles: Sequence[Mapping[str, float]], free: Mapping[str, Mapping[str, float]]) -> str:
    """What a waiting placement group needs against the nodes' free resources: the largest
    bundle and the node that comes closest, e.g. ``needs 8 GPU in one bundle (one node); the
    largest free is 4 GPU on node3``."""
    if not bundles:
        return "has no bundles"
    total: Counter[str] = Counter()
    for b in bundles:
        total.update({k: v for k, v in b.items() if v})
    for res in ("GPU", "CPU"):
        biggest = max((b.get(res, 0.0) for b in bundles), default=0.0)
        if not biggest:
            continue
        best_node, best = "", -1.0
        for node, fr in free.items():
            if fr.get(res, 0.0) > best:
                best_node, best = node, fr.get(res, 0.0)
        if best < biggest:
            where = f"{best:g} {res} on {best_node}" if best_node else "not known (no load report)"
            return (
                f"needs {biggest:g} {res} on one node (a bundle of {_fmt_res(bundles[0])}; "
                f"{len(bundles)} bundle(s), {_fmt_res(total)} in all); the largest free is {where}"
            )
    have = {r: sum(fr.get(r, 0.0) for fr in free.values()) for r in ("GPU", "CPU")}
    short = [r for r in ("GPU", "CPU") if total.get(r, 0.0) > have[r]]
    if short:
        return f"needs {_fmt_res(total)} over {len(bundles)} bundle(s); free in all: " + ", ".join(
            f"{have[r]:g} {r}" for r in short
        )
    return (
        f"needs {_fmt_res(total)} over {len(bundles)} bundle(s), which the nodes have free now: "
        "its strategy (STRICT_SPREAD/STRICT_PACK) or custom resources keep it waiting"
    )


async def ray_view(client: DashboardClient, inv: Inventory, job_hex: str) -> RayView:
    """The job's actors, pending tasks and waiting placement groups (`job_hex`: Ray's job id)."""
    from tui.cluster.dashboard import DashboardError
    from tui.jobs.queue import free_resources

    view = RayView()
    actors, tasks, pgs, nodes = await asyncio.gather(
        client.state_rows("actors", job_query("job_id", job_hex)),
        client.state_rows("tasks", job_query("job_id", job_hex, detail=False)),
        client.state_rows("placement_groups", {"limit": LIMIT, "detail": "true"}),
        client.nodes(),
    )
    host_of_node = {n["node_id"]: inv.host_of_ip(n["node_ip"]) or n["node_ip"] for n in nodes}
    for a in actors:
        name = a["name"] or a["class_name"] or a["actor_id"] or "?"
        restarts = a["num_restarts"]
        view.actors.append(
            ActorRow(
                name=one_line(name, 120),
                state=one_line(a["state"] or "?", 40),
                host=one_line(host_of_node.get(a["node_id"], ""), 80),
                pid=a["pid"],
                restarts=int(restarts) if restarts and restarts > 0 else 0,
                death=death_text(a["death_cause"]) if a["state"] != "ALIVE" else "",
            )
        )
    counts: Counter[tuple[str, str]] = Counter()
    for t in tasks:
        state = t["state"] or "?"
        if state == "RUNNING":
            view.running += 1
        elif state.startswith("PENDING") or state == "SUBMITTED_TO_WORKER":
            counts[(one_line(t["name"] or t["func_or_class_name"] or "?", 120), state)] += 1
    view.pending = [(n, s, c) for (n, s), c in counts.most_common()]
    waiting = [
        p
        for p in pgs
        if p["creator_job_id"] == job_hex and p["state"] not in ("CREATED", "REMOVED")
    ]
    if waiting:
        try:
            res = await free_resources(client, inv)
        except DashboardError:  # the load report only adds what is free
            res = None
        if res is not None:
            view.free = {n.host: {"GPU": n.gpus, "CPU": n.cpus} for n in res.nodes}
    for p in waiting[:MAX_ROWS]:
        bundles = tuple(
            {one_line(k, 40): float(v) for k, v in list((b["unit_resources"] or {}).items())[:16]}
            for b in (p["bundles"] or ())
        )
        view.placement_groups.append(
            WaitingPG(
                pg_id=one_line(p["placement_group_id"] or "?", 80),
                name=one_line(p["name"] or "", 80),
                state=one_line(p["state"] or "?", 40),
                bundles=bundles,
                why=pg_why(bundles, view.free),
            )
        )
    return view
