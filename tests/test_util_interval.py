"""GPU utilization over the whole interval: the agent (run as production runs it, against the
real pynvml loading the fake libnvidia-ml.so.1) averages NVML's utilization samples since the
previous sample (nvmlDeviceGetSamples), falls back to the instantaneous value, and survives
bad sample buffers. The real-GPU check is scripts/util_interval_check.py
(docs/util_interval_h100.txt)."""

from __future__ import annotations

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
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    write_state,
)

from tui.cluster.agent_schema import gpu_from_json, parse_message
from tui.cluster.telemetry import agent_argv

# 100 ms busy / 100 ms idle as NVML reports it: a sample every 20 ms, 5 at 100 %, 5 at 2 %
# (a mean of 51 %); the instantaneous value is the newest sample, 100 or 2.
DUTY_51 = {"samples_every_us": 20_000, "samples_cycle": [100] * 5 + [2] * 5}
BASE = 1_700_000_000_000_000  # an NVML timestamp (CPU µs) for explicit buffers


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "nvml.state"


@pytest.fixture
def env(fake_nvml_lib: Path, state: Path) -> dict[str, str]:
    return dict(
        os.environ,
        LD_LIBRARY_PATH=str(fake_nvml_lib),
        FAKE_NVML_STATE=str(state),
        VERL_TUI_AGENT_NVML_RETRY_S="0.5",
    )


