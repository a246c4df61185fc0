"""Compact delta lines (issue 31): the agent's `--delta --compact` lines (packed numbers) give
the same samples, totals and history values as its JSON delta lines; the boundary refuses a
hostile one whole and names the field as the JSON boundary does; the monitor takes them."""

from __future__ import annotations

import base64
import json
import os
import random
import struct
import subprocess
import sys
import time
from array import array

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from test_telemetry_delta import _comparable, _line, _once, _sample, load_inventory_text

from tui.cluster import agent_delta
from tui.cluster.agent_delta import (
    BadDelta,
    StaleDelta,
    _checked,
    apply_compact,
    apply_delta,
    delta_plan,
)
from tui.cluster.agent_schema import parse_line
from tui.cluster.models import DELTA_METRICS, DeltaSample, TelemetryState
from tui.cluster.telemetry import TelemetryMonitor, agent_argv
from tui.remote.gpu_common import (
    COMPACT_INTEGRAL,
    COMPACT_PREFIX,
    DELTA_GPU_KEYS,
    DeltaEncoder,
    compact_delta,
)


def _fleet_sample(seq: int, rng: random.Random, ngpus: int = 8, *, nones: bool = False) -> dict:
    """A host's sample with `ngpus` GPUs; with `nones`, some values not read and a GPU with
    an error (whose values the totals leave out)."""
    gpus = []
    for i in range(ngpus):
        used = rng.randrange(0, 80 << 30)
        gpus.append(
            {
                "index": i,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": f"GPU-{i}",
                "util_percent": None if nones and i == 1 else float(rng.randrange(101)),
                "mem_util_percent": rng.random() * 100,
                "memory_used_bytes": used,
                "memory_total_bytes": 80 << 30,
                "temperature_c": rng.uniform(-5, 90),
                "power_w": None if nones and i == 2 else rng.uniform(50, 700),
                "power_limit_w": 700.0,
                "util_window_s": None if nones else 1.0,
                "sm_clock_mhz": rng.randrange(2000) if i % 2 else None,
                "processes": None
                if nones and i == 3
                else [
                    {"pid": 100 + k, "name": "python", "memory_bytes": used // 2}
                    for k in range(i % 3)
                ],
                "error": "GPU is lost" if nones and i == 4 else None,
            }
        )
    return {
        "type": "sample",
        "seq": seq,
        "t": round(time.time(), 6),
        "source": "nvml",
        "driver": "550",
        "error": None,
        "host": {"cpu_percent": 5.5, "load1": 1.0, "mem_used_bytes": 7, "mem_total_bytes": 9},
        "gpus": gpus,
    }


def _pairs(nones: bool, rounds: int = 6):
    """(base, JSON delta line, compact delta line) of one host's stream."""
    rng = random.Random(31 + nones)
    enc = DeltaEncoder()
    first = _fleet_sample(0, rng, nones=nones)
    base = parse_line(_line(enc.encode(first)), 0.0).sample
    out = []
    for seq in range(1, rounds):
        sample = _fleet_sample(seq, rng, nones=nones)
        for g, f in zip(sample["gpus"], first["gpus"], strict=True):  # what a delta cannot say
            g["processes"] = f["processes"] and [
                {**p, "memory_bytes": rng.randrange(1 << 40)} for p in f["processes"]
            ]
        delta = enc.encode(sample)
        assert delta["type"] == "delta"
        compact = compact_delta(delta)
        assert compact is not None and compact.startswith(COMPACT_PREFIX)
        out.append((base, _line(delta), compact))
    return out


@pytest.mark.parametrize("nones", [False, True])
def test_compact_and_json_deltas_give_the_same_sample(nones):
    for base, json_line, compact in _pairs(nones):
        want = apply_delta(json_line, base, 1.0)
        got = apply_compact(compact, base, 1.0, delta_plan(base))
        assert type(got) is DeltaSample
        # What every second needs, taken at the boundary, before any GPU object exists:
        assert got.totals() == want.totals()
        assert array("f", got._hist) == array("f", want._hist)  # the history row, as kept
        for j in range(len(DELTA_METRICS)):  # what a metric sort reads, GPUs not built
            assert list(got.column(j)) == list(want.column(j)), DELTA_METRICS[j].key
        assert got.gpu_count == 8 and got.gpu_ids is base.gpus
        # What a row on screen, the details pane or --json reads, built on first use:
        assert [g.to_json() for g in got.gpus] == [g.to_json() for g in want.gpus]
        for key in ("seq", "t", "cpu_percent", "load1", "mem_used_bytes", "source", "ncpu"):
            assert getattr(got, key) == getattr(want, key), key
    assert len(compact) < 2 * len(json_line)


def test_a_kept_plan_follows_values_that_come_and_go(monkeypatch):
    """The whole-line check expects None where the host's last line had one (learnt on the
    plan the monitor keeps): line after line, with values turning None and back at random,
    the compact line gives what the JSON delta gives, and a nan or an out-of-range value in a
    place that held None is still refused."""
    rng = random.Random(5)
    enc = DeltaEncoder()
    first = _fleet_sample(0, rng)
    base = parse_line(_line(enc.encode(first)), 0.0).sample
    plan = delta_plan(base)
    keys = [m.key for m in DELTA_METRICS if m.key != "memory_total_bytes"]
    learnt = set()
    for seq in range(1, 120):
        sample = _fleet_sample(seq, rng)
        for g, f in zip(sample["gpus"], first["gpus"], strict=True):
            g["processes"] = f["processes"]
            for key in keys:
                if rng.random() < 0.08:
                    g[key] = None
        if rng.random() < 0.1:
            sample["host"]["cpu_percent"] = None
        delta = enc.encode(sample)
        if delta["type"] != "delta":  # the full sample due every few seconds: a new base
            base = parse_line(_line(delta), 0.0).sample
            plan = delta_plan(base)
            continue
        compact = compact_delta(delta)
        assert compact is not None
        want = apply_delta(_line(delta), base, 1.0)
        got = apply_compact(compact, base, 1.0, plan)
        assert got.totals() == want.totals(), seq
        assert array("f", got._hist) == array("f", want._hist), seq
        assert [g.to_json() for g in got.gpus] == [g.to_json() for g in want.gpus], seq
        assert got.cpu_percent == want.cpu_percent
        learnt.add(plan.marks)
    assert len(learnt) > 50  # the None places changed, and the plan followed them
    # A line with its None where the last one had them takes the one whole-line check.
    checked = []
    monkeypatch.setattr(agent_delta, "_checked", lambda *a: checked.append(a) or _checked(*a))
    assert apply_compact(compact, base, 1.0, plan).totals() == got.totals() and not checked
    marked = next(iter(plan.marks))
    head, data = compact.rsplit(" ", 1)
    values = list(struct.unpack(plan.layout.format, base64.b64decode(data)))
    for bad in (float("nan"), 1e300, -1):
        v = list(values)
        v[marked] = bad if type(v[marked]) is float else -1
        line = f"{head} {base64.b64encode(struct.pack(plan.layout.format, *v)).decode()}"
        with pytest.raises(BadDelta):
            apply_compact(line, base, 1.0, plan)


def test_compact_boundary_refuses_hostile_lines_whole():
    base, _, good = _pairs(False, 2)[0]
    plan = delta_plan(base)
    head, data = good.rsplit(" ", 1)
    raw = base64.b64decode(data)
    fmt = plan.layout.format
    values = list(struct.unpack(fmt, raw))

    def packed(index: int, value) -> str:
        v = list(values)
        v[index] = value
        return f"{head} {base64.b64encode(struct.pack(fmt, *v)).decode()}"

    n, host = 8, 5  # GPUs; seq, t and the host's three numbers come first
    util0, used0 = host, host + 2 * n
    with pytest.raises(StaleDelta):
        apply_compact(good.replace(f"B1 {base.seq} ", "B1 999 "), base, 0.0, plan)
    with pytest.raises(StaleDelta):
        apply_compact(good, None, 0.0)
    cases = {
        "B1": "delta",
        good + "AAAA": "delta",  # 3 bytes more than the base's GPUs take
        good[:-8]: "delta",
        f"{head} !!!!": "delta",
        f"{head} !{data[1:]}": "delta",  # a character outside base64's
        f"{head} {data[:-8]}=AAAAAAA": "delta",  # padding inside
        packed(util0 + 3, float("nan")): r"delta\.gpus\[3\]\[0\]",
        packed(util0 + 3, float("inf")): r"delta\.gpus\[3\]\[0\]",
        packed(util0, 100.5): r"delta\.gpus\[0\]\[0\]",
        packed(used0 + 5, -5): r"delta\.gpus\[5\]\[2\]",
        packed(len(values) - 1, -1): rf"delta\.gpus\[7\]\[{len(DELTA_GPU_KEYS)}\]",
        packed(1, float("nan")): r"delta\.t",
        packed(2, 101.0): r"delta\.host\[0\]",
        packed(4, -7): r"delta\.host\[2\]",
    }
    for line, path in cases.items():
        with pytest.raises(BadDelta, match=path):
            apply_compact(line, base, 0.0, plan)
    # None marks are None, as null is in a JSON delta; t's falls back to the arrival time.
    cleared = apply_compact(packed(1, float("-inf")), base, 5.0, plan)
    assert cleared.t == 5.0
    none_util = apply_compact(packed(util0, float("-inf")), base, 5.0, plan)
    assert none_util.gpus[0].util_percent is None and none_util.totals().util_count == 7


def test_agent_sends_json_when_a_value_does_not_pack():
    rng = random.Random(1)
    enc = DeltaEncoder()
    enc.encode(_fleet_sample(0, rng))
    delta = enc.encode(_fleet_sample(1, rng))
    for bad in ("97", True, 1 << 70):
        delta["gpus"][0][0 if bad != 1 << 70 else 2] = bad
        assert compact_delta(delta) is None
        delta["gpus"][0][0], delta["gpus"][0][2] = 1.0, 5
    assert compact_delta(delta) is not None
    # The packing follows the cockpit's field table: counts packed as integers.
    integral = {m.key for m in DELTA_METRICS if m.integral}
    assert integral == set(COMPACT_INTEGRAL) & set(DELTA_GPU_KEYS)


async def test_monitor_takes_compact_lines_and_names_bad_ones():
    inv = load_inventory_text("hosts:\n  - name: localhost\n")
    from tui.transport.fleet import Fleet

    monitor = TelemetryMonitor(Fleet(inv), inv, interval=1.0)
    ht = monitor.hosts["localhost"]
    enc = DeltaEncoder()
    lines = []
    for seq in range(4):
        msg = enc.encode(_sample(seq, float(10 + seq), pid_mem=seq * MIB))
        lines.append(compact_delta(msg) if msg["type"] == "delta" else _line(msg))
    assert lines[0].startswith("{") and all(x.startswith("B1 ") for x in lines[1:])
    for line in lines:
        monitor.ingest_line("localhost", line)
    assert ht.samples == 4 and ht.latest.seq == 3 and ht.state == TelemetryState.OK
    assert list(ht.util_history[0]) == [10.0, 11.0, 12.0, 13.0]
    assert ht.latest.gpus[0].processes[0].memory_bytes == 3 * MIB and not ht.problems
    monitor.ingest_line("localhost", lines[1][:-4])  # cut short: refused, named
    monitor.ingest_line("localhost", "B1 0 @@@@")
    assert ht.samples == 4 and "delta" in ht.problems
    monitor._bases.clear()  # a new agent run: its deltas wait for its full sample
    monitor.ingest_line("localhost", lines[2])
    assert ht.samples == 4


def test_real_agent_sends_compact_lines(fake_nvml_lib, tmp_path):
    state = tmp_path / "nvml.state"
    write_state(state, [FakeGpu(util=10), FakeGpu(util=20, processes=[(os.getpid(), 300 * MIB)])])
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_lib), FAKE_NVML_STATE=str(state))
    argv = agent_argv(sys.executable, 0.2, delta=True, compact=True)
    assert argv[-2:] == ["--delta", "--compact"]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert json.loads(proc.stdout.readline())["type"] == "hello"
        base = parse_line(proc.stdout.readline(), time.time()).sample
        assert base is not None
        plan = delta_plan(base)
        samples = [
            apply_compact(proc.stdout.readline().rstrip("\n"), base, 0.0, plan) for _ in range(3)
        ]
    finally:
        proc.stdin.close()
        proc.wait(10)
    want = _comparable(_once(env))
    assert all(_comparable(s) == want for s in samples)
    assert [s.seq for s in samples] == [1, 2, 3]
    assert samples[0].totals().util_sum == 30


