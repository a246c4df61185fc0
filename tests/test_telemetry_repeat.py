"""Repeat lines (issue 31): the agent's full sample every 10 s usually says nothing new but
its numbers and health; a `--compact` agent sends it packed (a B2 line) and the cockpit checks
it as a delta on its base (agent_delta.apply_repeat). The cockpit must end up exactly where
the same samples sent whole put it; a hostile repeat is refused whole and named; a cockpit
that lost its base asks the agent for a full sample."""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import json
import os
import random
import struct
import time

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from test_telemetry_compact import _fleet_sample
from test_telemetry_delta import load_inventory_text

from tui.cluster import agent_schema
from tui.cluster.agent_delta import BadDelta, StaleDelta, apply_repeat, delta_plan
from tui.cluster.agent_schema import parse_line
from tui.cluster.models import GpuHealth, HostTelemetry, TelemetryState
from tui.cluster.telemetry import TelemetryMonitor
from tui.config.hosts import load_inventory, parse_inventory
from tui.remote import gpu_common, nvml_health
from tui.remote.gpu_common import DELTA_RESYNC_EVERY, DeltaEncoder, compact_delta, wire_line
from tui.remote.relay_wire import sign
from tui.transport.fleet import Fleet

HEALTH = {
    "ecc_mode": True,
    "ecc_volatile_uncorrected": 0,
    "pcie_gen": 4,
    "pcie_gen_max": 5,
    "persistence": False,
    "clock_reasons": ["idle", "sw_power_cap"],
    "clock_reasons_mask": 5,
    "xid_count": 2,
    "xid_last": 79,
}


def _monitor() -> TelemetryMonitor:
    inv = load_inventory_text("hosts:\n  - name: localhost\n")
    return TelemetryMonitor(Fleet(inv), inv, interval=1.0)


def _same(a: HostTelemetry, b: HostTelemetry) -> None:
    """Two monitors' views of one host hold the same."""
    assert a.samples == b.samples and a.state == b.state and a.driver == b.driver
    assert {k: v[1] for k, v in a.problems.items()} == {k: v[1] for k, v in b.problems.items()}
    if b.latest is None:
        assert a.latest is None
        return
    assert a.latest is not None
    assert [g.to_json() for g in a.latest.gpus] == [g.to_json() for g in b.latest.gpus]
    assert a.latest.totals() == b.latest.totals()
    for key in ("seq", "source", "error", "cpu_percent", "load1", "mem_used_bytes", "ncpu"):
        assert getattr(a.latest, key) == getattr(b.latest, key), key
    # t: the agent's, or (none sent) each monitor's own arrival time
    got, want = (s.latest and (s.latest.t, s.latest.t == s.latest.received) for s in (a, b))
    assert got == want or (got[1] and want[1])
    assert {i: h.to_json() for i, h in a.health.items()} == {
        i: h.to_json() for i, h in b.health.items()
    }
    assert {i: list(h) for i, h in a.util_history.items()} == {
        i: list(h) for i, h in b.util_history.items()
    }
    assert {i: list(h) for i, h in a.mem_history.items()} == {
        i: list(h) for i, h in b.mem_history.items()
    }


def _line(msg: dict) -> str:
    return json.dumps(msg, separators=(",", ":"))


def _health(seq: int, i: int) -> dict:
    return dict(HEALTH, pcie_gen=(seq + i) % 5, xid_count=seq, ecc_mode=bool(i % 2))


def _agent_lines(enc: DeltaEncoder, sample: dict) -> str:
    """What the agent writes for `sample` (gpu_agent.main, --delta --compact)."""
    return wire_line(enc.encode(sample), True)


def test_the_packing_tables_are_the_cockpits():
    assert tuple(agent_schema.HEALTH_FIELDS) == gpu_common.HEALTH_KEYS
    flags = {k for k, bounds in agent_schema.HEALTH_FIELDS.items() if bounds is None}
    assert flags == gpu_common.HEALTH_FLAGS
    assert gpu_common.CLOCK_REASON_WORDS == agent_schema.CLOCK_REASON_WORDS
    assert tuple(word for _, _, word in nvml_health.CLOCK_REASONS) == gpu_common.CLOCK_REASON_WORDS
    assert gpu_common.REPEAT_PREFIX == "B2 " and gpu_common.COMPACT_PREFIX == "B1 "
    # A checked row becomes GpuHealth's fields in order (agent_delta._health_args).
    names = [f.name for f in dataclasses.fields(GpuHealth)]
    keys = list(gpu_common.HEALTH_KEYS)
    keys.insert(keys.index("clock_reasons_mask"), "clock_reasons")
    assert names[: len(keys)] == keys and names[len(keys) :] == ["util_percent", "t"]


