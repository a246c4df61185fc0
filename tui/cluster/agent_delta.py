"""The boundary for the agent's delta lines (`gpu_agent --delta`; gpu_common.DeltaEncoder).

A delta carries only the numbers that change every second; the rest comes from the last full
sample of the same stream (its "base"), already validated by agent_schema. A delta is checked
as strictly as a full sample (types, bounds, shape against its base) and is all or nothing: a
bad one is dropped and named, and the next full sample (at most DELTA_FULL_EVERY later) puts
things right. Cheap on purpose: ~10x less JSON than a full 8-GPU sample, no strings to clean.
The full sample due every 10 s that only repeats its base's fixed fields comes packed from a
`--compact` agent (a B2 line, apply_repeat) and is checked the same way.
"""

from __future__ import annotations

import binascii
import functools
import json
import struct
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from itertools import repeat
from operator import itemgetter, le, mul, truediv
from typing import Any, NamedTuple

from tui.cluster.agent_schema import CLOCK_REASON_WORDS, EPOCH, HEALTH_FIELDS, LOAD, SEQ
from tui.cluster.agent_schema import describe as _describe
from tui.cluster.models import (
    BYTES,
    DELTA_METRICS,
    PERCENT,
    DeltaSample,
    GpuHealth,
    GpuMetric,
    GpuProcess,
    GpuSample,
    GpuTotals,
    HostSample,
)

DELTA_PREFIX = '{"type":"delta"'  # how the agent's json.dumps starts a delta line
_HOST_BOUNDS = ((*PERCENT, False), (*LOAD, False), (*BYTES, True))
# The same bounds as plain names, for the checks inlined on the hot path.
_REAL = (int, float)  # type() membership: bool is neither
(_P_LO, _P_HI), (_L_LO, _L_HI), (_B_LO, _B_HI) = PERCENT, LOAD, BYTES
_BOUNDS = tuple((m.lo, m.hi, m.integral) for m in DELTA_METRICS)


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
    checked = _check_gpus(rows, bases)
    if checked is None:  # a value not accepted outright: the decoder names it, or converts it
        sample: HostSample = _new(HostSample)
        sample.gpus = _decode_gpus(rows, bases)
        # Its GPU totals now, while the sample is fresh in the cache: the summary adds every
        # host's twice a second, and summing 1,024 cold samples there cost more.
        sample._totals = None
        sample.totals()
    else:  # every value as sent: the GPUs are built when first read (models.DeltaSample)
        delta: DeltaSample = _new(DeltaSample)
        delta._totals, delta._hist = checked
        delta._rows, delta._base_gpus, delta._health = rows, bases, None
        delta._build, delta._column = _decode_gpus, _json_column
        sample = delta
    return _finish(sample, base, received, seq, t, cpu, load1, mem_used)


def _finish(
    sample: HostSample,
    base: HostSample,
    received: float,
    seq: int | None,
    t: float | None,
    cpu: float | None,
    load1: float | None,
    mem_used: int | None,
) -> HostSample:
    """The host's numbers of a delta, and the rest from its base."""
    sample.seq = seq if seq is not None else base.seq
    sample.t = float(t) if t is not None else received
    sample.received = received
    sample.source = base.source
    sample.error = base.error
    sample.cpu_percent = cpu
    sample.load1 = load1
    sample.mem_used_bytes = mem_used
    sample.mem_total_bytes = base.mem_total_bytes
    sample.ncpu = base.ncpu
    return sample


# -- compact delta lines (agent --delta --compact; gpu_common.compact_delta) ---------------------
# The same values as a JSON delta, packed (struct, base64): one unpack gives every number, and
# the whole line is checked in C (each value against its bounds, or the None mark where the
# host's last line had one; the processes' memory with min and max), where the JSON delta cost
# a json.loads and a Python check per value. A line not accepted outright is checked column by
# column, then value by value (_num), naming the field as the JSON boundary does:
# delta.gpus[GPU][METRIC].

