"""A running Slurm allocation as the inventory: its nodes, their SSH addresses, their GPUs.

`scontrol show job -d JOBID` names the job's state, its node list and (detail lines) each node's
GRES; `scontrol show node -o NODES` gives every node's NodeAddr, the address slurmctld itself
reaches the node at, so the inventory works without cluster DNS. scontrol runs from an argv
(never a shell) with a timeout, and its output is untrusted: records are read by line-start keys
only, a key that appears twice is refused (a job name or command holding `\\n   NodeList=…`
cannot plant a second one), node names and addresses go through hosts.yaml's own validators,
and the inventory is checked by the normal hosts.yaml loader before anything is written.

The base file is a hosts.yaml without `hosts:`; its top-level keys (ssh, python, ray, telemetry,
secret_env, and whatever else hosts.yaml grows) are copied as they are, and errors in it name
base.yaml:line.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tui.config.hosts import HostEntry, inventory_from_doc, normalize_address, parse_inventory
from tui.config.yamlfile import ConfigError, LocatedDoc, load_yaml
from tui.sanitize import one_line

SCONTROL = "scontrol"
TIMEOUT = 30.0  # seconds per scontrol call (slurmctld retries for MessageTimeout itself)
MAX_HOSTS = 65536  # one hostlist expression; Slurm's own cap is of this order
MAX_OUTPUT = 4 << 20  # bytes of scontrol output read (a 10k-node `show node -o` is ~5 MiB)
_JOB_ID_RE = re.compile(r"^[0-9]{1,10}(?:_[0-9]{1,10}|\+[0-9]{1,4})?\Z")
_HOSTLIST_RE = re.compile(r"^[A-Za-z0-9._,\[\]-]{1,100000}\Z")
_RANGE_RE = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9}))?\Z")
# One GPU GRES item as scontrol prints it, per node (`gpu:4(IDX:0-3)`, `gpu:a100:2(IDX:0,1)`,
# `gpu:1g.5gb:2(IDX:…)`) or per job request (`gres:gpu:4`, `gres/gpu:4`, `gres/gpu=4`).
_GPU_ITEM_RE = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::[A-Za-z0-9_.-]+)?[:=]([0-9]{1,6})(?=$|[(,])")


class SlurmError(ConfigError, title="Slurm allocation"):
    """One line for the user: no scontrol, no such job, not running, output we cannot read."""


@dataclass(frozen=True)
class SlurmNode:
    name: str  # as Slurm names it
    address: str  # NodeAddr
    gpus: int | None  # from the job's GRES on this node; None: the job asked for none


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[SlurmNode, ...]  # in the allocation's order: the first is the batch host

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus or 0 for n in self.nodes)


def check_job_id(text: str) -> str:
    """A Slurm job id (`123`, an array task `123_4`, a het component `123+1`), else SlurmError."""
    job = text.strip()
    if not _JOB_ID_RE.match(job):
        raise SlurmError(f"{one_line(repr(text), 40)} is not a Slurm job id (e.g. 12345)")
    return job


# -- hostlists ----------------------------------------------------------------------------------


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets; unbalanced brackets are an error."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
            if depth > 1:
                raise ValueError("nested '['")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("']' without '['")
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("'[' without ']'")
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_ranges(body: str, budget: int) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE_RE.match(item)
        if not m:
            raise ValueError(f"bad range {item!r}")
        lo_text, hi_text = m[1], m[2] or m[1]
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ValueError(f"bad range {item!r} (high end below low end)")
        if len(out) + hi - lo + 1 > budget:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
        width = len(lo_text)  # Slurm pads to the low end's width: n[08-11] → n08 … n11
        out += [f"{n:0{width}d}" for n in range(lo, hi + 1)]
    return out


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist expression → host names, in order (`node[1-3,5]`, `gpu-[001-004]`,
    `a,b[1-2]`, `rack[1-2]-n[3,5]` as the cartesian product). ValueError when malformed."""
    if not _HOSTLIST_RE.match(text):
        raise ValueError("not a hostlist (letters, digits, '.', '_', '-', ',', '[', ']' only)")
    names: list[str] = []
    for part in _split_top(text):
        combos = [""]
        for piece in re.split(r"(\[[^\]]*\])", part):
            if piece.startswith("["):
                options = _expand_ranges(piece[1:-1], MAX_HOSTS)
                if len(combos) * len(options) > MAX_HOSTS:
                    raise ValueError(f"more than {MAX_HOSTS} hosts")
                combos = [c + o for c in combos for o in options]
            else:
                combos = [c + piece for c in combos]
        names += combos
        if len(names) > MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
    if not names:
        raise ValueError("empty hostlist")
    return names


