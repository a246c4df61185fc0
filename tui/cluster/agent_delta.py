"""The boundary for the agent's delta lines (`gpu_agent --delta`; gpu_common.DeltaEncoder).

A delta carries only the numbers that change every second; the rest comes from the last full
sample of the same stream (its "base"), already validated by agent_schema. A delta is checked
as strictly as a full sample (types, bounds, shape against its base) and is all or nothing: a
bad one is dropped and named, and the next full sample (at most DELTA_FULL_EVERY later) puts
things right. Cheap on purpose: ~10x less JSON than a full 8-GPU sample, no strings to clean.
"""

from __future__ import annotations

import json
from typing import Any

from tui.cluster.agent_schema import BYTES, EPOCH, LOAD, PERCENT, SEQ, TEMP_C, WATTS, WINDOW_S
from tui.cluster.agent_schema import describe as _describe
from tui.cluster.models import GpuProcess, GpuSample, HostSample

DELTA_PREFIX = '{"type":"delta"'  # how the agent's json.dumps starts a delta line
# Per GPU, in the order gpu_common.DELTA_GPU_KEYS sends them: (lo, hi, integral).
_GPU_BOUNDS = (
    (*PERCENT, False),
    (*PERCENT, False),
    (*BYTES, True),
    (*TEMP_C, False),
    (*WATTS, False),
    (*WINDOW_S, False),
)
_HOST_BOUNDS = ((*PERCENT, False), (*LOAD, False), (*BYTES, True))
# The same bounds as plain names, for the checks inlined on the hot path.
_REAL = (int, float)  # type() membership: bool is neither
(_P_LO, _P_HI), (_L_LO, _L_HI), (_B_LO, _B_HI) = PERCENT, LOAD, BYTES
(_T_LO, _T_HI), (_W_LO, _W_HI), (_S_LO, _S_HI) = TEMP_C, WATTS, WINDOW_S


class BadDelta(ValueError):
    """(field path, problem message) for the host's problem list."""

    def __init__(self, path: str, value: object, why: str = "") -> None:
        detail = f"{why}, got " if why else "got "
        self.path = path
        self.problem = f"bad data: field {path} ({detail}{_describe(value)})"
        super().__init__(self.problem)


class StaleDelta(Exception):
    """A delta against another full sample than the one we hold (one was lost): skipped."""


def _num(v: Any, lo: float, hi: float, integral: bool, path: str) -> Any:
    if v is None:
        return None
    t = type(v)
    if (t is int or (t is float and not integral)) and lo <= v <= hi:
        return v
    if t is float and integral and lo <= v <= hi and v.is_integer():
        return int(v)
    raise BadDelta(path, v)


def apply_delta(line: str, base: HostSample | None, received: float) -> HostSample:
    """The sample a delta line stands for, on top of `base` (the stream's last full sample).
    BadDelta for a malformed line, StaleDelta when it belongs to another base."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise BadDelta("delta", line[:40], type(exc).__name__) from None
    if type(msg) is not dict:
        raise BadDelta("delta", msg, "not an object")
    if base is None or msg.get("base") != base.seq:
        raise StaleDelta()
    seq = _num(msg.get("seq"), *SEQ, True, "delta.seq")
    t = _num(msg.get("t"), *EPOCH, False, "delta.t")
    host = msg.get("host")
    if type(host) is not list or len(host) != len(_HOST_BOUNDS):
        raise BadDelta("delta.host", host, "not a list of 3")
    cpu, load1, mem_used = host
    if not (
        (cpu is None or (type(cpu) in _REAL and _P_LO <= cpu <= _P_HI))
        and (load1 is None or (type(load1) in _REAL and _L_LO <= load1 <= _L_HI))
        and (mem_used is None or (type(mem_used) is int and _B_LO <= mem_used <= _B_HI))
    ):
        pairs = enumerate(zip(host, _HOST_BOUNDS, strict=True))
        cpu, load1, mem_used = (_num(v, *b, f"delta.host[{i}]") for i, (v, b) in pairs)
    rows = msg.get("gpus")
    bases = base.gpus
    if type(rows) is not list or len(rows) != len(bases):
        raise BadDelta("delta.gpus", rows, f"not a list of {len(bases)}")
    gpus = []
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != 7:
            raise BadDelta(f"delta.gpus[{i}]", row, "not a list of 7")
        util, mem_util, used, temp, power, window, pmem = row
        # Checked inline, unrolled (every GPU of every host, every second: the cockpit's
        # hottest loop at 1,024 hosts); a value not accepted outright takes the general check.
        if not (
            (util is None or (type(util) in _REAL and _P_LO <= util <= _P_HI))
            and (mem_util is None or (type(mem_util) in _REAL and _P_LO <= mem_util <= _P_HI))
            and (used is None or (type(used) is int and _B_LO <= used <= _B_HI))
            and (temp is None or (type(temp) in _REAL and _T_LO <= temp <= _T_HI))
            and (power is None or (type(power) in _REAL and _W_LO <= power <= _W_HI))
            and (window is None or (type(window) in _REAL and _S_LO <= window <= _S_HI))
        ):
            util, mem_util, used, temp, power, window = (
                _num(row[j], lo, hi, integral, f"delta.gpus[{i}][{j}]")
                for j, (lo, hi, integral) in enumerate(_GPU_BOUNDS)
            )
        b = bases[i]
        procs = b.processes
        if pmem is not None:
            if procs is None or type(pmem) is not list or len(pmem) != len(procs):
                raise BadDelta(f"delta.gpus[{i}][6]", pmem, "not the base's processes")
            # Checked inline; the general check (and its field path) only for an odd value.
            procs = tuple(
                GpuProcess(
                    p.pid,
                    p.name,
                    m
                    if type(m) is int and _B_LO <= m <= _B_HI
                    else _num(m, *BYTES, True, f"delta.gpus[{i}][6]"),
                )
                for p, m in zip(procs, pmem, strict=True)
            )
        gpus.append(
            GpuSample(
                b.index,
                b.name,
                b.uuid,
                util,
                mem_util,
                used,
                b.memory_total_bytes,
                temp,
                power,
                b.power_limit_w,
                procs,
                b.error,
                window,
                b.vendor,
            )
        )
    sample = HostSample(
        seq=seq if seq is not None else base.seq,
        t=float(t) if t is not None else received,
        received=received,
        source=base.source,
        error=base.error,
        cpu_percent=cpu,
        load1=load1,
        mem_used_bytes=mem_used,
        mem_total_bytes=base.mem_total_bytes,
        ncpu=base.ncpu,
        gpus=tuple(gpus),
    )
    # Its GPU totals now, while the sample is fresh in the cache: the summary adds every
    # host's twice a second, and summing 1,024 cold samples there cost more.
    sample.totals()
    return sample
