"""The boundary for GPU agent output: one schema for hello / sample / error lines.

An agent's stdout is untrusted input (a broken, half-upgraded or hostile host writes what it
likes). Every field is coerced to its documented type here, before anything else sees it:

- numbers: int/float only (a bool is not a number), finite, within sane bounds;
- strings: str only, sanitized for a terminal (`tui.sanitize.one_line`) and length-capped;
- lists: bounded (`MAX_GPUS` GPUs, `MAX_PROCESSES` processes per GPU); GPU indexes unique and
  non-negative.

A bad field becomes None (a bad GPU or process entry is left out) and is named in the result's
`problems` as ``(field path, "bad data: field X (got …)")``; nothing here raises on any input.
Hand-written checks rather than a pydantic model: this runs for every host every second
(bench/agent_parse.py measures it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from tui.cluster.models import (  # the per-GPU bounds live with GPU_METRICS
    BYTES,
    GPU_METRICS,
    PERCENT,
    GpuHealth,
    GpuProcess,
    GpuSample,
    HostSample,
)
from tui.sanitize import one_line

MAX_GPUS = 64
MAX_PROCESSES = 256  # per GPU
MAX_PROBLEMS = 8  # per line; the rest are counted
# NVIDIA backends, AMD backends; a host with both vendors sends "nvml+amdgpu-sysfs".
SOURCES = frozenset({"nvml", "nvidia-smi", "none", "amdgpu-sysfs", "amdsmi", "amd-smi", "rocm-smi"})
VENDORS = frozenset({"nvidia", "amd"})

# Length caps for strings (characters, after sanitizing).
NAME_LEN = 96
UUID_LEN = 96
ERROR_LEN = 300
SHORT_LEN = 64
HOSTNAME_LEN = 253

# (lo, hi) bounds: values outside are bad data, not clamped (a 1e300 W GPU is a broken agent);
# a GPU's numbers have theirs in models.GPU_METRICS.
LOAD = (0.0, 1e6)
COUNT = (0, 1 << 20)
PID = (0, (1 << 31) - 1)
INDEX = (0, 65535)
SEQ = (0, 1 << 62)
EPOCH = (0.0, 1e10)  # seconds since 1970, up to the year 2286
# A GPU's `health` object (tui/remote/nvml_health.py): field -> bool, or (lo, hi) of an int.
U64 = (0, (1 << 64) - 1)
_HEALTH_FIELDS: dict[str, tuple[int, int] | None] = {
    "ecc_mode": None,
    "ecc_volatile_uncorrected": U64,
    "ecc_aggregate_uncorrected": U64,
    "retired_pages_pending": None,
    "remap_corrected": U64,
    "remap_uncorrected": U64,
    "remap_pending": None,
    "remap_failure": None,
    "clock_reasons_mask": U64,
    "pcie_gen": (0, 64),
    "pcie_gen_max": (0, 64),
    "pcie_width": (0, 64),
    "pcie_width_max": (0, 64),
    "persistence": None,
    "xid_count": U64,
    "xid_last": (0, (1 << 32) - 1),
}
# The clock reasons' words in the order of their bits (a repeat line packs them as bits:
# gpu_common.CLOCK_REASON_WORDS, nvml_health.CLOCK_REASONS).
CLOCK_REASON_WORDS = (
    "idle",
    "app_clocks",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
)
CLOCK_REASONS = frozenset(CLOCK_REASON_WORDS)
HEALTH_FIELDS = _HEALTH_FIELDS  # gpu_common.HEALTH_KEYS, in this order


@dataclass(slots=True)
class Hello:
    """The agent's first line: who and what it is."""

    hostname: str | None = None
    driver: str | None = None
    nvml_version: str | None = None
    python: str | None = None
    source: str | None = None
    error: str | None = None
    ncpu: int | None = None
    pid: int | None = None
    agent: int | None = None  # protocol version


@dataclass(slots=True)
class AgentLine:
    """One parsed line. kind: "hello" | "sample" | "error" | "route" (where the agent now sends
    its lines: `route` "relay", or "direct" with `message` why, if it failed) | "other" (an
    unknown message type, ignored) | "invalid" (not JSON, not an object: `message` says why)."""

    kind: str
    hello: Hello | None = None
    sample: HostSample | None = None
    driver: str | None = None  # a sample's driver field (NVML may come up after the hello)
    message: str | None = None  # an error line's text, or why the line is invalid
    route: str | None = None  # a route line's "relay" | "direct"
    problems: list[tuple[str, str]] = field(default_factory=list)
    dropped_problems: int = 0  # problems past MAX_PROBLEMS, counted only