@pytest.mark.parametrize("nones", [False, True])
def test_repeat_lines_give_what_full_samples_give(nones):
    """An agent with repeats (packed lines) against one that sends every full sample as JSON:
    the cockpit holds the same samples, health, histories at every step."""
    rng = random.Random(11)
    packed, whole = _monitor(), _monitor()
    enc, plain = DeltaEncoder(repeats=True), DeltaEncoder()
    kinds = []
    for seq in range(DELTA_RESYNC_EVERY + 3):
        sample = _fleet_sample(seq, rng, nones=nones)
        if seq % 10 == 0:
            # (with nones, at 30 also the GPU with an error: such a sample goes whole)
            for i in (0, 2, 5, 4) if nones and seq == 30 else (0, 2, 5):
                sample["gpus"][i]["health"] = _health(seq, i)
        line = _agent_lines(enc, copy.deepcopy(sample))
        kinds.append(line[:2])
        packed.ingest_line("localhost", line)
        whole.ingest_line("localhost", _line(plain.encode(sample)))
        _same(packed.hosts["localhost"], whole.hosts["localhost"])
    ht = packed.hosts["localhost"]
    assert ht.samples == DELTA_RESYNC_EVERY + 3 and not ht.problems
    assert ht.health[5].pcie_gen == (60 + 5) % 5 and ht.health[5].clock_reasons == (
        "idle",
        "sw_power_cap",
    )
    # A JSON full sample at the start and DELTA_RESYNC_EVERY after the last one; the due ones
    # between packed (a GPU with an error never carries health in a repeat).
    fulls = [i for i, k in enumerate(kinds) if k == '{"']
    assert fulls == ([0, 30] if nones else [0, DELTA_RESYNC_EVERY])
    repeats = [i for i, k in enumerate(kinds) if k == "B2"]
    assert repeats == [i for i in range(10, DELTA_RESYNC_EVERY + 1, 10) if i not in fulls]


