#!/usr/bin/env python3
"""verl-tui GPU telemetry agent: streams host + GPU samples as JSON lines on stdout.

Shipped to cluster hosts as ``python3 -u -c SOURCE --interval 1.0``, so it must stay one
self-contained file: stdlib + pynvml / amdsmi (optional), Python 3.8+, no imports from ``tui``.
Protocol: one ``{"type":"hello",...}`` line, then one ``{"type":"sample",...}`` line per interval;
on an unexpected failure one ``{"type":"error","error":"..."}`` line, then exit status 1.
The cockpit validates every field (tui/cluster/agent_schema.py): keep types and names in step.
It exits (status 0) when stdin reaches EOF -- the SSH channel closing is how the cockpit stops
it, since a remote process without a PTY gets no signal -- and on SIGTERM, SIGHUP or a broken pipe.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

AGENT_PROTOCOL = 1
MIB = 1024 * 1024
# How often a failed nvmlInit (or a dead nvidia-smi) is retried: a driver can come back.
RETRY_S = float(os.environ.get("VERL_TUI_AGENT_NVML_RETRY_S", "10"))
NO_LIBRARY = "NVML library not found (no NVIDIA driver on this host)"
NO_TOOLS = "pynvml is not installed and nvidia-smi was not found"
SMI_FIELDS = ("index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,"
              "temperature.gpu,power.draw,power.limit")
# Alternatives for calls whose C symbol changed over driver releases, preferred first.
TEMPERATURE = ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV")
PROCESSES = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
             "nvmlDeviceGetComputeRunningProcesses")
# nvmlDeviceGetSamples: GPU utilization (nvmlSamplingType_t), the nvmlValue_t member for each
# nvmlValueType_t, and how many sweeps in a row may bring no new sample before NVML's whole
# buffer is read again (its clock may have stepped back below the last timestamp seen).
UTIL_SAMPLES = 1
VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
UTIL_RESYNC = 3
SMI_KEYS = ("name", "uuid", "util_percent", "mem_util_percent", "memory_used_bytes",
            "memory_total_bytes", "temperature_c", "power_w", "power_limit_w")


def _empty_gpu(index, error=None):
    return {"index": index, "name": None, "uuid": None, "util_percent": None,
            "mem_util_percent": None, "memory_used_bytes": None, "memory_total_bytes": None,
            "temperature_c": None, "power_w": None, "power_limit_w": None, "processes": None,
            "error": error, "util_window_s": None}


def _text(value):
    # Old pynvml releases return bytes, new ones str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _proc_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


class HostStats:
    """CPU% from /proc/stat deltas between sweeps, load and memory; None where unknown."""

    def __init__(self):
        self.ncpu = self._ncpu()
        self.prev = self._cpu_times()

    @staticmethod
    def _ncpu():
        try:  # the CPUs this process may use (containers, taskset), as Ray counts them
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1

    @staticmethod
    def _cpu_times():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        # user nice system idle iowait irq softirq steal; guest time is already in user.
        return sum(fields), fields[3] + fields[4]

    def _cpu_percent(self):
        cur = self._cpu_times()
        if cur is None or self.prev is None:
            return None
        if cur[0] - self.prev[0] <= 0:  # window shorter than a jiffy (first sample)
            time.sleep(0.1)
            cur = self._cpu_times() or cur
        total, idle = cur[0] - self.prev[0], cur[1] - self.prev[1]
        self.prev = cur
        return round(100.0 * (total - idle) / total, 1) if total > 0 else None

    def sample(self):
        try:
            load1 = round(os.getloadavg()[0], 2)
        except (AttributeError, OSError):
            load1 = None
        mem = {}
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    mem[key] = int(rest.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        total, avail = mem.get("MemTotal"), mem.get("MemAvailable")
        return {"cpu_percent": self._cpu_percent(), "load1": load1,
                "mem_used_bytes": total - avail if total and avail is not None else None,
                "mem_total_bytes": total, "ncpu": self.ncpu}


class NvmlBackend:
    """pynvml sweeps. While nvmlInit fails it reports source "none" and retries."""

    def __init__(self, pynvml, interval=1.0):
        self.nv = pynvml
        self.interval = interval  # what a first utilization reading averages over
        self.ok = False
        self.error = None
        self.driver = self.nvml_version = None
        self.static = {}  # index -> {"handle", "name", "uuid", "power_limit_w"}
        self.lost_codes = {getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", 15),
                           getattr(pynvml, "NVML_ERROR_RESET_REQUIRED", 16)}
        self.next_init = 0.0
        self._init()

    @property
    def source(self):
        return "nvml" if self.ok else "none"

    def _init(self):
        nv = self.nv
        self.next_init = time.monotonic() + RETRY_S
        try:
            nv.nvmlInit()
        except nv.NVMLError_LibraryNotFound:
            self.error = NO_LIBRARY
            return
        except Exception as err:  # NVMLError or ctypes trouble: report it, keep streaming
            self.error = f"NVML init failed: {err}"
            return
        self.ok, self.error, self.static = True, None, {}
        self.driver = self._call(nv.nvmlSystemGetDriverVersion)
        self.nvml_version = self._call(nv.nvmlSystemGetNVMLVersion)

    def _call(self, fn, *args):
        """One NVML field: None when unsupported/failing; raises only for a lost GPU."""
        try:
            return _text(fn(*args))
        except self.nv.NVMLError as err:
            if err.value in self.lost_codes:
                raise
            return None
        except Exception:  # e.g. NVMLLibraryMismatchError (not an NVMLError) on old drivers
            return None

    def _newest(self, names, *args):
        """Call the first of ``names`` that both this pynvml and the driver provide."""
        nv, error = self.nv, None
        missing = (nv.NVMLError_FunctionNotFound,
                   getattr(nv, "NVMLLibraryMismatchError", nv.NVMLError_FunctionNotFound))
        for name in names:
            fn = getattr(nv, name, None)
            if fn is not None:
                try:
                    return fn(*args)
                except missing as err:
                    error = err
        raise error or AttributeError(names[0])

    def _memory(self, h):
        # v1's "used" includes the driver's reserved memory (~600 MiB on an idle H200);
        # v2 (driver >= 510) separates it, and is what nvidia-smi shows.
        nv, version = self.nv, getattr(self.nv, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=version)
            except nv.NVMLError as err:  # FunctionNotFound, version mismatch: older driver
                if err.value in self.lost_codes:
                    raise
            except TypeError:  # a pynvml without the version argument
                pass
        return nv.nvmlDeviceGetMemoryInfo(h)

    def sweep(self):
        if not self.ok:
            if time.monotonic() >= self.next_init:
                self._init()
            if not self.ok:
                return []
        try:
            count = self.nv.nvmlDeviceGetCount()
        except Exception as err:  # the driver went away: start over with nvmlInit later
            self.close()
            self.ok, self.error = False, f"NVML failed: {err}"
            return []
        self.error = None
        return [self._device(i) for i in range(count)]

    def _device(self, index):
        nv = self.nv
        st = self.static.get(index)
        try:
            if st is None:
                st = {"handle": nv.nvmlDeviceGetHandleByIndex(index), "name": None,
                      "uuid": None, "power_limit_w": None,
                      "util_ts": 0, "util_newest": None, "util_empty": 0, "util_ok": True}
                self.static[index] = st
            h = st["handle"]
            # Static values: read until one read succeeds, then cached.
            for key, fn in (("name", nv.nvmlDeviceGetName), ("uuid", nv.nvmlDeviceGetUUID)):
                if st[key] is None:
                    st[key] = self._call(fn, h)
            if st["power_limit_w"] is None:
                limit = self._call(nv.nvmlDeviceGetEnforcedPowerLimit, h)
                st["power_limit_w"] = limit / 1000.0 if limit is not None else None
            gpu = _empty_gpu(index)
            gpu.update(name=st["name"], uuid=st["uuid"], power_limit_w=st["power_limit_w"])
            util = self._call(nv.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                gpu["util_percent"], gpu["mem_util_percent"] = float(util.gpu), float(util.memory)
            window = self._util_window(st, h)
            if window is not None:  # else the instantaneous value stands; util_window_s null
                gpu["util_percent"], gpu["util_window_s"] = window
            mem = self._call(self._memory, h)
            if mem is not None:
                gpu["memory_used_bytes"], gpu["memory_total_bytes"] = int(mem.used), int(mem.total)
            # The unversioned call is deprecated in nvml.h but is the one old drivers have.
            temp = self._call(self._newest, TEMPERATURE, h, nv.NVML_TEMPERATURE_GPU)
            gpu["temperature_c"] = float(temp) if temp is not None else None
            power = self._call(nv.nvmlDeviceGetPowerUsage, h)  # milliwatts
            gpu["power_w"] = power / 1000.0 if power is not None else None
            procs = self._call(self._newest, PROCESSES, h)
            if procs is not None:
                gpu["processes"] = [
                    {"pid": int(p.pid), "name": _proc_name(int(p.pid)),
                     "memory_bytes": int(p.usedGpuMemory) if p.usedGpuMemory is not None
                     else None} for p in procs]
            return gpu
        except Exception as err:  # handle failed or GPU lost: drop the cache, retry next sweep
            self.static.pop(index, None)
            return _empty_gpu(index, str(err) or type(err).__name__)

    def _util_window(self, st, h):
        """GPU utilization over the whole interval: (mean %, seconds covered) or None.

        nvmlDeviceGetUtilizationRates covers only the driver's last sample period (1/6 s to
        1 s by product), so a bursty load reads anywhere from 0 to 100 %. The driver keeps its
        samples; this averages those stamped since the last sweep. None where the call is not
        supported or no new sample arrived: the caller keeps the instantaneous value."""
        if not st["util_ok"]:
            return None
        nv, last = self.nv, st["util_ts"]
        try:
            vtype, samples = nv.nvmlDeviceGetSamples(h, UTIL_SAMPLES, last)
        except nv.NVMLError as err:
            if err.value in self.lost_codes:
                raise
            if err.value in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND):
                st["util_ok"] = False  # old driver or GPU: stop asking until NVML re-inits
            else:  # NOT_FOUND: nothing since `last`
                self._util_nothing_new(st)
            return None
        except Exception:  # a pynvml without the call, ctypes trouble: instantaneous only
            st["util_ok"] = False
            return None
        member = VALUE_FIELDS[vtype] if type(vtype) is int and 0 <= vtype < len(VALUE_FIELDS) \
            else None
        points, newest = [], last
        for sample in samples:
            ts = int(sample.timeStamp)
            if ts <= last:  # the driver filters these; one that slips through is not trusted
                continue
            newest = max(newest, ts)
            value = getattr(sample.sampleValue, member) if member else None
            if value is not None and 0 <= value <= 100:  # NaN fails both
                points.append((ts, float(value)))
        st["util_ts"] = newest
        points.sort()
        prev = last
        if last == 0 and points:  # first read (or a resync): the whole buffer came back
            if points[-1][0] == st["util_newest"]:  # nothing newer than before the resync
                points = []
            else:
                # The samples that best span one interval: NVML's spacing (200 ms on an H100)
                # need not divide it, so the cut sits half a spacing later.
                gaps = sorted(points[i][0] - points[i - 1][0] for i in range(1, len(points)))
                half = gaps[len(gaps) // 2] // 2 if gaps else 0
                cut = min(points[-1][0] - int(self.interval * 1e6) + half, points[-1][0] - 1)
                older = [ts for ts, _ in points if ts <= cut]
                points = [p for p in points if p[0] > cut]
                prev = older[-1] if older else None
        if not points:
            self._util_nothing_new(st)
            return None
        st["util_newest"], st["util_empty"] = points[-1][0], 0
        return _mean_util(points, prev)

    @staticmethod
    def _util_nothing_new(st):
        st["util_empty"] += 1
        if st["util_empty"] >= UTIL_RESYNC:
            st["util_ts"], st["util_empty"] = 0, 0

    def close(self):
        if self.ok:
            with contextlib.suppress(Exception):
                self.nv.nvmlShutdown()


def _mean_util(points, prev):
    """Time-weighted mean of (timestamp µs, percent) samples sorted by time.

    A sample's value is the busy share of the period that ends at its timestamp, so each one
    weighs the time since the sample before it (``prev`` before the first; None: unknown). A
    gap longer than twice the usual spacing (sampling paused) counts as twice the spacing."""
    stamps = [ts for ts, _ in points]
    gaps = [stamps[i] - stamps[i - 1] for i in range(1, len(stamps))]  # (no pairwise in 3.8)
    usual = sorted(gaps)[len(gaps) // 2] if gaps else None
    first = stamps[0] - prev if prev else usual
    weights = [w if usual is None or w is None else min(w, 2 * usual)
               for w in [first, *gaps]]
    if any(w is None for w in weights) or sum(weights) <= 0:
        weights = [1] * len(points)  # a lone sample, or duplicate stamps: equal weights
        span = stamps[-1] - stamps[0]
    else:
        span = sum(weights)
    mean = sum(weights[i] * points[i][1] for i in range(len(points))) / sum(weights)
    return round(mean, 1), round(span / 1e6, 2)


def _smi_value(text, kind):
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":  # [N/A], [Not Supported]
        return None
    if kind is str:
        return text
    try:
        return kind(float(text))
    except ValueError:
        return None


class SmiBackend:
    """Fallback without pynvml: one long-lived ``nvidia-smi --query-gpu ... -lms MS``."""

    source = "nvidia-smi"
    driver = nvml_version = None

    def __init__(self, exe, interval, once):
        self.argv = [exe, "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"]
        self.once = once
        if not once:  # --once: a single query that ends with EOF
            self.argv += ["-lms", str(max(1, round(interval * 1000)))]
        self.gap = min(0.1, interval / 2.0)  # quiet time that ends a sweep
        self.lock = threading.Lock()
        self.first = threading.Event()
        self.latest, self.latest_at, self.message = None, 0.0, None
        self.proc, self.error, self.next_start = None, None, 0.0
        self.stale_after = max(3.0 * interval, 5.0)
        self._start()

    def _start(self):
        self.next_start = time.monotonic() + RETRY_S
        try:
            # stderr joins stdout: nvidia-smi's failure text becomes this backend's error.
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as err:
            self.proc, self.error = None, f"cannot run nvidia-smi: {err}"
            self.first.set()
            return
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc):
        fd, buf, rows = proc.stdout.fileno(), b"", []
        try:
            while True:
                ready = select.select([fd], [], [], self.gap if rows else None)[0]
                chunk = os.read(fd, 65536) if ready else None
                if chunk:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        row = self._parse(line.decode("utf-8", "replace"))
                        if row is None:
                            continue
                        if rows and row["index"] <= rows[-1]["index"]:  # a new sweep began
                            self._publish(rows)
                            rows = []
                        rows.append(row)
                elif rows:  # quiet pipe or EOF: the sweep is complete
                    self._publish(rows)
                    rows = []
                if chunk == b"":
                    proc.wait()
                    return
        finally:
            self.first.set()  # never leave sweep() waiting on a reader that has ended

    def _parse(self, line):
        if not line.strip():
            return None
        cols = next(csv.reader([line], skipinitialspace=True))
        index = _smi_value(cols[0], int) if len(cols) == 10 else None
        if index is None:
            self.message = line.strip()  # e.g. "NVIDIA-SMI has failed because ..."
            return None
        gpu = _empty_gpu(index)
        for i, key in enumerate(SMI_KEYS):
            gpu[key] = _smi_value(cols[i + 1], str if i < 2 else float)
        for key in ("memory_used_bytes", "memory_total_bytes"):
            if gpu[key] is not None:
                gpu[key] = int(gpu[key] * MIB)
        return gpu

    def _publish(self, rows):
        with self.lock:
            self.latest, self.latest_at, self.message = rows, time.monotonic(), None
        self.first.set()

    def sweep(self):
        self.first.wait(5.0)  # the first sample carries GPUs if nvidia-smi answers at all
        proc = self.proc
        if proc is not None and not self.once and proc.poll() is not None:
            detail = f": {self.message}" if self.message else ""
            self.error = f"nvidia-smi exited with status {proc.returncode}{detail}"
            self.proc = None
        if self.proc is None:
            if not self.once and time.monotonic() >= self.next_start:
                self._start()
            return []
        with self.lock:
            rows, at = self.latest, self.latest_at
        if rows is None or (not self.once and time.monotonic() - at > self.stale_after):
            self.error = self.message or "no output from nvidia-smi"
            return []
        self.error = None
        return [dict(r) for r in rows]

    def close(self):
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class NoneBackend:
    source, driver, nvml_version, error = "none", None, None, NO_TOOLS

    def sweep(self):
        return []

    def close(self):
        pass


def _open_nvidia_backend(interval, once):
    try:
        import pynvml
    except ImportError:
        exe = shutil.which("nvidia-smi")
        return SmiBackend(exe, interval, once) if exe else NoneBackend()
    return NvmlBackend(pynvml, interval)


# ----------------------------------------------------------------------------- AMD GPUs
# The amdgpu kernel driver's sysfs files (Documentation/gpu/amdgpu/ in the kernel: thermal.rst
# "HWMON Interfaces" and "*_busy_percent", driver-misc.rst "GPU Product Information" and "GPU
# Memory Usage Information"), read with the stdlib at the agent's interval. Index order: NVIDIA
# GPUs first (NVML's order), then AMD GPUs by PCI address, which is how ROCm numbers them.

DRM_ROOT = os.environ.get("VERL_TUI_AGENT_DRM", "/sys/class/drm")
AMD_VENDOR_ID = "0x1002"
AMD_CLI_TIMEOUT_S = 10.0
# PCI device ids -> marketing names where product_name (the board's FRU EEPROM) is absent;
# the ids are the ones Ray's AMD accelerator manager knows (ray/_private/accelerators/amd_gpu.py).
AMD_DEVICE_NAMES = {
    "0x738c": "AMD Instinct MI100", "0x7408": "AMD Instinct MI250X",
    "0x740c": "AMD Instinct MI250X/MI250", "0x740f": "AMD Instinct MI210",
    "0x74a0": "AMD Instinct MI300A", "0x74a1": "AMD Instinct MI300X",
    "0x74a2": "AMD Instinct MI308X", "0x74a5": "AMD Instinct MI325X",
    "0x74a9": "AMD Instinct MI300X HF", "0x75a0": "AMD Instinct MI350X",
    "0x75a3": "AMD Instinct MI355X",
}
# hwmon temperature channels by label, preferred first: "edge" is closest to what NVML calls
# the GPU temperature; MI300 (GC 9.4.3) has no edge sensor and reports "junction" instead.
AMD_TEMP_LABELS = ("edge", "junction", "mem")


class _Unreadable(Exception):
    """A sysfs file that exists but cannot be read (EIO, EACCES, a directory...)."""


def _sysfs(path):
    """A sysfs attribute's text, stripped; None when absent; _Unreadable when it fails."""
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _Unreadable(f"{os.path.basename(path)}: {err.strerror or err}") from None


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


