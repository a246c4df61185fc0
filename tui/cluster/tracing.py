"""Whether py-spy can dump a host's processes: the host's answer (tui/remote/tracing.py, shipped
inside the probe, the job preflight and the stack dump) read at one boundary, and the one line
that names the fix for each way it cannot: py-spy missing, ptrace refused (Yama's
kernel.yama.ptrace_scope, a container without CAP_SYS_PTRACE), Ray run by another user. The
doctor and the job preflight warn with these before a job starts (so the tool is there when the
hang comes); `verl-tui stack` says the same when a dump fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tui.cluster.doctor.findings import Finding, Status
from tui.sanitize import one_line
from tui.shellcmd import copy_line

if TYPE_CHECKING:
    from tui.cluster.probe import HostFacts
    from tui.config.hosts import Inventory

PY_SPY_CHECK = ("py-spy", "py-spy for stack dumps")
PTRACE_CHECK = ("ptrace", "ptrace allowed (py-spy)")


def _s(value: Any, cap: int) -> str:
    return one_line(value, cap) if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TracingFacts:
    """One host's answer about tracing (every field checked; unknown is None)."""

    py_spy: str | None = None
    python: str = ""
    user: str = ""
    uid: int | None = None
    ptrace_scope: int | None = None
    cap_ptrace: bool | None = None
    ray_users: tuple[str, ...] = ()
    trial_ok: bool | None = None  # py-spy dumped a Python of ours (None: not tried)
    trial_error: str = ""

    @classmethod
    def parse(cls, doc: Mapping[str, Any] | Any) -> TracingFacts:
        if not isinstance(doc, Mapping):
            return cls()
        cap = doc.get("cap_ptrace")
        users = doc.get("ray_users")
        raw = doc.get("trial")
        trial: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        ok = trial.get("ok")
        return cls(
            py_spy=_s(doc.get("py_spy"), 500) or None,
            python=_s(doc.get("python"), 500),
            user=_s(doc.get("user"), 64),
            uid=_int(doc.get("uid")),
            ptrace_scope=_int(doc.get("ptrace_scope")),
            cap_ptrace=cap if isinstance(cap, bool) else None,
            ray_users=tuple(_s(u, 64) for u in users[:8] if isinstance(u, str))
            if isinstance(users, list)
            else (),
            trial_ok=ok if isinstance(ok, bool) else None,
            trial_error=_s(trial.get("error"), 300),
        )


def missing_fix(host: str, facts: TracingFacts, python: str) -> str:
    """The one line for a host without py-spy."""
    where = facts.python or python
    return (
        f"py-spy not found beside {where} nor on PATH: "
        f"`{copy_line([where, '-m', 'pip', 'install', 'py-spy'])}` on {host} "
        "(ray[default] installs it)"
    )


def ptrace_fix(facts: TracingFacts) -> str:
    """What to change so py-spy may trace the job's processes."""
    scope = facts.ptrace_scope
    if scope == 3:
        return "kernel.yama.ptrace_scope is 3 (no tracing at all until a reboot with a lower value)"
    if scope is not None and scope >= 1 and facts.uid != 0:
        return (
            f"kernel.yama.ptrace_scope is {scope}: `sysctl kernel.yama.ptrace_scope=0` on the "
            "host, or connect as root (ssh.user in hosts.yaml)"
        )
    if facts.cap_ptrace is False:
        return (
            "the process has no CAP_SYS_PTRACE (a container started without it): start the "
            "container with --cap-add SYS_PTRACE (docker/podman), or connect as a user that has it"
        )
    return (
        "connect as the user that started Ray, or as root (ssh.user in hosts.yaml); in a "
        "container, --cap-add SYS_PTRACE"
    )


def tracing_findings(
    host: str, python: str, doc: Mapping[str, Any] | Any, *, status: Status = "warn"
) -> list[Finding]:
    """The two findings of one host's answer: py-spy there, and ptrace allowed (a warning, not
    a failure: the job runs either way, only its stack dump would not). No answer: none."""
    if not isinstance(doc, Mapping) or not doc:
        return []
    f = TracingFacts.parse(doc)

    def finding(check: tuple[str, str], st: Status, text: str, fix: str = "") -> Finding:
        return Finding(check[0], check[1], st, host, one_line(text, 400), one_line(fix, 400))

    if f.py_spy is None:
        line = missing_fix(host, f, python)
        text, _, fix = line.partition(": ")
        return [finding(PY_SPY_CHECK, status, text, fix)]
    out = [finding(PY_SPY_CHECK, "ok", f"py-spy at {f.py_spy}")]
    others = [u for u in f.ray_users if u != f.user]
    if f.trial_ok is False:
        out.append(
            finding(PTRACE_CHECK, status, f"py-spy may not trace: {f.trial_error}", ptrace_fix(f))
        )
    elif f.uid == 0 and f.cap_ptrace is False:
        out.append(
            finding(
                PTRACE_CHECK,
                status,
                "root without CAP_SYS_PTRACE: py-spy may not trace processes that hold it",
                ptrace_fix(f),
            )
        )
    elif others and f.uid != 0:
        out.append(
            finding(
                PTRACE_CHECK,
                status,
                f"Ray runs as {', '.join(others)}, not {f.user}: py-spy may not read its processes",
                f"connect as {others[0]} or root (ssh.user in hosts.yaml)",
            )
        )
    elif f.trial_ok:
        out.append(finding(PTRACE_CHECK, "ok", f"py-spy dumped a process of {f.user}"))
    return out


def doctor_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    """The doctor's py-spy and ptrace rows, from each host's probe answer."""
    out: list[Finding] = []
    for host in inventory.hosts:
        f = facts.get(host.name)
        if f is not None and f.ok:
            out += tracing_findings(host.name, host.python, f.tracing)
    return out