def test_repeat_boundary_refuses_hostile_lines_whole():
    rng = random.Random(2)
    enc = DeltaEncoder(repeats=True)
    first = _fleet_sample(0, rng)
    base = parse_line(_line(enc.encode(first)), 0.0).sample
    for seq in range(1, 10):
        enc.encode(_fleet_sample(seq, rng))
    due = _fleet_sample(10, rng)
    for i in range(8):
        due["gpus"][i]["health"] = _health(10, i)
    good = _agent_lines(enc, due)
    assert good.startswith(f"B2 {base.seq} ")
    plan = delta_plan(base)
    got = apply_repeat(good, base, 0.0, plan)
    assert got.base.seq == 10 and got.base.gpus is base.gpus and got.sample.seq == 10
    assert sorted(got.health) == list(range(8)) and got.health[3].pcie_gen == 3
    head, text = good.rsplit(" ", 1)
    values = list(struct.unpack(f"<{len(base64.b64decode(text)) // 8}q", base64.b64decode(text)))
    width = len(gpu_common.HEALTH_KEYS) + 2

    def health(i: int, key: str, value: int) -> str:
        v = list(values)
        at = i * width  # its "present"
        if key == "clock_reasons":
            at += width - 1
        elif key:
            at += 1 + gpu_common.HEALTH_KEYS.index(key)
        v[at] = value
        return f"{head} {base64.b64encode(struct.pack(f'<{len(v)}q', *v)).decode()}"

    none = -(1 << 63)
    cases = {
        "B2": "repeat",
        good.rsplit(" ", 1)[0]: "repeat",  # no health section
        good + " -": "repeat",
        f"{head} {text[:-4]}": r"repeat\.health",  # cut short
        f"{head} {text}AAAA": r"repeat\.health",
        f"{head} {'A' * (1 << 20)}": r"repeat\.health",  # oversized
        f"{head} !{text[1:]}": r"repeat\.health",
        health(3, "", 2): r"gpus\[3\]\.health",
        health(3, "", -1): r"gpus\[3\]\.health",
        health(1, "ecc_mode", 2): r"gpus\[1\]\.health\.ecc_mode",
        health(1, "persistence", -7): r"gpus\[1\]\.health\.persistence",
        health(2, "pcie_gen", 999): r"gpus\[2\]\.health\.pcie_gen",
        health(2, "xid_count", -1): r"gpus\[2\]\.health\.xid_count",
        health(2, "xid_last", 1 << 40): r"gpus\[2\]\.health\.xid_last",
        health(7, "clock_reasons", 1 << 12): r"gpus\[7\]\.health\.clock_reasons",
        health(7, "clock_reasons", -5): r"gpus\[7\]\.health\.clock_reasons",
    }
    # The numbers: as a B1 line's, named as the delta boundary names them.
    b1 = compact_delta(enc.encode(_fleet_sample(11, rng)))
    assert b1 is not None and b1.startswith("B1 10 ")
    words = good.split(" ")
    raw = list(plan.layout.unpack(base64.b64decode(words[2])))
    raw[5 + 3] = float("nan")  # GPU 3's utilization
    nan = base64.b64encode(plan.layout.pack(*raw)).decode()
    cases[f"B2 {words[1]} {nan} {words[3]}"] = r"delta\.gpus\[3\]\[0\]"
    cases[f"B2 {words[1]} {words[2][:-4]} {words[3]}"] = "delta"
    for line, path in cases.items():
        with pytest.raises(BadDelta, match=path):
            apply_repeat(line, base, 0.0, plan)
    # None marks are n/a, as null is in JSON.
    cleared = apply_repeat(health(2, "pcie_gen", none), base, 0.0, plan)
    assert cleared.health[2].pcie_gen is None and cleared.health[2].pcie_gen_max == 5
    # Another base's (or a replayed one, once its base moved on): skipped, not named.
    with pytest.raises(StaleDelta):
        apply_repeat(good.replace("B2 0 ", "B2 9 "), base, 0.0, plan)
    with pytest.raises(StaleDelta):
        apply_repeat(good, got.base, 0.0)
    with pytest.raises(StaleDelta):
        apply_repeat(good, None, 0.0)

    # In the monitor: refused whole and named, nothing recorded; the next deltas (on the
    # base the agent moved to) wait for a full sample, a replay changes nothing.
    monitor = _monitor()
    ht = monitor.hosts["localhost"]
    monitor.ingest_line("localhost", _line(first))
    monitor.ingest_line("localhost", health(2, "pcie_gen", 999))
    assert ht.samples == 1 and "gpus[].health.pcie_gen" in ht.problems and not ht.health
    monitor.ingest_line("localhost", b1)
    assert ht.samples == 1
    monitor.ingest_line("localhost", good)
    monitor.ingest_line("localhost", good)
    monitor.ingest_line("localhost", b1)
    assert ht.samples == 3 and ht.latest.seq == 11 and ht.health[3].pcie_gen == 3


def test_agent_values_that_do_not_pack_send_the_sample_whole():
    rng = random.Random(4)
    for bad in (
        {"pcie_gen": True},
        {"ecc_mode": 1},
        {"xid_count": 1 << 64},
        {"clock_reasons": ["x"]},
    ):
        enc = DeltaEncoder(repeats=True)
        for seq in range(10):
            enc.encode(_fleet_sample(seq, rng))
        due = _fleet_sample(10, rng)
        due["gpus"][1]["health"] = dict(HEALTH, **bad)
        line = _agent_lines(enc, due)
        assert json.loads(line)["seq"] == 10, bad  # the sample, as JSON
        assert enc.base_seq == 10  # and the deltas' base, either way
    enc.want_full()  # the cockpit's "full": the next sample whole
    assert enc.encode(_fleet_sample(11, rng))["type"] == "sample"
    assert enc.encode(_fleet_sample(12, rng))["type"] == "delta"