def _amd_cards(root):
    """[(pci address, card dir)] of the amdgpu devices under ``root``, by PCI address."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    cards = []
    for name in names:
        # card0 is the device; card0-DP-1 (connectors) and renderD128 are not.
        if not name.startswith("card") or not name[4:].isdigit():
            continue
        device = os.path.join(root, name, "device")
        try:
            if _sysfs(os.path.join(device, "vendor")) != AMD_VENDOR_ID:
                continue
        except _Unreadable:
            continue
        driver = os.path.join(device, "driver")
        if os.path.lexists(driver) and os.path.basename(os.path.realpath(driver)) != "amdgpu":
            continue  # e.g. an AMD device bound to vfio-pci for a VM
        cards.append((os.path.basename(os.path.realpath(device)), int(name[4:]), device))
    cards.sort(key=lambda c: (c[0], c[1]))
    return [(pci, device) for pci, _, device in cards]


def _amd_hwmon(device):
    """The device's hwmon directory (device/hwmon/hwmonN), or None."""
    try:
        names = sorted(n for n in os.listdir(os.path.join(device, "hwmon"))
                       if n.startswith("hwmon"))
    except OSError:
        return None
    return os.path.join(device, "hwmon", names[0]) if names else None


def _amd_temperature(hwmon, failures):
    """°C from the preferred labelled channel (temp*_input is in millidegrees)."""
    by_label, first = {}, None
    for channel in range(1, 10):
        value = _sysfs_int(os.path.join(hwmon, f"temp{channel}_input"), -100_000, 300_000,
                           failures)
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
        gpu["memory_used_bytes"] = used if used is None or total is None or used <= total \
            else None
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
                entry["processes"] = [_amd_process(p) for p in lib.amdsmi_get_gpu_process_list(h)
                                      if isinstance(p, dict) and isinstance(p.get("pid"), int)]
            out[pci] = entry
        return out

    def close(self):
        with contextlib.suppress(Exception):
            self.lib.amdsmi_shut_down()


