"""The boundary for a host's stack answer (tui/remote/stack_dump.py's JSON lines): py-spy's
dumps parsed into threads and frames (its --json, or its text from a py-spy before --json),
every field checked and cut to size, and why a process could not be dumped turned into one
line per host that names the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tui.cluster.tracing import TracingFacts, missing_fix, ptrace_fix
from tui.sanitize import one_line
from tui.stack.model import MAX_FRAMES, Frame, ProcessDump, Target, Thread

MAX_THREADS = 256
NAME_CHARS = 200
_TEXT_THREAD = re.compile(r'Thread (0x[0-9A-Fa-f]+|\d+) ?(\([^)]*\))?:?(?: "(.*)")?')
_TEXT_FRAME = re.compile(r"\s+(.+?) \((.*?)(?::(\d+))?\)\s*")


def _s(value: Any, cap: int = NAME_CHARS) -> str:
    return one_line(value, cap) if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _frames_json(raw: Any) -> tuple[Frame, ...]:
    out = []
    for f in raw[:MAX_FRAMES] if isinstance(raw, list) else ():
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            line = _int(f.get("line")) or 0
            where = f.get("short_filename") or f.get("filename")
            out.append(Frame(_s(f["name"]), _s(where), max(0, min(line, 1 << 31))))
    return tuple(out)


def parse_json_dump(text: str, pid: int) -> tuple[Thread, ...] | None:
    """py-spy's `dump --json` answer (a list of threads), or None when it is not that."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, list):
        return None
    threads = []
    for t in doc[:MAX_THREADS]:
        if not isinstance(t, dict):
            continue
        tid = _int(t.get("os_thread_id"))
        name = _s(t.get("thread_name")) or str(tid if tid is not None else "?")
        threads.append(
            Thread(
                name=name,
                frames=_frames_json(t.get("frames")),
                idle=t.get("active") is False,
                main=tid == pid,
            )
        )
    return tuple(threads)


def parse_text_dump(text: str, pid: int) -> tuple[Thread, ...]:
    """py-spy's text dump: `Thread 123 (idle): "MainThread"` lines, each followed by its
    frames as `    func (file:line)`."""
    threads: list[Thread] = []
    name, main, idle, frames = "", False, False, []  # type: ignore[var-annotated]
    started = False

    def close() -> None:
        if started and len(threads) < MAX_THREADS:
            threads.append(Thread(name, tuple(frames[:MAX_FRAMES]), idle, main))

    for line in text.splitlines():
        m = _TEXT_THREAD.match(line)
        if m:
            close()
            started = True
            tid = m.group(1)
            num = int(tid, 16) if tid.startswith("0x") else int(tid)
            name = _s(m.group(3)) or tid
            main, idle, frames = num == pid, "idle" in (m.group(2) or ""), []
            continue
        f = _TEXT_FRAME.fullmatch(line)
        if started and f:
            frames.append(Frame(_s(f.group(1)), _s(f.group(2)), int(f.group(3) or 0)))
    close()
    return tuple(threads)


# ---- why a process was not dumped (the fixes: tui/cluster/tracing.py) -----------------------


@dataclass
class HostAnswer:
    """One host's answer, parsed: the dumps and, per kind of failure, the pids it hit."""

    host: str
    facts: TracingFacts | None = None
    dumps: list[ProcessDump] = field(default_factory=list)
    denied: list[int] = field(default_factory=list)
    other_user: dict[str, list[int]] = field(default_factory=dict)  # owner → pids
    gone: list[int] = field(default_factory=list)
    traced: list[tuple[int, int]] = field(default_factory=list)  # (pid, the pid tracing it)
    failed: list[tuple[int, str]] = field(default_factory=list)  # (pid, py-spy's reason)
    timed_out: list[int] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)
    error: str = ""  # the host could not answer at all
    bad_lines: int = 0


def _reason(err: str) -> str:
    """py-spy's error in one line: its `Error:` line and the innermost cause."""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    head = next((ln for ln in lines if ln.startswith("Error:")), lines[0] if lines else "")
    causes = [ln.split(":", 1)[1].strip() for ln in lines if re.match(r"\d+: ", ln)]
    head = head.removeprefix("Error:").strip()
    return one_line(head + (f" ({causes[-1]})" if causes else ""), 300)