COMPACT_PREFIX = "B1 "  # gpu_common.COMPACT_PREFIX
_NONE_INT = -(1 << 63)  # gpu_common.COMPACT_NONE_INT
_NONE_FLOAT = float("-inf")  # gpu_common.COMPACT_NONE_FLOAT
_MARKS = (_NONE_INT, _NONE_FLOAT)  # an accepted line holds -2**63 only in int places
_HOST_FORMAT = "<qdddq"  # seq, t, cpu_percent, load1, mem_used
_HEAD = len(_HOST_FORMAT) - 1
_K = len(DELTA_METRICS)
_COLUMN = {m.key: j for j, m in enumerate(DELTA_METRICS)}
_UTIL, _USED, _POWER = _COLUMN["util_percent"], _COLUMN["memory_used_bytes"], _COLUMN["power_w"]
_HEAD_BOUNDS = ((*SEQ, True), (*EPOCH, False), *_HOST_BOUNDS)
_HEAD_PATHS = ("delta.seq", "delta.t", "delta.host[0]", "delta.host[1]", "delta.host[2]")


@functools.lru_cache(maxsize=256)  # bounded: a hostile host's ever-new shapes
def _ranges(n: int, marks: frozenset[int]) -> tuple[tuple, tuple]:
    """Each value's bounds in a packed line's head and columns for `n` GPUs (lows, highs), or
    the None mark at positions `marks`: one all(map(le, ...)) each way checks a whole line in
    C. Shared by every plan of the same shape (a fleet has a few)."""
    bounds = [*_HEAD_BOUNDS, *(b for b in _BOUNDS for _ in range(n))]
    lows, highs = [], []
    for at, (lo, hi, integral) in enumerate(bounds):
        if at in marks:
            lo = hi = _NONE_INT if integral else _NONE_FLOAT
        elif integral:  # int against int: the faster comparison
            lo, hi = int(lo), int(hi)
        lows.append(lo)
        highs.append(hi)
    return tuple(lows), tuple(highs)


@dataclass(slots=True)
class DeltaPlan:
    """What a base sample fixes about its compact deltas (made once per base): their layout,
    each GPU's process count, and what the totals take from the base; and where the host's
    lines hold a None (learnt from its last line the whole-line check did not take)."""

    base: HostSample
    base_text: str  # the base's seq as the agent writes it
    layout: struct.Struct
    # each metric's values, its check, and whether the totals read it
    columns: tuple[tuple[slice, float, float, bool, str, bool], ...]
    procs: tuple[int | None, ...]  # each GPU's processes (None: not read)
    proc_gpu: tuple[int, ...]  # the GPU of each process value (for a bad value's path)
    mem_totals: tuple[int | None, ...]
    simple: bool  # no GPU with an error, every GPU's memory total known and > 0
    mem_total_sum: int  # of the GPUs without an error
    readers: tuple[tuple[struct.Struct, int], ...]  # each column alone: its layout, offset
    ranges: tuple[tuple, tuple] = ((), ())  # _ranges(GPUs, marks)
    marks: frozenset[int] = frozenset()  # positions in the head and columns that hold None
    fast: bool = False  # no mark in the head or in a totalled column: simple totals apply

    def expect(self, marks: frozenset[int]) -> None:
        """The whole-line check takes the None mark at `marks` from now on."""
        n = len(self.procs)
        self.marks, self.ranges = marks, _ranges(n, marks)
        totalled = [c[0] for c in self.columns if c[5]]
        self.fast = self.simple and not any(
            at < _HEAD or any(part.start <= at < part.stop for part in totalled) for at in marks
        )


def delta_plan(base: HostSample) -> DeltaPlan:
    gpus = base.gpus
    n = len(gpus)
    procs = _shared(tuple(None if g.processes is None else len(g.processes) for g in gpus))
    proc_gpu = _shared(tuple(i for i, count in enumerate(procs) for _ in range(count or 0)))
    totals = _shared(tuple(g.memory_total_bytes for g in gpus))
    ok = [g for g in gpus if not g.error]
    plan = DeltaPlan(
        base=base,
        base_text=str(base.seq),
        layout=_layout(n, len(proc_gpu)),
        columns=_columns_of(n),
        readers=_readers(n),
        procs=procs,
        proc_gpu=proc_gpu,
        mem_totals=totals,
        simple=len(ok) == n and all(totals),
        mem_total_sum=sum(g.memory_total_bytes or 0 for g in ok),
    )
    # The first guess of where the deltas hold None: where the base does.
    head = (base.seq, base.t, base.cpu_percent, base.load1, base.mem_used_bytes)
    cells = [getattr(g, m.key) for m in DELTA_METRICS for g in gpus]
    plan.expect(frozenset(at for at, v in enumerate([*head, *cells]) if v is None))
    return plan


