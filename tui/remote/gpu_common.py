"""GPU agent part (joined into tui/remote/gpu_agent.py's source by the loader): the per-GPU
record every backend fills, NVIDIA's and AMD's alike. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

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
    the last full sample sent."""

    def __init__(self, full_every=DELTA_FULL_EVERY):
        self.full_every = max(1, int(full_every))
        self.base_seq = None
        self.base_fixed = None

    def encode(self, sample):
        fixed = _delta_fixed(sample)
        seq = sample.get("seq", 0)
        if (
            self.base_seq is None
            or fixed != self.base_fixed
            or seq - self.base_seq >= self.full_every
            or any("health" in g for g in sample.get("gpus") or ())
        ):
            self.base_seq, self.base_fixed = seq, fixed
            return sample
        host = sample.get("host") or {}
        gpus = []
        for g in sample.get("gpus") or ():
            row = [g.get(k) for k in DELTA_GPU_KEYS]
            procs = g.get("processes")
            row.append(None if procs is None else [p.get("memory_bytes") for p in procs])
            gpus.append(row)
        return {
            "type": "delta",
            "seq": seq,
            "t": sample.get("t"),
            "base": self.base_seq,
            "host": [host.get(k) for k in DELTA_HOST_KEYS],
            "gpus": gpus,
        }