async def test_a_lost_base_is_asked_for_and_repeats_carry_health(fake_nvml_lib, tmp_path):
    """The real agent (--delta --compact, fake NVML through the real pynvml, health every
    0.3 s) on a local stream: repeat lines carry its health; when the cockpit loses the base,
    its stale deltas ask the agent for a full sample at once (not 10 samples later)."""
    state = tmp_path / "nvml.state"
    write_state(state, [FakeGpu(util=10), FakeGpu(util=20, processes=[(os.getpid(), 300 * MIB)])])
    env = {
        "LD_LIBRARY_PATH": str(fake_nvml_lib),
        "FAKE_NVML_STATE": str(state),
        "VERL_TUI_AGENT_HEALTH_S": "0.3",
    }
    inv = parse_inventory("cluster: t\nhosts:\n  - name: h\n    transport: local\n")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv, interval=0.1)
    ht = monitor.hosts["h"]
    lines: list[str] = []
    real = monitor._ingest

    def tap(host: HostTelemetry, line: str) -> None:  # what the stream delivers, then ingest
        lines.append(line)
        real(host, line)

    monitor._ingest = tap  # type: ignore[method-assign]
    fleet.start()
    monitor.start()
    try:

        async def until(check, what: str) -> None:
            deadline = time.monotonic() + 20
            while not check():
                assert time.monotonic() < deadline, (what, lines[-5:])
                await asyncio.sleep(0.02)

        await until(lambda: any(x.startswith("B2 ") for x in lines), "a repeat line")
        assert ht.health and ht.health[0].pcie_gen is not None and not ht.problems
        await until(lambda: ht.latest is not None and ht.latest.seq % 10 == 2, "seq 10k+2")
        lost_at, seen = ht.latest.seq, len(lines)
        monitor._bases.clear()  # as if its last full sample had been lost
        fulls = lambda: [x for x in lines[seen:] if x.startswith('{"type":"sample"')]  # noqa: E731
        await until(fulls, "a full sample after the loss")
        # Asked for: the agent's own full samples come every DELTA_RESYNC_EVERY (60) samples.
        assert json.loads(fulls()[0])["seq"] <= lost_at + 4
        await until(lambda: ht.latest.seq > json.loads(fulls()[0])["seq"], "samples again")
        assert ht.state == TelemetryState.OK and not ht.problems
    finally:
        await monitor.close()
        await fleet.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_relayed_repeats_are_signed_by_their_leaf(tmp_path):
    """Through the monitor's relay hub, as a relay host delivers them: a repeat line signed by
    its leaf is taken; the same line with its health changed by the relay host (the leaf's
    signature kept), or again under its counter, is refused and nothing recorded."""
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "telemetry:\n  relay: on\nhosts:\n"
        + "".join(f"  - name: h{i}\n    address: 10.0.0.{i + 1}\n" for i in range(3))
    )
    inv = load_inventory(path)
    monitor = TelemetryMonitor(Fleet(inv), inv, interval=1.0)
    hub = monitor.relays
    [group] = hub.groups
    leaf = group.leaves[1]
    leaf.key, leaf.state, leaf.stream = os.urandom(32), "relayed", object()  # type: ignore[assignment]
    ht = monitor.hosts["h1"]

    def relayed(counter: int, line: str, key: bytes | None = None) -> str:
        return f"1 {counter} {sign(key or leaf.key, counter, line.encode()).decode()} {line}"

    rng = random.Random(9)
    enc = DeltaEncoder(repeats=True)
    lines = []
    for seq in range(12):
        sample = _fleet_sample(seq, rng)
        if seq == 10:
            for i in range(8):
                sample["gpus"][i]["health"] = _health(seq, i)
        lines.append(wire_line(enc.encode(sample), True))
    due, after = lines[10], lines[11]
    assert due.startswith("B2 0 ") and after.startswith("B1 10 ")
    hub._relay_line(group, relayed(1, lines[0]))
    head, text = due.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(text))
    raw[8 * (len(gpu_common.HEALTH_KEYS) + 2) * 2 + 8 * 10] ^= 1  # GPU 2's pcie_gen
    tampered = f"{head} {base64.b64encode(bytes(raw)).decode()}"
    hub._relay_line(group, f"1 2 {relayed(2, due).split(' ')[2]} {tampered}")
    hub._relay_line(group, relayed(3, due, os.urandom(32)))  # forged
    assert ht.samples == 1 and leaf.refused == 2 and not ht.health
    hub._relay_line(group, relayed(4, due))
    hub._relay_line(group, relayed(4, due))  # replayed
    hub._relay_line(group, relayed(5, after))
    assert leaf.refused == 3 and "replayed" in ht.problems["relay"][1]
    assert ht.samples == 3 and ht.latest.seq == 11 and ht.health[2].pcie_gen == (10 + 2) % 5
    # A new assignment's key (RelayHub._assign): the old key's lines are refused from now on.
    old_key = leaf.key
    leaf.key, leaf.counter = os.urandom(32), 0
    hub._relay_line(group, relayed(1, lines[0], old_key))
    assert leaf.refused == 4 and ht.samples == 3
    hub._relay_line(group, relayed(2, lines[0]))
    assert ht.samples == 4 and ht.latest.seq == 0