def describe(value: object) -> str:
    """A short, safe rendering of a bad value for a problem message (never the whole of it)."""
    if isinstance(value, str):
        text = repr(value[:40] + ("…" if len(value) > 40 else ""))
    elif isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, (int, float)):
        text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge int"
    elif isinstance(value, list):
        text = f"a list of {len(value)}"
    elif isinstance(value, dict):
        text = f"an object of {len(value)} keys"
    else:
        text = type(value).__name__
    return one_line(text, 60)


class _Checker:
    """Collects problems for one line; the coercions return None for a bad value."""

    __slots__ = ("dropped", "problems")

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []
        self.dropped = 0

    def bad(self, path: str, value: object, why: str = "") -> None:
        if len(self.problems) >= MAX_PROBLEMS:
            self.dropped += 1
            return
        detail = f"{why}, got " if why else "got "
        self.problems.append((path, f"bad data: field {path} ({detail}{describe(value)})"))

    def num(self, d: dict, key: str, bounds: tuple[float, float], path: str) -> float | None:
        v = d.get(key)
        if v is None:
            return None
        t = type(v)
        # type() not isinstance(): a bool is not a number. NaN fails both comparisons.
        if (t is float or t is int) and bounds[0] <= v <= bounds[1]:
            return v
        self.bad(path + key, v)
        return None

    def int_(self, d: dict, key: str, bounds: tuple[int, int], path: str) -> int | None:
        v = d.get(key)
        if v is None:
            return None
        t = type(v)
        if t is int:
            if bounds[0] <= v <= bounds[1]:
                return v
        elif t is float and bounds[0] <= v <= bounds[1] and v.is_integer():
            return int(v)
        self.bad(path + key, v)
        return None

    def str_(self, d: dict, key: str, limit: int, path: str) -> str | None:
        v = d.get(key)
        if v is None:
            return None
        if type(v) is str:
            return one_line(v, limit)
        self.bad(path + key, v)
        return None


# A GPU's numbers, from the one table: (key, lo, hi, integral).
_GPU_NUMBERS = tuple((m.key, m.lo, m.hi, m.integral) for m in GPU_METRICS)
# Sanitized short strings by their raw text: names and uuids repeat in every sample, so the
# sanitizer runs once per distinct string, not once per sample (bounded: cleared when full).
# Sized for every GPU's uuid of 4,096 8-GPU hosts and their names (at 8,192 a fleet of 1,024
# filled it, so it was cleared over and over and every full sample sanitized its uuids again);
# ~10 MB at most, bounded by the key's length (a longer raw string is not kept).
_TEXT_CACHE: dict[str, str] = {}
_TEXT_CACHE_MAX = 1 << 16
_TEXT_CACHE_KEY_MAX = 4 * NAME_LEN


def _short_text(c: _Checker, v: object, path: str, key: str) -> str | None:
    """A name/uuid-like string (NAME_LEN cap), sanitized, through the cache."""
    if v is None:
        return None
    if type(v) is str:
        text = _TEXT_CACHE.get(v)
        if text is None:
            text = one_line(v, NAME_LEN)
            if len(v) <= _TEXT_CACHE_KEY_MAX:
                if len(_TEXT_CACHE) >= _TEXT_CACHE_MAX:
                    _TEXT_CACHE.clear()
                _TEXT_CACHE[v] = text
        return text
    c.bad(path + key, v)
    return None


@overload
def _number(
    c: _Checker, v: object, lo: float, hi: float, integral: Literal[True], path: str, key: str
) -> int | None: ...
@overload
def _number(
    c: _Checker, v: object, lo: float, hi: float, integral: bool, path: str, key: str
) -> int | float | None: ...
def _number(
    c: _Checker, v: object, lo: float, hi: float, integral: bool, path: str, key: str
) -> float | None:
    """The slow path of a numeric field: a float holding an integer, or bad data."""
    if type(v) is float and integral and lo <= v <= hi and v.is_integer():
        return int(v)
    c.bad(path + key, v)
    return None


