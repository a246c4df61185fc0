"""The local job queue: validated submissions that wait for the cluster's GPUs.

One JSON file per cluster under the state dir (`queue/<cluster>/queue.json`), its entries in
queue order (priority first, then FIFO; `move` reorders by hand). Every change takes a flock on
`queue.lock` (blocking: changes are short), re-reads the file, changes it and writes it back
atomically (temp file + rename), so two processes (the cockpit and `verl-tui watch`, or a CLI
`submit --queue` next to them) never lose or duplicate an entry; readers need no lock.

An entry is a Submission frozen at queue time: its submission id is chosen then, and its env
vars are stored the way the history stores them (secrets as references, never values: they
are taken from the environment of the process that starts the job). What the job needs comes
from its composed config (nnodes × n_gpus_per_node, 3 CPUs per GPU, extra resource pools) and
is checked with the validator's own rule (rules_runtime._cluster_rules) against Ray's
*available* resources.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tui.cluster.dashboard import check_job_id, is_job_id
from tui.config.hosts import Inventory
from tui.errors import VerlTuiError
from tui.jobs.owner import me, owner_of_metadata, valid_owner
from tui.jobs.rules_base import CPUS_PER_GPU, ClusterResources, NodeResources, Problem, _Cfg
from tui.jobs.rules_runtime import _cluster_rules
from tui.jobs.secrets import env_for_record, resolve
from tui.jobs.submit import Submission
from tui.state import StateError, atomic_write_json, open_lock_file, read_state_json, state_path

QUEUE_VERSION = 1
LOCK_WAIT_S = 20.0  # a change holds the lock for milliseconds; longer means a stuck holder
# A job the queue just started holds its place in the free resources this long (or until it
# ends): Ray counts its placement groups only once verl has created them, and the
# autoscaler's usage report lags a few seconds behind that.
SETTLE_S = 120.0
MAX_QUEUE_BYTES = 64 << 20  # thousands of entries fit; more is not a file we wrote

State = Literal["queued", "starting"]

# The config keys verl reads to size resource pools beyond trainer.* (rules_runtime).
_POOL_KEYS = (
    "reward.reward_model.enable_resource_pool",
    "reward.reward_model.nnodes",
    "reward.reward_model.n_gpus_per_node",
    "distillation.enabled",
    "distillation.nnodes",
    "distillation.n_gpus_per_node",
)


class QueueError(VerlTuiError, title="queue"):
    """A queue change that cannot be made (unknown id, duplicate id, stuck lock): one line."""


@dataclass
class Needs:
    """What a job takes from the cluster: `nnodes` placement groups of `gpus_per_node`
    bundles {CPU: 3, GPU: 1}, plus GPUs of extra pools. All zero: a raw command (no known
    size: it waits only for its turn)."""

    nnodes: int = 0
    gpus_per_node: int = 0
    pools: dict[str, Any] = field(default_factory=dict)  # the _POOL_KEYS subset of the config

    @property
    def gpus(self) -> int:
        return self.nnodes * self.gpus_per_node + _extra_gpus(self.pools)

    @property
    def cpus_per_node(self) -> int:
        return CPUS_PER_GPU * self.gpus_per_node

    def describe(self) -> str:
        if not self.nnodes:
            return "-"
        text = f"{self.nnodes}×{self.gpus_per_node} GPU, {self.cpus_per_node} CPU/node"
        extra = _extra_gpus(self.pools)
        return text + (f" +{extra} GPU" if extra else "")

    def problems(self, resources: ClusterResources) -> list[Problem]:
        """The validator's cluster rule on `resources` (free or total): [] when it fits."""
        out: list[Problem] = []
        if self.nnodes and self.gpus_per_node:
            _cluster_rules(_Cfg(self.pools, out), out, resources, self.nnodes, self.gpus_per_node)
        return out

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> Needs:
        if not cfg:
            return cls()
        c = _Cfg(cfg, [])
        pools: dict[str, Any] = {}
        for key in _POOL_KEYS:
            value = c.get(key)
            if value is not None:
                node = pools
                *parents, last = key.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                node[last] = value
        return cls(c.as_int("trainer.nnodes") or 0, c.as_int("trainer.n_gpus_per_node") or 0, pools)

    @classmethod
    def from_json(cls, doc: Any) -> Needs:
        if not isinstance(doc, dict):
            return cls()
        nn, per = doc.get("nnodes"), doc.get("gpus_per_node")
        pools = doc.get("pools")
        return cls(
            nn if isinstance(nn, int) and nn >= 0 else 0,
            per if isinstance(per, int) and per >= 0 else 0,
            pools if isinstance(pools, dict) else {},
        )


