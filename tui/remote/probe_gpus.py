"""Probe part (joined into tui/remote/probe.py's source by the loader): how many GPUs this host
has and their names, NVIDIA's (pynvml, else ``nvidia-smi -L``) and AMD's (the amdgpu cards the
GPU agent reads, tui/remote/amd_cards.py, else ``amd-smi list`` / ``rocm-smi``). Stdlib +
pynvml (optional), Python 3.8+.
"""

import contextlib
import json
import os
import shutil
import subprocess
import threading

from tui.remote.amd_cards import AMD_DEVICE_NAMES, DRM_ROOT, _amd_cards, _sysfs, _Unreadable

NVML_TIMEOUT_S = 10.0


def _with_timeout(fn, seconds, what):
    """Run fn in a daemon thread: a wedged driver must not hang the whole probe."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # reported by the caller, never lost
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise RuntimeError(f"{what} did not answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _nvml():
    import pynvml  # from nvidia-ml-py; honours LD_LIBRARY_PATH like any dlopen

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = []
        for i in range(count):
            try:
                name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                names.append(name.decode() if isinstance(name, bytes) else name)
            except Exception:
                names.append(None)
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:
            driver = None
        return {"count": count, "names": names, "driver": driver, "source": "nvml", "error": None}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvidia_smi():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=NVML_TIMEOUT_S)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise RuntimeError("nvidia-smi -L: " + (msg[0] if msg else f"exit {proc.returncode}"))
    names = [
        ln.split(":", 1)[1].split("(UUID")[0].strip()
        for ln in proc.stdout.splitlines()
        if ln.startswith("GPU ") and ":" in ln
    ]
    return {
        "count": len(names),
        "names": names,
        "driver": None,
        "source": "nvidia-smi",
        "error": None,
    }


def _nvidia_gpus():
    try:
        import pynvml  # noqa: F401
    except ImportError:
        found = _nvidia_smi()
        if found is not None:
            return found
        return {
            "count": None,
            "names": [],
            "driver": None,
            "source": None,
            "error": "pynvml is not installed in this interpreter and nvidia-smi is absent",
        }
    try:
        return _with_timeout(_nvml, NVML_TIMEOUT_S, "NVML")
    except Exception as exc:
        return {
            "count": None,
            "names": [],
            "driver": None,
            "source": "nvml",
            "error": f"NVML: {str(exc).strip() or type(exc).__name__}",
        }


# AMD GPUs, counted from the same sources as the GPU agent: amdgpu cards in sysfs (the same
# cards, in the same order), else `amd-smi list --json` / `rocm-smi --showproductname --json`.


def _amd_sysfs():
    """The names of the amdgpu cards, in the agent's index order (by PCI address)."""
    return [_amd_label(device) for _, device in _amd_cards(DRM_ROOT)]


def _amd_label(device):
    def attr(name):
        try:
            return _sysfs(os.path.join(device, name))
        except _Unreadable:
            return None

    return attr("product_name") or AMD_DEVICE_NAMES.get((attr("device") or "").lower(), "AMD GPU")


def _amd_cli():
    for argv, source in (
        (["amd-smi", "list", "--json"], "amd-smi"),
        (["rocm-smi", "--showproductname", "--json"], "rocm-smi"),
    ):
        exe = shutil.which(argv[0])
        if exe is None:
            continue
        try:
            proc = subprocess.run(
                [exe, *argv[1:]], capture_output=True, text=True, timeout=NVML_TIMEOUT_S
            )
            doc = json.loads(proc.stdout) if proc.returncode == 0 else None
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
            doc = doc["gpu_data"]
        if isinstance(doc, list):
            names = ["AMD GPU" for item in doc if isinstance(item, dict) and "gpu" in item]
        elif isinstance(doc, dict):
            names = [
                v.get("Card Series") or v.get("Device Name") or "AMD GPU"
                for k, v in sorted(doc.items())
                if k.startswith("card") and isinstance(v, dict)
            ]
        else:
            names = []
        if names:
            return names, source
    return [], None


def _amd_gpus():
    """{"count", "names", "source"} of this host's AMD GPUs, or None when it has none."""
    names, source = _amd_sysfs(), "amdgpu-sysfs"
    if not names:
        names, source = _amd_cli()
    if not names:
        return None
    return {"count": len(names), "names": names, "source": source}