def _amd_process(p):
    mem = p.get("memory_usage")
    vram = mem.get("vram_mem") if isinstance(mem, dict) else p.get("mem")
    name = p.get("name")
    return {"pid": p["pid"],
            "name": name if isinstance(name, str) and name != "N/A" else _proc_name(p["pid"]),
            "memory_bytes": vram if isinstance(vram, int) and vram >= 0 else None}


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
    gpu["memory_used_bytes"] = int(used) if used is not None and 0 <= used <= (
        total or used) else None
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

        usage, power, temp, mem = (section("usage"), section("power"), section("temperature"),
                                   section("mem_usage"))
        temperature = next((t for t in (_amd_value(temp.get(k)) for k in ("edge", "hotspot"))
                            if t is not None), None)
        gpus.append(_amd_gpu_fields(
            gpu, _amd_value(usage.get("gfx_activity")), _amd_value(usage.get("umc_activity")),
            _amd_value(mem.get("used_vram"), MIB), _amd_value(mem.get("total_vram"), MIB),
            temperature, _amd_value(power.get("socket_power")), None))
    return gpus


ROCM_SMI_POWER = ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)")
ROCM_SMI_TEMP = ("Temperature (Sensor edge) (C)", "Temperature (Sensor junction) (C)")


def parse_rocm_smi(text):
    """`rocm-smi ... --json`: {"card0": {"GPU use (%)": "0", ...}, ...}; all values strings."""
    doc = json.loads(text)
    gpus = []
    cards = [(k, v) for k, v in (doc.items() if isinstance(doc, dict) else ())
             if k.startswith("card") and k[4:].isdigit() and isinstance(v, dict)]
    for key, card in sorted(cards, key=lambda kv: int(kv[0][4:])):
        gpu = _empty_gpu(int(key[4:]))
        name = card.get("Card Series") or card.get("Device Name")
        gpu["name"] = name if isinstance(name, str) and name != "N/A" else None
        uid = card.get("Unique ID")
        gpu["uuid"] = uid if isinstance(uid, str) and uid != "N/A" else None
        mem_util = card.get("GPU Memory Read/Write Activity (%)", card.get("GPU memory use (%)"))
        gpus.append(_amd_gpu_fields(
            gpu, _amd_value(card.get("GPU use (%)")), _amd_value(mem_util),
            _amd_value(card.get("VRAM Total Used Memory (B)")),
            _amd_value(card.get("VRAM Total Memory (B)")),
            next((t for t in (_amd_value(card.get(k)) for k in ROCM_SMI_TEMP) if t is not None),
                 None),
            next((p for p in (_amd_value(card.get(k)) for k in ROCM_SMI_POWER) if p is not None),
                 None),
            _amd_value(card.get("Max Graphics Package Power (W)"))))
    return gpus