def _processes(c: _Checker, procs: list, path: str) -> tuple[GpuProcess, ...]:
    if len(procs) > MAX_PROCESSES:
        c.bad(path + "processes", procs, f"more than {MAX_PROCESSES}, kept the first")
        procs = procs[:MAX_PROCESSES]
    out = []
    pid_lo, pid_hi = PID
    mem_lo, mem_hi = BYTES
    for j, p in enumerate(procs):
        if type(p) is not dict:
            c.bad(f"{path}processes[{j}]", p, "not an object")
            continue
        pid = p.get("pid")
        if type(pid) is not int or not pid_lo <= pid <= pid_hi:
            if pid is None:
                c.bad(f"{path}processes[{j}].pid", None, "missing")
                continue
            pid = _number(c, pid, pid_lo, pid_hi, True, f"{path}processes[{j}].", "pid")
            if pid is None:
                continue
        mem = p.get("memory_bytes")
        if mem is not None and (type(mem) is not int or not mem_lo <= mem <= mem_hi):
            mem = _number(c, mem, mem_lo, mem_hi, True, f"{path}processes[{j}].", "memory_bytes")
        name = p.get("name")
        if name is not None:
            name = _short_text(c, name, f"{path}processes[{j}].", "name")
        out.append(GpuProcess(pid, name, mem))
    return tuple(out)


def _health(c: _Checker, h: object, path: str, util: float | None) -> GpuHealth:
    """A GPU's health object (sent every few seconds, so plain code, not the fast path):
    every field typed and bounded; a bad one becomes None (n/a) and a problem."""
    path += "health."
    out = GpuHealth(util_percent=util)
    if type(h) is not dict:
        c.bad(path[:-1], h, "not an object")
        return out
    for key, bounds in _HEALTH_FIELDS.items():
        v = h.get(key)
        if v is None:
            continue
        if type(v) is bool if bounds is None else type(v) is int and bounds[0] <= v <= bounds[1]:
            setattr(out, key, v)
        else:
            c.bad(path + key, v, "not true/false" if bounds is None else "")
    reasons = h.get("clock_reasons")
    if reasons is not None:
        if type(reasons) is list and len(reasons) <= len(CLOCK_REASONS):
            known = tuple(r for r in reasons if type(r) is str and r in CLOCK_REASONS)
            if len(known) != len(reasons):
                c.bad(path + "clock_reasons", reasons, "unknown reason")
            out.clock_reasons = known
        else:
            c.bad(path + "clock_reasons", reasons, "not a list of reasons")
    return out


def _gpu(c: _Checker, g: object, i: int, seen: set[int]) -> GpuSample | None:
    # Written for speed (every GPU of every host, every second): locals, one pass over a
    # table, and paths for problem messages built only when something is wrong.
    path = f"gpus[{i}]."
    if type(g) is not dict:
        c.bad(f"gpus[{i}]", g, "not an object")
        return None
    get = g.get
    index = get("index")
    if type(index) is not int or not INDEX[0] <= index <= INDEX[1]:
        if index is None:
            c.bad(path + "index", None, "missing")
            return None
        index = _number(c, index, INDEX[0], INDEX[1], True, path, "index")
        if index is None:
            return None
    if index in seen:
        c.bad(path + "index", index, "duplicate")
        return None
    seen.add(index)
    # Keyword arguments for GpuSample; ints where the table says integral.
    numbers: dict[str, Any] = {}
    for key, lo, hi, integral in _GPU_NUMBERS:
        v = get(key)
        if v is not None:
            t = type(v)
            if not (((t is float and not integral) or t is int) and lo <= v <= hi):
                v = _number(c, v, lo, hi, integral, path, key)
        numbers[key] = v
    procs = get("processes")
    processes: tuple[GpuProcess, ...] | None = None
    if procs is not None:
        if type(procs) is list:
            processes = _processes(c, procs, path)
        else:
            c.bad(path + "processes", procs, "not a list")
    error = get("error")
    vendor = get("vendor")  # "amd" / "nvidia"; absent from NVIDIA-only agents
    if vendor is not None and (type(vendor) is not str or vendor not in VENDORS):
        c.bad(path + "vendor", vendor, "not nvidia or amd")
        vendor = None
    health = get("health")  # on one sample every few seconds
    return GpuSample(
        index,
        name=_short_text(c, get("name"), path, "name"),
        uuid=_short_text(c, get("uuid"), path, "uuid"),
        processes=processes,
        error=None if error is None else c.str_(g, "error", ERROR_LEN, path),
        vendor=vendor,
        health=None if health is None else _health(c, health, path, numbers["util_percent"]),
        **numbers,
    )


def _source(c: _Checker, d: dict, path: str = "") -> str | None:
    v = d.get("source")
    if v is None or (
        type(v) is str and len(v) <= SHORT_LEN and all(part in SOURCES for part in v.split("+"))
    ):
        return v
    c.bad(path + "source", v, "not a known backend")
    return None