def _extra_gpus(pools: Mapping[str, Any]) -> int:
    from tui.jobs.rules_runtime import _extra_pool_gpus

    return _extra_pool_gpus(_Cfg(pools, [])) if pools else 0


@dataclass
class QueueEntry:
    submission_id: str
    cluster: str
    queued_at: float
    entrypoint_argv: list[str]
    priority: int = 0
    kind: str = "profile"  # profile | raw
    runtime_env: dict[str, Any] = field(default_factory=dict)  # env_vars as the history keeps them
    metadata: dict[str, str] = field(default_factory=dict)
    profile: str | None = None
    profile_path: str | None = None
    overrides: list[str] = field(default_factory=list)
    config_hash: str | None = None
    needs: Needs = field(default_factory=Needs)
    group: str | None = None  # a sweep's name
    tags: dict[str, str] = field(default_factory=dict)  # e.g. {"sweep": NAME, "grid": "lr=…"}
    hosts_file: str | None = None
    state: State = "queued"
    started_at: float | None = None  # when a supervisor began submitting it
    reason: str | None = None  # why it waits (or cannot start), as the supervisor last saw it
    blocked: bool = False  # cannot start on the cluster as it is (skipped, kept)
    owner: str | None = None  # user@host who queued it (tui/jobs/owner.py); None: unknown
    retry_policy: dict[str, Any] | None = None  # `submit --queue --retries N`: goes with it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> QueueEntry | None:
        """An entry read back from the file; None for anything of the wrong shape (the file
        is ours, but a hand edit must not crash the supervisor)."""
        if not isinstance(doc, dict) or not is_job_id(doc.get("submission_id")):
            return None
        argv = doc.get("entrypoint_argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not argv:
            return None
        try:
            entry = cls(
                **{k: v for k, v in doc.items() if k in cls.__dataclass_fields__ and k != "needs"},
                needs=Needs.from_json(doc.get("needs")),
            )
        except TypeError:
            return None
        if not isinstance(entry.queued_at, (int, float)) or not isinstance(entry.priority, int):
            return None
        if not _shaped(entry):
            return None
        if entry.state not in ("queued", "starting"):
            entry.state = "queued"
        entry.owner = valid_owner(entry.owner)
        if not isinstance(entry.retry_policy, dict):
            entry.retry_policy = None
        return entry

    @property
    def env_refs(self) -> dict[str, Any]:
        env = self.runtime_env.get("env_vars") if isinstance(self.runtime_env, dict) else None
        return env if isinstance(env, dict) else {}

    def summary_json(self, position: int) -> dict[str, Any]:
        """One row of `verl-tui queue --json`."""
        return {
            "position": position,
            "submission_id": self.submission_id,
            "owner": self.owner,
            "priority": self.priority,
            "profile": self.profile,
            "kind": self.kind,
            "needs": {
                "nnodes": self.needs.nnodes,
                "gpus_per_node": self.needs.gpus_per_node,
                "cpus_per_node": self.needs.cpus_per_node,
                "gpus": self.needs.gpus,
            },
            "queued_at": self.queued_at,
            "waiting_s": max(0.0, time.time() - self.queued_at),
            "state": self.state,
            "reason": self.reason,
            "blocked": self.blocked,
            "group": self.group,
            "tags": dict(self.tags),
            "overrides": list(self.overrides),
        }


def _is_str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    )


def _opt_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _shaped(e: QueueEntry) -> bool:
    """Every field of the type the code relies on (a hand-edited file is input)."""
    return (
        isinstance(e.runtime_env, dict)
        and _is_str_map(e.metadata)
        and _is_str_map(e.tags)
        and isinstance(e.overrides, list)
        and all(isinstance(o, str) for o in e.overrides)
        and all(
            _opt_str(v)
            for v in (e.profile, e.profile_path, e.config_hash, e.group, e.hosts_file, e.reason)
        )
        and isinstance(e.kind, str)
        and isinstance(e.cluster, str)
        and isinstance(e.blocked, bool)
        and (e.started_at is None or isinstance(e.started_at, (int, float)))
    )