AMD_CLIS = {
    "amd-smi": (["metric", "--json"], parse_amd_smi_metric),
    "rocm-smi": (["--showproductname", "--showuse", "--showmemuse", "--showmeminfo", "vram",
                  "--showtemp", "--showpower", "--showmaxpower", "--showuniqueid", "--json"],
                 parse_rocm_smi),
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
            proc = subprocess.run(self.argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=AMD_CLI_TIMEOUT_S)
            if proc.returncode != 0:
                lines = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
                raise RuntimeError(lines.splitlines()[0] if lines else
                                   f"exit status {proc.returncode}")
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


class MixedBackend:
    """NVIDIA and AMD GPUs on one host: NVIDIA first with NVML's indexes, AMD after them."""

    def __init__(self, nvidia, amd):
        self.nvidia, self.amd = nvidia, amd
        self.error = None

    @property
    def source(self):
        return f"{self.nvidia.source}+{self.amd.source}"

    @property
    def driver(self):
        return self.nvidia.driver

    @property
    def nvml_version(self):
        return self.nvidia.nvml_version

    def sweep(self):
        nvidia = self.nvidia.sweep()
        for gpu in nvidia:
            gpu["vendor"] = "nvidia"
        offset = max((g["index"] for g in nvidia), default=-1) + 1
        amd = self.amd.sweep()
        for gpu in amd:
            gpu["index"] += offset
        errors = [b.error for b in (self.nvidia, self.amd) if b.error]
        self.error = "; ".join(errors) or None
        return nvidia + amd

    def close(self):
        self.nvidia.close()
        self.amd.close()


def _nvidia_absent(backend):
    """No NVIDIA stack at all here (not: a driver that fails), so the host is AMD-only."""
    return isinstance(backend, NoneBackend) or (
        isinstance(backend, NvmlBackend) and not backend.ok and backend.error == NO_LIBRARY)


def _open_backend(interval, once):
    """NVIDIA (NVML, else nvidia-smi) and AMD (sysfs, else amd-smi/rocm-smi), as present."""
    nvidia = _open_nvidia_backend(interval, once)
    amd = _open_amd_backend(interval, once)
    if amd is None:
        return nvidia
    if _nvidia_absent(nvidia):
        nvidia.close()
        return amd
    return MixedBackend(nvidia, amd)


def _watch_stdin(stop, done):
    """Set ``stop`` when stdin reaches EOF (the SSH channel closed)."""
    try:
        fd = sys.stdin.fileno()
        while os.read(fd, 4096):  # unbuffered: anything the cockpit sends is ignored
            pass
    except (AttributeError, OSError, ValueError):
        return  # no usable stdin (closed, or replaced in-process): nothing to watch
    stop.set()
    # A call into a wedged driver can block for minutes; never outlive the cockpit by much.
    if not done.wait(5.0):
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_agent", description="verl-tui GPU telemetry")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--once", action="store_true", help="emit one sample, then exit")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 0.0 < args.interval <= 86400.0:  # also rejects nan and inf
        parser.error("--interval must be a number of seconds in (0, 86400]")
    interval = max(0.05, args.interval)

    stop, done = threading.Event(), threading.Event()
    old_handlers = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            with contextlib.suppress(ValueError):  # main() called from a non-main thread
                old_handlers[signum] = signal.signal(signum, lambda *_: stop.set())
    if not args.once:
        threading.Thread(target=_watch_stdin, args=(stop, done), daemon=True).start()

    out = sys.stdout

    def emit(obj):
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()

    host = HostStats()
    backend = _open_backend(interval, args.once)
    try:
        emit({"type": "hello", "agent": AGENT_PROTOCOL, "hostname": socket.gethostname(),
              "pid": os.getpid(), "python": platform.python_version(),
              "source": backend.source, "driver": backend.driver,
              "nvml_version": backend.nvml_version, "error": backend.error,
              "ncpu": host.ncpu})
        start, slot, seq = time.monotonic(), 0, 0
        while not stop.is_set():
            t = time.time()
            gpus = backend.sweep()
            # driver rides along: NVML may come up after the hello (a driver loaded later).
            emit({"type": "sample", "seq": seq, "t": round(t, 6), "source": backend.source,
                  "driver": backend.driver, "error": backend.error, "host": host.sample(),
                  "gpus": gpus})
            seq += 1
            if args.once:
                break
            # Fixed slots on the monotonic clock: no drift; an overrun skips to the next slot.
            now = time.monotonic()
            slot = max(slot + 1, int((now - start) / interval) + 1)
            stop.wait(max(0.0, start + slot * interval - now))
    except BrokenPipeError:
        # The reader is gone. Point stdout at /dev/null so the exit-time flush stays quiet.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except KeyboardInterrupt:  # Ctrl-C when run by hand
        pass
    except Exception as err:  # a bug or a host we did not foresee: say why, in the protocol
        with contextlib.suppress(Exception):
            emit({"type": "error", "error": f"agent failed: {type(err).__name__}: {err}"})
        return 1
    finally:
        backend.close()
        done.set()
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
