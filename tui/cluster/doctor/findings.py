"""The doctor's findings: check ids in report order, one Finding per check and host, and the
thresholds the checks share."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tui.fmt import GIB
from tui.shellcmd import copy_line

Status = Literal["ok", "warn", "fail"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail")

CPUS_PER_GPU = 3  # verl's STRICT_PACK bundles: {CPU: 3, GPU: 1} per GPU
MIN_DEBUGPY = (1, 8)
MEM_WARN_FRACTION = 0.10
MEM_WARN_BYTES = 8 * GIB
SKEW_WARN_S = 2.0
SKEW_FAIL_S = 30.0
NUMEXPR_CPU_LIMIT = 64
CONNECT_TIMEOUT_S = 3.0
MAX_PARALLEL = 128  # commands in flight, one per host, each a channel on its connection
LISTENER_LIFETIME_S = 120  # the temporary GCS-port listener exits by itself after this

CHECKS: dict[str, str] = {
    "ssh-reach": "SSH reach",
    "host-keys": "Host keys checked",
    "python-interpreter": "Interpreter runs",
    "python-version": "Python version equal",
    "ray-version": "Ray version equal",
    "ray-installed": "ray installed",
    "verl-installed": "verl installed",
    "debugpy": "debugpy ≥ 1.8",
    "head-ports": "Head ports free",
    "gcs-reach": "GCS port reachable",
    "socket-ifname": "NCCL/Gloo interface",
    "infiniband": "InfiniBand ports",
    "gpu-count": "GPU count equal",
    "gpu-health": "GPU health (NVML)",
    "cpus-per-gpu": "CPUs ≥ 3 × GPUs",
    "hf-cache": "HF cache writable",
    "memory": "Free memory",
    "clock-skew": "Clock skew",
    "numexpr-threads": "NUMEXPR_MAX_THREADS",
    "mkl-threading": "MKL threading layer",
    "py-spy": "py-spy for stack dumps",
    "ptrace": "ptrace allowed (py-spy)",
}


_LINE_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")


@dataclass(frozen=True)
class Finding:
    check: str  # stable id, a key of CHECKS
    title: str
    status: Status
    host: str | None  # None: the whole cluster, or several hosts named in `finding`
    finding: str  # one line: what was seen
    fix: str  # one line: a command or a hosts.yaml key; "" when nothing needs doing

    def to_json(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "title": self.title,
            "status": self.status,
            "host": self.host,
            "finding": self.finding,
            "fix": self.fix,
        }


def _f(check: str, status: Status, host: str | None, finding: str, fix: str = "") -> Finding:
    one = " ".join(finding.split())  # one line, always
    # The fix may hold a quoted command line (tui/shellcmd.py): line breaks go, but the spaces
    # inside a quoted word are part of it.
    return Finding(check, CHECKS[check], status, host, one, _LINE_BREAKS.sub(" ", fix).strip())


def summarize(findings: Iterable[Finding]) -> dict[str, int]:
    counts = Counter(f.status for f in findings)
    return {s: counts.get(s, 0) for s in STATUSES}


def _names(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def _version_tuple(text: str | None) -> tuple[int, ...]:
    parts = []
    for piece in (text or "").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def _pip(python: str, requirement: str) -> str:
    return copy_line([python, "-m", "pip", "install", requirement])
