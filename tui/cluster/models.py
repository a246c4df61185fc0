"""Plain data the telemetry service publishes and the UI and CLI read."""

from __future__ import annotations

import enum
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any, NamedTuple

from tui.transport.types import HostState, LinkStatus


# Samples are read-only by convention, not frozen: a frozen dataclass's __init__ costs ~5x more,
# and these are built for every GPU of every host every second (bench/agent_parse.py).
@dataclass(slots=True)
class GpuProcess:
    pid: int
    name: str | None
    memory_bytes: int | None


@dataclass(slots=True)
class GpuHealth:
    """NVML health readings of one GPU (tui/remote/nvml_health.py), read every few seconds.

    None: n/a -- the driver, GPU or pynvml cannot answer (NotSupported, FunctionNotFound), or
    the agent sent bad data (then also a host problem). Judged by tui.cluster.gpu_health."""

    ecc_mode: bool | None = None  # ECC enabled now
    ecc_volatile_uncorrected: int | None = None  # since the driver loaded
    ecc_aggregate_uncorrected: int | None = None  # over the GPU's life
    retired_pages_pending: bool | None = None  # pre-Hopper page retirement
    remap_corrected: int | None = None  # Ampere+ row remapping
    remap_uncorrected: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    clock_reasons: tuple[str, ...] | None = None  # nvml_health.CLOCK_REASONS words
    clock_reasons_mask: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    persistence: bool | None = None
    xid_count: int | None = None  # XID critical errors since the agent started
    xid_last: int | None = None
    # Cockpit side: the GPU's utilization in the sample that carried these readings (an idle
    # GPU lowers its PCIe generation legitimately), and that sample's time.
    util_percent: float | None = None
    t: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.clock_reasons is not None:
            doc["clock_reasons"] = list(self.clock_reasons)
        doc["sample_time"] = doc.pop("t")
        return doc


# (lo, hi) bounds: values outside are bad data, not clamped (a 1e300 W GPU is a broken agent).
PERCENT = (0.0, 100.0)
BYTES = (0, 1 << 60)  # 1 EiB
TEMP_C = (-100.0, 300.0)
WATTS = (0.0, 100_000.0)
WINDOW_S = (0.0, 86400.0)  # util_window_s: the span a utilization mean covers


class GpuMetric(NamedTuple):
    """One per-GPU number: how the agent sends it and GpuSample holds it."""

    key: str  # the agent's record key and GpuSample's attribute
    lo: float
    hi: float
    integral: bool  # an int (a float holding an integer is taken as one), else int or float
    delta: bool  # sent on delta lines (it changes every second), else on full samples only
    fmt: str = ""  # format spec and unit of a display ("3.0f", "MHz")
    unit: str = ""
    title: str = ""  # header of its own optional GPU-table column; "" for none
    width: int = 0  # that column's cells


# THE per-GPU numbers, one row each. The boundary (agent_schema), the delta decoder
# (agent_delta, which builds its unrolled check from this), GpuSample.to_json and the GPU
# table's optional columns all read it; tests/test_gpu_fields.py checks it against the agent's
# record (tui/remote/gpu_common.py GPU_METRICS, DELTA_GPU_KEYS) and GpuSample's attributes.
# Delta lines carry the `delta` rows in this order. A new metric: a row here, its attribute in
# GpuSample, the agent's key and reading.
GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("util_percent", *PERCENT, False, True, "3.0f", "%"),
    GpuMetric("mem_util_percent", *PERCENT, False, True, "3.0f", "%", "MEM BUSY", 9),
    GpuMetric("memory_used_bytes", *BYTES, True, True),
    GpuMetric("memory_total_bytes", *BYTES, True, False),
    GpuMetric("temperature_c", *TEMP_C, False, True, ".0f", "°C"),
    GpuMetric("power_w", *WATTS, False, True, ".0f", "W"),
    GpuMetric("power_limit_w", *WATTS, False, False, ".0f", "W"),
    GpuMetric("util_window_s", *WINDOW_S, False, True, ".1f", "s"),
    GpuMetric("sm_clock_mhz", 0, 100_000, True, True, "d", "MHz", "SM CLOCK", 10),
)
DELTA_METRICS = tuple(m for m in GPU_METRICS if m.delta)