# What plans of the same shape share, one object each: a fleet's hosts look alike, and a line's
# check then reads a few objects warm in the cache instead of thousands of copies cold (at
# 4,096 hosts that was ~a tenth of a relayed line). Each cache is bounded against a hostile
# host's ever-new shapes.


@functools.lru_cache(maxsize=4096)
def _shared(value: tuple) -> tuple:
    """The first of equal tuples (the cache hands back the one it keeps)."""
    return value


@functools.lru_cache(maxsize=256)
def _layout(gpus: int, procs: int) -> struct.Struct:
    columns = "".join(("q" if m.integral else "d") * gpus for m in DELTA_METRICS)
    return struct.Struct(_HOST_FORMAT + columns + "q" * procs)


@functools.lru_cache(maxsize=256)
def _columns_of(n: int) -> tuple[tuple[slice, float, float, bool, str, bool], ...]:
    return tuple(
        (
            slice(_HEAD + j * n, _HEAD + (j + 1) * n),
            *_BOUNDS[j],
            f"delta.gpus[{{}}][{j}]",
            j in (_UTIL, _USED, _POWER),
        )
        for j in range(_K)
    )


@functools.lru_cache(maxsize=256)
def _readers(n: int) -> tuple[tuple[struct.Struct, int], ...]:
    # Every value packs to 8 bytes with no padding ("<"): a column is one run of bytes, read
    # alone by a sort (DeltaSample.column) without unpacking the line's other ~50 values.
    return tuple(
        (struct.Struct("<" + ("q" if m.integral else "d") * n), 8 * (_HEAD + j * n))
        for j, m in enumerate(DELTA_METRICS)
    )


def _value(v: Any, lo: float, hi: float, integral: bool, path: str) -> Any:
    """One packed value, checked as a JSON value is (_num); the None mark is None."""
    if v == (_NONE_INT if integral else _NONE_FLOAT):
        return None
    return _num(v, lo, hi, integral, path)


def _column(values: tuple, lo: float, hi: float, integral: bool, path: str) -> Sequence:
    """A column not accepted outright: all None (a metric this host does not read), or
    checked value by value; `path` has {} for the GPU's place."""
    if values.count(_NONE_INT if integral else _NONE_FLOAT) == len(values):
        return (None,) * len(values)
    return [_value(v, lo, hi, integral, path.format(i)) for i, v in enumerate(values)]


def _unmarked(values: tuple, integral: bool) -> Sequence:
    """A checked column's values, its None marks None."""
    mark = _NONE_INT if integral else _NONE_FLOAT
    return [None if v == mark else v for v in values] if mark in values else values


def _unmarked_columns(values: tuple, plan: DeltaPlan) -> list[Sequence]:
    """The columns of a line the whole-line check took, its None marks None."""
    return [_unmarked(values[c[0]], c[3]) for c in plan.columns]


def apply_compact(
    line: str, base: HostSample | None, received: float, plan: DeltaPlan | None = None
) -> DeltaSample:
    """The sample a compact delta line stands for, on top of `base` (plan: delta_plan(base),
    kept by the caller). BadDelta for a malformed line, StaleDelta for another base's."""
    parts = line.split(" ", 2)
    if len(parts) != 3:
        raise BadDelta("delta", line, "not B1 BASE DATA")
    return _apply_packed(parts[1], parts[2], base, received, plan)


