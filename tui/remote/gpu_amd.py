"""GPU agent part (joined into tui/remote/gpu_agent.py's source by the loader): AMD GPUs
from the amdgpu driver's sysfs files (names and processes from amdsmi where importable), else
``amd-smi metric --json`` / ``rocm-smi --json``. Stdlib + amdsmi (optional), Python 3.8+.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time

from tui.remote.amd_cards import AMD_DEVICE_NAMES, DRM_ROOT, _amd_cards, _sysfs, _Unreadable
from tui.remote.gpu_common import MIB, _empty_gpu, _proc_name

# The amdgpu kernel driver's sysfs files (Documentation/gpu/amdgpu/ in the kernel: thermal.rst
# "HWMON Interfaces" and "*_busy_percent", driver-misc.rst "GPU Product Information" and "GPU
# Memory Usage Information"), read with the stdlib at the agent's interval. Index order: NVIDIA
# GPUs first (NVML's order), then AMD GPUs by PCI address, which is how ROCm numbers them.

AMD_CLI_TIMEOUT_S = 10.0
# hwmon temperature channels by label, preferred first: "edge" is closest to what NVML calls
# the GPU temperature; MI300 (GC 9.4.3) has no edge sensor and reports "junction" instead.
AMD_TEMP_LABELS = ("edge", "junction", "mem")


def _sysfs_int(path, lo, hi, failures):
    """An integer attribute within [lo, hi]; None when absent, odd or unreadable."""
    try:
        text = _sysfs(path)
    except _Unreadable as err:
        failures.append(str(err))
        return None
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None  # not a number: odd firmware output, reported as unknown
    return value if lo <= value <= hi else None


def _amd_sclk(device, failures):
    """The shader clock now, MHz: pp_dpm_sclk's level marked "*" ("1: 1700Mhz *"); None when
    the file is absent, odd, or marks no level."""
    try:
        text = _sysfs(os.path.join(device, "pp_dpm_sclk"))
    except _Unreadable as err:
        failures.append(str(err))
        return None
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "*" and parts[1].lower().endswith("mhz"):
            digits = parts[1][:-3]
            if digits.isdigit() and int(digits) <= 100_000:
                return int(digits)
    return None


def _amd_hwmon(device):
    """The device's hwmon directory (device/hwmon/hwmonN), or None."""
    try:
        names = sorted(
            n for n in os.listdir(os.path.join(device, "hwmon")) if n.startswith("hwmon")
        )
    except OSError:
        return None
    return os.path.join(device, "hwmon", names[0]) if names else None


def _amd_temperature(hwmon, failures):
    """degC from the preferred labelled channel (temp*_input is in millidegrees)."""
    by_label, first = {}, None
    for channel in range(1, 10):
        value = _sysfs_int(os.path.join(hwmon, f"temp{channel}_input"), -100_000, 300_000, failures)
        if value is None:
            continue
        try:
            label = _sysfs(os.path.join(hwmon, f"temp{channel}_label"))
        except _Unreadable:
            label = None
        by_label.setdefault(label, value)
        first = value if first is None else first
    for label in AMD_TEMP_LABELS:
        if label in by_label:
            return by_label[label] / 1000.0
    return first / 1000.0 if first is not None else None