# -- scontrol -----------------------------------------------------------------------------------


async def scontrol(*args: str, timeout: float = TIMEOUT) -> tuple[int, str, str]:
    """Run `scontrol ARGS` (argv, no shell); (exit status, stdout, stderr). SlurmError when
    scontrol is not on PATH or does not answer within `timeout`."""
    try:
        proc = await asyncio.create_subprocess_exec(
            SCONTROL,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        raise SlurmError(
            "scontrol: not found on PATH (run this on a Slurm login node, or install the "
            "Slurm client)"
        ) from None
    except OSError as exc:
        raise SlurmError(f"scontrol: cannot run: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise SlurmError(
            f"scontrol {' '.join(args[:2])}: no answer within {timeout:g} s "
            "(is slurmctld reachable?)"
        ) from None
    decode = lambda b: b[:MAX_OUTPUT].decode("utf-8", "replace")  # noqa: E731
    return proc.returncode or 0, decode(out), decode(err)


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return one_line(lines[-1] if lines else "no output", 200)


def _line_keys(record: str) -> dict[str, list[str]]:
    """Every line's first `Key=value` (the key that starts the line) → the lines it starts."""
    keys: dict[str, list[str]] = {}
    for line in record.splitlines():
        m = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_/:]*)=", line)
        if m:
            keys.setdefault(m[1], []).append(line.strip())
    return keys


def _token(line: str, key: str) -> str | None:
    """The value of `key=` where it starts a word in `line` (first one)."""
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", line)
    return m[1] if m else None


def _only(keys: dict[str, list[str]], key: str, job: str) -> str:
    lines = keys.get(key, [])
    if len(lines) != 1:
        what = "no" if not lines else f"{len(lines)}"
        raise SlurmError(f"scontrol show job {job}: {what} {key}= lines (cannot read the job)")
    value = _token(lines[0], key)
    assert value is not None
    return value


def gpus_in(gres: str) -> int | None:
    """GPUs in one GRES string (`gpu:4(IDX:0-3)`, `gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)`,
    `gres:gpu:4`, `gres/gpu:4`); None when it names no GPU."""
    counts = [int(n) for n in _GPU_ITEM_RE.findall(gres)]
    return sum(counts) if counts else None


@dataclass(frozen=True)
class JobInfo:
    state: str
    reason: str
    nodelist: str
    nodes: tuple[str, ...]
    gpus: dict[str, int | None]


