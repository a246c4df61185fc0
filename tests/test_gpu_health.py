"""GPU health from NVML, end to end: the real agent and the real pynvml against the fake
libnvidia-ml.so.1 (tests/fakenvml), over real OpenSSH namespace hosts, into `gpus`, `check` and
the Cluster screen; plus the boundary schema and the judge on their own.

Hosts (one cluster for the module):
  node1  gpu0 with 2 uncorrectable ECC errors since the driver loaded (error), gpu1 healthy
  node2  gpu0 in HW slowdown, gpu1 on a x8 link of x16 (warn)
  node3  a driver without the health calls (pynvml: FunctionNotFound everywhere) -> n/a
  node4  every health call answers Not Supported -> n/a
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import (
    CLOCKS_HW_SLOWDOWN,
    CLOCKS_HW_THERMAL,
    CLOCKS_SW_POWER_CAP,
    HEALTH_FUNCS,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    build_fake_nvml,
    write_state,
)
from harness.cli import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.app import VerlTuiApp
from tui.cluster.agent_schema import parse_line
from tui.cluster.gpu_health import BUSY_UTIL, gpu_level, judge_host
from tui.cluster.models import GpuHealth, GpuSample, HostTelemetry
from tui.cluster.telemetry import agent_argv
from tui.config.hosts import load_inventory
from tui.transport.types import HostState, LinkStatus
from tui.widgets.gpu_table import GpuTable, Row

ROOT = Path(__file__).resolve().parents[1]
ESC = "\x1b"
HEALTH_KEYS = {
    "ecc_mode",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_uncorrected",
    "retired_pages_pending",
    "remap_corrected",
    "remap_uncorrected",
    "remap_pending",
    "remap_failure",
    "clock_reasons",
    "clock_reasons_mask",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "persistence",
    "xid_count",
    "xid_last",
}
NOT_SUPPORTED = {f: NVML_ERROR_NOT_SUPPORTED for f in HEALTH_FUNCS}


# --- the agent on its own (a subprocess, as the hosts run it) ---------------------------------


def agent_env(lib: Path, state: Path, every_s: str = "10") -> dict[str, str]:
    return dict(
        os.environ,
        LD_LIBRARY_PATH=str(lib),
        FAKE_NVML_STATE=str(state),
        VERL_TUI_AGENT_HEALTH_S=every_s,
    )


def agent_once(env: dict[str, str]) -> dict:
    proc = subprocess.run(
        agent_argv(sys.executable, 1.0, once=True),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    hello, sample = (json.loads(line) for line in proc.stdout.splitlines())
    assert hello["source"] == sample["source"] == "nvml"
    return sample


@pytest.fixture(scope="module")
def old_driver_lib(tmp_path_factory) -> Path:
    """The fake NVML without the health and event symbols (a driver older than them)."""
    return build_fake_nvml(tmp_path_factory.mktemp("fakenvml-old"), health=False)


def test_first_sample_reads_every_health_call(fake_nvml_lib, tmp_path) -> None:
    state = tmp_path / "nvml"
    write_state(
        state,
        [
            FakeGpu(ecc_uncorrected=(2, 7), ecc_corrected=(5, 9)),
            FakeGpu(
                clock_reasons=CLOCKS_HW_SLOWDOWN | CLOCKS_SW_POWER_CAP,
                pcie_gen=(3, 5),
                pcie_width=(8, 16),
                persistence=False,
                retired_pending=True,
                remap=(4, 1, 1, 1),
            ),
        ],
    )
    sample = agent_once(agent_env(fake_nvml_lib, state))
    h0, h1 = (g["health"] for g in sample["gpus"])
    assert set(h0) == set(h1) == HEALTH_KEYS
    assert h0 == {
        "ecc_mode": True,
        "ecc_volatile_uncorrected": 2,
        "ecc_aggregate_uncorrected": 7,
        "retired_pages_pending": None,  # Not Supported, as on Hopper
        "remap_corrected": 0,
        "remap_uncorrected": 0,
        "remap_pending": False,
        "remap_failure": False,
        "clock_reasons": [],
        "clock_reasons_mask": 0,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "persistence": True,
        "xid_count": 0,  # registered: events before registration are not delivered
        "xid_last": None,
    }
    assert h1["clock_reasons"] == ["sw_power_cap", "hw_slowdown"]  # pynvml's bits, decoded
    assert h1["clock_reasons_mask"] == CLOCKS_HW_SLOWDOWN | CLOCKS_SW_POWER_CAP
    assert (h1["pcie_gen"], h1["pcie_gen_max"], h1["pcie_width"], h1["pcie_width_max"]) == (
        3,
        5,
        8,
        16,
    )
    assert h1["persistence"] is False and h1["retired_pages_pending"] is True
    assert (h1["remap_corrected"], h1["remap_uncorrected"]) == (4, 1)
    assert h1["remap_pending"] is True and h1["remap_failure"] is True


@pytest.mark.parametrize("case", ["not-supported", "old-driver"])
def test_unanswered_health_calls_are_na_and_nothing_else_breaks(
    case, fake_nvml_lib, old_driver_lib, tmp_path
) -> None:
    state = tmp_path / "nvml"
    errors = NOT_SUPPORTED if case == "not-supported" else {}
    write_state(state, [FakeGpu(util=61, errors=dict(errors)), FakeGpu(util=7)])
    lib = fake_nvml_lib if case == "not-supported" else old_driver_lib
    sample = agent_once(agent_env(lib, state))
    g0, g1 = sample["gpus"]
    # The usual readings are untouched by the health calls' failures.
    assert (g0["util_percent"], g1["util_percent"]) == (61.0, 7.0)
    assert g0["error"] is None and sample["error"] is None
    assert all(v is None for v in g0["health"].values()), g0["health"]
    if case == "old-driver":  # FunctionNotFound for every call, on every GPU
        assert all(v is None for v in g1["health"].values()), g1["health"]
    else:  # only gpu0 was scripted "not supported": gpu1 still answers
        assert g1["health"]["ecc_mode"] is True and g1["health"]["pcie_width"] == 16
    line = parse_line(json.dumps(sample | {"type": "sample"}), time.time())
    assert line.problems == []
    found = judge_host(line.sample.gpus)
    if case == "old-driver":
        assert [f.level for f in found] == ["na"] and "n/a on 2 GPUs" in found[0].message
    else:
        assert [f.level for f in found] == ["ok"]
        assert gpu_level(line.sample.gpus[0], True) is None  # nothing read: no flag


class Stream:
    """A streaming agent; its sample lines parsed on a thread into a queue."""

    def __init__(self, env: dict[str, str], interval: float):
        self.proc = subprocess.Popen(
            agent_argv(sys.executable, interval),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg["type"] == "sample":
                self.lines.put(msg)

    def until(self, predicate, timeout: float = 15.0) -> list[dict]:
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            seen.append(msg)
            if predicate(msg):
                return seen
        raise AssertionError(f"not seen in {timeout} s; last: {seen[-1:]}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # EOF: the agent exits
        self.proc.wait(10)


def test_health_rides_on_some_samples_and_follows_changes(fake_nvml_lib, tmp_path) -> None:
    state = tmp_path / "nvml"
    write_state(state, [FakeGpu()])
    stream = Stream(agent_env(fake_nvml_lib, state, every_s="0.5"), interval=0.1)
    try:
        seen = stream.until(lambda m: m["seq"] >= 15)
        carrying = [m["seq"] for m in seen if "health" in m["gpus"][0]]
        # Every 0.5 s at 10 samples/s: the first sample, then about one in five.
        assert carrying[0] == 0 and 3 <= len(carrying) <= 6, carrying
        # XID events arrive (after registration), a thermal slowdown starts: the next health
        # sweep reports both.
        write_state(state, [FakeGpu(xid=(79, 2), clock_reasons=CLOCKS_HW_THERMAL)])
        seen = stream.until(
            lambda m: "health" in m["gpus"][0] and m["gpus"][0]["health"]["xid_count"] == 2
        )
        health = seen[-1]["gpus"][0]["health"]
        assert health["xid_last"] == 79 and health["clock_reasons"] == ["hw_thermal"]
        write_state(state, [FakeGpu(xid=(79, 2))])  # no new events: the count stays
        seen = stream.until(
            lambda m: "health" in m["gpus"][0] and m["gpus"][0]["health"]["clock_reasons"] == []
        )
        assert seen[-1]["gpus"][0]["health"]["xid_count"] == 2
    finally:
        stream.close()
    assert stream.proc.returncode == 0


# --- the boundary and the judge ---------------------------------------------------------------


def sample_with(health: object, util: float = 90.0, n: int = 1) -> str:
    gpus = [{"index": i, "util_percent": util, "health": health} for i in range(n)]
    return json.dumps({"type": "sample", "seq": 1, "t": 1_800_000_000.0, "gpus": gpus})


def test_bad_health_fields_become_na_and_host_problems() -> None:
    hostile = {
        "ecc_mode": "yes",  # not a bool
        "ecc_volatile_uncorrected": True,  # a bool is not a count
        "ecc_aggregate_uncorrected": 1 << 70,  # past u64
        "remap_pending": 1,  # not a bool
        "pcie_width": -4,
        "pcie_width_max": 16,
        "clock_reasons": ["hw_slowdown", f"{ESC}[31mred", 7],
        "xid_last": 2.5,
        "persistence": False,
        "future_field": {"ignored": True},  # a newer agent's field
    }
    line = parse_line(sample_with(hostile), 0.0)
    h = line.sample.gpus[0].health
    assert (h.ecc_mode, h.ecc_volatile_uncorrected, h.ecc_aggregate_uncorrected) == (None,) * 3
    assert (h.remap_pending, h.pcie_width, h.xid_last) == (None, None, None)
    assert h.pcie_width_max == 16 and h.persistence is False
    assert h.clock_reasons == ("hw_slowdown",)  # the known reason kept, the rest dropped
    paths = [p for p, _ in line.problems]
    assert "gpus[0].health.ecc_mode" in paths and "gpus[0].health.clock_reasons" in paths
    assert all(ESC not in msg for _, msg in line.problems)
    # Not an object at all: health empty (n/a), one problem, the GPU itself kept.
    line = parse_line(sample_with([1, 2]), 0.0)
    assert line.sample.gpus[0].util_percent == 90.0
    assert line.sample.gpus[0].health == GpuHealth(util_percent=90.0)
    assert [p for p, _ in line.problems] == ["gpus[0].health"]


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(HEALTH_KEYS)), JSON, max_size=len(HEALTH_KEYS)))
def test_any_health_object_parses_typed_and_judges(health: dict) -> None:
    """Whatever a host sends as health: never raises; each field None or its type; judged."""
    line = parse_line(sample_with(health, n=2), 0.0)
    for g in line.sample.gpus:
        h = g.health
        for key in HEALTH_KEYS - {"clock_reasons"}:
            value = getattr(h, key)
            assert value is None or type(value) in (bool, int), (key, value)
        assert h.clock_reasons is None or all(type(r) is str for r in h.clock_reasons)
    assert {f.level for f in judge_host(line.sample.gpus)} <= {"error", "warn", "ok", "na"}


def test_latest_health_carried_onto_samples_between_sweeps() -> None:
    ht = HostTelemetry("h", LinkStatus("h", HostState.UP))
    ht.record(parse_line(sample_with({"ecc_volatile_uncorrected": 3}), 1.0).sample)
    plain = json.dumps({"type": "sample", "seq": 2, "gpus": [{"index": 0, "util_percent": 5}]})
    ht.record(parse_line(plain, 2.0).sample)
    gpu = ht.latest.gpus[0]
    assert gpu.util_percent == 5 and gpu.health.ecc_volatile_uncorrected == 3
    assert gpu.health.t == 1_800_000_000.0  # when it was read, not when it was carried
    assert ht.to_json()["gpus"][0]["health"]["ecc_volatile_uncorrected"] == 3


def gpu(i: int = 0, util: float = 90.0, **readings: object) -> GpuSample:
    return GpuSample(i, util_percent=util, health=GpuHealth(util_percent=util, **readings))


def levels(*gpus: GpuSample) -> list[tuple[str, int | None]]:
    return [(f.level, f.gpu) for f in judge_host(gpus)]


def test_judge_errors_warnings_and_what_is_routine() -> None:
    healthy = dict(ecc_mode=True, ecc_volatile_uncorrected=0, remap_pending=False, persistence=True)
    assert levels(gpu(**healthy)) == [("ok", None)]
    # Errors: memory that cannot be trusted until a reset or a replacement.
    assert levels(gpu(ecc_volatile_uncorrected=1)) == [("error", 0)]
    assert levels(gpu(remap_failure=True)) == [("error", 0)]
    assert levels(gpu(remap_pending=True)) == [("error", 0)]
    assert levels(gpu(retired_pages_pending=True)) == [("error", 0)]
    # Throttling: HW slowdown / thermal / power brake warn; power capping under load is routine.
    for reason in ("hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"):
        assert levels(gpu(clock_reasons=(reason,))) == [("warn", 0)], reason
    assert levels(gpu(clock_reasons=("sw_power_cap", "idle", "sync_boost"))) == [("ok", None)]
    # PCIe: width always; generation only while busy (idle GPUs lower it legitimately).
    assert levels(gpu(pcie_width=8, pcie_width_max=16)) == [("warn", 0)]
    idle = gpu(util=0.0, pcie_gen=1, pcie_gen_max=5, pcie_width=16, pcie_width_max=16)
    assert levels(idle) == [("ok", None)]
    busy = gpu(util=BUSY_UTIL, pcie_gen=3, pcie_gen_max=5)
    assert levels(busy) == [("warn", 0)] and "gen3 of gen5" in judge_host([busy])[0].message
    # Persistence off matters on a multi-GPU node only.
    assert levels(gpu(persistence=False)) == [("ok", None)]
    assert levels(gpu(0, persistence=False), gpu(1, persistence=True)) == [("warn", 0)]
    # Worst first; a GPU that reports an error has no health judged.
    both = levels(gpu(0, clock_reasons=("hw_slowdown",)), gpu(1, ecc_volatile_uncorrected=2))
    assert both == [("error", 1), ("warn", 0)]
    lost = GpuSample(0, error="GPU is lost", health=GpuHealth(ecc_volatile_uncorrected=5))
    assert judge_host([lost]) == [] and gpu_level(lost, False) is None
    assert judge_host([GpuSample(0)]) == []  # never read (AMD, an old agent): nothing to judge


# --- end to end over namespace hosts ----------------------------------------------------------


@pytest.fixture(scope="module")
def hosts(ns_hosts, tmp_path_factory, fake_nvml_lib, old_driver_lib) -> Path:
    root = tmp_path_factory.mktemp("gpuhealth")
    states = {
        "node1": [FakeGpu(util=93, ecc_uncorrected=(2, 2)), FakeGpu(util=91)],
        "node2": [
            FakeGpu(util=88, clock_reasons=CLOCKS_HW_SLOWDOWN),
            FakeGpu(util=90, pcie_width=(8, 16)),
        ],
        "node3": [FakeGpu(util=40), FakeGpu(util=41)],
        "node4": [FakeGpu(util=50, errors=dict(NOT_SUPPORTED)) for _ in range(2)],
    }
    env = {}
    for name, gpus in states.items():
        write_state(root / f"{name}.nvml", gpus)
        lib = old_driver_lib if name == "node3" else fake_nvml_lib
        env[name] = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(root / f"{name}.nvml")}
    cluster = ns_hosts(4, root / "cluster", host_env=env)
    try:
        yield cluster.write_hosts_yaml(root / "hosts.yaml", python=sys.executable)
    finally:
        cluster.stop()


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], cwd=ROOT, timeout=timeout)


def test_gpus_json_and_text_carry_health(hosts) -> None:
    proc = cli("gpus", str(hosts), "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = {h["name"]: h for h in json.loads(proc.stdout)["hosts"]}
    n1, n2, n3, n4 = (doc[f"node{i}"] for i in range(1, 5))
    assert n1["gpus"][0]["health"]["ecc_volatile_uncorrected"] == 2
    assert [g["health"]["level"] for g in n1["gpus"]] == ["error", "ok"]
    assert n1["gpu_health"][0]["level"] == "error" and n1["gpu_health"][0]["gpu"] == 0
    assert "2 uncorrectable ECC errors" in n1["gpu_health"][0]["message"]
    assert [g["health"]["level"] for g in n2["gpus"]] == ["warn", "warn"]
    assert sorted(f["message"] for f in n2["gpu_health"]) == [
        "gpu0: clocks held back: HW slowdown",
        "gpu1: PCIe link x8 of x16",
    ]
    for host in (n3, n4):  # old driver / not supported: n/a, no flag, no crash
        assert all(
            set(g["health"]) - {"util_percent", "sample_time", "level"} for g in host["gpus"]
        )
        assert all(g["health"]["ecc_mode"] is None for g in host["gpus"])
        assert [g["health"]["level"] for g in host["gpus"]] == [None, None]
        assert [f["level"] for f in host["gpu_health"]] == ["na"]
        assert all(g["util_percent"] is not None for g in host["gpus"])
    text = cli("gpus", str(hosts), "--once")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    gpu0 = lines[lines.index(next(ln for ln in lines if ln.startswith("node1"))) + 1]
    assert gpu0.startswith("  gpu0") and gpu0.endswith("health ERROR")
    assert "  health error: gpu0: 2 uncorrectable ECC errors since the driver loaded" in (
        text.stdout
    )
    assert "health warn: gpu1: PCIe link x8 of x16" in text.stdout
    assert "health: health n/a on 2 GPUs" in text.stdout


def test_check_has_a_gpu_health_row_per_host(hosts) -> None:
    proc = cli("check", str(hosts), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # node1's ECC error fails
    rows = [c for c in json.loads(proc.stdout)["checks"] if c["check"] == "gpu-health"]
    by_host = {r["host"]: r for r in rows if r["host"]}
    assert by_host["node1"]["status"] == "fail"
    assert "gpu0: 2 uncorrectable ECC errors" in by_host["node1"]["finding"]
    assert "nvidia-smi -r -i 0" in by_host["node1"]["fix"]
    assert by_host["node2"]["status"] == "warn"
    assert "HW slowdown" in by_host["node2"]["finding"]
    assert "x8 of x16" in by_host["node2"]["finding"]
    # node3 and node4 say the same (n/a): folded into one ok row naming both.
    [na] = [r for r in rows if r["host"] is None]
    assert na["status"] == "ok" and "n/a on 2 GPUs" in na["finding"]
    assert "node3" in na["finding"] and "node4" in na["finding"]


async def wait_for(pilot, predicate, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.1)


async def test_cluster_screen_flags_gpus_and_lists_findings(hosts) -> None:
    app = VerlTuiApp(load_inventory(hosts), interval=0.5)
    async with app.run_test(size=(160, 44)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(
            pilot,
            lambda: (
                len(table.rows) == 12
                and all(ht.latest and ht.latest.gpus for ht in table.hosts.values())
            ),
        )

        def row_text(host: str, gpu: int | None = None) -> str:
            return table.render_line(table.rows.index(Row(host, gpu)) - table.scroll_offset.y).text

        assert row_text("node1", 0).startswith(" ✖ 0 ")
        assert row_text("node1", 1).startswith("   1 ")  # healthy: no flag
        assert row_text("node2", 0).startswith(" ▲ 0 ") and row_text("node2", 1).startswith(" ▲ 1")
        assert row_text("node3", 0).startswith("   0 ")  # n/a: no flag
        assert "✖ GPU health error" in row_text("node1")
        assert "▲ GPU health warn" in row_text("node2")
        table.focus()
        table.cursor = table.rows.index(Row("node1"))
        await pilot.pause(0.2)
        details = str(app.screen.query_one("#details").render())
        assert "GPU health error: gpu0: 2 uncorrectable ECC errors since the driver" in details
        table.cursor = table.rows.index(Row("node2", 1))
        await pilot.pause(0.2)
        details = str(app.screen.query_one("#details").render())
        assert "PCIe gen 5/5 x8/16" in details and "GPU health warn: gpu1: PCIe link x8" in details
        table.cursor = table.rows.index(Row("node4"))
        await pilot.pause(0.2)
        details = str(app.screen.query_one("#details").render())
        assert "GPU health: health n/a on 2 GPUs" in details