def entry_for(
    sub: Submission,
    inv: Inventory,
    *,
    needs: Needs,
    priority: int = 0,
    profile_path: str | None = None,
    group: str | None = None,
    tags: Mapping[str, str] | None = None,
    retry_policy: dict[str, Any] | None = None,
) -> QueueEntry:
    """A validated Submission as a queue entry (secrets as references, like the history); its
    owner is the one its metadata names (tui/jobs/flow.py stamps it), else this process's."""
    runtime_env = sub.runtime_env()
    if "env_vars" in runtime_env:
        runtime_env["env_vars"] = env_for_record(
            sub.env_vars, sub.env_sources, (*sub.secret_extra, *inv.secret_env)
        )
    return QueueEntry(
        submission_id=check_job_id(sub.submission_id, "submission id"),
        cluster=inv.cluster,
        queued_at=time.time(),
        entrypoint_argv=list(sub.entrypoint_argv),
        priority=priority,
        kind="profile" if sub.profile else "raw",
        runtime_env=runtime_env,
        metadata=dict(sub.metadata),
        profile=sub.profile,
        profile_path=profile_path,
        overrides=list(sub.overrides),
        config_hash=sub.config_hash,
        needs=needs,
        group=group,
        tags=dict(tags or {}),
        hosts_file=str(inv.source) if inv.source else None,
        owner=owner_of_metadata(sub.metadata) or me(),
        retry_policy=retry_policy,
    )


def submission_of(
    entry: QueueEntry, inv: Inventory, environ: Mapping[str, str] | None = None
) -> Submission:
    """The entry back as a Submission, secrets from `environ` (this process's environment),
    else hosts.yaml's ray.env. MissingSecret when one is set nowhere."""
    env = resolve(entry.env_refs, environ, dict(inv.ray.env))
    rt = entry.runtime_env if isinstance(entry.runtime_env, dict) else {}
    wd = rt.get("working_dir")
    sources = {
        v["name"]: v["from"]
        for v in entry.env_refs.values()
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    }
    return Submission(
        submission_id=entry.submission_id,
        entrypoint_argv=list(entry.entrypoint_argv),
        env_vars=env,
        working_dir=wd if isinstance(wd, str) else None,
        excludes=[str(x) for x in rt.get("excludes") or []],
        metadata={k: str(v) for k, v in entry.metadata.items()},
        profile=entry.profile,
        overrides=list(entry.overrides),
        config_hash=entry.config_hash,
        secret_extra=tuple(inv.secret_env),
        env_sources={k: sources.get(k, "env") for k in env},
    )


@dataclass
class Started:
    """A job the queue started recently: its needs stay reserved (see SETTLE_S)."""

    submission_id: str
    needs: Needs
    at: float


# -- the queue file's document and its changes: the same for every store -----------------------
# (this module's JobQueue: a local file; tui/jobs/queue_shared.py: the cluster's head)

Change = Callable[[list[QueueEntry], list[Started]], Any]


def parse_queue(
    doc: Any, damaged: Callable[[str], Exception]
) -> tuple[list[QueueEntry], list[Started]]:
    """The entries and reservations of a queue document (None: an empty queue). A document not
    entirely ours raises `damaged(why)`, so a change never writes back a queue that lost entries."""
    if doc is None:
        return [], []
    if not isinstance(doc, dict):
        raise damaged("not a JSON object")
    raw_entries, raw_started = doc.get("entries", []), doc.get("started", [])
    if not isinstance(raw_entries, list) or not isinstance(raw_started, list):
        raise damaged("'entries' and 'started' must be lists")
    entries = []
    for i, raw in enumerate(raw_entries):
        entry = QueueEntry.from_json(raw)
        if entry is None:
            raise damaged(f"entry {i + 1} is not a queue entry")
        entries.append(entry)
    started = []
    for s in raw_started:
        at = s.get("at") if isinstance(s, dict) else None
        if not (isinstance(s, dict) and is_job_id(s.get("submission_id"))) or not isinstance(
            at, (int, float)
        ):
            continue  # a reservation only delays: one of the wrong shape is let go
        started.append(Started(s["submission_id"], Needs.from_json(s.get("needs")), float(at)))
    return entries, started


def queue_doc(cluster: str, entries: list[QueueEntry], started: list[Started]) -> dict[str, Any]:
    now = time.time()
    return {
        "version": QUEUE_VERSION,
        "cluster": cluster,
        "entries": [e.to_json() for e in entries],
        "started": [asdict(s) for s in started if now - s.at < SETTLE_S],
    }


def settled(started: list[Started], now: float | None = None) -> list[Started]:
    now = time.time() if now is None else now
    return [s for s in started if now - s.at < SETTLE_S]


