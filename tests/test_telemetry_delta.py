"""Delta lines between full samples (issue 16): the real agent (`--delta`, fake NVML through
the real pynvml) and the cockpit's boundary give the same samples as full lines do; old agents'
full lines stay valid; bad or stale deltas are dropped, never crash; and over real SSH a killed
host at 1 Hz is still LOST within 5 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state

from tui.cluster.agent_delta import BadDelta, StaleDelta, apply_delta
from tui.cluster.agent_schema import parse_line
from tui.cluster.models import GPU_METRICS, TelemetryState
from tui.cluster.telemetry import TelemetryMonitor, agent_argv
from tui.config.hosts import load_inventory
from tui.remote.gpu_common import DELTA_FULL_EVERY, DELTA_GPU_KEYS, DeltaEncoder
from tui.transport.fleet import Fleet
from tui.transport.types import HostState

INTERVAL = 0.2
PMEM = len(DELTA_GPU_KEYS)  # a delta row's place for its processes' memory, after the numbers


def _row(procs: list | None = None, **values: object) -> list:
    """A delta row: 1 for every number but `values` (by key), then `procs`."""
    return [values.get(k, 1) for k in DELTA_GPU_KEYS] + [procs]


def _env(fake_nvml_lib: Path, state: Path) -> dict[str, str]:
    return dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_lib), FAKE_NVML_STATE=str(state))


def _comparable(sample) -> list[tuple]:
    """What a GPU row shows (every GPU_METRICS number but the span a utilization covers,
    which depends on timing), without the host's own CPU/load."""
    metrics = [m.key for m in GPU_METRICS if m.key != "util_window_s"]
    return [
        (g.index, g.name, g.uuid, *(getattr(g, k) for k in metrics), g.processes, g.error, g.vendor)
        for g in sample.gpus
    ]