@dataclass(slots=True)
class GpuSample:
    """One GPU in one sample. Built by keyword only (after the index): a field added to
    GPU_METRICS cannot shift the others."""

    index: int
    _: KW_ONLY
    name: str | None = None
    uuid: str | None = None
    # The GPU_METRICS numbers (None: not read, not supported, or bad data).
    util_percent: float | None = None
    mem_util_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    # Seconds util_percent averages over (NVML's samples since the previous sample); None: an
    # instantaneous reading (nvidia-smi, an old driver, or no new sample).
    util_window_s: float | None = None
    sm_clock_mhz: int | None = None  # the SM (shader) clock now
    processes: tuple[GpuProcess, ...] | None = None
    error: str | None = None
    vendor: str | None = None  # "nvidia" | "amd"; None: an NVIDIA-only agent's GPU
    # The latest health readings: the agent sends them every few seconds, and
    # HostTelemetry.record carries them onto the samples in between. None: never read.
    health: GpuHealth | None = None

    @property
    def memory_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"index": self.index, "name": self.name, "uuid": self.uuid}
        for m in GPU_METRICS:
            doc[m.key] = getattr(self, m.key)
        doc["processes"] = (
            None
            if self.processes is None
            else [
                {"pid": p.pid, "name": p.name, "memory_bytes": p.memory_bytes}
                for p in self.processes
            ]
        )
        doc["error"] = self.error
        doc["vendor"] = self.vendor
        doc["health"] = None if self.health is None else self.health.to_json()
        return doc


@dataclass(slots=True)
class GpuTotals:
    """GPUs added up: a sample's error-free GPUs, or a fleet's (the Cluster summary adds one
    of these per host twice a second instead of walking every GPU of the fleet)."""

    gpus: int = 0
    util_sum: float = 0.0
    util_count: int = 0  # GPUs that reported a utilization
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0
    power_w: float = 0.0

    def add(self, other: GpuTotals) -> None:
        self.gpus += other.gpus
        self.util_sum += other.util_sum
        self.util_count += other.util_count
        self.memory_used_bytes += other.memory_used_bytes
        self.memory_total_bytes += other.memory_total_bytes
        self.power_w += other.power_w


@dataclass(slots=True)
class HostSample:
    seq: int
    t: float  # the agent's clock, seconds since the epoch, at the start of the sweep
    received: float  # our clock (time.time()) when the line arrived
    source: str  # "nvml" | "nvidia-smi" | "none" | AMD's, "+"-joined on mixed hosts
    error: str | None
    cpu_percent: float | None
    load1: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    ncpu: int | None
    gpus: tuple[GpuSample, ...]
    _totals: GpuTotals | None = field(default=None, repr=False, compare=False)

    def totals(self) -> GpuTotals:
        """This sample's error-free GPUs added up (computed once: samples are read-only)."""
        if self._totals is None:
            t = GpuTotals()
            for g in self.gpus:
                if g.error:
                    continue
                t.gpus += 1
                if g.util_percent is not None:
                    t.util_sum += g.util_percent
                    t.util_count += 1
                t.memory_used_bytes += g.memory_used_bytes or 0
                t.memory_total_bytes += g.memory_total_bytes or 0
                t.power_w += g.power_w or 0
            self._totals = t
        return self._totals

    @property
    def gpu_count(self) -> int:
        """How many GPUs (without building a delta sample's GPUs: see DeltaSample)."""
        return len(self.gpus)

    @property
    def gpu_ids(self) -> tuple[GpuSample, ...]:
        """The GPUs for what only a full sample changes (index, name, uuid, error, vendor):
        a delta sample's base GPUs, its own not built. Their numbers may be older."""
        return self.gpus


_GPUS_SLOT = HostSample.__dict__["gpus"]  # the slot under DeltaSample's property


class DeltaSample(HostSample):
    """A sample rebuilt from a delta line (tui/cluster/agent_delta.py), its GPUs built when
    first read. The boundary has checked every value of `_rows` (a bad line never becomes
    one) and taken what every second needs from them: the totals (`_totals`) and the history
    row (`_hist`: each GPU's utilization, then each GPU's memory %, in `_base_gpus`' order). The
    GpuSample objects, ~2/3 of a delta's cost, are made only for the hosts someone looks at
    (rows on screen, the details pane, a metric sort, --json): at 1,024 hosts few of them."""

    __slots__ = ("_base_gpus", "_build", "_column", "_health", "_hist", "_rows")
    _rows: Any  # the checked values, as the decoder in _build takes them
    _base_gpus: tuple[GpuSample, ...]
    _build: Any  # (rows, base GPUs) -> GPUs: agent_delta's decoder
    _column: Any  # (rows, j) -> column j of the rows: agent_delta's reader
    _health: dict[int, GpuHealth] | None  # the host's latest health, carried onto each GPU
    _hist: Sequence[float]  # HostTelemetry's history row (HistoryRows.append)

    @property
    def gpus(self) -> tuple[GpuSample, ...]:
        try:
            return _GPUS_SLOT.__get__(self, DeltaSample)
        except AttributeError:  # not built yet
            pass
        gpus = self._build(self._rows, self._base_gpus)
        health = self._health
        if health:
            for gpu in gpus:
                if gpu.error is None:
                    gpu.health = health.get(gpu.index)
        _GPUS_SLOT.__set__(self, gpus)
        return gpus

    @gpus.setter
    def gpus(self, value: tuple[GpuSample, ...]) -> None:
        _GPUS_SLOT.__set__(self, value)

    def column(self, j: int) -> Sequence[Any]:
        """Every GPU's value of DELTA_METRICS[j], as checked (None: not read), in
        `_base_gpus`' order, without building the GPUs: what a sort by that metric reads."""
        return self._column(self._rows, j)

    @property
    def gpu_count(self) -> int:
        return len(self._base_gpus)

    @property
    def gpu_ids(self) -> tuple[GpuSample, ...]:
        return self._base_gpus  # a delta is sent only while these fields are the base's