def op_add_all(new: list[QueueEntry], taken: Callable[[str], bool] | None) -> Change:
    """All of `new` or none (a sweep), each after every entry of its priority or higher: their
    1-based positions. QueueError when an id is queued already (or `taken` says it is used)."""

    def change(entries: list[QueueEntry], _s: list[Started]) -> list[int]:
        ids = {e.submission_id for e in entries}
        for e in new:
            if e.submission_id in ids or (taken is not None and taken(e.submission_id)):
                raise QueueError(f"submission id {e.submission_id} is already used")
            ids.add(e.submission_id)
        for e in new:
            at = next(
                (i for i, old in enumerate(entries) if old.priority < e.priority), len(entries)
            )
            entries.insert(at, e)
        return [entries.index(e) + 1 for e in new]

    return change


def op_cancel(submission_id: str, cluster: str) -> Change:
    def change(entries: list[QueueEntry], _s: list[Started]) -> QueueEntry:
        entry = _find(entries, submission_id, cluster)
        if entry.state == "starting":
            raise QueueError(f"{submission_id} is being submitted now: stop it instead")
        entries.remove(entry)
        return entry

    return change


def op_move(submission_id: str, to: int, cluster: str) -> Change:
    """To 1-based position `to` (clamped): its new position. It keeps its priority: the order
    is the queue's truth, priority only places new entries."""

    def change(entries: list[QueueEntry], _s: list[Started]) -> int:
        entry = _find(entries, submission_id, cluster)
        entries.remove(entry)
        at = min(max(to, 1), len(entries) + 1) - 1
        entries.insert(at, entry)
        return at + 1

    return change


def op_update(submission_id: str, changes: dict[str, Any]) -> Change:
    """Set fields of an entry (None when it is gone: cancelled meanwhile)."""

    def change(entries: list[QueueEntry], _s: list[Started]) -> QueueEntry | None:
        entry = next((e for e in entries if e.submission_id == submission_id), None)
        if entry is not None:
            for k, v in changes.items():
                setattr(entry, k, v)
        return entry

    return change


def op_begin_start(submission_id: str) -> Change:
    """Mark an entry `starting` (written before anything is sent: a supervisor killed
    mid-submit finds it so and checks the head before sending it again); None when it is gone."""
    return op_update(submission_id, {"state": "starting", "started_at": time.time()})


def op_finish_start(submission_id: str, needs: Needs) -> Change:
    """The job is on the head: out of the queue, its needs reserved for SETTLE_S."""

    def change(entries: list[QueueEntry], started: list[Started]) -> None:
        entries[:] = [e for e in entries if e.submission_id != submission_id]
        if not any(s.submission_id == submission_id for s in started):
            started.append(Started(submission_id, needs, time.time()))

    return change


def op_release(submission_ids: set[str]) -> Change:
    """Jobs that ended: their reservations go."""

    def change(_e: list[QueueEntry], started: list[Started]) -> None:
        started[:] = [s for s in started if s.submission_id not in submission_ids]

    return change


class JobQueue:
    """The queue of one cluster in a local file: where there is no head to keep it (a cockpit
    or CLI given no fleet), and the per-user queue of earlier versions that
    tui/jobs/queue_shared.py moves to the head once. Reads are lock-free; every change goes
    through `_change`."""

    def __init__(self, cluster: str, root: Path | None = None):
        self.cluster = cluster
        self.dir = state_path("queue", cluster, root=root)
        self.path = self.dir / "queue.json"
        self.lock_path = self.dir / "queue.lock"

    # -- reading -------------------------------------------------------------------------

    def _damaged(self, why: str) -> StateError:
        return StateError(
            f"{self.path}: damaged ({why}); nothing in it is submitted or changed until it is "
            "fixed by hand or moved away"
        )

    def _read(self) -> tuple[list[QueueEntry], list[Started]]:
        """No file: an empty queue. A file not entirely ours (bad JSON, an entry of the wrong
        shape, a FIFO): StateError naming it."""
        return parse_queue(read_state_json(self.path, max_bytes=MAX_QUEUE_BYTES), self._damaged)

    def entries(self) -> list[QueueEntry]:
        return self._read()[0]

    def started(self, now: float | None = None) -> list[Started]:
        return settled(self._read()[1], now)

    def get(self, submission_id: str) -> QueueEntry | None:
        return next((e for e in self.entries() if e.submission_id == submission_id), None)

    def position(self, submission_id: str) -> int | None:
        for i, e in enumerate(self.entries(), 1):
            if e.submission_id == submission_id:
                return i
        return None

    # -- changing ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = open_lock_file(self.lock_path)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise QueueError(
                            f"the queue of {self.cluster} is locked by another process "
                            f"({self.lock_path})"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # drops the flock

    def _change(self, fn: Change) -> Any:  # returns what fn returns
        with self._locked():
            entries, started = self._read()
            result = fn(entries, started)
            atomic_write_json(self.path, queue_doc(self.cluster, entries, started))
            return result

    def add(self, entry: QueueEntry, *, taken: Callable[[str], bool] | None = None) -> int:
        """Put `entry` after every entry of its priority or higher; its 1-based position."""
        return self.add_all([entry], taken=taken)[0]

    def add_all(
        self, new: list[QueueEntry], *, taken: Callable[[str], bool] | None = None
    ) -> list[int]:
        result: list[int] = self._change(op_add_all(new, taken))
        return result

    def cancel(self, submission_id: str) -> QueueEntry:
        result: QueueEntry = self._change(op_cancel(submission_id, self.cluster))
        return result

    def move(self, submission_id: str, to: int) -> int:
        result: int = self._change(op_move(submission_id, to, self.cluster))
        return result

    def update(self, submission_id: str, **changes: Any) -> QueueEntry | None:
        result: QueueEntry | None = self._change(op_update(submission_id, changes))
        return result

    def begin_start(self, submission_id: str) -> QueueEntry | None:
        result: QueueEntry | None = self._change(op_begin_start(submission_id))
        return result

    def finish_start(self, submission_id: str, needs: Needs) -> None:
        self._change(op_finish_start(submission_id, needs))

    def release(self, submission_ids: set[str]) -> None:
        self._change(op_release(submission_ids))