def _once(env: dict[str, str]):
    out = subprocess.run(
        agent_argv(sys.executable, INTERVAL, once=True),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    line = out.stdout.splitlines()[-1]
    assert json.loads(line)["type"] == "sample", out.stdout + out.stderr
    return parse_line(line, time.time()).sample


def test_real_agent_delta_lines_rebuild_the_full_samples(fake_nvml_lib, tmp_path):
    state = tmp_path / "nvml.state"
    me = os.getpid()
    write_state(state, [FakeGpu(util=10), FakeGpu(util=20, processes=[(me, 3000 * MIB)])])
    env = _env(fake_nvml_lib, state)
    proc = subprocess.Popen(
        agent_argv(sys.executable, INTERVAL, delta=True),
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert json.loads(proc.stdout.readline())["type"] == "hello"
        kinds, samples, sizes = [], [], {"sample": [], "delta": []}
        base = None

        def take(n: int) -> None:
            nonlocal base
            for _ in range(n):
                line = proc.stdout.readline().rstrip("\n")
                kind = json.loads(line)["type"]
                kinds.append(kind)
                sizes[kind].append(len(line))
                if kind == "sample":
                    base = parse_line(line, time.time()).sample
                    samples.append(base)
                else:
                    samples.append(apply_delta(line, base, time.time()))

        take(DELTA_FULL_EVERY + 2)
        # One full sample, then deltas, and a full one again after DELTA_FULL_EVERY.
        assert kinds[0] == "sample" and kinds[DELTA_FULL_EVERY] == "sample", kinds
        assert set(kinds[1:DELTA_FULL_EVERY]) == {"delta"}
        assert max(sizes["delta"]) < 0.5 * min(sizes["sample"])
        want = _comparable(_once(env))
        assert all(_comparable(s) == want for s in samples)
        assert [s.seq for s in samples] == list(range(len(samples)))
        # A delta brings its GPU totals (added while parsing) equal to the ones a full
        # sample computes on first use.
        totals = [s.totals() for s in samples]
        assert all(t == totals[0] for t in totals) and totals[0].gpus == 2
        assert totals[0].util_sum == 30 and totals[0].util_count == 2

        # Values that deltas carry change: still deltas, and the new values arrive.
        write_state(
            state,
            [FakeGpu(util=77, power_mw=300_000), FakeGpu(util=20, processes=[(me, 5000 * MIB)])],
        )
        want = _comparable(_once(env))
        kinds.clear()
        samples.clear()
        deadline = time.monotonic() + 10  # lines sent before the change are still in the pipe
        while time.monotonic() < deadline and _comparable(samples[-1] if samples else base) != want:
            take(1)
        take(2)
        # (One of the two may be the full sample due every DELTA_FULL_EVERY, never both.)
        assert _comparable(samples[-1]) == want and "delta" in kinds[-2:], kinds
        assert samples[-1].gpus[0].util_percent == 77.0
        assert samples[-1].gpus[1].processes[0].memory_bytes == 5000 * MIB

        # A process appears (ids are not in deltas): the next line is a full sample.
        write_state(state, [FakeGpu(util=77, processes=[(me, 1 * MIB)]), FakeGpu(util=20)])
        kinds.clear()
        samples.clear()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            take(1)
            if samples[-1].gpus[0].processes:
                break
        assert kinds[-1] == "sample"
        assert _comparable(samples[-1]) == _comparable(_once(env))
        take(1)
        assert kinds[-1] == "delta"  # and deltas against the new base after it
    finally:
        proc.stdin.close()
        proc.wait(10)


def _monitor() -> tuple[TelemetryMonitor, object]:
    inv = load_inventory_text("hosts:\n  - name: localhost\n")
    fleet = Fleet(inv)  # never started: lines are fed by hand
    monitor = TelemetryMonitor(fleet, inv, interval=1.0)
    return monitor, monitor.hosts["localhost"]


def load_inventory_text(text: str):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        return load_inventory(Path(f.name))
    finally:
        os.unlink(f.name)


def _sample(seq: int, util: float, pid_mem: int = 100 * MIB) -> dict:
    gpu = {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-x",
        "util_percent": util,
        "mem_util_percent": 1.0,
        "memory_used_bytes": 10 * MIB,
        "memory_total_bytes": 80 * 1024 * MIB,
        "temperature_c": 40.0,
        "power_w": 100.0,
        "power_limit_w": 700.0,
        "processes": [{"pid": 7, "name": "python", "memory_bytes": pid_mem}],
        "error": None,
        "util_window_s": 1.0,
    }
    return {
        "type": "sample",
        "seq": seq,
        "t": time.time(),
        "source": "nvml",
        "driver": "550",
        "error": None,
        "host": {"cpu_percent": 5.0, "load1": 1.0, "mem_used_bytes": 1, "mem_total_bytes": 2},
        "gpus": [gpu],
    }


def _line(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


async def test_old_agents_full_lines_and_new_deltas_in_one_monitor():
    monitor, ht = _monitor()
    # An old agent: full lines only, every one recorded as before.
    for seq in range(3):
        monitor.ingest_line("localhost", _line(_sample(seq, 10.0 + seq)))
    assert ht.samples == 3 and ht.latest.gpus[0].util_percent == 12.0
    assert ht.state == TelemetryState.OK and not ht.problems

    enc = DeltaEncoder()
    lines = [
        _line(enc.encode(_sample(seq, float(seq), pid_mem=seq * MIB))) for seq in range(10, 14)
    ]
    assert [json.loads(x)["type"] for x in lines] == ["sample", "delta", "delta", "delta"]
    for line in lines:
        monitor.ingest_line("localhost", line)
    g = ht.latest.gpus[0]
    assert ht.samples == 7 and ht.latest.seq == 13 and g.util_percent == 13.0
    assert g.processes[0].memory_bytes == 13 * MIB and g.name == "NVIDIA H100 80GB HBM3"
    assert list(ht.util_history[0])[-4:] == [10.0, 11.0, 12.0, 13.0]

    # A delta whose full sample never arrived (a new agent run): skipped, not recorded.
    monitor._bases.clear()
    monitor.ingest_line("localhost", lines[2])
    assert ht.samples == 7 and not ht.problems
    # Malformed deltas: named as bad data, nothing recorded, no exception.
    monitor.ingest_line("localhost", lines[0])
    bad = json.loads(lines[1])
    bad["gpus"][0][0] = 1e9  # util over 100 %
    monitor.ingest_line("localhost", _line(bad))
    bad["gpus"] = [[1.0]]
    monitor.ingest_line("localhost", _line(bad))
    monitor.ingest_line("localhost", '{"type":"delta", garbage')
    assert ht.samples == 8 and ht.latest.seq == 10
    assert {"delta", "delta.gpus[]", "delta.gpus[][]"} <= set(ht.problems)
    assert "bad data: field delta.gpus[0][0]" in ht.problems["delta.gpus[][]"][1]
    assert ht.state == TelemetryState.OK


def test_delta_boundary_rejects_wrong_shapes():
    base = parse_line(_line(_sample(0, 1.0)), 0.0).sample
    enc = DeltaEncoder()
    enc.encode(_sample(0, 1.0))
    good = enc.encode(_sample(1, 2.0))
    assert apply_delta(_line(good), base, 0.0).gpus[0].util_percent == 2.0
    with pytest.raises(StaleDelta):
        apply_delta(_line({**good, "base": 5}), base, 0.0)
    with pytest.raises(StaleDelta):
        apply_delta(_line(good), None, 0.0)
    for broken in (
        {**good, "host": [1, 2]},
        {**good, "host": [True, 1, 1]},
        {**good, "gpus": "x"},
        {**good, "gpus": [_row([1, 2])]},  # two process memories, one process
        {**good, "gpus": [_row(memory_used_bytes=-5)]},  # negative bytes
        {**good, "gpus": [_row(mem_util_percent=101)]},  # a percent over 100
        {**good, "gpus": [[*_row()[:-2], None]]},  # a number short
        {**good, "host": [101, 1, 1]},
        {**good, "host": [1, 1, 1.5]},  # bytes that are not whole
        {**good, "seq": "1"},
    ):
        with pytest.raises(BadDelta):
            apply_delta(_line(broken), base, 0.0)
    # Whole floats where bytes are expected are taken, as ints (the inlined checks send any
    # value they do not accept outright through the general one).
    whole = apply_delta(_line({**good, "host": [1, 1, 4096.0]}), base, 0.0)
    assert whole.mem_used_bytes == 4096 and type(whole.mem_used_bytes) is int
    assert base.gpus[0].processes is not None and len(base.gpus[0].processes) == 1
    for bad in (True, -1, "7"):
        with pytest.raises(BadDelta, match=rf"delta\.gpus\[0\]\[{PMEM}\]"):
            apply_delta(_line({**good, "gpus": [_row([bad])]}), base, 0.0)
    row = _row([2048.0])
    procs = apply_delta(_line({**good, "gpus": [row]}), base, 0.0).gpus[0].processes
    assert procs is not None and procs[0].memory_bytes == 2048
    assert type(procs[0].memory_bytes) is int and procs[0].pid == 7


# -- lost-host detection over real SSH at 1 Hz ------------------------------------------------


@pytest.fixture
def two_hosts(ns_cluster_factory, fake_nvml_lib, tmp_path):
    env = {}
    for name in ("node1", "node2"):
        state = tmp_path / f"{name}.nvml"
        write_state(state, [FakeGpu(util=5)] * 8)
        env[name] = {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    return ns_cluster_factory(2, host_env=env)


async def test_killed_host_is_lost_within_5_s_at_1_hz(two_hosts, tmp_path):
    from test_fleet_ssh import hosts_yaml, until

    inv = load_inventory(hosts_yaml(two_hosts, tmp_path / "hosts.yaml"))
    async with Fleet(inv) as fleet:
        monitor = TelemetryMonitor(fleet, inv, interval=1.0)
        monitor.start()
        try:
            await until(lambda: all(h.samples >= 3 for h in monitor.hosts.values()), 30, "samples")
            two_hosts.kill_host("node2")
            took = await until(
                lambda: fleet.status("node2").state == HostState.LOST, 6, "node2 lost"
            )
            assert took < 5, took
            assert monitor.hosts["node2"].display_state == "lost"
            seq = monitor.hosts["node1"].latest.seq
            # The other host streams on: two more samples within 2.5 s.
            await until(lambda: monitor.hosts["node1"].latest.seq >= seq + 2, 2.5, "node1 on")
        finally:
            await monitor.close()