def _sample(c: _Checker, d: dict, received: float) -> HostSample:
    host = d.get("host")
    if host is None:
        host = {}
    elif type(host) is not dict:
        c.bad("host", host, "not an object")
        host = {}
    gpus_in = d.get("gpus")
    gpus: list[GpuSample] = []
    if gpus_in is not None:
        if type(gpus_in) is not list:
            c.bad("gpus", gpus_in, "not a list")
        else:
            if len(gpus_in) > MAX_GPUS:
                c.bad("gpus", gpus_in, f"more than {MAX_GPUS}, kept the first")
                gpus_in = gpus_in[:MAX_GPUS]
            seen: set[int] = set()
            for i, g in enumerate(gpus_in):
                gpu = _gpu(c, g, i, seen)
                if gpu is not None:
                    gpus.append(gpu)
    t = c.num(d, "t", EPOCH, "")
    source = _source(c, d)
    return HostSample(
        seq=c.int_(d, "seq", SEQ, "") or 0,
        t=float(t) if t is not None else received,
        received=received,
        source="none" if source is None and not gpus else (source or "nvml"),
        error=c.str_(d, "error", ERROR_LEN, ""),
        cpu_percent=c.num(host, "cpu_percent", PERCENT, "host."),
        load1=c.num(host, "load1", LOAD, "host."),
        mem_used_bytes=c.int_(host, "mem_used_bytes", BYTES, "host."),
        mem_total_bytes=c.int_(host, "mem_total_bytes", BYTES, "host."),
        ncpu=c.int_(host, "ncpu", COUNT, "host."),
        gpus=tuple(gpus),
    )


def _hello(c: _Checker, d: dict) -> Hello:
    return Hello(
        hostname=c.str_(d, "hostname", HOSTNAME_LEN, "hello."),
        driver=c.str_(d, "driver", SHORT_LEN, "hello."),
        nvml_version=c.str_(d, "nvml_version", SHORT_LEN, "hello."),
        python=c.str_(d, "python", SHORT_LEN, "hello."),
        source=_source(c, d, "hello."),
        error=c.str_(d, "error", ERROR_LEN, "hello."),
        ncpu=c.int_(d, "ncpu", COUNT, "hello."),
        pid=c.int_(d, "pid", PID, "hello."),
        agent=c.int_(d, "agent", COUNT, "hello."),
    )


def parse_message(msg: Any, received: float) -> AgentLine:
    """One decoded JSON value from an agent → AgentLine. Never raises."""
    if type(msg) is not dict:
        return AgentLine("invalid", message=f"{describe(msg)}, not an object")
    kind = msg.get("type")
    c = _Checker()
    if kind == "sample":
        line = AgentLine(
            "sample", sample=_sample(c, msg, received), driver=c.str_(msg, "driver", SHORT_LEN, "")
        )
    elif kind == "hello":
        line = AgentLine("hello", hello=_hello(c, msg))
    elif kind == "error":
        line = AgentLine("error", message=c.str_(msg, "error", ERROR_LEN, "") or "agent error")
    elif kind == "route":
        via = msg.get("via")
        if via not in ("relay", "direct"):
            return AgentLine("invalid", message=f"route via {describe(via)}")
        line = AgentLine(
            "route",
            route=via,
            message=c.str_(msg, "error", ERROR_LEN, "route."),
        )
    elif type(kind) is str:
        return AgentLine("other")  # a newer agent's message: ignored, not an error
    else:
        return AgentLine("invalid", message=f"message type {describe(kind)}")
    line.problems, line.dropped_problems = c.problems, c.dropped
    return line


def parse_line(line: str | bytes, received: float) -> AgentLine:
    """One line of agent output → AgentLine. Never raises, whatever the line holds."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError, TypeError) as exc:
        # ValueError covers JSONDecodeError, UnicodeDecodeError and the int-digits limit.
        return AgentLine("invalid", message=type(exc).__name__)
    try:
        return parse_message(msg, received)
    except RecursionError:  # a deeply nested value inside a field being described
        return AgentLine("invalid", message="nested too deeply")


def gpu_from_json(d: Any) -> GpuSample | None:
    """One GPU entry through the boundary (as `gpus --json` prints it); None without a valid
    index."""
    line = parse_message({"type": "sample", "gpus": [d]}, 0.0)
    return line.sample.gpus[0] if line.sample and line.sample.gpus else None


def sample_from_json(d: Any, received: float) -> HostSample:
    """A sample document through the boundary: bad fields become None, a document that is not
    a sample an empty one carrying why."""
    line = parse_message({**d, "type": "sample"} if isinstance(d, dict) else d, received)
    if line.sample is None:
        return HostSample(
            0, received, received, "none", line.message, None, None, None, None, None, ()
        )
    return line.sample