def _find(entries: list[QueueEntry], submission_id: str, cluster: str) -> QueueEntry:
    for e in entries:
        if e.submission_id == submission_id:
            return e
    raise QueueError(f"{submission_id} is not in the queue of {cluster} (verl-tui queue lists it)")


def free_after(resources: ClusterResources, reserved: list[Needs]) -> ClusterResources:
    """`resources` less what recently started jobs will take: their GPUs and CPUs taken from
    the nodes with the most free GPUs first (where Ray's STRICT_PACK groups would go)."""
    gpus = [n.gpus for n in resources.nodes]
    cpus = [n.cpus for n in resources.nodes]
    for needs in reserved:
        for _ in range(needs.nnodes):
            fit = [
                i
                for i in range(len(gpus))
                if gpus[i] >= needs.gpus_per_node and cpus[i] >= needs.cpus_per_node
            ]
            if not fit:
                break
            best = max(fit, key=lambda i: gpus[i])
            gpus[best] -= needs.gpus_per_node
            cpus[best] -= needs.cpus_per_node
    nodes = [NodeResources(n.host, gpus[i], cpus[i]) for i, n in enumerate(resources.nodes)]
    return ClusterResources(nodes=nodes)


def _pair(value: Any) -> tuple[float, float] | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    ):
        return float(value[0]), float(value[1])
    return None


def free_from_report(
    report: Any, nodes: list[dict[str, Any]], inv: Inventory
) -> ClusterResources | None:
    """Free GPUs and CPUs per alive node out of the dashboard's /api/cluster_status answer
    (the autoscaler's load report: `usageByNode` {node_id: {resource: [used, total]}}, refreshed
    every few seconds) joined with the alive nodes; None when the report has no per-node part."""
    data = report.get("data") if isinstance(report, dict) else None
    status = data.get("clusterStatus") if isinstance(data, dict) else None
    load = status.get("loadMetricsReport") if isinstance(status, dict) else None
    by_node = load.get("usageByNode") if isinstance(load, dict) else None
    if not isinstance(by_node, dict):
        return None
    out = []
    for n in nodes:
        nid, ip = n.get("node_id"), n.get("node_ip")
        usage = by_node.get(nid) if isinstance(nid, str) else None
        if not isinstance(usage, dict):
            continue  # alive but not in the report yet: nothing known free there
        gpu, cpu = _pair(usage.get("GPU")), _pair(usage.get("CPU"))
        free_gpu = max(0.0, gpu[1] - gpu[0]) if gpu else 0.0
        free_cpu = max(0.0, cpu[1] - cpu[0]) if cpu else 0.0
        name = inv.host_of_ip(ip)
        out.append(NodeResources(name or str(ip or nid), free_gpu, free_cpu))
    return ClusterResources(nodes=out)


async def free_resources(client: Any, inv: Inventory) -> ClusterResources | None:
    """Ray's free resources per alive node now (DashboardError when Ray cannot be asked)."""
    import asyncio

    report, nodes = await asyncio.gather(client.cluster_status(), client.alive_nodes())
    return free_from_report(report, nodes, inv)
