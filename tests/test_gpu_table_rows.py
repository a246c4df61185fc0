"""The GPU table's rows (tui/widgets/gpu_table_rows.py) against a brute-force reference.

`TableRows.build` keeps what it can between rebuilds (each host's GPU keys, its top value while
its sample is the same, the name order; `prepare` reads a frame's hosts ahead) and reads a delta sample's checked values without
building its GPUs. The reference here builds every GPU object and sorts, filters and folds the
fleet from scratch the plain way. Over random fleets (full, JSON-delta and packed-delta
samples, hosts without a sample, many equal values so ties are common, hosts that come, go and
change state), one TableRows rebuilt again and again must give the reference's rows, in order,
and its shapes. Pure Python: no app, no hosts.
"""

from __future__ import annotations

import dataclasses
import json
import random
import weakref

import pytest

from tui.cluster.agent_delta import apply_compact, apply_delta, delta_plan
from tui.cluster.agent_schema import parse_line
from tui.cluster.models import HostSample, HostTelemetry, TelemetryState
from tui.remote.gpu_common import DeltaEncoder, compact_delta
from tui.transport.types import HostState, LinkStatus
from tui.widgets.gpu_table import BY_KEY, COLUMNS, _gpu_metric
from tui.widgets.gpu_table_rows import Row, RowIndex, TableRows

GIB = 1 << 30
GPU_NAMES = ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X", None)
FILTERS = ("", "gpu3", "h200", "a100", "mi300", "n1", "node0", "up", "lost", "nvml", "box", "x")
METRIC_KEYS = tuple(c.key for c in COLUMNS if c.sort is not None and c.key != "name")


def _record(seq: int, rng: random.Random, gpus: int, names: list) -> dict:
    """An agent record; values from a few choices so that hosts and GPUs tie."""
    rows = []
    for i in range(gpus):
        rows.append(
            {
                "index": i,
                "name": names[i],
                "uuid": f"GPU-{i}",
                "util_percent": rng.choice([None, 0.0, 50.0, 100.0]),
                "mem_util_percent": rng.choice([None, 10.0, 90.0]),
                "memory_used_bytes": rng.choice([None, 0, 40 * GIB, 80 * GIB]),
                "memory_total_bytes": rng.choice([80 * GIB, 80 * GIB, 0, None]),
                "temperature_c": rng.choice([None, 40.0, 80.0]),
                "power_w": rng.choice([None, 100.0, 700.0]),
                "power_limit_w": 700.0,
                "util_window_s": 1.0,
                "sm_clock_mhz": rng.choice([None, 1000, 1980]),
                "processes": None,
                "error": "GPU is lost" if rng.random() < 0.05 else None,
            }
        )
    host = {"cpu_percent": 1.0, "load1": 1.0, "mem_used_bytes": GIB, "mem_total_bytes": 8 * GIB}
    return {"type": "sample", "seq": seq, "t": 1000.0 + seq, "host": host, "gpus": rows}


