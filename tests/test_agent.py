"""The GPU agent run exactly as production runs it (``python -u -c SOURCE --interval ...``),
against the real pynvml bindings loading a fake libnvidia-ml.so.1 (tests/fakenvml), or a fake
``nvidia-smi`` for the fallback path."""

from __future__ import annotations

import ast
import glob
import itertools
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import (
    MIB,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    default_uuid,
    write_state,
)

from tui.cluster.models import GPU_METRICS
from tui.cluster.telemetry import agent_argv
from tui.remote import BUNDLES, source

AGENT_FILE = Path(__file__).resolve().parents[1] / "tui" / "remote" / "gpu_agent.py"
INTERVAL = 0.2
# Every GPU's record: its own fields and the one table's numbers (tests/test_gpu_fields.py).
GPU_KEYS = {"index", "name", "uuid", "processes", "error", *(m.key for m in GPU_METRICS)}
HOST_KEYS = {"cpu_percent", "load1", "mem_used_bytes", "mem_total_bytes", "ncpu"}


# --- helpers ---------------------------------------------------------------------------------


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


class Agent:
    """A streaming agent subprocess; stdout JSON lines are parsed on a thread into a queue."""

    def __init__(self, env: dict[str, str], argv: list[str] | None = None):
        self.proc = subprocess.Popen(
            argv or agent_argv(sys.executable, INTERVAL),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def next(self, timeout: float = 5.0) -> dict:
        msg = self.lines.get(timeout=timeout)
        assert msg is not None, f"agent ended: {self.proc.wait()} {self.proc.stderr.read()!r}"
        return msg

    def wait_for(self, pred, timeout: float = 5.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.next(timeout=max(0.01, deadline - time.monotonic()))
            if msg["type"] == "sample" and pred(msg):
                return msg
        raise AssertionError("no matching sample in time")

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_agent():
    agents: list[Agent] = []

    def start(env: dict[str, str], argv: list[str] | None = None) -> Agent:
        agents.append(Agent(env, argv))
        return agents[-1]

    yield start
    for agent in agents:
        agent.close()


def run_once(env: dict[str, str], argv: list[str] | None = None) -> tuple[dict, dict]:
    proc = subprocess.run(
        argv or agent_argv(sys.executable, INTERVAL, once=True),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [m["type"] for m in lines] == ["hello", "sample"]
    check_sample_shape(lines[1])
    return lines[0], lines[1]


def check_sample_shape(sample: dict) -> None:
    assert set(sample) == {"type", "seq", "t", "source", "driver", "error", "host", "gpus"}
    assert set(sample["host"]) == HOST_KEYS
    host = sample["host"]
    assert 0 < host["mem_used_bytes"] <= host["mem_total_bytes"]
    assert host["ncpu"] >= 1 and host["load1"] >= 0
    assert host["cpu_percent"] is None or 0.0 <= host["cpu_percent"] <= 100.0
    for gpu in sample["gpus"]:
        # "health" rides on one sample every few seconds (tests/test_gpu_health.py checks it)
        assert set(gpu) - {"health"} == GPU_KEYS


# --- the file itself ---------------------------------------------------------------------------


def kept_lines(path: Path, part: bool) -> list[str]:
    """The lines of a bundle file that ship: all but its imports of sibling parts (and a
    part's own `from __future__`, which the program's first line already has)."""
    drop = ("from tui.remote.", "from __future__") if part else ("from tui.remote.",)
    return [line for line in path.read_text().splitlines() if not line.startswith(drop)]


def test_agent_is_self_contained_python38_source() -> None:
    """What ships is the agent module joined with its parts (tui/remote BUNDLES): each file's
    lines in their order, nothing added but one marker line per part, no tui import left."""
    text = source("gpu_agent")
    files = [(AGENT_FILE, False)] + [
        (AGENT_FILE.with_name(f"{p}.py"), True) for p in BUNDLES["gpu_agent"]
    ]
    assert text.startswith(AGENT_FILE.read_text().split("from tui.remote.")[0])
    shipped = text.splitlines()
    for path, part in files:
        rest = iter(shipped)
        missing = [line for line in kept_lines(path, part) if line not in rest]
        assert not missing, (path.name, missing[:3])
    markers = [line for line in shipped if line.startswith("# ---- ")]
    assert len(markers) == len(BUNDLES["gpu_agent"])
    assert sum(1 for line in shipped if line.strip()) == len(markers) + sum(
        1 for path, part in files for line in kept_lines(path, part) if line.strip()
    )
    assert shipped[-2:] == ['if __name__ == "__main__":', "    sys.exit(main())"]
    tree = ast.parse(text, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    # pynvml for NVIDIA, amdsmi for AMD: both optional, imported only where present.
    assert imported - set(sys.stdlib_module_names) == {"pynvml", "amdsmi"}


def test_agent_argv_shape() -> None:
    argv = agent_argv("/usr/bin/python3", 1, once=True)
    assert argv[:3] == ["/usr/bin/python3", "-u", "-c"]
    assert argv[3] == source("gpu_agent")
    assert argv[4:] == ["--interval", "1.0", "--once"]


# --- NVML path ---------------------------------------------------------------------------------


def test_gpus_reported_with_units_converted(env, state) -> None:
    gpus = [
        FakeGpu(
            util=37,
            mem_util=12,
            memory_used=1234 * MIB,
            temperature=41,
            power_mw=71_234,
            sm_clock_mhz=1410,
        ),
        FakeGpu(
            name="NVIDIA H200",
            util=100,
            mem_util=88,
            memory_used=70_000 * MIB,
            memory_total=143_771 * MIB,
            temperature=67,
            power_mw=654_321,
            power_limit_mw=700_000,
            uuid="GPU-7d2c64d3-bd5a-1b21-9c01-3f6c1a2b3c4d",
        ),
        FakeGpu(util=0, temperature=29, power_mw=68_500, power_limit_mw=500_000),
    ]
    write_state(state, gpus, driver="570.86.15", nvml_version="12.570.86.15")
    hello, sample = run_once(env)
    assert hello == {
        "type": "hello",
        "agent": 1,
        "hostname": hello["hostname"],
        "pid": hello["pid"],
        "python": hello["python"],
        "source": "nvml",
        "driver": "570.86.15",
        "nvml_version": "12.570.86.15",
        "error": None,
        "ncpu": sample["host"]["ncpu"],
    }
    assert hello["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert sample["source"] == "nvml" and sample["error"] is None and sample["seq"] == 0
    assert abs(sample["t"] - time.time()) < 30
    g0, g1, g2 = sample["gpus"]
    # The first sample carries the health readings (tests/test_gpu_health.py checks them).
    assert all(type(g.pop("health")) is dict for g in (g0, g1, g2))
    assert g0 == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": default_uuid(0),
        "util_percent": 37.0,
        "mem_util_percent": 12.0,
        "memory_used_bytes": 1234 * MIB,
        "memory_total_bytes": 81559 * MIB,
        "temperature_c": 41.0,
        "power_w": 71.234,
        "power_limit_w": 700.0,
        "processes": [],
        "error": None,
        "util_window_s": None,
        "sm_clock_mhz": 1410,
    }
    assert g1["name"] == "NVIDIA H200" and g1["uuid"] == gpus[1].uuid
    assert (g1["util_percent"], g1["mem_util_percent"]) == (100.0, 88.0)
    assert (g1["memory_used_bytes"], g1["memory_total_bytes"]) == (70_000 * MIB, 143_771 * MIB)
    assert (g1["temperature_c"], g1["power_w"], g1["power_limit_w"]) == (67.0, 654.321, 700.0)
    assert (g2["index"], g2["util_percent"], g2["temperature_c"]) == (2, 0.0, 29.0)
    assert (g2["power_w"], g2["power_limit_w"]) == (68.5, 500.0)
    assert (g1["sm_clock_mhz"], g2["sm_clock_mhz"]) == (1980, 1980)  # FakeGpu's default


def test_memory_used_excludes_driver_reserve(env, state) -> None:
    # Measured on an H200: NVML v1 "used" 615 MiB idle (reserve included), nvidia-smi 1 MiB.
    write_state(
        state,
        [
            FakeGpu(memory_used=1 * MIB, memory_reserved=614 * MIB),
            FakeGpu(
                memory_used=1 * MIB,
                memory_reserved=614 * MIB,
                errors={"mem_v2": NVML_ERROR_FUNCTION_NOT_FOUND},
            ),  # a pre-510 driver: v1 only
        ],
    )
    _, sample = run_once(env)
    g0, g1 = sample["gpus"]
    assert (g0["memory_used_bytes"], g0["memory_total_bytes"]) == (1 * MIB, 81559 * MIB)
    assert (g1["memory_used_bytes"], g1["memory_total_bytes"]) == (615 * MIB, 81559 * MIB)


def test_full_gpu(env, state) -> None:
    write_state(state, [FakeGpu(util=99, mem_util=97, memory_used=81559 * MIB)])
    _, sample = run_once(env)
    gpu = sample["gpus"][0]
    assert gpu["memory_used_bytes"] == gpu["memory_total_bytes"] == 81559 * MIB
    assert gpu["util_percent"] == 99.0 and gpu["error"] is None


def test_processes_with_names_from_proc(env, state) -> None:
    me = os.getpid()
    my_comm = Path(f"/proc/{me}/comm").read_text().strip()
    absent = 4_242_424  # above the kernel's pid_max limit: never a live process
    write_state(
        state,
        [
            FakeGpu(processes=[(me, 30_000 * MIB), (absent, 512 * MIB)]),
            FakeGpu(processes=[(me, None)]),  # NVML_VALUE_NOT_AVAILABLE → null memory
            FakeGpu(),
        ],
    )
    _, sample = run_once(env)
    p0, p1, p2 = (g["processes"] for g in sample["gpus"])
    assert p0 == [
        {"pid": me, "name": my_comm, "memory_bytes": 30_000 * MIB},
        {"pid": absent, "name": None, "memory_bytes": 512 * MIB},
    ]
    assert p1 == [{"pid": me, "name": my_comm, "memory_bytes": None}]
    assert p2 == []


def test_unsupported_fields_become_null_alone(env, state) -> None:
    write_state(
        state,
        [
            FakeGpu(
                util=10,
                errors={"power": NVML_ERROR_NOT_SUPPORTED, "temp": NVML_ERROR_NOT_SUPPORTED},
            ),
            # A driver without ..._v3: pynvml raises NVMLLibraryMismatchError, not an NVMLError.
            FakeGpu(util=20, errors={"procs": NVML_ERROR_FUNCTION_NOT_FOUND}),
            FakeGpu(
                util=30,
                errors={"util": NVML_ERROR_NOT_SUPPORTED, "power_limit": NVML_ERROR_NOT_SUPPORTED},
            ),
            # Only ..._v3 missing: the agent falls back to ..._v2 and still lists processes.
            FakeGpu(
                util=40,
                processes=[(4_242_424, 7 * MIB)],
                errors={"procs_v3": NVML_ERROR_FUNCTION_NOT_FOUND},
            ),
        ],
    )
    _, sample = run_once(env)
    g0, g1, g2, g3 = sample["gpus"]
    assert (g0["power_w"], g0["temperature_c"]) == (None, None)
    assert (g0["util_percent"], g0["power_limit_w"], g0["memory_total_bytes"]) == (
        10.0,
        700.0,
        81559 * MIB,
    )
    assert g1["processes"] is None
    assert (g1["util_percent"], g1["power_w"], g1["temperature_c"]) == (20.0, 69.0, 32.0)
    assert (g2["util_percent"], g2["mem_util_percent"], g2["power_limit_w"]) == (None,) * 3
    assert (g2["power_w"], g2["name"], g2["processes"]) == (69.0, "NVIDIA H100 80GB HBM3", [])
    assert g3["processes"] == [{"pid": 4_242_424, "name": None, "memory_bytes": 7 * MIB}]
    assert all(g["error"] is None for g in sample["gpus"])


def test_lost_gpu_reports_error_others_fine(env, state) -> None:
    write_state(
        state,
        [
            FakeGpu(util=5),
            FakeGpu(util=6, errors={"all": NVML_ERROR_GPU_IS_LOST}),  # handle ok, every call fails
            FakeGpu(util=7, errors={"handle": NVML_ERROR_GPU_IS_LOST}),  # no handle at all
            FakeGpu(util=8),
        ],
    )
    _, sample = run_once(env)
    gpus = sample["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    for lost in (gpus[1], gpus[2]):
        assert lost["error"] == "GPU is lost"
        assert all(lost[k] is None for k in GPU_KEYS - {"index", "error"})
    assert [g["util_percent"] for g in (gpus[0], gpus[3])] == [5.0, 8.0]
    assert gpus[0]["error"] is None and gpus[3]["error"] is None
    assert sample["error"] is None and sample["source"] == "nvml"


def test_gpu_becomes_busy_while_running(env, state, start_agent) -> None:
    write_state(state, [FakeGpu(), FakeGpu()])
    agent = start_agent(env)
    assert agent.next()["type"] == "hello"
    first = agent.next()
    assert [g["util_percent"] for g in first["gpus"]] == [0.0, 0.0]
    write_state(
        state,
        [
            FakeGpu(),
            FakeGpu(
                util=96, mem_util=41, memory_used=60_000 * MIB, power_mw=512_000, temperature=63
            ),
        ],
    )
    busy = agent.wait_for(lambda s: s["gpus"][1]["util_percent"] == 96.0)
    assert busy["seq"] > first["seq"]
    g1 = busy["gpus"][1]
    assert (g1["memory_used_bytes"], g1["power_w"], g1["temperature_c"]) == (
        60_000 * MIB,
        512.0,
        63.0,
    )
    assert busy["gpus"][0]["util_percent"] == 0.0


def test_init_error_streams_host_only_then_recovers(env, state, start_agent) -> None:
    write_state(state, [FakeGpu(util=55)], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    agent = start_agent(env)
    hello = agent.next()
    assert (hello["source"], hello["driver"]) == ("none", None)
    assert hello["error"] == "NVML init failed: Driver Not Loaded"
    for _ in range(2):
        sample = agent.next()
        check_sample_shape(sample)
        assert (sample["source"], sample["gpus"]) == ("none", [])
        assert sample["error"] == "NVML init failed: Driver Not Loaded"
    write_state(state, [FakeGpu(util=55)])  # the driver comes back
    back = agent.wait_for(lambda s: s["source"] == "nvml", timeout=5)
    assert back["error"] is None
    assert [g["util_percent"] for g in back["gpus"]] == [55.0]


def test_driver_lost_while_running_then_back(env, state, start_agent) -> None:
    write_state(state, [FakeGpu(util=11)])
    agent = start_agent(env)
    assert agent.next()["source"] == "nvml"
    assert agent.next()["gpus"][0]["util_percent"] == 11.0
    write_state(state, [FakeGpu(util=11)], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    gone = agent.wait_for(lambda s: s["source"] == "none")
    assert gone["gpus"] == [] and "Driver Not Loaded" in gone["error"]
    write_state(state, [FakeGpu(util=12)])
    back = agent.wait_for(lambda s: s["source"] == "nvml")
    assert back["error"] is None and back["gpus"][0]["util_percent"] == 12.0


def test_missing_state_file_is_driver_not_loaded(env) -> None:
    hello, sample = run_once(env)
    assert hello["error"] == sample["error"] == "NVML init failed: Driver Not Loaded"
    assert (sample["source"], sample["gpus"]) == ("none", [])


def test_no_nvml_library(env, tmp_path) -> None:
    try:  # this machine has no NVIDIA driver; on one with a driver the real library loads
        import ctypes

        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("a real libnvidia-ml.so.1 is installed here")
    except OSError:
        pass
    empty = tmp_path / "nolib"
    empty.mkdir()
    hello, sample = run_once(dict(env, LD_LIBRARY_PATH=str(empty)))
    error = "NVML library not found (no NVIDIA driver on this host)"
    assert (hello["source"], hello["error"]) == ("none", error)
    assert (sample["source"], sample["error"], sample["gpus"]) == ("none", error, [])
    assert sample["host"]["mem_total_bytes"] > 0


# --- process lifecycle -------------------------------------------------------------------------


def test_exits_when_stdin_closes(env, state, start_agent) -> None:
    write_state(state, [FakeGpu()])
    agent = start_agent(env)
    agent.next(), agent.next()
    agent.proc.stdin.close()
    t0 = time.monotonic()
    assert agent.proc.wait(5) == 0
    assert time.monotonic() - t0 < 2.0
    assert agent.proc.stderr.read() == b""


def test_sigterm_exits_zero(env, state, start_agent) -> None:
    write_state(state, [FakeGpu()])
    agent = start_agent(env)
    agent.next(), agent.next()
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(5) == 0


def test_broken_pipe_exits_quietly(env, state) -> None:
    write_state(state, [FakeGpu()])
    proc = subprocess.Popen(
        agent_argv(sys.executable, INTERVAL),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert json.loads(proc.stdout.readline())["type"] == "hello"
        proc.stdout.close()  # the reader goes away: the agent's next write gets EPIPE
        assert proc.wait(5) == 0
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_once_emits_hello_and_one_sample(env, state) -> None:
    write_state(state, [FakeGpu(util=3)])
    hello, sample = run_once(env)  # asserts exit 0 and exactly two lines
    assert hello["type"] == "hello" and sample["gpus"][0]["util_percent"] == 3.0


def test_runs_as_a_script_file(env, state, tmp_path) -> None:
    """The shipped text saved as a file (copied to a host by hand) runs the same."""
    script = tmp_path / "gpu_agent.py"
    script.write_text(source("gpu_agent"))
    write_state(state, [FakeGpu(util=4)])
    _, sample = run_once(env, [sys.executable, str(script), "--once"])
    assert sample["gpus"][0]["util_percent"] == 4.0


def test_python38_with_real_pynvml(env, state, tmp_path) -> None:
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    candidates += [shutil.which("python3.8") or ""]
    python38 = next(
        (
            c
            for c in candidates
            if c and subprocess.run([c, "-c", "pass"], capture_output=True).returncode == 0
        ),
        None,
    )
    if python38 is None:
        pytest.skip("no working python3.8 here")
    import pynvml

    shutil.copy(pynvml.__file__, tmp_path / "pynvml.py")
    write_state(state, [FakeGpu(util=38, power_mw=123_456)])
    hello, sample = run_once(
        dict(env, PYTHONPATH=str(tmp_path)), agent_argv(python38, INTERVAL, once=True)
    )
    assert hello["python"].startswith("3.8.") and sample["source"] == "nvml"
    assert (sample["gpus"][0]["util_percent"], sample["gpus"][0]["power_w"]) == (38.0, 123.456)


def test_fixed_schedule_without_drift(env, state, start_agent) -> None:
    write_state(state, [FakeGpu()])
    agent = start_agent(env)
    agent.next()
    samples = [agent.next() for _ in range(11)]  # ~2 s at 0.2 s
    assert [s["seq"] for s in samples] == list(range(11))
    ts = [s["t"] for s in samples]
    deltas = sorted(b - a for a, b in itertools.pairwise(ts))
    assert abs(deltas[len(deltas) // 2] - INTERVAL) < 0.03
    # Every sample sits on the grid start + k·interval: lateness does not accumulate.
    for t in ts:
        slots = (t - ts[0]) / INTERVAL
        assert abs(slots - round(slots)) < 0.25, (t - ts[0], ts)
    assert round((ts[-1] - ts[0]) / INTERVAL) >= 10


def test_overrun_skips_to_the_next_slot(env, state, start_agent) -> None:
    write_state(state, [FakeGpu()], sweep_delay_ms=300)  # each sweep takes 1.5 intervals
    agent = start_agent(env)
    agent.next()
    samples = [agent.next() for _ in range(5)]
    assert [s["seq"] for s in samples] == list(range(5))  # seq counts samples, not slots
    ts = [s["t"] for s in samples]
    for a, b in itertools.pairwise(ts):
        assert abs((b - a) - 2 * INTERVAL) < 0.05, ts  # slot 1 was missed: the next is slot 2


def test_wedged_driver_still_exits_after_stdin_closes(env, state, start_agent) -> None:
    write_state(state, [FakeGpu()], sweep_delay_ms=60_000)  # the first sweep never ends
    agent = start_agent(env)
    assert agent.next()["type"] == "hello"
    time.sleep(0.5)  # let the agent enter the first sweep's 60 s call
    agent.proc.stdin.close()
    t0 = time.monotonic()
    assert agent.proc.wait(15) == 0
    assert 4.0 < time.monotonic() - t0 < 8.0  # the 5 s watchdog ended it, not the call


# --- nvidia-smi fallback -----------------------------------------------------------------------

FAKE_SMI = """#!/bin/sh
echo "$@" > '{args}'
echo $$ > '{pid}'
n=0
while :; do
  echo "0, NVIDIA H100 80GB HBM3, GPU-aaaa-1111, $n, 12, 40960, 81559, 45, 312.45, 700.00"
  echo "1, NVIDIA H100 80GB HBM3, GPU-bbbb-2222, [N/A], [Not Supported], 0, 81559, 31, [N/A], N/A"
  case "$*" in *-lms*) ;; *) exit 0 ;; esac
  n=$((n + 1))
  sleep 0.2
done
"""


@pytest.fixture
def no_pynvml_env(tmp_path: Path) -> dict[str, str]:
    """Environment where ``import pynvml`` fails for the agent (a shadowing module)."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text("raise ImportError('simulated: pynvml not installed')\n")
    return dict(os.environ, PYTHONPATH=str(shadow))


def test_nvidia_smi_fallback(no_pynvml_env, tmp_path, start_agent) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(args=tmp_path / "args", pid=tmp_path / "pid"))
    smi.chmod(0o755)
    env = dict(no_pynvml_env, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    agent = start_agent(env)
    hello = agent.next()
    assert (hello["source"], hello["error"], hello["driver"]) == ("nvidia-smi", None, None)
    samples = [agent.next() for _ in range(5)]
    args = (tmp_path / "args").read_text().split()
    assert args == [
        "--query-gpu=index,name,uuid,utilization.gpu,utilization.memory,"
        "memory.used,memory.total,temperature.gpu,power.draw,power.limit",
        "--format=csv,noheader,nounits",
        "-lms",
        "200",
    ]
    for sample in samples:  # rows are grouped per sweep: always both GPUs, in order
        check_sample_shape(sample)
        assert (sample["source"], sample["error"]) == ("nvidia-smi", None)
        assert [g["index"] for g in sample["gpus"]] == [0, 1]
    g0, g1 = samples[-1]["gpus"]
    assert g0 == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-aaaa-1111",
        "util_percent": g0["util_percent"],
        "mem_util_percent": 12.0,
        "memory_used_bytes": 40960 * MIB,
        "memory_total_bytes": 81559 * MIB,
        "temperature_c": 45.0,
        "power_w": 312.45,
        "power_limit_w": 700.0,
        "processes": None,
        "error": None,
        "util_window_s": None,
        "sm_clock_mhz": None,  # nvidia-smi's query does not ask for it
    }
    assert g1 == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-bbbb-2222",
        "util_percent": None,
        "mem_util_percent": None,
        "memory_used_bytes": 0,
        "memory_total_bytes": 81559 * MIB,
        "temperature_c": 31.0,
        "power_w": None,
        "power_limit_w": None,
        "processes": None,
        "error": None,
        "util_window_s": None,
        "sm_clock_mhz": None,  # nvidia-smi's query does not ask for it
    }
    utils = [s["gpus"][0]["util_percent"] for s in samples]
    assert utils == sorted(utils) and utils[-1] > utils[0]  # later sweeps reach the agent
    # The agent takes its nvidia-smi child down with it.
    smi_pid = int((tmp_path / "pid").read_text())
    assert agent.close() == 0
    with pytest.raises(ProcessLookupError):
        os.kill(smi_pid, 0)


def test_nvidia_smi_fallback_once(no_pynvml_env, tmp_path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(args=tmp_path / "args", pid=tmp_path / "pid"))
    smi.chmod(0o755)
    env = dict(no_pynvml_env, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    _, sample = run_once(env)
    assert "-lms" not in (tmp_path / "args").read_text()
    assert sample["source"] == "nvidia-smi"
    assert [g["util_percent"] for g in sample["gpus"]] == [0.0, None]


def test_no_pynvml_and_no_nvidia_smi(no_pynvml_env, tmp_path) -> None:
    empty = tmp_path / "emptybin"
    empty.mkdir()
    hello, sample = run_once(dict(no_pynvml_env, PATH=str(empty)))
    error = "pynvml is not installed and nvidia-smi was not found"
    assert (hello["source"], hello["error"]) == ("none", error)
    assert (sample["source"], sample["error"], sample["gpus"]) == ("none", error, [])