_DENIED = ("permission denied", "operation not permitted", "os error 1)", "os error 13)")


def take_proc(answer: HostAnswer, doc: Mapping[str, Any], targets: Mapping[int, Target]) -> None:
    """One `{"proc": …}` line of the host into `answer`."""
    pid = _int(doc.get("pid"))
    if pid is None or pid not in targets:
        answer.bad_lines += 1
        return
    target = targets[pid]
    if doc.get("gone"):
        answer.gone.append(pid)
        return
    env = doc.get("env")
    rank = None
    if isinstance(env, dict) and isinstance(env.get("RANK"), str) and env["RANK"].isdigit():
        rank = int(env["RANK"][:9])
    if rank is not None and target.rank is None:
        target = Target(target.host, target.pid, target.role, target.actor, rank)
    rc = doc.get("rc")
    out = doc["out"] if isinstance(doc.get("out"), str) else ""
    err = doc["err"] if isinstance(doc.get("err"), str) else ""
    if doc.get("cut") is True:
        answer.cut.append(pid)
    if rc is None and "rc" in doc:
        answer.timed_out.append(pid)
        return
    if rc == 0:
        threads = parse_json_dump(out, pid)
        if threads is None:
            threads = parse_text_dump(out, pid)
        answer.dumps.append(ProcessDump(target, threads))
        return
    tracer = _int(doc.get("tracer"))
    if tracer:
        answer.traced.append((pid, tracer))
        return
    if any(s in err.lower() for s in _DENIED):
        owner, us = _s(doc.get("user"), 64), answer.facts.user if answer.facts else ""
        if owner and us and owner != us and us != "root":
            answer.other_user.setdefault(owner, []).append(pid)
        else:
            answer.denied.append(pid)
        return
    if "no such file" in err.lower() or "not running" in err.lower():
        answer.gone.append(pid)
        return
    answer.failed.append((pid, _reason(err) or f"py-spy exit status {rc}"))


def _pids(pids: list[int]) -> str:
    shown = ", ".join(str(p) for p in sorted(pids)[:8])
    return f"pid {shown}" if len(pids) == 1 else f"pids {shown}" + (" …" if len(pids) > 8 else "")


def problems_of(answer: HostAnswer, python: str) -> list[str]:
    """The host's problems, each one line naming the fix (at most one per kind)."""
    host, facts = answer.host, answer.facts or TracingFacts()
    if answer.error:
        return [answer.error]
    if facts.py_spy is None and answer.facts is not None:
        return [missing_fix(host, facts, python)]
    out = []
    if answer.denied:
        out.append(f"ptrace denied for {_pids(answer.denied)}: " + ptrace_fix(facts))
    for owner, pids in sorted(answer.other_user.items()):
        us = facts.user or "this user"
        verb, them = ("belongs", "it") if len(pids) == 1 else ("belong", "them")
        who = "root" if owner == "root" else f"{owner} or root"
        out.append(
            f"{_pids(pids)} {verb} to {owner}, not {us}: connect as {who} (ssh.user in "
            f"hosts.yaml) to dump {them}"
        )
    if answer.traced:
        held = ", ".join(f"{p} (by pid {t})" for p, t in sorted(answer.traced)[:8])
        out.append(
            f"pid {held} already traced by another program (a debugger, another dump): "
            "try again once it lets go"
        )
    if answer.timed_out:
        out.append(
            f"py-spy did not finish for {_pids(answer.timed_out)} within its deadline "
            "(a process stopped in the kernel, or the host overloaded): try again"
        )
    for pid, why in answer.failed[:4]:
        out.append(f"pid {pid}: py-spy failed: {why}")
    if len(answer.failed) > 4:
        out.append(f"py-spy failed for {len(answer.failed) - 4} more process(es)")
    if answer.gone:
        out.append(f"{_pids(answer.gone)} exited before the dump (Ray's list was older)")
    if answer.cut:
        out.append(
            f"{_pids(answer.cut)}: only the threads that fit the size bound were kept (the main "
            "thread first)"
        )
    if answer.bad_lines:
        out.append(f"{answer.bad_lines} line(s) of its answer not understood")
    return out