class _Source:
    """One host's agent: its full samples and the delta lines after them (JSON or packed)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.gpus = rng.choice([0, 1, 2, 4, 8, 8])
        self.names = [rng.choice(GPU_NAMES) for _ in range(self.gpus)]
        self.enc = DeltaEncoder(full_every=1000)
        self.seq = 0
        self.base: HostSample | None = None

    def next(self) -> HostSample:
        self.seq += 1
        msg = self.enc.encode(_record(self.seq, self.rng, self.gpus, self.names))
        if msg["type"] == "sample" or self.base is None or self.rng.random() < 0.1:
            if msg["type"] != "sample":  # a fresh full sample now and then, its GPUs changed
                self.enc = DeltaEncoder(full_every=1000)
                if self.rng.random() < 0.5:
                    self.gpus = self.rng.choice([0, 1, 2, 4, 8, 8])
                    self.names = [self.rng.choice(GPU_NAMES) for _ in range(self.gpus)]
                msg = self.enc.encode(_record(self.seq, self.rng, self.gpus, self.names))
            self.base = parse_line(json.dumps(msg), 0.0).sample
            assert self.base is not None
            return self.base
        line = compact_delta(msg) if self.rng.random() < 0.5 else None
        if line is not None:
            return apply_compact(line, self.base, 1.0, delta_plan(self.base))
        return apply_delta(json.dumps(msg), self.base, 1.0)


def _reference(
    hosts: dict[str, HostTelemetry], key: str, reverse: bool, filt: str, collapsed: set[str]
) -> tuple[list[Row], dict[str, object]]:
    """The rows from built GPU objects, sorted, filtered and folded the plain way."""
    needle = filt.lower()
    metric = BY_KEY[key].sort if key not in ("name", "state") else None
    shown = []
    shapes: dict[str, object] = {}
    for ht in hosts.values():
        gpus = ht.latest.gpus if ht.latest is not None else ()
        state = ht.display_state
        plain = not (key == "state" or filt)
        shapes[ht.name] = len(gpus) if plain else (len(gpus), state, ht.hostname)
        hay = (ht.name, ht.hostname or "", state)
        host_hit = not needle or any(needle in h.lower() for h in hay)
        kept = [g for g in gpus if host_hit or needle in f"{g.name or ''}\0gpu{g.index}".lower()]
        if not kept and not host_hit:
            continue
        top = max((metric(g) for g in gpus), default=-1.0) if metric else 0.0
        if ht.name in collapsed:
            kept = []
        elif metric is not None:
            kept.sort(key=metric, reverse=not reverse)
        shown.append((ht, kept, top, state))
    if key == "name":
        shown.sort(key=lambda s: s[0].name, reverse=reverse)
    elif key == "state":
        shown.sort(key=lambda s: (s[3] == "up", s[0].name), reverse=reverse)
    else:
        shown.sort(key=lambda s: s[2], reverse=not reverse)
    rows = []
    for ht, kept, _top, _state in shown:
        rows.append(Row(ht.name))
        rows += [Row(ht.name, g.index) for g in kept]
    return rows, shapes


def _new_host(name: str, rng: random.Random) -> tuple[HostTelemetry, _Source]:
    ht = HostTelemetry(name, LinkStatus(name, HostState.UP), history_len=5)
    return ht, _Source(rng)


def test_rows_equal_a_brute_force_reference_over_random_fleets():
    rng = random.Random(31)
    table = TableRows(_gpu_metric)
    hosts: dict[str, HostTelemetry] = {}
    sources: dict[str, _Source] = {}
    for i in range(70):
        name = f"n{rng.randrange(1000):03d}x{i}"
        hosts[name], sources[name] = _new_host(name, rng)
    checked = ties = 0
    for _round in range(160):
        # The fleet moves on: new samples for some hosts, states and hostnames change, a host
        # leaves or joins (the mapping's order is the ties' order).
        for name, ht in hosts.items():
            if ht.latest is None and rng.random() < 0.2:
                continue  # never sampled
            if rng.random() < 0.4:
                ht.record(sources[name].next())
            if rng.random() < 0.05:
                ht.link = LinkStatus(name, rng.choice(list(HostState)))
            if rng.random() < 0.05:
                ht.state = rng.choice(list(TelemetryState))
            if rng.random() < 0.03:
                ht.hostname = rng.choice([None, "box-" + name, "X" + name])
        if rng.random() < 0.1:
            del hosts[rng.choice(list(hosts))]
        if rng.random() < 0.1:
            name = f"n{rng.randrange(1000):03d}y{_round}"
            hosts[name], sources[name] = _new_host(name, rng)
        key = rng.choice(("name", "state", *METRIC_KEYS, *METRIC_KEYS))
        if rng.random() < 0.6:  # a frame's hosts read ahead (GpuTable.update_hosts)
            frame = rng.sample(list(hosts.values()), len(hosts) // 3)
            table.prepare(frame, key if rng.random() < 0.8 else rng.choice(METRIC_KEYS))
        reverse = rng.random() < 0.5
        filt = rng.choice(FILTERS)
        collapsed = set(rng.sample(list(hosts), rng.choice([0, 0, 1, 5, len(hosts)])))
        built = table.build(hosts, key, reverse, filt, collapsed)
        want, shapes = _reference(hosts, key, reverse, filt, collapsed)
        got = list(built.rows)
        assert got == want, (key, reverse, filt, _round)
        assert {n: built.shape(n) for n in hosts} == shapes, (key, filt)
        assert built.shape("nobody") is None
        assert len(built.rows) == len(want) and built.rows == want
        # Every row is found where it is drawn (the cursor kept across a rebuild).
        for at in rng.sample(range(len(want)), min(len(want), 20)):
            assert built.rows.index(want[at]) == at and built.rows[at] == want[at]
        assert Row("nobody") not in built.rows
        tops = [
            max((BY_KEY[key].sort(g) for g in ht.latest.gpus), default=-1.0)
            for ht in hosts.values()
            if ht.latest is not None and key in METRIC_KEYS
        ]
        ties += len(tops) - len(set(tops))
        checked += len(want)
    assert checked > 8_000 and ties > 1_000  # the ties' order was checked, many times


def test_row_index_ranks_a_hosts_gpus_once_when_read():
    """Under a metric sort a host's GPUs are put in order when its rows are first read, once;
    a folded host's are never ranked."""
    calls: list[int] = []

    def rank(h: int) -> tuple[int, ...]:
        calls.append(h)
        return (7, 5) if h == 0 else (2,)

    rows = RowIndex(["a", "b", "c"], [(5, 7), (), [0]], rank)
    assert len(rows) == 6 and rows[2] == Row("a", 5) and calls == [0]
    assert rows[1] == Row("a", 7) and calls == [0]  # ranked once
    assert list(rows) == [Row("a"), Row("a", 7), Row("a", 5), Row("b"), Row("c"), Row("c", 2)]
    assert calls == [0, 2] and rows.index(Row("c", 2)) == 5


