"""GPU agent part (joined into tui/remote/gpu_agent.py's source by the loader): NVIDIA GPUs
through pynvml (NVML), else one streaming ``nvidia-smi --query-gpu``, else nothing. Stdlib +
pynvml (optional), Python 3.8+.
"""

from __future__ import annotations

import contextlib
import csv
import os
import select
import shutil
import subprocess
import threading
import time

from tui.remote.gpu_common import MIB, _empty_gpu, _proc_name
from tui.remote.nvml_health import HEALTH_EVERY_S, read_health

# How often a failed nvmlInit (or a dead nvidia-smi) is retried: a driver can come back.
RETRY_S = float(os.environ.get("VERL_TUI_AGENT_NVML_RETRY_S", "10"))
NO_LIBRARY = "NVML library not found (no NVIDIA driver on this host)"
NO_TOOLS = "pynvml is not installed and nvidia-smi was not found"
SMI_FIELDS = (
    "index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,power.limit"
)
# Alternatives for calls whose C symbol changed over driver releases, preferred first.
TEMPERATURE = ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV")
PROCESSES = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
# nvmlDeviceGetSamples: GPU utilization (nvmlSamplingType_t), the nvmlValue_t member for each
# nvmlValueType_t, and how many sweeps in a row may bring no new sample before NVML's whole
# buffer is read again (its clock may have stepped back below the last timestamp seen).
UTIL_SAMPLES = 1
VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
UTIL_RESYNC = 3
SMI_KEYS = (
    "name",
    "uuid",
    "util_percent",
    "mem_util_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
)


def _text(value):
    # Old pynvml releases return bytes, new ones str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class NvmlBackend:
    """pynvml sweeps. While nvmlInit fails it reports source "none" and retries."""

    def __init__(self, pynvml, interval=1.0):
        self.nv = pynvml
        self.interval = interval  # what a first utilization reading averages over
        self.ok = False
        self.error = None
        self.driver = self.nvml_version = None
        self.static = {}  # index -> {"handle", "name", "uuid", "power_limit_w"}
        self.lost_codes = {
            getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", 15),
            getattr(pynvml, "NVML_ERROR_RESET_REQUIRED", 16),
        }
        self.next_init = 0.0
        self.next_health = 0.0  # health readings ride on one sample every HEALTH_EVERY_S
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
        self.next_health = 0.0  # NVML (re)started: the next sample carries health
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
        missing = (
            nv.NVMLError_FunctionNotFound,
            getattr(nv, "NVMLLibraryMismatchError", nv.NVMLError_FunctionNotFound),
        )
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
        now = time.monotonic()
        health = now >= self.next_health
        if health:
            self.next_health = now + HEALTH_EVERY_S
        return [self._device(i, health) for i in range(count)]

    def _device(self, index, health=False):
        nv = self.nv
        st = self.static.get(index)
        try:
            if st is None:
                st = {
                    "handle": nv.nvmlDeviceGetHandleByIndex(index),
                    "name": None,
                    "uuid": None,
                    "power_limit_w": None,
                    "util_ts": 0,
                    "util_newest": None,
                    "util_empty": 0,
                    "util_ok": True,
                }
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
            sm_clock = self._call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)  # MHz
            gpu["sm_clock_mhz"] = int(sm_clock) if sm_clock is not None else None
            procs = self._call(self._newest, PROCESSES, h)
            if procs is not None:
                gpu["processes"] = [
                    {
                        "pid": int(p.pid),
                        "name": _proc_name(int(p.pid)),
                        "memory_bytes": int(p.usedGpuMemory)
                        if p.usedGpuMemory is not None
                        else None,
                    }
                    for p in procs
                ]
            if health:
                gpu["health"] = read_health(self, st, h)
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
        member = (
            VALUE_FIELDS[vtype] if type(vtype) is int and 0 <= vtype < len(VALUE_FIELDS) else None
        )
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
    """Time-weighted mean of (timestamp us, percent) samples sorted by time.

    A sample's value is the busy share of the period that ends at its timestamp, so each one
    weighs the time since the sample before it (``prev`` before the first; None: unknown). A
    gap longer than twice the usual spacing (sampling paused) counts as twice the spacing."""
    stamps = [ts for ts, _ in points]
    gaps = [stamps[i] - stamps[i - 1] for i in range(1, len(stamps))]  # (no pairwise in 3.8)
    usual = sorted(gaps)[len(gaps) // 2] if gaps else None
    first = stamps[0] - prev if prev else usual
    weights = [w if usual is None or w is None else min(w, 2 * usual) for w in [first, *gaps]]
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
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
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