def parse_job(text: str, job: str) -> JobInfo:
    """`scontrol show job -d JOB` output → state, nodes (in order) and each node's GPUs."""
    records = [r for r in re.split(r"\n\s*\n", text) if r.strip()]
    if len(records) != 1:
        raise SlurmError(
            f"Slurm job {job} has {len(records)} records (an array or heterogeneous job): "
            f"name one part, e.g. {job}_0 or {job}+0"
            if records
            else f"scontrol show job {job}: no output"
        )
    keys = _line_keys(records[0])
    if "JobId" not in keys or not records[0].lstrip().startswith("JobId="):
        raise SlurmError(f"scontrol show job {job}: not a job record")
    state_line = keys.get("JobState", [""])
    state = _only(keys, "JobState", job)
    reason = one_line(_token(state_line[0], "Reason") or "", 80)
    if not re.fullmatch(r"[A-Z_]{1,40}", state):
        raise SlurmError(f"scontrol show job {job}: unreadable JobState {one_line(state, 40)!r}")
    if state != "RUNNING":
        return JobInfo(state, reason, "", (), {})
    nodelist = _only(keys, "NodeList", job)
    try:
        nodes = expand_hostlist(nodelist)
    except ValueError as exc:
        raise SlurmError(
            f"scontrol show job {job}: NodeList={one_line(nodelist, 80)}: {exc}"
        ) from None
    if len(set(nodes)) != len(nodes):
        raise SlurmError(f"scontrol show job {job}: NodeList names a node twice")
    # Per-node GRES from the detail lines (`Nodes=node[1-2] CPU_IDs=0-3 Mem=0 GRES=gpu:4(…)`);
    # they must cover exactly the node list.
    gpus: dict[str, int | None] = {}
    for line in keys.get("Nodes", []):
        expr = _token(line, "Nodes") or ""
        try:
            covered = expand_hostlist(expr)
        except ValueError as exc:
            raise SlurmError(
                f"scontrol show job {job}: Nodes={one_line(expr, 80)}: {exc}"
            ) from None
        gres = _token(line, "GRES")
        for name in covered:
            if name in gpus or name not in nodes:
                raise SlurmError(f"scontrol show job {job}: detail lines do not match NodeList")
            gpus[name] = gpus_in(gres) if gres else None
    if gpus and set(gpus) != set(nodes):
        raise SlurmError(f"scontrol show job {job}: detail lines do not match NodeList")
    if not any(v is not None for v in gpus.values()) and "TresPerNode" in keys:
        per_node = gpus_in(_only(keys, "TresPerNode", job))
        gpus = dict.fromkeys(nodes, per_node)
    return JobInfo(state, reason, nodelist, tuple(nodes), gpus)


def parse_nodes(text: str, wanted: tuple[str, ...]) -> dict[str, str]:
    """`scontrol show node -o NODES` → name → NodeAddr, validated; every wanted node once."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith("NodeName="):
            raise SlurmError("scontrol show node: a line that is not a node record")
        name = _token(line, "NodeName") or ""
        # The first NodeAddr= word: the fields before it (arch, cores, features, Gres) hold
        # no spaces; free text (OS, Reason, Comment) comes after it.
        addr = _token(line, "NodeAddr")
        if name not in wanted:
            raise SlurmError(f"scontrol show node: unexpected node {one_line(name, 64)!r}")
        if name in found:
            raise SlurmError(f"scontrol show node: node {name} listed twice")
        address = normalize_address(addr) if addr else None
        if address is None:
            raise SlurmError(
                f"scontrol show node {name}: NodeAddr {one_line(addr or '', 64)!r} is not a "
                "host name or IP address"
            )
        found[name] = address
    missing = [n for n in wanted if n not in found]
    if missing:
        raise SlurmError(f"scontrol show node: no record for {', '.join(missing[:5])}")
    return found


def _check_names(nodes: tuple[str, ...], job: str) -> None:
    from pydantic import ValidationError

    for name in nodes:
        try:
            HostEntry(name=name)
        except ValidationError:
            raise SlurmError(
                f"Slurm job {job}: node name {one_line(name, 64)!r} is not usable as a host "
                "name (letters, digits, '.', '_', '-', max 63)"
            ) from None


async def read_allocation(job_id: str, *, timeout: float = TIMEOUT) -> Allocation:
    """The running allocation of `job_id`, or SlurmError saying why not."""
    job = check_job_id(job_id)
    rc, out, err = await scontrol("show", "job", "-d", job, timeout=timeout)
    if rc != 0:
        if "invalid job id" in (err + out).lower():
            raise SlurmError(f"Slurm job {job}: not found (finished long ago, or never existed)")
        raise SlurmError(f"scontrol show job {job}: {_first_line(err or out)}")
    info = parse_job(out, job)
    if info.state != "RUNNING":
        why = f", reason {info.reason}" if info.reason and info.reason != "None" else ""
        raise SlurmError(
            f"Slurm job {job} is {info.state}{why}, not RUNNING: the inventory needs its nodes"
        )
    _check_names(info.nodes, job)
    rc, out, err = await scontrol("show", "node", "-o", info.nodelist, timeout=timeout)
    if rc != 0:
        raise SlurmError(f"scontrol show node {one_line(info.nodelist, 80)}: {_first_line(err)}")
    addresses = parse_nodes(out, info.nodes)
    return Allocation(
        job,
        tuple(SlurmNode(n, addresses[n], info.gpus.get(n)) for n in info.nodes),
    )


# -- the inventory ------------------------------------------------------------------------------


def load_base(path: Path | None) -> LocatedDoc | None:
    """The base file: a hosts.yaml's top-level keys, without `hosts:`."""
    if path is None:
        return None
    doc = load_yaml(Path(path).expanduser())
    if doc.data is None:
        doc.data = {}
    if not isinstance(doc.data, dict):
        raise ConfigError("expected a mapping of hosts.yaml keys", doc.path, doc.line_of(()))
    if "hosts" in doc.data:
        raise ConfigError(
            "hosts: leave it out of a base file (the Slurm allocation lists the hosts)",
            doc.path,
            doc.line_of(("hosts",)),
        )
    # Checked now, with a stand-in host, so its mistakes are found before any Slurm call.
    probe = {**doc.data, "hosts": [{"name": "slurm-node"}]}
    inventory_from_doc(LocatedDoc(data=probe, path=doc.path, lines=dict(doc.lines)))
    return doc


