"""`verl-tui gpus` on the built-in localhost inventory (local transport, real agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli


def env_with(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def test_without_driver_says_no_nvml_plainly(tmp_path):
    proc = run_cli(["gpus", "--once"], env=env_with(LD_LIBRARY_PATH=str(tmp_path)), timeout=60)
    assert proc.returncode == 0, proc.stderr  # the host answered; it just has no GPUs
    assert proc.stdout.startswith("localhost  [no NVML]  NVML library not found")


def test_keeps_printing_json_lines(fake_nvml_lib, tmp_path):
    state = tmp_path / "nvml.txt"
    write_state(state, [FakeGpu(util=42), FakeGpu(util=7)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui", "gpus", "--json", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        text=True,
        env=env_with(LD_LIBRARY_PATH=str(fake_nvml_lib), FAKE_NVML_STATE=str(state)),
    )
    try:
        docs = [json.loads(proc.stdout.readline()) for _ in range(4)]
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 143  # SIGTERM handled: agents closed, no traceback
    times = [d["time"] for d in docs]
    assert times == sorted(times) and times[-1] - times[0] >= 0.4
    samples = [d["hosts"][0]["sample_time"] for d in docs]
    assert len(set(samples)) >= 3  # new samples, not the same one reprinted
    assert [g["util_percent"] for g in docs[-1]["hosts"][0]["gpus"]] == [42, 7]
