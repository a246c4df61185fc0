"""GPU agent part (joined into tui/remote/gpu_agent.py's source by the loader): the per-GPU
record every backend fills, NVIDIA's and AMD's alike. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import base64
import json
import struct

MIB = 1024 * 1024
# The per-GPU numbers every backend fills (None: not read). The cockpit's field table
# (tui/cluster/models.py GPU_METRICS: bounds, units, which ride on delta lines) has the same
# keys in the same order; tests/test_gpu_fields.py fails when the two drift.
GPU_METRICS = (
    "util_percent",
    "mem_util_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "util_window_s",
    "sm_clock_mhz",
)


def _empty_gpu(index, error=None):
    gpu = {"index": index, "name": None, "uuid": None}
    gpu.update(dict.fromkeys(GPU_METRICS))
    gpu["processes"] = None
    gpu["error"] = error
    return gpu


def _proc_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


# -- delta lines (agent --delta; the cockpit's tui/cluster/agent_delta.py reads them) -----------
# Between full samples, a "delta" line carries only what changes every second: per GPU, in the
# base sample's GPU order, [the DELTA_GPU_KEYS values, process memory in the base's process
# order or null]; for the host [cpu_percent, load1, mem_used]. Everything else (names, uuids,
# totals, limits, errors, process ids and names) is the base's (health rides on full samples
# only); when any of it changes a full sample goes out instead, and at least every
# DELTA_FULL_EVERY samples anyway. "base": the seq of the full sample a delta applies to.
DELTA_FULL_EVERY = 10
# With repeats (--compact), the sample due every DELTA_FULL_EVERY goes as a repeat line when
# nothing a delta cannot say changed (below); a full one still goes out this often, and when
# the cockpit asks (stdin "full": it lost its base).
DELTA_RESYNC_EVERY = 60
DELTA_GPU_KEYS = (  # GPU_METRICS that change every second, in GPU_METRICS' order
    "util_percent",
    "mem_util_percent",
    "memory_used_bytes",
    "temperature_c",
    "power_w",
    "util_window_s",
    "sm_clock_mhz",
)
DELTA_HOST_KEYS = ("cpu_percent", "load1", "mem_used_bytes")
_DELTA_SAMPLE_FIXED = ("source", "driver", "error")
_DELTA_HOST_FIXED = ("mem_total_bytes", "ncpu")
# Not compared: the delta's own values, processes (compared by id and name), and health, which
# rides only on full samples (a sample that has it always goes out whole).
_DELTA_GPU_SKIP = frozenset((*DELTA_GPU_KEYS, "processes", "health"))


def _delta_fixed(sample):
    """What a delta cannot say: if it differs from the base's, a full sample is due."""
    host = sample.get("host") or {}
    gpus = []
    for g in sample.get("gpus") or ():
        procs = g.get("processes")
        pids = None if procs is None else tuple((p.get("pid"), p.get("name")) for p in procs)
        kept = [(k, v) for k, v in g.items() if k not in _DELTA_GPU_SKIP]
        gpus.append((tuple(kept), pids))
    return (
        tuple(sample.get(k) for k in _DELTA_SAMPLE_FIXED),
        tuple(host.get(k) for k in _DELTA_HOST_FIXED),
        tuple(gpus),
    )


class DeltaEncoder:
    """Turns each sample dict into what to send: the sample itself, or a delta line against
    the last full sample sent; with `repeats`, a due full sample that repeats its base's
    fixed fields as a "repeat" (compact_delta packs it; its "sample" is what to send when it
    does not pack)."""

    def __init__(self, full_every=DELTA_FULL_EVERY, repeats=False):
        self.full_every = max(1, int(full_every))
        self.repeats = repeats
        self.base_seq = None
        self.base_fixed = None
        self.full_seq = None  # the last full sample's seq
        self.full_wanted = False

    def want_full(self):
        """The cockpit lost its base: the next sample goes out whole (any thread)."""
        self.full_wanted = True

    def encode(self, sample):
        fixed = _delta_fixed(sample)
        seq = sample.get("seq", 0)
        gpus_in = sample.get("gpus") or ()
        due = self.base_seq is not None and seq - self.base_seq >= self.full_every
        health = any("health" in g for g in gpus_in)
        if (
            self.base_seq is None
            or fixed != self.base_fixed
            or self.full_wanted
            or ((due or health) and not self.repeats)
            or seq - self.full_seq >= DELTA_RESYNC_EVERY
            or any("health" in g and g.get("error") is not None for g in gpus_in)
        ):
            self.full_wanted = False
            self.base_seq, self.base_fixed, self.full_seq = seq, fixed, seq
            return sample
        host = sample.get("host") or {}
        gpus = []
        for g in gpus_in:
            row = [g.get(k) for k in DELTA_GPU_KEYS]
            procs = g.get("processes")
            row.append(None if procs is None else [p.get("memory_bytes") for p in procs])
            gpus.append(row)
        delta = {
            "type": "delta",
            "seq": seq,
            "t": sample.get("t"),
            "base": self.base_seq,
            "host": [host.get(k) for k in DELTA_HOST_KEYS],
            "gpus": gpus,
        }
        if due or health:  # this sample is the next deltas' base, as a full one would be
            delta["type"], delta["sample"] = "repeat", sample
            delta["health"] = [g.get("health") for g in gpus_in]
            self.base_seq = seq
        return delta