def inventory_data(alloc: Allocation, base: LocatedDoc | None) -> dict[str, Any]:
    """hosts.yaml data: the base's keys as they are, then the allocation's hosts (the first
    node is the head); checked by the hosts.yaml loader, errors naming base.yaml:line."""
    data: dict[str, Any] = {"cluster": f"slurm-{alloc.job_id}".replace("+", "-")}
    if base is not None:
        data.update(base.data)
    hosts = []
    for i, node in enumerate(alloc.nodes):
        entry: dict[str, Any] = {"name": node.name, "address": node.address}
        if i == 0:
            entry["role"] = "head"
        if node.gpus is not None:
            entry["num_gpus"] = node.gpus
        hosts.append(entry)
    data["hosts"] = hosts
    path = base.path if base is not None else Path(f"<slurm job {alloc.job_id}>")
    lines = dict(base.lines) if base is not None else {}
    inventory_from_doc(LocatedDoc(data=data, path=path, lines=lines))
    return data


def inventory_text(alloc: Allocation, base: LocatedDoc | None, base_path: Path | None) -> str:
    """The hosts.yaml text for an allocation (validated again as the file it will be)."""
    data = inventory_data(alloc, base)
    origin = f", base {base_path}" if base_path is not None else ""
    header = (
        f"# verl-tui slurm {alloc.job_id}: the nodes of Slurm job {alloc.job_id}"
        f" (NodeAddr from scontrol{origin}).\n"
        "# The first node is the Ray head. Regenerate for a new allocation.\n"
    )
    text = header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    parse_inventory(text, f"<slurm job {alloc.job_id}>")
    return _no_controls(text)


def _no_controls(text: str) -> str:
    # safe_dump escapes control characters in values; the check makes that a guarantee.
    if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text):
        raise SlurmError("the inventory would hold a control character")
    return text


async def inventory_for_job(
    job_id: str, base_path: Path | None, *, timeout: float = TIMEOUT
) -> tuple[Allocation, str]:
    """Read the base first (its errors need no Slurm), then the allocation; (it, the text)."""
    base = load_base(base_path)
    alloc = await read_allocation(job_id, timeout=timeout)
    return alloc, inventory_text(alloc, base, base_path)


def state_file(job_id: str) -> Path:
    """Where `verl-tui --slurm JOBID` keeps the inventory it opens (the XDG state dir)."""
    from tui.state import state_path

    return state_path("slurm", None, f"job-{check_job_id(job_id)}.yaml")
