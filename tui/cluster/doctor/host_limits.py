"""Host limit checks: the Hugging Face cache, memory, clock skew, numexpr threads and MKL's
threading layer."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from tui.cluster.doctor.findings import (
    MEM_WARN_BYTES,
    MEM_WARN_FRACTION,
    NUMEXPR_CPU_LIMIT,
    SKEW_FAIL_S,
    SKEW_WARN_S,
    Finding,
    Status,
    _f,
)
from tui.cluster.probe import HostFacts
from tui.config.hosts import Inventory
from tui.fmt import GIB
from tui.shellcmd import copy_line


def _hf_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        hf = f.hf_cache
        if hf is None:
            out.append(
                _f(
                    "hf-cache",
                    "warn",
                    name,
                    f"HF cache not checked: {f.probe_errors.get('hf_cache', 'no data')}",
                )
            )
            continue
        if hf.readable and hf.writable:
            note = "" if hf.exists else f" (absent; {hf.checked} lets it be created)"
            out.append(_f("hf-cache", "ok", name, f"{hf.path} is writable{note}"))
            continue
        why = hf.error or ("not readable" if not hf.readable else "not writable")
        out.append(
            _f(
                "hf-cache",
                "fail",
                name,
                f"HF cache {hf.path} ({hf.source}) is unusable: {why}",
                "point it at a writable directory: ray.env: {HF_HOME: /path/to/hf} "
                f"(or {copy_line(['mkdir', '-p', hf.path])} and fix its owner)",
            )
        )
    return out


def _memory_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        total, avail = f.mem_total_bytes, f.mem_available_bytes
        if f.mem_cgroup_limit_bytes and total:
            total = min(total, f.mem_cgroup_limit_bytes)
        if not total or avail is None:
            out.append(
                _f(
                    "memory",
                    "warn",
                    name,
                    f"memory unknown: {f.probe_errors.get('memory', 'no /proc/meminfo')}",
                )
            )
            continue
        avail = min(avail, total)
        text = f"{avail / GIB:.1f} of {total / GIB:.1f} GiB available"
        if avail < MEM_WARN_BYTES or avail < MEM_WARN_FRACTION * total:
            out.append(
                _f(
                    "memory",
                    "warn",
                    name,
                    text + " (little room for Ray's object store and workers)",
                    f"free memory on {name}: ps aux --sort=-rss | head; leftover Ray: ray stop",
                )
            )
        else:
            out.append(_f("memory", "ok", name, text))
    return out


def classify_clock_offsets(
    offsets: Mapping[str, tuple[float, float]], reference: str | None = None
) -> list[Finding]:
    """Clock skew per host from (offset to the cockpit, rtt) pairs, both in seconds.

    Skew is measured against the reference host (the head) or, without one, the median
    offset; each estimate is only good to ± rtt/2, so that much is forgiven.
    """
    if not offsets:
        return []
    if reference is not None and reference in offsets:
        ref_offset, ref_rtt = offsets[reference]
        against = f"head {reference}"
    else:
        ref_offset = statistics.median(o for o, _ in offsets.values())
        ref_rtt = 0.0
        against = "the median host"
    out = []
    for name, (offset, rtt) in offsets.items():
        skew = offset - ref_offset
        slack = (rtt + ref_rtt) / 2
        certain = max(0.0, abs(skew) - slack)
        status: Status = (
            "fail" if certain > SKEW_FAIL_S else "warn" if certain > SKEW_WARN_S else "ok"
        )
        if status == "ok":  # one text for every good host, so they fold into one row
            out.append(_f("clock-skew", "ok", name, f"within {SKEW_WARN_S:g} s of {against}"))
            continue
        out.append(
            _f(
                "clock-skew",
                status,
                name,
                f"clock {skew:+.3f} s vs {against} (±{slack:.3f} s); {offset:+.3f} s vs "
                "this machine",
                f"sync clocks with NTP on {name}: timedatectl set-ntp true; chronyc tracking",
            )
        )
    return out


def _clock_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    offsets = {
        n: (f.clock_offset_s, f.rtt_s or 0.0)
        for n, f in facts.items()
        if f.ok and f.clock_offset_s is not None
    }
    return classify_clock_offsets(offsets, inventory.head.name)


def _numexpr_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        cpus = f.cpu_count or 0
        if f.numexpr_version is None:
            out.append(_f("numexpr-threads", "ok", name, "numexpr not installed"))
        elif f.env.get("NUMEXPR_MAX_THREADS"):
            out.append(
                _f(
                    "numexpr-threads",
                    "ok",
                    name,
                    f"NUMEXPR_MAX_THREADS={f.env['NUMEXPR_MAX_THREADS']}",
                )
            )
        elif cpus > NUMEXPR_CPU_LIMIT:
            out.append(
                _f(
                    "numexpr-threads",
                    "warn",
                    name,
                    f"numexpr {f.numexpr_version} with {cpus} CPUs and NUMEXPR_MAX_THREADS "
                    "unset: it caps its threads and logs a note in every worker",
                    f'ray.env: {{NUMEXPR_MAX_THREADS: "{NUMEXPR_CPU_LIMIT}"}}',
                )
            )
        else:
            out.append(
                _f(
                    "numexpr-threads",
                    "ok",
                    name,
                    f"numexpr {f.numexpr_version}, {cpus} CPUs (≤ {NUMEXPR_CPU_LIMIT})",
                )
            )
    return out


def _mkl_findings(facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    fix = 'ray.env: {MKL_SERVICE_FORCE_INTEL: "1"} (or MKL_THREADING_LAYER: GNU)'
    for name, f in facts.items():
        if not f.ok:
            continue
        layer = f.env.get("MKL_THREADING_LAYER", "").strip().upper()
        forced = bool(f.env.get("MKL_SERVICE_FORCE_INTEL", "").strip())
        what = (
            ", ".join(
                x
                for x in (
                    "numpy linked with MKL" if f.numpy_mkl else "",
                    f"mkl {f.mkl_version}" if f.mkl_version else "",
                    f"mkl-service {f.mkl_service_version}" if f.mkl_service_version else "",
                )
                if x
            )
            or "MKL libraries"
        )
        if not f.mkl_present:
            out.append(_f("mkl-threading", "ok", name, "no MKL"))
        elif layer == "INTEL" and not forced:
            out.append(
                _f(
                    "mkl-threading",
                    "warn",
                    name,
                    f"{what} with MKL_THREADING_LAYER=INTEL: torch's libgomp makes it fail "
                    "('MKL_THREADING_LAYER=INTEL is incompatible with libgomp')",
                    fix,
                )
            )
        elif forced or layer == "GNU":
            setting = "MKL_SERVICE_FORCE_INTEL" if forced else "MKL_THREADING_LAYER=GNU"
            out.append(_f("mkl-threading", "ok", name, f"{what}; {setting} set"))
        else:
            out.append(
                _f(
                    "mkl-threading",
                    "warn",
                    name,
                    f"{what}, and neither MKL_SERVICE_FORCE_INTEL nor "
                    "MKL_THREADING_LAYER=GNU is set: a worker importing numpy then torch "
                    "can fail with 'MKL_THREADING_LAYER=INTEL is incompatible with "
                    "libgomp'",
                    fix,
                )
            )
    return out