def once(env: dict[str, str], interval: float = 0.2) -> list[dict]:
    proc = subprocess.run(
        agent_argv(sys.executable, interval, once=True),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    sample = json.loads(proc.stdout.splitlines()[-1])
    assert sample["type"] == "sample"
    return sample["gpus"]


class Stream:
    """A streaming agent; its sample lines arrive on a queue."""

    def __init__(self, env: dict[str, str], interval: float):
        self.proc = subprocess.Popen(
            agent_argv(sys.executable, interval),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def sample(self, timeout: float = 5.0) -> dict:
        while True:
            msg = self.lines.get(timeout=timeout)
            assert msg is not None, f"agent ended: {self.proc.wait()} {self.proc.stderr.read()!r}"
            assert msg["type"] != "error", msg
            if msg["type"] == "sample":
                return msg

    def close(self) -> int:
        self.proc.stdin.close()
        try:
            return self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def stream():
    agents: list[Stream] = []

    def start(env: dict[str, str], interval: float) -> Stream:
        agents.append(Stream(env, interval))
        return agents[-1]

    yield start
    for agent in agents:
        assert agent.close() == 0


def test_duty_cycle_reads_its_mean_every_interval(env, state, stream) -> None:
    write_state(
        state,
        [
            FakeGpu(**DUTY_51),
            FakeGpu(**DUTY_51, errors={"samples": NVML_ERROR_NOT_SUPPORTED}),  # instants only
        ],
    )
    agent = stream(env, 0.4)
    readings = [agent.sample()["gpus"] for _ in range(6)]
    for g0, g1 in readings:
        assert abs(g0["util_percent"] - 51.0) <= 5.0, readings
        assert abs(g0["util_window_s"] - 0.4) <= 0.05, readings
        assert g1["util_window_s"] is None and g1["util_percent"] in (2.0, 100.0)
    # The mean is exact when the window holds whole cycles (20 samples): the usual case.
    assert sum(g0["util_percent"] == 51.0 for g0, _ in readings) >= 3, readings


def test_once_averages_the_last_interval(env, state) -> None:
    write_state(state, [FakeGpu(**DUTY_51)])
    for interval in (0.2, 1.0):
        (gpu,) = once(env, interval)
        assert abs(gpu["util_percent"] - 51.0) <= 5.0, gpu
        assert abs(gpu["util_window_s"] - interval) <= 0.03, gpu


@pytest.mark.parametrize("code", [NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND])
def test_unsupported_samples_fall_back_to_the_instant(env, state, code) -> None:
    write_state(state, [FakeGpu(util=37, mem_util=9, errors={"samples": code})])
    (gpu,) = once(env)
    assert (gpu["util_percent"], gpu["mem_util_percent"], gpu["util_window_s"]) == (37.0, 9.0, None)


def test_no_samples_fall_back_to_the_instant(env, state) -> None:
    write_state(state, [FakeGpu(util=64)])  # an empty buffer: NVML_ERROR_NOT_FOUND
    (gpu,) = once(env)
    assert (gpu["util_percent"], gpu["util_window_s"], gpu["error"]) == (64.0, None, None)


def test_lost_gpu_in_the_samples_call_is_a_gpu_error(env, state) -> None:
    write_state(
        state, [FakeGpu(util=5, errors={"samples": NVML_ERROR_GPU_IS_LOST}), FakeGpu(util=6)]
    )
    lost, fine = once(env)
    assert lost["error"] == "GPU is lost" and lost["util_percent"] is None
    assert (fine["util_percent"], fine["error"]) == (6.0, None)


def test_garbage_and_disorder_in_the_buffer(env, state) -> None:
    write_state(
        state,
        [
            # Out of order, a duplicate timestamp with a garbage value, a value over 100, a zero
            # timestamp: the valid ones are 20 @100 ms, 60 @200 ms, 40 @300 ms.
            FakeGpu(
                util=77,
                samples=[
                    (BASE + 300_000, 40),
                    (BASE + 100_000, 20),
                    (BASE + 200_000, 4_294_967_295),
                    (BASE + 200_000, 60),
                    (BASE + 400_000, 101),
                    (0, 50),
                ],
            ),
            FakeGpu(
                util=78, samples=[(BASE + 100_000, 30), (BASE + 200_000, 50)], samples_type=0
            ),  # doubles
            FakeGpu(util=79, samples=[(BASE + 100_000, 30)], samples_type=99),  # unknown type
            FakeGpu(util=80, samples=[(BASE + 100_000, 4_294_967_295)]),  # nothing valid
        ],
    )
    g0, g1, g2, g3 = once(env)
    # The last 0.2 s of valid samples: 60 and 40, each holding 100 ms.
    assert (g0["util_percent"], g0["util_window_s"]) == (50.0, 0.2)
    # 30 and 50; with no sample before them, the first holds one usual spacing too.
    assert (g1["util_percent"], g1["util_window_s"]) == (40.0, 0.2)
    assert (g2["util_percent"], g2["util_window_s"]) == (79.0, None)
    assert (g3["util_percent"], g3["util_window_s"]) == (80.0, None)
    assert all(g["error"] is None for g in (g0, g1, g2, g3))


def test_uneven_spacing_is_weighted_by_time(env, state) -> None:
    # Busy for 200 ms (two samples 100 ms apart), then one idle sample 800 ms later: the GPU
    # was busy 20 % of that second, not the 67 % an equal-weight mean of the samples says.
    write_state(
        state,
        [
            FakeGpu(
                samples=[
                    (BASE, 0),
                    (BASE + 100_000, 100),
                    (BASE + 200_000, 100),
                    (BASE + 1_000_000, 0),
                ]
            )
        ],
    )
    (gpu,) = once(env, 1.0)
    assert (gpu["util_percent"], gpu["util_window_s"]) == (20.0, 1.0)


def test_stale_buffer_then_clock_stepping_back(env, state, stream) -> None:
    # A buffer that stops growing is read once; later samples fall back to the instant rather
    # than repeat old news. Then the driver's clock steps back (every new timestamp below the
    # last one seen): after a few empty sweeps the agent reads the whole buffer again.
    write_state(state, [FakeGpu(util=11, samples=[(BASE + 100_000, 30), (BASE + 200_000, 50)])])
    agent = stream(env, 0.2)
    first = agent.sample()["gpus"][0]
    assert (first["util_percent"], first["util_window_s"]) == (40.0, 0.2)
    for _ in range(5):  # includes a resync of the same buffer: still nothing new
        gpu = agent.sample()["gpus"][0]
        assert (gpu["util_percent"], gpu["util_window_s"]) == (11.0, None)
    write_state(state, [FakeGpu(util=11, samples=[(1_000_000, 90), (1_100_000, 70)])])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        gpu = agent.sample()["gpus"][0]
        if gpu["util_window_s"] is not None:
            break
        assert gpu["util_percent"] == 11.0
    assert (gpu["util_percent"], gpu["util_window_s"]) == (80.0, 0.2)


def test_schema_carries_util_window() -> None:
    gpu = gpu_from_json({"index": 0, "util_percent": 51.0, "util_window_s": 1.0})
    assert gpu is not None and (gpu.util_percent, gpu.util_window_s) == (51.0, 1.0)
    assert gpu.to_json()["util_window_s"] == 1.0  # what `gpus --json` prints
    assert gpu_from_json({"index": 0, "util_percent": 3.0}).util_window_s is None
    for bad in (-1.0, "1.0", True, float("nan"), 1e9, [1]):
        line = parse_message(
            {"type": "sample", "gpus": [{"index": 0, "util_percent": 51.0, "util_window_s": bad}]},
            0.0,
        )
        assert line.sample.gpus[0].util_window_s is None
        assert line.sample.gpus[0].util_percent == 51.0
        assert [path for path, _ in line.problems] == ["gpus[0].util_window_s"]
