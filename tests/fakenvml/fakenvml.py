"""Build and drive the fake ``libnvidia-ml.so.1`` (fake_nvml.c) that the real pynvml loads.

A process started with ``LD_LIBRARY_PATH=<build_fake_nvml(dir)>`` and
``FAKE_NVML_STATE=<file>`` sees the GPUs that ``write_state(file, [...])`` describes; the
library re-reads the file on every ``nvmlDeviceGetCount`` (once per agent sweep), so a test
can change values while the agent runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBNAME = "libnvidia-ml.so.1"
MIB = 1024 * 1024

# NVML return codes the tests script (nvml.h values).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15

# Functions that `FakeGpu.errors` can make fail (see the C file's header).
ERROR_FUNCS = (
    "handle",
    "name",
    "uuid",
    "util",
    "mem",
    "mem_v2",
    "temp",
    "power",
    "power_limit",
    "samples",
    "procs",
    "procs_v3",
    "ecc_mode",
    "ecc_count",
    "retired",
    "remap",
    "clocks",
    "pcie",
    "persistence",
    "events",
    "clock_info",
    "all",
)
# The health calls' names in `errors` (every one of them: "not supported everywhere").
HEALTH_FUNCS = (
    "ecc_mode",
    "ecc_count",
    "retired",
    "remap",
    "clocks",
    "pcie",
    "persistence",
    "events",
)
# nvmlClocksEventReason* bits (nvml.h) for `FakeGpu.clock_reasons`.
CLOCKS_IDLE = 0x1
CLOCKS_SW_POWER_CAP = 0x4
CLOCKS_HW_SLOWDOWN = 0x8
CLOCKS_SW_THERMAL = 0x20
CLOCKS_HW_THERMAL = 0x40
CLOCKS_HW_POWER_BRAKE = 0x80


def build_fake_nvml(outdir: Path, health: bool = True) -> Path:
    """Compile fake_nvml.c into ``outdir/libnvidia-ml.so.1``; return ``outdir``.

    ``health=False`` leaves out the health and event calls (a driver older than them: pynvml
    raises NVMLError_FunctionNotFound for each)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("cannot build the fake NVML: no gcc/cc on PATH")
    cmd = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(outdir / LIBNAME), str(SOURCE)]
    if not health:
        cmd.insert(1, "-DFAKE_NVML_NO_HEALTH")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"building the fake NVML failed ({' '.join(cmd)}):\n{proc.stderr.strip()}"
        )
    return outdir