class _Tracked(HostSample):
    """A sample a weak reference can follow (to see when the table lets go of it)."""

    __slots__ = ("__weakref__",)


def _tracked(seq: int, rng: random.Random) -> _Tracked:
    sample = parse_line(json.dumps(_record(seq, rng, 4, ["NVIDIA H200"] * 4)), 0.0).sample
    assert sample is not None
    return _Tracked(**{f.name: getattr(sample, f.name) for f in dataclasses.fields(HostSample)})


@pytest.mark.parametrize("key", ["name", "util", "state"])
def test_a_key_does_not_free_the_samples_the_frames_replaced(key):
    """The samples the last build read are let go at the next telemetry frame (prepare), not
    in the next key's build: freeing a fleet's worth of them was a good part of a sort key."""
    rng = random.Random(5)
    table = TableRows(_gpu_metric)
    hosts = {f"n{i}": HostTelemetry(f"n{i}", LinkStatus(f"n{i}", HostState.UP)) for i in range(6)}
    for ht in hosts.values():
        ht.record(_tracked(1, rng))
    table.build(hosts, key, False, "", set())
    for seq in range(2, 5):
        read = [weakref.ref(ht.latest) for ht in hosts.values() if ht.latest is not None]
        for ht in hosts.values():  # a frame: new samples, read ahead by the table
            ht.record(_tracked(seq, rng))
        table.prepare(hosts.values(), key)
        built = table.build(hosts, key, False, "", set())  # a key
        assert len(built.rows) == 6 * 5
        assert all(r() is not None for r in read), "freed in the key's build"
        table.prepare([], key)  # the next frame
        assert all(r() is None for r in read), "still held after the next frame"