# A compact delta line (agent --delta --compact): the same values as encode()'s delta, packed
# little-endian and base64'd, read by the cockpit with one struct.unpack and checked a column
# at a time in C (tui/cluster/agent_delta.py apply_compact), where a JSON delta cost a
# json.loads and a check per value:
#   B1 <base> <base64 of: seq q, t d, cpu_percent d, load1 d, mem_used q,
#       then each DELTA_GPU_KEYS column (every GPU's value: q for a count, else d),
#       then every GPU's processes' memory (q), in the base's GPU and process order>
# None is COMPACT_NONE_INT / COMPACT_NONE_FLOAT (outside every bound). The layout follows
# from the base (its GPUs and processes), so a line of another size is refused whole. A delta
# with a value that does not pack (not a number) goes out as JSON, where the cockpit names it.
COMPACT_PREFIX = "B1 "
# A repeat (DeltaEncoder with repeats): a full sample whose fixed fields are its base's,
#   B2 <base> <base64 as B1's, seq: this sample's> <health, base64; "-" when none>
# after which this sample is the deltas' base. Health: for each GPU in the base's order, 1
# (it has health) or 0, then HEALTH_KEYS (q: a flag as 0/1, None as COMPACT_NONE_INT), then
# its clock reasons as the bits of CLOCK_REASON_WORDS (q). The cockpit's tables
# (tui/cluster/agent_schema.py) are the same; tests/test_telemetry_repeat.py checks.
REPEAT_PREFIX = "B2 "
HEALTH_KEYS = (
    "ecc_mode",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_uncorrected",
    "retired_pages_pending",
    "remap_corrected",
    "remap_uncorrected",
    "remap_pending",
    "remap_failure",
    "clock_reasons_mask",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "persistence",
    "xid_count",
    "xid_last",
)
HEALTH_FLAGS = frozenset(
    ("ecc_mode", "retired_pages_pending", "remap_pending", "remap_failure", "persistence")
)
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
COMPACT_NONE_INT = -(1 << 63)
COMPACT_NONE_FLOAT = float("-inf")
COMPACT_INTEGRAL = ("seq", "memory_used_bytes", "sm_clock_mhz", "mem_used_bytes")


def _packable(value, integral):
    if value is None:
        return COMPACT_NONE_INT if integral else COMPACT_NONE_FLOAT
    kind = type(value)
    if integral:
        if kind is float and value.is_integer():
            return int(value)
        if kind is int:
            return value
    elif kind is int or kind is float:
        return value
    raise ValueError("not a number")


def _health_field(value, flag):
    if value is None:
        return COMPACT_NONE_INT
    if type(value) is (bool if flag else int):
        return int(value)
    raise ValueError("not a flag" if flag else "not a count")


def _pack_health(healths):
    """A repeat's health section (see REPEAT_PREFIX); ValueError where a value does not pack."""
    if not any(h is not None for h in healths):
        return "-"
    values = []
    for h in healths:
        if h is None:
            values.extend([0] * (len(HEALTH_KEYS) + 2))
            continue
        if type(h) is not dict:
            raise ValueError("not an object")
        values.append(1)
        values.extend(_health_field(h.get(k), k in HEALTH_FLAGS) for k in HEALTH_KEYS)
        reasons = h.get("clock_reasons")
        if reasons is None:
            values.append(COMPACT_NONE_INT)
        else:
            values.append(sum(1 << CLOCK_REASON_WORDS.index(word) for word in set(reasons)))
    try:
        packed = struct.pack(f"<{len(values)}q", *values)
    except (struct.error, OverflowError) as err:
        raise ValueError(str(err)) from None
    return base64.b64encode(packed).decode("ascii")


def compact_delta(delta):
    """encode()'s delta (or repeat) dict as one compact line (without the newline), or None
    when a value does not pack (the caller sends the JSON delta, or the repeat's sample)."""
    rows = delta["gpus"]
    fmt = ["<qdddq"]
    values = [delta["seq"], delta["t"], *delta["host"]]
    kinds = [True, False, False, False, True]
    for j, key in enumerate(DELTA_GPU_KEYS):
        integral = key in COMPACT_INTEGRAL
        fmt.append(("q" if integral else "d") * len(rows))
        values.extend(row[j] for row in rows)
        kinds.extend([integral] * len(rows))
    for row in rows:
        if row[-1] is not None:
            fmt.append("q" * len(row[-1]))
            values.extend(row[-1])
            kinds.extend([True] * len(row[-1]))
    try:
        packed = struct.pack("".join(fmt), *map(_packable, values, kinds))
        base = _packable(delta["base"], True)
        health = _pack_health(delta["health"]) if delta["type"] == "repeat" else None
    except (ValueError, TypeError, OverflowError, struct.error):
        return None
    data = base64.b64encode(packed).decode("ascii")
    if health is None:
        return f"{COMPACT_PREFIX}{base} {data}"
    return f"{REPEAT_PREFIX}{base} {data} {health}"


def wire_line(msg, compact):
    """The line the agent writes for a message (an encode() result, or any other): a delta or
    a repeat packed with `compact` where it packs, a repeat that does not as its sample."""
    kind = msg.get("type")
    line = compact_delta(msg) if compact and kind in ("delta", "repeat") else None
    if line is not None:
        return line
    if kind == "repeat":
        msg = msg["sample"]
    return json.dumps(msg, separators=(",", ":"))
