"""GPU agent part (joined into tui/remote/gpu_agent.py's source by the loader): the per-GPU
record every backend fills, NVIDIA's and AMD's alike. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

MIB = 1024 * 1024


def _empty_gpu(index, error=None):
    return {
        "index": index,
        "name": None,
        "uuid": None,
        "util_percent": None,
        "mem_util_percent": None,
        "memory_used_bytes": None,
        "memory_total_bytes": None,
        "temperature_c": None,
        "power_w": None,
        "power_limit_w": None,
        "processes": None,
        "error": error,
        "util_window_s": None,
    }


def _proc_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None