class AmdSysfsBackend:
    """amdgpu GPUs from /sys/class/drm, stdlib only. A GPU seen before that is gone from
    sysfs keeps its index and is reported with an error, so indexes do not shift."""

    source = "amdgpu-sysfs"
    nvml_version = None

    def __init__(self, root=DRM_ROOT, smi=None):
        self.root = root
        self.smi = smi  # an _AmdSmiLib for names and processes, or None
        if smi is not None:
            self.source = "amdsmi"
        self.error = None
        self.known = []  # PCI addresses in index order
        self.driver = None
        with contextlib.suppress(_Unreadable):
            self.driver = _sysfs("/sys/module/amdgpu/version") or None

    def count(self):
        return len(_amd_cards(self.root))

    def sweep(self):
        cards = dict(_amd_cards(self.root))
        for pci in sorted(cards):
            if pci not in self.known:
                self.known.append(pci)
        extra = self.smi.sweep() if self.smi is not None else {}
        gpus = []
        for index, pci in enumerate(self.known):
            device = cards.get(pci)
            if device is None:
                gpus.append(_empty_gpu(index, f"GPU {pci} is gone from {self.root}"))
                gpus[-1]["vendor"] = "amd"
                continue
            gpu = self._device(index, pci, device)
            found = extra.get(pci.lower())
            if found:
                gpu["name"] = found.get("name") or gpu["name"]
                gpu["processes"] = found.get("processes")
            gpus.append(gpu)
        self.error = None if gpus else f"no amdgpu devices under {self.root}"
        return gpus

    def _device(self, index, pci, device):
        failures = []
        gpu = _empty_gpu(index)
        gpu["vendor"] = "amd"
        busy = _sysfs_int(os.path.join(device, "gpu_busy_percent"), 0, 100, failures)
        mem_busy = _sysfs_int(os.path.join(device, "mem_busy_percent"), 0, 100, failures)
        gpu["util_percent"] = float(busy) if busy is not None else None
        gpu["mem_util_percent"] = float(mem_busy) if mem_busy is not None else None
        total = _sysfs_int(os.path.join(device, "mem_info_vram_total"), 1, 1 << 50, failures)
        used = _sysfs_int(os.path.join(device, "mem_info_vram_used"), 0, 1 << 50, failures)
        gpu["memory_total_bytes"] = total
        gpu["memory_used_bytes"] = used if used is None or total is None or used <= total else None
        gpu["sm_clock_mhz"] = _amd_sclk(device, failures)
        hwmon = _amd_hwmon(device)
        if hwmon is not None:
            gpu["temperature_c"] = _amd_temperature(hwmon, failures)
            # microwatts; the average where the ASIC has it, else the instantaneous value
            power = _sysfs_int(os.path.join(hwmon, "power1_average"), 0, 10**11, failures)
            if power is None:
                power = _sysfs_int(os.path.join(hwmon, "power1_input"), 0, 10**11, failures)
            cap = _sysfs_int(os.path.join(hwmon, "power1_cap"), 1, 10**11, failures)
            gpu["power_w"] = power / 1e6 if power is not None else None
            gpu["power_limit_w"] = cap / 1e6 if cap is not None else None
        name = uid = None
        try:
            name = _sysfs(os.path.join(device, "product_name")) or None
            uid = _sysfs(os.path.join(device, "unique_id")) or None
            if name is None:
                dev_id = (_sysfs(os.path.join(device, "device")) or "").lower()
                name = AMD_DEVICE_NAMES.get(dev_id, f"AMD GPU {dev_id}" if dev_id else "AMD GPU")
        except _Unreadable as err:
            failures.append(str(err))
        gpu["name"] = name or "AMD GPU"
        gpu["uuid"] = uid or pci
        readings = ("util_percent", "memory_used_bytes", "temperature_c", "power_w")
        if failures and all(gpu[k] is None for k in readings):
            gpu["error"] = "cannot read " + failures[0]
        return gpu

    def close(self):
        if self.smi is not None:
            self.smi.close()


class _AmdSmiLib:
    """AMD's amdsmi Python library (ships with ROCm): exact names and the process list,
    which sysfs lacks. Keyed by lower-case PCI address; any failure leaves sysfs alone."""

    def __init__(self, amdsmi):
        self.lib = amdsmi
        amdsmi.amdsmi_init()
        self.names = {}

    def sweep(self):
        lib, out = self.lib, {}
        try:
            handles = lib.amdsmi_get_processor_handles()
        except Exception:
            return out
        for h in handles:
            try:
                pci = str(lib.amdsmi_get_gpu_device_bdf(h)).lower()
            except Exception:
                continue
            entry = {}
            if pci not in self.names:
                with contextlib.suppress(Exception):
                    self.names[pci] = lib.amdsmi_get_gpu_asic_info(h).get("market_name")
            entry["name"] = self.names.get(pci)
            with contextlib.suppress(Exception):
                entry["processes"] = [
                    _amd_process(p)
                    for p in lib.amdsmi_get_gpu_process_list(h)
                    if isinstance(p, dict) and isinstance(p.get("pid"), int)
                ]
            out[pci] = entry
        return out

    def close(self):
        with contextlib.suppress(Exception):
            self.lib.amdsmi_shut_down()