def _unbase64(text: str, size: int, path: str) -> bytes:
    """`size` bytes from base64 `text`, or BadDelta. The text's length and the bytes' count
    both: the decoder (strict only from Python 3.11) skips characters outside base64's and
    stops at padding."""
    chars = -(-size // 3) * 4
    if len(text) != chars:
        raise BadDelta(path, len(text), f"not {chars} characters for the base's GPUs")
    try:
        data = binascii.a2b_base64(text)
    except (binascii.Error, ValueError):
        raise BadDelta(path, text, "not base64") from None
    if len(data) != size:
        raise BadDelta(path, len(data), f"not {size} bytes for the base's GPUs")
    return data


def _apply_packed(
    base_text: str, text: str, base: HostSample | None, received: float, plan: DeltaPlan | None
) -> DeltaSample:
    """A B1 line's (or a B2 line's) numbers on `base`: see apply_compact.

    Most lines take one check of every head and column value in C (plan.ranges: each value's
    bounds, or the None mark where the host's last line had one; a nan fails every
    comparison). A line it does not take is checked column by column, each value not taken
    outright naming its field (BadDelta), and where it holds None is learnt for the next."""
    if base is None:
        raise StaleDelta()
    if plan is None or plan.base is not base:
        plan = delta_plan(base)
    if base_text != plan.base_text:
        raise StaleDelta()
    layout = plan.layout
    data = _unbase64(text, layout.size, "delta")
    values = layout.unpack(data)
    lows, highs = plan.ranges
    n = len(plan.procs)
    delta: DeltaSample = _new(DeltaSample)
    cols: Sequence[Sequence] | None = None
    if not (all(map(le, lows, values)) and all(map(le, values, highs))):
        seq, t, cpu, load1, mem_used, cols = _checked(values, plan)
    elif plan.fast:  # no None in the head or the totalled columns, no GPU with an error
        seq, t, cpu, load1, mem_used = values[:_HEAD]
        columns = plan.columns
        util, used = values[columns[_UTIL][0]], values[columns[_USED][0]]
        power = values[columns[_POWER][0]]
        delta._totals = GpuTotals(n, sum(util), n, sum(used), plan.mem_total_sum, sum(power))
        hist = array("f", util)
        hist.extend(map(mul, map(truediv, used, plan.mem_totals), _HUNDRED))
        delta._hist = hist
    else:
        seq, t, cpu, load1, mem_used = (None if v in _MARKS else v for v in values[:_HEAD])
        cols = _unmarked_columns(values, plan)
    pmem: Sequence[Any] | None = values[_HEAD + _K * n :]
    if not pmem or (min(pmem) >= _B_LO and max(pmem) <= _B_HI):
        pmem = None  # as sent: read again from the bytes if needed
    else:
        pmem = [
            _value(v, _B_LO, _B_HI, True, f"delta.gpus[{g}][{_K}]")
            for g, v in zip(plan.proc_gpu, pmem, strict=True)
        ]
    if cols is not None:
        delta._totals, delta._hist = _column_totals(plan, cols[_UTIL], cols[_USED], cols[_POWER])
    # The bytes, not the 60-odd numbers: a sample lives a second, and keeping every host's
    # numbers as objects until then cost their creation's and their release's cold memory
    # (a third of a relayed line at 4,096 hosts). The few readers unpack them again.
    delta._rows = (data, cols, pmem, plan)
    delta._base_gpus, delta._health = base.gpus, None
    delta._build, delta._column = _build_compact, _packed_column
    _finish(delta, base, received, seq, t, cpu, load1, mem_used)
    return delta


_HUNDRED = repeat(100.0)  # a memory fraction to %, in map(): never exhausted


def _checked(values: tuple, plan: DeltaPlan) -> tuple:
    """The head and columns of a line the whole-line check did not take: each value checked
    (BadDelta names the first bad one), None where marked; the plan learns where."""
    head = values[:_HEAD]
    seq, t, cpu, load1, mem_used = (
        _value(v, *bounds, path)
        for v, bounds, path in zip(head, _HEAD_BOUNDS, _HEAD_PATHS, strict=True)
    )
    cols: list[Sequence] = []
    for part, lo, hi, integral, path, _totalled in plan.columns:
        col = values[part]
        if col and min(col) >= lo and max(col) <= hi and (integral or sum(col) == sum(col)):
            cols.append(col)
        else:
            cols.append(_column(col, lo, hi, integral, path))
    end = _HEAD + _K * len(plan.procs)
    marks = frozenset(at for at, v in enumerate(values[:end]) if v in _MARKS)
    if marks != plan.marks:
        plan.expect(marks)
    return seq, t, cpu, load1, mem_used, cols


# -- repeat lines (agent --delta --compact; gpu_common.REPEAT_PREFIX) ----------------------------
# The full sample due every 10 s, when its fixed fields are its base's: a B1 line's numbers
# (seq: its own), then its GPUs' health packed (each GPU: 1 or 0, HEALTH_FIELDS as integers,
# None the mark, the clock reasons as bits of CLOCK_REASON_WORDS). A bad health value refuses
# the line whole and is named as the sample boundary names it: gpus[i].health.FIELD.

REPEAT_PREFIX = "B2 "  # gpu_common.REPEAT_PREFIX
_HEALTH_ITEMS = tuple(HEALTH_FIELDS.items())
_HEALTH_WIDTH = len(_HEALTH_ITEMS) + 2
_ALL_REASONS = (1 << len(CLOCK_REASON_WORDS)) - 1
_REASONS_AT = [f.name for f in fields(GpuHealth)].index("clock_reasons")
# Checked health rows (the packed integers) -> GpuHealth's fields in order, up to xid_last.
# Health changes on a scale of minutes and healthy GPUs read alike: most rows are known.
_HEALTH_ROWS: dict[tuple[int, ...], tuple] = {}
_HEALTH_ROWS_MAX = 4096


class Repeated(NamedTuple):
    sample: DeltaSample
    base: HostSample  # the held base under the repeat's seq (the next deltas' base)
    health: dict[int, GpuHealth]  # by GPU index, the health the repeat carried


def rebased_plan(plan: DeltaPlan, base: HostSample) -> DeltaPlan:
    """`plan` for `base`, a base under a repeat's seq: the same GPUs, the same layout."""
    return replace(plan, base=base, base_text=str(base.seq))


def apply_repeat(
    line: str, base: HostSample | None, received: float, plan: DeltaPlan | None = None
) -> Repeated:
    """A repeat line on `base`: the sample (a DeltaSample on base's GPUs), base under the
    line's seq (the next deltas' base), its health by GPU index. BadDelta, StaleDelta as
    apply_compact."""
    parts = line.split(" ", 4)
    if len(parts) != 4:
        raise BadDelta("repeat", line, "not B2 BASE DATA HEALTH")
    delta = _apply_packed(parts[1], parts[2], base, received, plan)
    assert base is not None  # (_apply_packed: StaleDelta without one)
    bases = base.gpus
    health = {} if parts[3] == "-" else _packed_health(parts[3], bases, delta.column(_UTIL))
    rebased = HostSample(
        delta.seq, base.t, base.received, base.source, base.error, base.cpu_percent, base.load1,
        base.mem_used_bytes, base.mem_total_bytes, base.ncpu, bases,
    )  # fmt: skip
    return Repeated(delta, rebased, health)


def _packed_health(
    text: str, bases: tuple[GpuSample, ...], util: Sequence[float | None]
) -> dict[int, GpuHealth]:
    count = len(bases) * _HEALTH_WIDTH
    values = struct.unpack(f"<{count}q", _unbase64(text, count * 8, "repeat.health"))
    out = {}
    known = _HEALTH_ROWS
    for i, b in enumerate(bases):
        at = i * _HEALTH_WIDTH
        present = values[at]
        if present != 1:
            if present != 0:
                raise BadDelta(f"gpus[{i}].health", present, "not 1 or 0 for present")
            continue
        row = values[at + 1 : at + _HEALTH_WIDTH]
        args = known.get(row)
        if args is None:
            args = _health_args(row, f"gpus[{i}].health.")
            if len(known) >= _HEALTH_ROWS_MAX:
                known.clear()
            known[row] = args
        health = out[b.index] = GpuHealth(*args)
        health.util_percent = util[i]
    return out


def _health_args(row: tuple[int, ...], path: str) -> tuple:
    """A packed health row checked (BadDelta naming the field), as GpuHealth's fields."""
    args: list[Any] = []
    for (key, bounds), v in zip(_HEALTH_ITEMS, row, strict=False):
        if v == _NONE_INT:
            args.append(None)
        elif bounds is None:
            if v != 0 and v != 1:
                raise BadDelta(path + key, v, "not true/false")
            args.append(v == 1)
        elif bounds[0] <= v <= bounds[1]:
            args.append(v)
        else:
            raise BadDelta(path + key, v)
    mask = row[-1]
    reasons = None
    if mask != _NONE_INT:
        if not 0 <= mask <= _ALL_REASONS:
            raise BadDelta(path + "clock_reasons", mask, "unknown reason")
        reasons = tuple(w for j, w in enumerate(CLOCK_REASON_WORDS) if mask >> j & 1)
    args.insert(_REASONS_AT, reasons)
    return tuple(args)


def _column_totals(
    plan: DeltaPlan, util: Sequence, used: Sequence, power: Sequence
) -> tuple[GpuTotals, list[float]]:
    """The totals and history row of _check_gpus, from columns with None or error GPUs."""
    totals = GpuTotals()
    utils, mems = [], []
    for g, u, m, total, p in zip(plan.base.gpus, util, used, plan.mem_totals, power, strict=True):
        utils.append(u if u is not None else 0.0)
        mems.append(m / total * 100 if m is not None and total else 0.0)
        if g.error:
            continue
        totals.gpus += 1
        if u is not None:
            totals.util_sum += u
            totals.util_count += 1
        totals.memory_used_bytes += m or 0
        totals.memory_total_bytes += total or 0
        totals.power_w += p or 0
    return totals, utils + mems


def _columns(rows: tuple) -> Sequence[Sequence]:
    """A compact delta's checked columns, None where the agent sent none (DeltaSample._rows)."""
    data, cols, _pmem, plan = rows
    return _unmarked_columns(plan.layout.unpack(data), plan) if cols is None else cols


def _packed_column(rows: tuple, j: int) -> Sequence:
    """A compact delta's column j (DeltaSample.column)."""
    data, cols, _pmem, plan = rows
    if cols is not None:
        return cols[j]
    reader, offset = plan.readers[j]
    return _unmarked(reader.unpack_from(data, offset), plan.columns[j][3])


def _json_column(rows: list, j: int) -> list:
    """A JSON delta's column j (DeltaSample.column)."""
    return list(map(itemgetter(j), rows))


def _build_compact(rows: tuple, bases: tuple[GpuSample, ...]) -> tuple[GpuSample, ...]:
    """A compact delta's GPUs (DeltaSample._build), from its checked columns."""
    cols, pmem, plan = _columns(rows), rows[2], rows[3]
    if pmem is None:  # as sent
        pmem = plan.layout.unpack(rows[0])[_HEAD + _K * len(plan.procs) :]
    gpu_rows, k = [], 0
    for i, count in enumerate(plan.procs):
        procs = None
        if count is not None:
            procs, k = list(pmem[k : k + count]), k + count
        gpu_rows.append([col[i] for col in cols] + [procs])
    return _decode_gpus(gpu_rows, bases)


def _inline_check(m: GpuMetric, name: str) -> str:
    """`name` passes m's check outright (None, or an in-bounds number of the right type)."""
    kind = "type({0}) is int" if m.integral else "type({0}) in _REAL"
    return f"({name} is None or ({kind.format(name)} and {m.lo!r} <= {name} <= {m.hi!r}))"


def _gpus_source(metrics: Sequence[GpuMetric]) -> str:
    """The text of `_decode_gpus(rows, bases)`: every GPU's delta row (`metrics`' values in
    order, then its processes' memory) checked and merged with its base into a GpuSample.

    Written out from the table, unrolled: it runs for every GPU of every host every second
    (the cockpit's hottest loop at 1,024 hosts), where a loop over the table cost ~2x. A value
    not accepted outright takes the general check (_num) for its field path. The sample is
    filled field by field, by name, from GpuSample's own fields (its keyword __init__ cost 3x
    more here): a delta number, the processes, no health (it rides on full samples), and the
    base's value for everything else."""
    n = len(metrics)
    names = [f"v{j}" for j in range(n)]
    pairs = list(zip(metrics, names, strict=True))
    checks = "\n            and ".join(_inline_check(m, v) for m, v in pairs)
    source = {m.key: v for m, v in pairs} | {"processes": "procs", "health": "None"}
    fill = "".join(
        f"\n        g.{f.name} = {source.get(f.name, f'b.{f.name}')}" for f in fields(GpuSample)
    )
    return f"""
def _decode_gpus(rows, bases):
    gpus = []
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != {n + 1}:
            raise BadDelta(f"delta.gpus[{{i}}]", row, "not a list of {n + 1}")
        {", ".join(names)}, pmem = row
        if not (
            {checks}
        ):
            {", ".join(names)}, = (
                _num(row[j], lo, hi, integral, f"delta.gpus[{{i}}][{{j}}]")
                for j, (lo, hi, integral) in enumerate(_BOUNDS)
            )
        b = bases[i]
        procs = b.processes
        if pmem is not None:
            if procs is None or type(pmem) is not list or len(pmem) != len(procs):
                raise BadDelta(f"delta.gpus[{{i}}][{n}]", pmem, "not the base's processes")
            procs = tuple(
                GpuProcess(
                    p.pid,
                    p.name,
                    m
                    if type(m) is int and _B_LO <= m <= _B_HI
                    else _num(m, _B_LO, _B_HI, True, f"delta.gpus[{{i}}][{n}]"),
                )
                for p, m in zip(procs, pmem)
            )
        g = _new(GpuSample){fill}
        gpus.append(g)
    return tuple(gpus)
"""


def _check_source(metrics: Sequence[GpuMetric]) -> str:
    """The text of `_check_gpus(rows, bases)`: the delta's shape checked as _decode_gpus does
    (a bad shape raises the same BadDelta), and every value accepted outright, with no object
    built: then (the GPUs' totals, as HostSample.totals adds them; the history row, each GPU's
    utilization then each GPU's memory %, as HostTelemetry.record takes it), else None (the decoder
    then takes the line). Unrolled from the table like the decoder."""
    n = len(metrics)
    names = [f"v{j}" for j in range(n)]
    pairs = list(zip(metrics, names, strict=True))
    checks = "\n            and ".join(_inline_check(m, v) for m, v in pairs)
    value = {m.key: v for m, v in pairs}

    def get(key: str) -> str:
        return value.get(key, f"b.{key}")

    util, used, total, power = (
        get(k) for k in ("util_percent", "memory_used_bytes", "memory_total_bytes", "power_w")
    )
    return f"""
def _check_gpus(rows, bases):
    count = util_count = used_sum = total_sum = 0
    util_sum = power_sum = 0.0
    utils = []
    mems = []
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != {n + 1}:
            raise BadDelta(f"delta.gpus[{{i}}]", row, "not a list of {n + 1}")
        {", ".join(names)}, pmem = row
        if not (
            {checks}
        ):
            return None
        b = bases[i]
        if pmem is not None:
            procs = b.processes
            if procs is None or type(pmem) is not list or len(pmem) != len(procs):
                raise BadDelta(f"delta.gpus[{{i}}][{n}]", pmem, "not the base's processes")
            for m in pmem:
                if not (type(m) is int and _B_LO <= m <= _B_HI):
                    return None
        util, used, total = {util}, {used}, {total}
        utils.append(util if util is not None else 0.0)
        mems.append(used / total * 100 if used is not None and total else 0.0)
        if b.error:
            continue
        count += 1
        if util is not None:
            util_sum += util
            util_count += 1
        used_sum += used or 0
        total_sum += total or 0
        power_sum += {power} or 0
    return GpuTotals(count, util_sum, util_count, used_sum, total_sum, power_sum), utils + mems
"""


def _compile(source: str, name: str) -> Callable:
    scope: dict[str, Any] = {
        "BadDelta": BadDelta,
        "GpuProcess": GpuProcess,
        "GpuSample": GpuSample,
        "GpuTotals": GpuTotals,
        "_new": object.__new__,
        "_num": _num,
        "_REAL": _REAL,
        "_B_LO": _B_LO,
        "_B_HI": _B_HI,
        "_BOUNDS": tuple((m.lo, m.hi, m.integral) for m in DELTA_METRICS),
    }
    exec(compile(source, f"<agent_delta.{name}>", "exec"), scope)  # our own text, from the table
    return scope[name]


def _compile_decoder() -> Callable[[list, tuple[GpuSample, ...]], tuple[GpuSample, ...]]:
    if hasattr(GpuSample, "__post_init__") or hasattr(HostSample, "__post_init__"):
        # the decoder fills samples without __init__
        raise TypeError("a __post_init__ would be skipped by the delta decoder")
    return _compile(_gpus_source(DELTA_METRICS), "_decode_gpus")


_decode_gpus = _compile_decoder()
_check_gpus: Callable[[list, tuple[GpuSample, ...]], tuple[GpuTotals, list[float]] | None] = (
    _compile(_check_source(DELTA_METRICS), "_check_gpus")
)
_new = object.__new__