def test_histories_in_one_ring_a_host_match_a_ring_a_gpu():
    """HostTelemetry's histories (one float32 ring of rows per host and series) hold what a
    ring per GPU held: the last history_len values of each GPU, oldest first, a GPU's series
    carried over when the host's GPUs change, a new GPU's starting empty."""
    from collections import deque

    from tui.cluster.models import GpuSample, HostSample, HostTelemetry
    from tui.transport.types import HostState, LinkStatus

    rng = random.Random(7)
    ht = HostTelemetry("h", LinkStatus("h", HostState.UP), history_len=5)
    want_util: dict[int, deque] = {}
    want_mem: dict[int, deque] = {}
    shapes = [(0, 1, 2)] * 7 + [(0, 2, 5)] * 3 + [(5,)] * 8 + [(0, 1, 2, 5)] * 2
    for seq, index in enumerate(shapes):
        gpus = tuple(
            GpuSample(
                i,
                util_percent=float(rng.randrange(101)) if rng.random() > 0.1 else None,
                memory_used_bytes=rng.randrange(80),
                memory_total_bytes=80,
            )
            for i in index
        )
        ht.record(HostSample(seq, 0.0, 0.0, "nvml", None, None, None, None, None, None, gpus))
        for g in gpus:
            want_util.setdefault(g.index, deque(maxlen=5)).append(g.util_percent or 0.0)
            want_mem.setdefault(g.index, deque(maxlen=5)).append(g.memory_used_bytes / 80 * 100)
        for i in want_util:
            assert list(ht.util_history[i]) == pytest.approx(list(want_util[i])), (seq, i)
            assert list(ht.mem_history[i]) == pytest.approx(list(want_mem[i])), (seq, i)
            assert len(ht.util_history[i]) == len(want_util[i]) and ht.util_history[i].maxlen == 5
    assert (
        list(ht.util_history[1])[-1] == pytest.approx(want_util[1][-1]) and len(want_util[1]) == 5
    )