class HistoryRows:
    """The last `maxlen` rows of a host's series, one value a GPU and series a row (each GPU's
    utilization, then each GPU's memory %), in a ring of float32.

    One ring per host, not one per GPU or per series: a second's values go in with one slice
    assignment (at 4,096 hosts the per-GPU appends were a fifth of the ingest, and a ring per
    series a second write to a cold row). Not a deque of floats: 4 bytes a value and nothing for
    the garbage collector to visit."""

    __slots__ = ("buf", "maxlen", "next", "total", "width")

    def __init__(self, maxlen: int, width: int) -> None:
        self.maxlen = max(1, int(maxlen))
        self.width = width
        self.buf = array("f", bytes(4 * self.maxlen * width))
        self.next = 0  # the row the next values go in
        self.total = 0  # rows appended so far

    def append(self, values: Sequence[float]) -> None:
        """One row: `width` values (an array("f") goes in as it is)."""
        width = self.width
        start = self.next * width
        self.buf[start : start + width] = values if type(values) is array else array("f", values)
        self.next = (self.next + 1) % self.maxlen
        self.total += 1


class History:
    """One GPU's series, oldest first: its column of the host's HistoryRows, from the row it
    was first seen in (`born`)."""

    __slots__ = ("born", "column", "rows")

    def __init__(self, rows: HistoryRows, column: int, born: int) -> None:
        self.rows, self.column, self.born = rows, column, born

    @property
    def maxlen(self) -> int:
        return self.rows.maxlen

    def __len__(self) -> int:
        rows = self.rows
        return min(rows.total - self.born, rows.maxlen)

    def __iter__(self) -> Iterator[float]:
        rows, n = self.rows, len(self)
        column = rows.buf[self.column :: rows.width]  # one value a row, in ring order
        ordered = column[rows.next :] + column[: rows.next]
        return iter(ordered[len(ordered) - n :])


def _carried(
    series: Sequence[dict[int, History]], index: tuple[int, ...], maxlen: int
) -> tuple[HistoryRows, list[dict[int, History]]]:
    """A new ring for GPUs `index` (a host whose GPUs changed) and each of `series`, every
    GPU's values so far carried over; a new GPU's start empty. Series s of GPU k is column
    s * len(index) + k."""
    n = len(index)
    kept = [{i: list(old[i]) for i in index if i in old} for old in series]
    total = max((len(v) for k in kept for v in k.values()), default=0)
    rows = HistoryRows(maxlen, n * len(series))
    rows.total, rows.next = total, total % rows.maxlen
    views: list[dict[int, History]] = []
    for s, carried in enumerate(kept):
        out = {}
        for k, i in enumerate(index):
            column = s * n + k
            values = carried.get(i, [])
            for r, value in enumerate(values, start=total - len(values)):
                rows.buf[(r % rows.maxlen) * rows.width + column] = value
            out[i] = History(rows, column, total - len(values))
        views.append(out)
    return rows, views


class TelemetryState(str, enum.Enum):
    WAITING = "waiting"  # link not up yet, or agent starting
    OK = "ok"
    NO_NVML = "no NVML"  # the agent runs, but this host has no usable NVIDIA driver
    STALE = "stale"  # streaming stopped without the link noticing yet
    AGENT_FAILED = "agent failed"  # e.g. the configured python does not exist
    ERROR = "error"  # the agent reported an error, or reading it failed unexpectedly


PROBLEM_TTL_S = 60.0  # a problem not seen again for this long is dropped
MAX_HOST_PROBLEMS = 32  # distinct problems kept per host (the oldest go first)


