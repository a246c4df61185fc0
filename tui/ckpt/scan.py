"""Where a job's checkpoints live: every ``global_step_N`` under ``trainer.default_local_dir`` on
every host, and whether the hosts together hold all of a step's shards.

Each host runs remote/ckpt_helper.py ``scan ROOT`` (its own interpreter, stdlib only), answering
with a plain file listing; what the files mean is decided here, against the layout verl 0.9 writes:

FSDP (utils/checkpoint/fsdp_checkpoint_manager.py), in ``global_step_N/{actor,critic}/``:
    ``{model,optim,extra_state}_world_size_W_rank_R.pt`` — one per rank, written where that rank
    runs; ``fsdp_config.json`` (``{"FSDP_version", "world_size"}``) and ``huggingface/`` (config,
    tokenizer; the HF weights with ``hf_model`` in save_contents) — rank 0 only;
    ``lora_train_meta.json`` with LoRA.
Megatron (megatron_checkpoint_manager.py, layout schema v2), in the same role folders:
    ``{model,optimizer,extra}/dist_ckpt/`` with torch DCP files ``__R_I.distcp`` per global rank R
    and ``.metadata`` / ``common.pt`` / ``metadata.json`` from rank 0; ``model/huggingface/``;
    ``transformer_config.json``; ``ckpt_contents.json`` (its ``world_size``) — rank 0 only.
Beside the roles: ``global_step_N/data.pt`` (the dataloader state, from the driver), and
``latest_checkpointed_iteration.txt`` in the root.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tui.ckpt.hostcmd import CkptError, run_op
from tui.config.hosts import Inventory
from tui.sanitize import one_line
from tui.transport.fleet import Fleet

SHARD_RE = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt\Z")
DISTCP_RE = re.compile(r"^__(\d+)_(\d+)\.distcp\Z")
FSDP_KINDS = ("model", "optim", "extra_state")
MEGATRON_KINDS = ("model", "optimizer", "extra")
PARTIAL_PREFIX = ".verl-tui-partial."
SCAN_TIMEOUT = 120.0
MAX_PARALLEL = 64


def check_root(root: str) -> str:
    """An absolute checkpoint root without trailing slash; ValueError (one line) otherwise."""
    if not root or "\0" in root or "\n" in root:
        raise ValueError("the checkpoint folder must be one line")
    if not root.startswith("/"):
        raise ValueError(
            f"{root!r} is relative: give the absolute trainer.default_local_dir "
            "(verl resolves a relative one against each job's working directory)"
        )
    return posixpath.normpath(root) if root != "/" else root


@dataclass(frozen=True)
class CkptFile:
    path: str  # relative to the step folder, e.g. "actor/model_world_size_2_rank_0.pt"
    size: int
    mtime: float


@dataclass(frozen=True)
class HostScan:
    """One host's view of the checkpoint root (``ok`` False: see ``error``)."""

    host: str
    ok: bool = False
    error: str | None = None
    exists: bool = False
    latest: int | None = None
    latest_raw: str | None = None
    steps: Mapping[int, tuple[CkptFile, ...]] = field(default_factory=dict)
    meta: Mapping[int, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    partials: tuple[str, ...] = ()  # leftovers of an interrupted collect, "global_step_N/…"
    truncated: tuple[int, ...] = ()
    errors: tuple[str, ...] = ()


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list | tuple:
    return value if isinstance(value, (list, tuple)) else ()


def host_scan_from_json(host: str, data: Mapping[str, Any]) -> HostScan:
    """A host's scan answer, checked field by field: the helper runs on a host that may be
    broken or hostile, so a field of the wrong type is ignored, never an exception."""
    data = _as_dict(data)
    steps: dict[int, tuple[CkptFile, ...]] = {}
    meta: dict[int, dict[str, Mapping[str, Any]]] = {}
    partials: list[str] = []
    truncated: list[int] = []
    for name, body in _as_dict(data.get("steps")).items():
        if not isinstance(body, dict) or not str(name).startswith("global_step_"):
            continue
        digits = str(name).removeprefix("global_step_")
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
            continue
        step = int(digits)
        files = []
        for item in _as_list(body.get("files")):
            try:
                rel, size, mtime = item[0], int(item[1]), float(item[2])
            except (TypeError, ValueError, IndexError, KeyError, OverflowError):
                continue
            if not isinstance(rel, str) or size < 0:
                continue
            if posixpath.basename(rel).startswith(PARTIAL_PREFIX):
                partials.append(f"{name}/{rel}")
                continue
            files.append(CkptFile(rel, size, mtime))
        steps[step] = tuple(files)
        meta[step] = {
            str(k): v for k, v in _as_dict(body.get("meta")).items() if isinstance(v, dict)
        }
        if body.get("truncated"):
            truncated.append(step)
    raw = data.get("latest")
    raw = raw if isinstance(raw, str) else None
    return HostScan(
        host=host,
        ok=True,
        exists=bool(data.get("exists")),
        latest=int(raw) if raw and raw.isascii() and raw.isdigit() and len(raw) <= 18 else None,
        latest_raw=raw,
        steps=steps,
        meta=meta,
        partials=tuple(partials),
        truncated=tuple(truncated),
        errors=tuple(str(e) for e in _as_list(data.get("errors"))),
    )


# -- the model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleState:
    """One role folder (actor, critic) of one step, across all hosts."""

    role: str
    backend: str | None  # "fsdp" | "megatron" | None: no shard recognised
    world_size: int | None
    kinds: tuple[str, ...]  # shard kinds saved (model, optim, extra_state | optimizer, extra)
    holders: Mapping[str, Mapping[int, tuple[str, ...]]]  # kind → rank → hosts holding it
    missing: Mapping[str, tuple[int, ...]]  # kind → ranks that no host holds
    hosts: Mapping[str, tuple[int, ...]]  # host → ranks it holds (of any kind)
    complete_on: tuple[str, ...]  # hosts that hold every shard and the metadata by themselves
    config_on: tuple[str, ...]  # hosts with fsdp_config.json (fsdp) / ckpt_contents.json
    hf_on: tuple[str, ...]  # hosts with huggingface/config.json (model/huggingface/ megatron)
    size_bytes: int
    metadata_missing: tuple[str, ...] = ()  # megatron kinds whose dist_ckpt/.metadata is nowhere
    problems: tuple[str, ...] = ()  # one line each: stale shards of another world size, …

    @property
    def complete(self) -> bool:
        """Every rank of every saved kind is on some host (and, for megatron, each .metadata)."""
        return (
            self.world_size is not None
            and bool(self.kinds)
            and not any(self.missing.values())
            and not self.metadata_missing
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "world_size": self.world_size,
            "complete": self.complete,
            "kinds": list(self.kinds),
            "hosts": {h: list(r) for h, r in self.hosts.items()},
            "missing": {k: list(r) for k, r in self.missing.items() if r},
            "complete_on": list(self.complete_on),
            "config_on": list(self.config_on),
            "hf_on": list(self.hf_on),
            "size_bytes": self.size_bytes,
            "metadata_missing": list(self.metadata_missing),
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class StepState:
    step: int
    roles: Mapping[str, RoleState]
    files: Mapping[str, Mapping[str, CkptFile]]  # path in the step folder → host → file
    latest_on: tuple[str, ...]  # hosts whose latest_checkpointed_iteration.txt names this step
    truncated_on: tuple[str, ...] = ()

    @property
    def world_size(self) -> int | None:
        role = self.roles.get("actor") or next(iter(self.roles.values()), None)
        return role.world_size if role else None

    @property
    def complete(self) -> bool:
        return (
            bool(self.roles)
            and all(r.complete for r in self.roles.values())
            and (not self.truncated_on)
        )

    @property
    def hosts(self) -> dict[str, tuple[int, ...]]:
        """Every host with something of this step → the ranks it holds (any role, any kind)."""
        out: dict[str, set[int]] = {}
        for files in self.files.values():
            for host in files:
                out.setdefault(host, set())
        for role in self.roles.values():
            for host, ranks in role.hosts.items():
                out.setdefault(host, set()).update(ranks)
        return {h: tuple(sorted(r)) for h, r in out.items()}

    @property
    def complete_on(self) -> tuple[str, ...]:
        if not self.roles:
            return ()
        sets = [set(r.complete_on) for r in self.roles.values()]
        both = set.intersection(*sets)
        return tuple(h for h in self.hosts if h in both)

    @property
    def data_on(self) -> tuple[str, ...]:
        return tuple(self.files.get("data.pt", {}))

    @property
    def size_bytes(self) -> int:
        """The step's size: each file once, however many hosts hold a copy."""
        return sum(max(f.size for f in by_host.values()) for by_host in self.files.values())

    @property
    def host_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for by_host in self.files.values():
            for host, f in by_host.items():
                out[host] = out.get(host, 0) + f.size
        return out

    @property
    def missing(self) -> dict[str, dict[str, tuple[int, ...]]]:
        return {
            name: {k: r for k, r in role.missing.items() if r}
            for name, role in self.roles.items()
            if any(role.missing.values())
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "world_size": self.world_size,
            "complete": self.complete,
            "hosts": {h: list(r) for h, r in self.hosts.items()},
            "complete_on": list(self.complete_on),
            "missing": {
                role: {k: list(r) for k, r in kinds.items()} for role, kinds in self.missing.items()
            },
            "size_bytes": self.size_bytes,
            "host_bytes": self.host_bytes,
            "latest_on": list(self.latest_on),
            "data_on": list(self.data_on),
            "roles": {name: role.to_json() for name, role in self.roles.items()},
            **({"truncated_on": list(self.truncated_on)} if self.truncated_on else {}),
        }


@dataclass(frozen=True)
class CheckpointIndex:
    root: str
    hosts: Mapping[str, HostScan]  # inventory order, down hosts included (ok False)
    steps: tuple[StepState, ...]  # ascending

    def step(self, n: int) -> StepState | None:
        return next((s for s in self.steps if s.step == n), None)

    @property
    def down(self) -> dict[str, str]:
        return {h: s.error or "no answer" for h, s in self.hosts.items() if not s.ok}

    @property
    def latest(self) -> dict[str, int | None]:
        return {h: s.latest for h, s in self.hosts.items() if s.ok}

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "hosts": {
                h: {
                    "ok": s.ok,
                    "error": s.error,
                    "exists": s.exists,
                    "latest": s.latest,
                    "partials": list(s.partials),
                    # What the host could not read (a FIFO where a file belongs, …): named.
                    "errors": [one_line(e, 300) for e in s.errors[:20]],
                }
                for h, s in self.hosts.items()
            },
            "steps": [s.to_json() for s in self.steps],
        }


def _role_of(path: str) -> tuple[str | None, str]:
    head, _, rest = path.partition("/")
    return (head, rest) if rest else (None, path)


def _fsdp_role(
    role: str, files: Mapping[str, Mapping[str, CkptFile]], meta: Mapping[str, Mapping[str, Any]]
) -> RoleState:
    shards: list[tuple[str, int, int, str]] = []  # kind, world size, rank, host
    for rel, by_host in files.items():
        m = SHARD_RE.match(rel)
        if m:
            shards += [(m.group(1), int(m.group(2)), int(m.group(3)), h) for h in by_host]
    config_ws = {
        f["world_size"]
        for key, f in meta.items()
        if key.startswith("fsdp_config.json@") and isinstance(f.get("world_size"), int)
    }
    counts = Counter(ws for _, ws, _, _ in shards)
    # The world size fsdp_config.json names wins; else the one most shards carry.
    if len(config_ws) == 1:
        world_size: int | None = next(iter(config_ws))
    else:
        world_size = counts.most_common(1)[0][0] if counts else None
    problems = []
    if len(config_ws) > 1:
        problems.append(
            "hosts disagree on fsdp_config.json world_size: "
            + ", ".join(map(str, sorted(config_ws)))
        )
    others = sorted(ws for ws in counts if ws != world_size)
    if others:
        problems.append(
            "shards of another world size (an older run?): " + ", ".join(f"W={ws}" for ws in others)
        )
    kinds = tuple(k for k in FSDP_KINDS if any(s[0] == k and s[1] == world_size for s in shards))
    holders: dict[str, dict[int, list[str]]] = {k: {} for k in kinds}
    for kind, ws, rank, host in shards:
        if ws == world_size and kind in holders and rank < ws:
            holders[kind].setdefault(rank, []).append(host)
    config_on = tuple(files.get("fsdp_config.json", {}))
    hf_on = tuple(files.get("huggingface/config.json", {}))
    if shards and not config_on:
        problems.append("no fsdp_config.json on any host (rank 0 writes it; the merger needs it)")
    return _role_state(
        role,
        "fsdp" if shards else None,
        world_size,
        kinds,
        holders,
        files,
        config_on,
        hf_on,
        problems,
    )


def _megatron_role(
    role: str, files: Mapping[str, Mapping[str, CkptFile]], meta: Mapping[str, Mapping[str, Any]]
) -> RoleState:
    manifest = meta.get("ckpt_contents.json") or {}
    ws = manifest.get("world_size")
    world_size = ws if isinstance(ws, int) and ws > 0 else None
    problems = []
    if world_size is None:
        problems.append(
            "world size unknown: no host has ckpt_contents.json (rank 0 writes it "
            "last, so the save may not have finished)"
        )
    kinds = []
    no_metadata = []
    holders: dict[str, dict[int, list[str]]] = {}
    for kind in MEGATRON_KINDS:
        prefix = f"{kind}/dist_ckpt/"
        found = [(rel, by_host) for rel, by_host in files.items() if rel.startswith(prefix)]
        if not found:
            continue
        kinds.append(kind)
        holders[kind] = {}
        for rel, by_host in found:
            m = DISTCP_RE.match(rel[len(prefix) :])
            if m:
                holders[kind].setdefault(int(m.group(1)), []).extend(by_host)
        if prefix + ".metadata" not in files:
            no_metadata.append(kind)
            problems.append(f"no .metadata in {kind}/dist_ckpt on any host")
    for kind in holders:
        for rank in holders[kind]:
            holders[kind][rank] = sorted(set(holders[kind][rank]))
    config_on = tuple(files.get("ckpt_contents.json", {}))
    hf_on = tuple(files.get("model/huggingface/config.json", {}))
    return _role_state(
        role,
        "megatron",
        world_size,
        tuple(kinds),
        holders,
        files,
        config_on,
        hf_on,
        problems,
        tuple(no_metadata),
    )


def _role_state(
    role: str,
    backend: str | None,
    world_size: int | None,
    kinds: tuple[str, ...],
    holders: Mapping[str, Mapping[int, list[str]]],
    files: Mapping[str, Mapping[str, CkptFile]],
    config_on: tuple[str, ...],
    hf_on: tuple[str, ...],
    problems: list[str],
    metadata_missing: tuple[str, ...] = (),
) -> RoleState:
    all_ranks = range(world_size) if world_size else range(0)
    missing = {k: tuple(r for r in all_ranks if r not in holders.get(k, {})) for k in kinds}
    by_host: dict[str, set[int]] = {}
    for ranks in holders.values():
        for rank, hosts in ranks.items():
            for h in hosts:
                by_host.setdefault(h, set()).add(rank)
    seen_hosts = list(dict.fromkeys(h for by in files.values() for h in by))
    complete_on = []
    if world_size and kinds:
        for h in seen_hosts:
            has_all = all(h in holders[k].get(r, ()) for k in kinds for r in all_ranks)
            meta_ok = h in config_on
            if backend == "megatron":
                meta_ok = meta_ok and all(
                    h in files.get(f"{k}/dist_ckpt/.metadata", {}) for k in kinds
                )
            if has_all and meta_ok:
                complete_on.append(h)
    size = sum(max(f.size for f in by.values()) for by in files.values())
    return RoleState(
        role=role,
        backend=backend,
        world_size=world_size,
        kinds=kinds,
        holders={k: {r: tuple(hs) for r, hs in sorted(v.items())} for k, v in holders.items()},
        missing=missing,
        hosts={h: tuple(sorted(by_host.get(h, ()))) for h in seen_hosts},
        complete_on=tuple(complete_on),
        config_on=config_on,
        hf_on=hf_on,
        size_bytes=size,
        metadata_missing=metadata_missing,
        problems=tuple(problems),
    )


def _step_state(step: int, scans: list[HostScan]) -> StepState:
    files: dict[str, dict[str, CkptFile]] = {}
    meta: dict[str, dict[str, Mapping[str, Any]]] = {}  # role → file in role → facts
    for scan in scans:
        for f in scan.steps.get(step, ()):
            files.setdefault(f.path, {})[scan.host] = f
        for rel, facts in scan.meta.get(step, {}).items():
            role, inner = _role_of(rel)
            if role:
                meta.setdefault(role, {})[f"{inner}@{scan.host}"] = facts
    by_role: dict[str, dict[str, dict[str, CkptFile]]] = {}
    for rel, by_host in files.items():
        role, inner = _role_of(rel)
        if role:
            by_role.setdefault(role, {})[inner] = by_host
    roles = {}
    for role in sorted(by_role, key=lambda r: (r != "actor", r)):
        rfiles = by_role[role]
        rmeta = meta.get(role, {})
        megatron = any(
            rel.startswith(("model/dist_ckpt/", "optimizer/dist_ckpt/"))
            or rel == "ckpt_contents.json"
            for rel in rfiles
        )
        if megatron:
            # rank 0's manifest; copies collected elsewhere carry the same world size
            manifest = {
                k.split("@")[0]: v for k, v in rmeta.items() if k.startswith("ckpt_contents.json@")
            }
            roles[role] = _megatron_role(role, rfiles, manifest)
        else:
            roles[role] = _fsdp_role(role, rfiles, rmeta)
    latest_on = tuple(s.host for s in scans if s.latest == step)
    truncated = tuple(s.host for s in scans if step in s.truncated)
    return StepState(
        step=step, roles=roles, files=files, latest_on=latest_on, truncated_on=truncated
    )


def build_index(root: str, scans: Iterable[HostScan]) -> CheckpointIndex:
    """The checkpoint model from every host's scan (pure: no hosts needed)."""
    scans = list(scans)
    up = [s for s in scans if s.ok]
    numbers = sorted({n for s in up for n in s.steps})
    return CheckpointIndex(
        root=root,
        hosts={s.host: s for s in scans},
        steps=tuple(_step_state(n, up) for n in numbers),
    )


async def scan_host(
    fleet: Fleet, host: str, root: str, *, timeout: float = SCAN_TIMEOUT
) -> HostScan:
    """One host's listing; never raises for host trouble (``ok`` False, one-line ``error``)."""
    try:
        data = await run_op(fleet, host, "scan", root, timeout=timeout)
    except CkptError as exc:
        return HostScan(host=host, error=str(exc).removeprefix(f"{host}: "))
    except Exception as exc:  # one host's odd answer must not lose the others
        return HostScan(host=host, error=f"{type(exc).__name__}: {exc}")
    return host_scan_from_json(host, data)


async def scan_fleet(
    fleet: Fleet, inv: Inventory, root: str, *, timeout: float = SCAN_TIMEOUT
) -> CheckpointIndex:
    """Scan every host in parallel; a down host is reported in ``index.hosts``, not fatal.

    ValueError (one line) for a relative root.
    """
    root = check_root(root)
    slots = asyncio.Semaphore(MAX_PARALLEL)

    async def one(name: str) -> HostScan:
        async with slots:
            return await scan_host(fleet, name, root, timeout=timeout)

    scans = await asyncio.gather(*(one(h.name) for h in inv.hosts))
    return build_index(root, scans)