@dataclass
class FakeGpu:
    """One scripted GPU. Units are NVML's: bytes, milliwatts, °C, percent."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None  # None: a stable one derived from the index
    util: int = 0
    mem_util: int = 0
    memory_used: int = 4 * MIB  # allocated (nvidia-smi's memory.used, NVML v2 "used")
    memory_reserved: int = 0  # the driver's reserve; NVML v1's "used" adds it in
    memory_total: int = 81559 * MIB
    temperature: int = 32
    power_mw: int = 69_000
    power_limit_mw: int = 700_000
    sm_clock_mhz: int = 1980  # 0: nvmlDeviceGetClockInfo(NVML_CLOCK_SM) is NOT_SUPPORTED
    # (pid, used bytes or None for NVML_VALUE_NOT_AVAILABLE)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    # function name (ERROR_FUNCS) -> NVML return code, e.g. {"power": 3}, {"all": 15}
    errors: dict[str, int] = field(default_factory=dict)
    # nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES). A generated stream: one sample every
    # `samples_every_us` µs of the real-time clock, values cycling through `samples_cycle`, the
    # newest `samples_buffer` kept; while it runs, the instantaneous util is the newest sample.
    samples_every_us: int = 0
    samples_cycle: list[int] = field(default_factory=list)
    samples_buffer: int = 120
    # Or explicit (timestamp µs, raw value) samples, served in this order (garbage allowed).
    samples: list[tuple[int, int]] = field(default_factory=list)
    samples_type: int = 1  # nvmlValueType_t reported: 0 double, 1 unsigned int, 3 u64, ...
    # Health (defaults: a healthy H100 in a PCIe 5 x16 slot; retired pages Not Supported).
    ecc_mode: bool = True
    ecc_uncorrected: tuple[int, int] = (0, 0)  # (volatile, aggregate)
    ecc_corrected: tuple[int, int] = (0, 0)
    retired_pending: bool | None = None  # None: NOT_SUPPORTED, as on Hopper
    remap: tuple[int, int, int, int] = (0, 0, 0, 0)  # corrected, uncorrected, pending, failure
    clock_reasons: int = 0  # CLOCKS_* bits
    pcie_gen: tuple[int, int] = (5, 5)  # (current, max)
    pcie_width: tuple[int, int] = (16, 16)
    persistence: bool = True
    xid: tuple[int, int] = (0, 0)  # (last XID value, events so far)


def default_uuid(index: int) -> str:
    return f"GPU-{index:08x}-fake-4e56-8a5f-{index:012x}"


def render_state(
    gpus: list[FakeGpu],
    init_error: int | None = None,
    driver: str = "550.54.15",
    nvml_version: str = "12.550.54.15",
    sweep_delay_ms: int = 0,
) -> str:
    lines = ["# fake NVML state (see tests/fakenvml/fake_nvml.c)"]
    if init_error:
        lines.append(f"init_error {init_error}")
    if sweep_delay_ms:
        lines.append(f"sweep_delay_ms {sweep_delay_ms}")
    lines += [f"driver {driver}", f"nvml_version {nvml_version}"]
    for index, gpu in enumerate(gpus):
        lines += [
            "gpu",
            f"name {gpu.name}",
            f"uuid {gpu.uuid or default_uuid(index)}",
            f"util {gpu.util}",
            f"mem_util {gpu.mem_util}",
            f"mem_used {gpu.memory_used}",
            f"mem_reserved {gpu.memory_reserved}",
            f"mem_total {gpu.memory_total}",
            f"temp {gpu.temperature}",
            f"power_mw {gpu.power_mw}",
            f"power_limit_mw {gpu.power_limit_mw}",
            f"sm_clock {gpu.sm_clock_mhz}",
        ]
        lines += [f"proc {pid} {'na' if used is None else used}" for pid, used in gpu.processes]
        if gpu.samples_every_us:
            lines += [
                f"samples_every_us {gpu.samples_every_us}",
                f"samples_cycle {' '.join(str(v) for v in gpu.samples_cycle)}",
                f"samples_buffer {gpu.samples_buffer}",
            ]
        lines += [
            f"ecc_mode {int(gpu.ecc_mode)}",
            "ecc_uncorrected {} {}".format(*gpu.ecc_uncorrected),
            "ecc_corrected {} {}".format(*gpu.ecc_corrected),
            "remap {} {} {} {}".format(*gpu.remap),
            f"clock_reasons {gpu.clock_reasons:#x}",
            "pcie_gen {} {}".format(*gpu.pcie_gen),
            "pcie_width {} {}".format(*gpu.pcie_width),
            f"persistence {int(gpu.persistence)}",
            "xid {} {}".format(*gpu.xid),
        ]
        if gpu.retired_pending is not None:
            lines.append(f"retired_pending {int(gpu.retired_pending)}")
        lines += [f"sample {ts} {value}" for ts, value in gpu.samples]
        lines.append(f"samples_type {gpu.samples_type}")
        for func, code in gpu.errors.items():
            if func not in ERROR_FUNCS:
                raise ValueError(f"unknown fake NVML function {func!r}; one of {ERROR_FUNCS}")
            lines.append(f"error {func} {code}")
    return "\n".join(lines) + "\n"


def write_state(
    path: Path, gpus: list[FakeGpu], init_error: int | None = None, **kwargs: str | int
) -> None:
    """Write the state file atomically (temp file + rename): a sweep sees old or new, whole.

    kwargs go to `render_state`: driver, nvml_version, sweep_delay_ms (each nvmlDeviceGetCount
    sleeps that long first, i.e. a slow or wedged driver)."""
    path = Path(path)
    text = render_state(gpus, init_error, **kwargs)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