@dataclass
class HostTelemetry:
    """Everything known about one host: link, agent, latest sample, and short history."""

    name: str
    link: LinkStatus
    history_len: int = 300
    state: TelemetryState = TelemetryState.WAITING
    error: str | None = None
    hostname: str | None = None
    driver: str | None = None
    container: str | None = None  # hosts.yaml `container:` (label) the agent runs in
    route: str | None = None  # "relay HOST" while its lines come through a relay (relay_plan)
    latest: HostSample | None = None
    samples: int = 0  # recorded so far: keeps sparkline buckets aligned as history rolls
    util_history: dict[int, History] = field(default_factory=dict)
    mem_history: dict[int, History] = field(default_factory=dict)
    # Bad data from the agent, by field path: (last seen, time.time(); message). Recent only.
    problems: dict[str, tuple[float, str]] = field(default_factory=dict)
    bad_lines: int = 0  # lines of this agent run that were not JSON objects
    oversize_lines: int = 0  # lines of this agent run dropped for their length
    error_from_agent: bool = False  # `error` came from the agent's own error line
    health: dict[int, GpuHealth] = field(default_factory=dict)  # latest per GPU index
    # The ring under util_history and mem_history, for the GPUs `_history_index`
    # (`_history_gpus`: the GPUs tuple it was last checked against).
    _history_rows: HistoryRows = field(default_factory=lambda: HistoryRows(1, 0), repr=False)
    _history_index: tuple[int, ...] = field(default=(), repr=False)
    _history_gpus: tuple[GpuSample, ...] | None = field(default=None, repr=False)

    def note_problem(self, key: str, message: str, now: float) -> None:
        problems = self.problems
        if key in problems:
            del problems[key]  # re-inserted last: the dict stays ordered by last seen
        elif len(problems) >= MAX_HOST_PROBLEMS:
            del problems[next(iter(problems))]
        problems[key] = (now, message)

    def current_problems(self, now: float) -> list[str]:
        """Problems seen within PROBLEM_TTL_S, oldest first; older ones are forgotten."""
        problems = self.problems
        for key in [k for k, (seen, _) in problems.items() if now - seen > PROBLEM_TTL_S]:
            del problems[key]
        return [message for _, message in problems.values()]

    def record(self, sample: HostSample) -> None:
        self.latest = sample
        self.samples += 1
        health = self.health
        if type(sample) is DeltaSample:  # its history values are ready; its GPUs not built
            sample._health = health
            if sample._base_gpus is not self._history_gpus:
                self._history_shape(sample._base_gpus)
            self._history_rows.append(sample._hist)
            return
        gpus = sample.gpus
        utils, mems = [], []
        for gpu in gpus:
            # Health rides on one sample every few seconds: carry the latest onto the others.
            if gpu.health is not None:
                gpu.health.t = sample.t
                health[gpu.index] = gpu.health
            elif gpu.error is None:
                gpu.health = health.get(gpu.index)
            utils.append(gpu.util_percent if gpu.util_percent is not None else 0.0)
            frac = gpu.memory_fraction
            mems.append(frac * 100 if frac is not None else 0.0)
        if gpus is not self._history_gpus:
            self._history_shape(gpus)
        self._history_rows.append(utils + mems)

    def _history_shape(self, gpus: tuple[GpuSample, ...]) -> None:
        """The histories' ring follows `gpus` (a new ring only when their indexes changed)."""
        index = tuple(g.index for g in gpus)
        self._history_gpus = gpus
        if index == self._history_index:
            return
        self._history_index = index
        self._history_rows, (util, mem) = _carried(
            (self.util_history, self.mem_history), index, self.history_len
        )
        self.util_history.update(util)
        self.mem_history.update(mem)

    @property
    def display_state(self) -> str:
        """One word for the host column: the link's problem first, then the agent's."""
        if self.link.state != HostState.UP:
            return self.link.state.value
        if self.state in (
            TelemetryState.NO_NVML,
            TelemetryState.AGENT_FAILED,
            TelemetryState.STALE,
            TelemetryState.ERROR,
        ):
            return self.state.value
        if self.state == TelemetryState.WAITING:
            return "starting"
        return "up"

    @property
    def display_error(self) -> str | None:
        if self.link.state != HostState.UP:
            return self.link.error
        return self.error

    @property
    def answered(self) -> bool:
        return (
            self.link.state == HostState.UP
            and self.latest is not None
            and self.state in (TelemetryState.OK, TelemetryState.NO_NVML)
        )

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        s = self.latest if self.link.state == HostState.UP else None
        problems = self.current_problems(time.time() if now is None else now)
        return {
            "name": self.name,
            "state": self.display_state,
            "error": self.display_error,
            "hostname": self.hostname,
            "driver": self.driver,
            "source": s.source if s else None,
            "sample_time": s.t if s else None,
            "cpu_percent": s.cpu_percent if s else None,
            "load1": s.load1 if s else None,
            "mem_used_bytes": s.mem_used_bytes if s else None,
            "mem_total_bytes": s.mem_total_bytes if s else None,
            "ncpu": s.ncpu if s else None,
            "gpus": [g.to_json() for g in s.gpus] if s else [],
            "problems": problems,
        }