def _amd_process(p):
    mem = p.get("memory_usage")
    vram = mem.get("vram_mem") if isinstance(mem, dict) else p.get("mem")
    name = p.get("name")
    return {
        "pid": p["pid"],
        "name": name if isinstance(name, str) and name != "N/A" else _proc_name(p["pid"]),
        "memory_bytes": vram if isinstance(vram, int) and vram >= 0 else None,
    }


def _amd_value(value, scale=1.0):
    """A number from an amd-smi/rocm-smi JSON value: 42, "42.0", {"value": 42, "unit": "%"};
    None for "N/A" and anything else."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and value == value and abs(value) != float("inf"):
        return value * scale
    return None


def _amd_gpu_fields(gpu, util, mem_util, used, total, temp, power, limit):
    gpu["vendor"] = "amd"
    for key, value in (("util_percent", util), ("mem_util_percent", mem_util)):
        gpu[key] = float(value) if value is not None and 0 <= value <= 100 else None
    gpu["memory_total_bytes"] = int(total) if total is not None and total > 0 else None
    gpu["memory_used_bytes"] = (
        int(used) if used is not None and 0 <= used <= (total or used) else None
    )
    gpu["temperature_c"] = float(temp) if temp is not None and -100 <= temp <= 300 else None
    gpu["power_w"] = float(power) if power is not None and 0 <= power <= 100_000 else None
    gpu["power_limit_w"] = float(limit) if limit is not None and 0 < limit <= 100_000 else None
    return gpu


def parse_amd_smi_metric(text):
    """`amd-smi metric --json`: a list of per-GPU objects (ROCm 6.x) or {"gpu_data": [...]}
    (ROCm 6.4+/7). Values are {"value": N, "unit": U} or "N/A"; VRAM in MB (MiB)."""
    doc = json.loads(text)
    items = doc.get("gpu_data") if isinstance(doc, dict) else doc
    gpus = []
    for pos, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        index = item.get("gpu")
        gpu = _empty_gpu(index if isinstance(index, int) and index >= 0 else pos)

        def section(name, item=item):
            value = item.get(name)
            return value if isinstance(value, dict) else {}

        usage, power, temp, mem = (
            section("usage"),
            section("power"),
            section("temperature"),
            section("mem_usage"),
        )
        temperature = next(
            (t for t in (_amd_value(temp.get(k)) for k in ("edge", "hotspot")) if t is not None),
            None,
        )
        gpus.append(
            _amd_gpu_fields(
                gpu,
                _amd_value(usage.get("gfx_activity")),
                _amd_value(usage.get("umc_activity")),
                _amd_value(mem.get("used_vram"), MIB),
                _amd_value(mem.get("total_vram"), MIB),
                temperature,
                _amd_value(power.get("socket_power")),
                None,
            )
        )
    return gpus


ROCM_SMI_POWER = ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)")
ROCM_SMI_TEMP = ("Temperature (Sensor edge) (C)", "Temperature (Sensor junction) (C)")


def parse_rocm_smi(text):
    """`rocm-smi ... --json`: {"card0": {"GPU use (%)": "0", ...}, ...}; all values strings."""
    doc = json.loads(text)
    gpus = []
    cards = [
        (k, v)
        for k, v in (doc.items() if isinstance(doc, dict) else ())
        if k.startswith("card") and k[4:].isdigit() and isinstance(v, dict)
    ]
    for key, card in sorted(cards, key=lambda kv: int(kv[0][4:])):
        gpu = _empty_gpu(int(key[4:]))
        name = card.get("Card Series") or card.get("Device Name")
        gpu["name"] = name if isinstance(name, str) and name != "N/A" else None
        uid = card.get("Unique ID")
        gpu["uuid"] = uid if isinstance(uid, str) and uid != "N/A" else None
        mem_util = card.get("GPU Memory Read/Write Activity (%)", card.get("GPU memory use (%)"))
        gpus.append(
            _amd_gpu_fields(
                gpu,
                _amd_value(card.get("GPU use (%)")),
                _amd_value(mem_util),
                _amd_value(card.get("VRAM Total Used Memory (B)")),
                _amd_value(card.get("VRAM Total Memory (B)")),
                next(
                    (t for t in (_amd_value(card.get(k)) for k in ROCM_SMI_TEMP) if t is not None),
                    None,
                ),
                next(
                    (p for p in (_amd_value(card.get(k)) for k in ROCM_SMI_POWER) if p is not None),
                    None,
                ),
                _amd_value(card.get("Max Graphics Package Power (W)")),
            )
        )
    return gpus


AMD_CLIS = {
    "amd-smi": (["metric", "--json"], parse_amd_smi_metric),
    "rocm-smi": (
        [
            "--showproductname",
            "--showuse",
            "--showmemuse",
            "--showmeminfo",
            "vram",
            "--showtemp",
            "--showpower",
            "--showmaxpower",
            "--showuniqueid",
            "--json",
        ],
        parse_rocm_smi,
    ),
}


class AmdCliBackend:
    """Without /sys/class/drm cards: ``amd-smi metric --json`` or ``rocm-smi --json`` run
    on a thread (each takes ~1 s); a sweep returns the latest complete answer."""

    nvml_version = driver = None

    def __init__(self, tool, exe, interval, once):
        self.source, self.interval, self.once = tool, interval, once
        args, self.parse = AMD_CLIS[tool]
        self.argv = [exe, *args]
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.latest, self.latest_at, self.error = None, 0.0, None
        self.stale_after = max(3.0 * interval, 3.0 * AMD_CLI_TIMEOUT_S)
        self.run_once()  # the first answer decides whether this host has AMD GPUs at all
        if not once:
            threading.Thread(target=self._loop, daemon=True).start()

    def run_once(self):
        try:
            proc = subprocess.run(
                self.argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=AMD_CLI_TIMEOUT_S
            )
            if proc.returncode != 0:
                lines = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
                raise RuntimeError(
                    lines.splitlines()[0] if lines else f"exit status {proc.returncode}"
                )
            gpus = self.parse(proc.stdout.decode("utf-8", "replace"))
        except Exception as err:  # timeout, bad JSON, a crash: say why, keep the last answer
            with self.lock:
                self.error = f"{self.source} failed: {str(err).strip() or type(err).__name__}"
            return
        with self.lock:
            self.latest, self.latest_at, self.error = gpus, time.monotonic(), None

    def _loop(self):
        while not self.stop.wait(self.interval):
            self.run_once()

    def count(self):
        return len(self.latest or ())

    def sweep(self):
        with self.lock:
            rows, at = self.latest, self.latest_at
            if rows is not None and time.monotonic() - at > self.stale_after:
                self.error = self.error or f"no answer from {self.source}"
                return []
        return [dict(r) for r in rows or ()]

    def close(self):
        self.stop.set()


def _open_amd_backend(interval, once):
    """The AMD backend for this host, or None when it has no AMD GPUs."""
    if _amd_cards(DRM_ROOT):
        smi = None
        try:
            import amdsmi

            smi = _AmdSmiLib(amdsmi)
        except Exception:  # not installed, or no ROCm library under it: sysfs alone
            smi = None
        return AmdSysfsBackend(DRM_ROOT, smi)
    for tool in AMD_CLIS:
        exe = shutil.which(tool)
        if exe:
            backend = AmdCliBackend(tool, exe, interval, once)
            if backend.count():
                return backend
            backend.close()
    return None
