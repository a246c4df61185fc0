"""GPU agent part (joined into tui/remote/gpu_agent.py's source by the loader): NVML health
readings for one NVIDIA GPU -- ECC, retired pages / remapped rows, clock event (throttle)
reasons, PCIe link, persistence mode, XID critical errors. Stdlib + pynvml, Python 3.8+.

Read every HEALTH_EVERY_S seconds, not every sample: one sweep of these calls took ~7 ms on an
H100 (bench/device_gpu_health.py), against ~15 us for the utilization/memory/power sweep.
ECC counters, row remapping and persistence change on a scale of minutes; a throttle reason
that lasts less than 10 s does not slow a training step much. The cockpit keeps the last
health object per GPU.

Every reading is independent: a call the driver, the GPU or the pynvml release lacks
(NotSupported, FunctionNotFound, no such pynvml function, NoPermission) becomes None ("n/a")
and the others still run. Only a lost GPU raises (the caller reports the GPU as lost).
"""

from __future__ import annotations

import contextlib
import os

HEALTH_EVERY_S = float(os.environ.get("VERL_TUI_AGENT_HEALTH_S", "10"))
# nvmlClocksEventReason* (newer pynvml) / nvmlClocksThrottleReason* (older): pynvml's constant
# names, the nvml.h value used when this pynvml lacks the name, and the protocol's word.
CLOCK_REASONS = (
    ("GpuIdle", 0x1, "idle"),
    ("ApplicationsClocksSetting", 0x2, "app_clocks"),
    ("SwPowerCap", 0x4, "sw_power_cap"),
    ("HwSlowdown", 0x8, "hw_slowdown"),
    ("SyncBoost", 0x10, "sync_boost"),
    ("SwThermalSlowdown", 0x20, "sw_thermal"),
    ("HwThermalSlowdown", 0x40, "hw_thermal"),
    ("HwPowerBrakeSlowdown", 0x80, "hw_power_brake"),
    ("DisplayClockSetting", 0x100, "display_clocks"),
)
CLOCK_CALLS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",  # deprecated name; what older drivers export
)
XID_DRAIN = 32  # events read per health sweep at most (never loop on a storm)


def _reason_bits(nv):
    out = []
    for name, value, word in CLOCK_REASONS:
        bit = getattr(nv, "nvmlClocksEventReason" + name, None)
        if bit is None:
            bit = getattr(nv, "nvmlClocksThrottleReason" + name, value)
        out.append((int(bit), word))
    return out


def _get(backend, name, *args):
    """pynvml.<name>(*args), or None where this pynvml, driver or GPU cannot answer."""
    fn = getattr(backend.nv, name, None)
    return None if fn is None else backend._call(fn, *args)


def _int(value):
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(value):
    # nvmlEnableState_t: 0 disabled, 1 enabled; anything else is not an answer.
    return {0: False, 1: True}.get(value) if isinstance(value, int) else None


def read_health(backend, st, handle):
    """One GPU's health object (tui/cluster/agent_schema.py validates it; keep names in step)."""
    nv = backend.nv
    uncorrected = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile, aggregate = getattr(nv, "NVML_VOLATILE_ECC", 0), getattr(nv, "NVML_AGGREGATE_ECC", 1)
    mode = _get(backend, "nvmlDeviceGetEccMode", handle)  # [current, pending]
    rows = _get(backend, "nvmlDeviceGetRemappedRows", handle)  # (corr, unc, pending, failure)
    if not (isinstance(rows, (tuple, list)) and len(rows) == 4):
        rows = (None, None, None, None)
    mask = backend._call(backend._newest, CLOCK_CALLS, handle)
    mask = _int(mask)
    if mask is None:
        reasons = None
    else:
        bits = st.get("reason_bits")
        if bits is None:
            bits = st["reason_bits"] = _reason_bits(nv)
        reasons = [word for bit, word in bits if mask & bit]
    xid_count, xid_last = _xid(backend, st, handle)
    return {
        "ecc_mode": _flag(mode[0]) if isinstance(mode, (list, tuple)) and mode else None,
        "ecc_volatile_uncorrected": _int(
            _get(backend, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, volatile)
        ),
        "ecc_aggregate_uncorrected": _int(
            _get(backend, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, aggregate)
        ),
        "retired_pages_pending": _flag(
            _get(backend, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        ),
        "remap_corrected": _int(rows[0]),
        "remap_uncorrected": _int(rows[1]),
        "remap_pending": None if _int(rows[2]) is None else bool(rows[2]),
        "remap_failure": None if _int(rows[3]) is None else bool(rows[3]),
        "clock_reasons": reasons,
        "clock_reasons_mask": mask,
        "pcie_gen": _int(_get(backend, "nvmlDeviceGetCurrPcieLinkGeneration", handle)),
        "pcie_gen_max": _int(_get(backend, "nvmlDeviceGetMaxPcieLinkGeneration", handle)),
        "pcie_width": _int(_get(backend, "nvmlDeviceGetCurrPcieLinkWidth", handle)),
        "pcie_width_max": _int(_get(backend, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
        "persistence": _flag(_get(backend, "nvmlDeviceGetPersistenceMode", handle)),
        "xid_count": xid_count,
        "xid_last": xid_last,
    }


def _xid(backend, st, handle):
    """(XID critical errors seen since this agent registered, the last XID), or (None, None).

    One event set per GPU, registered on the first health sweep; each sweep drains it with a
    zero timeout (nvmlEventSetWait returns TIMEOUT at once when nothing is pending)."""
    nv = backend.nv
    if "xid_set" not in st:
        st["xid_set"], st["xid_count"], st["xid_last"] = None, 0, None
        event_set = None
        try:
            event_set = nv.nvmlEventSetCreate()
            kind = getattr(nv, "nvmlEventTypeXidCriticalError", 0x8)
            nv.nvmlDeviceRegisterEvents(handle, kind, event_set)
            st["xid_set"] = event_set
        except nv.NVMLError as err:
            _free(nv, event_set)
            if err.value in backend.lost_codes:
                raise
        except Exception:  # no such pynvml function, ctypes trouble: XIDs are n/a
            _free(nv, event_set)
    event_set = st["xid_set"]
    if event_set is None:
        return None, None
    wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
    for _ in range(XID_DRAIN):
        try:
            data = wait(event_set, 0)
        except nv.NVMLError as err:  # TIMEOUT: nothing pending
            if err.value in backend.lost_codes:
                raise
            break
        except Exception:
            break
        st["xid_count"] += 1
        st["xid_last"] = _int(getattr(data, "eventData", None))
    return st["xid_count"], st["xid_last"]


def _free(nv, event_set):
    if event_set is not None:
        with contextlib.suppress(Exception):  # best effort; nvmlShutdown frees the rest
            nv.nvmlEventSetFree(event_set)
