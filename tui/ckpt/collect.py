"""Collect: copy the files of a step that one host lacks onto it from the hosts that hold them.

The bytes are relayed through the cockpit, over the SSH connections it already has, so the nodes
need no SSH (or any network path) between them. Per file (remote/ckpt_helper.py has the details):

    source: ``send PATH``  — listens on its own 127.0.0.1; prints port, token, size
    target: ``recv PATH``  — listens on its own 127.0.0.1; writes a fresh temp file
                              ``.verl-tui-partial.XXXX.NAME`` next to PATH
    cockpit: ``open_connection`` to each (direct-tcpip channels of the existing connections),
             presents each token, tells the receiver the size, and pumps 1 MiB reads from one
             socket into the other (TCP and SSH window flow control bound the memory).
    Both ends hash what they read / wrote. Only when the sizes and the sha256 agree does the
    cockpit say ``commit SHA``; the receiver then hard-links the temp file to PATH — which
    fails if PATH exists, so a file of the same name is never overwritten (same content:
    "present"; another: a conflict).

A temp file is deleted by its receiver on a short stream, a hang-up, or when its stdin closes —
after a failure, or when the cockpit or its connection dies — so no partial file is ever left
under the final name, and none under a temp name unless the target itself goes down mid-file.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tui.ckpt.hostcmd import CkptError, host_transport, parse_json_line, run_op, script_argv
from tui.ckpt.scan import CheckpointIndex, StepState
from tui.transport.fleet import Fleet
from tui.transport.types import StreamProcess, Transport, TransportError

CHUNK = 1 << 20
HELLO_TIMEOUT = 60.0
IO_TIMEOUT = 300.0  # one read or write making no progress for this long fails the file
FINISH_TIMEOUT = 600.0  # the receiver's fsync of a large file
HASH_RATE = 100e6  # bytes/s assumed when budgeting time for remote sha256 of existing files
PARALLEL = 4  # files in flight at once
T1 = TypeVar("T1")
T2 = TypeVar("T2")


@dataclass(frozen=True)
class CopyProgress:
    path: str  # in the step folder, e.g. "actor/model_world_size_2_rank_1.pt"
    source: str
    done: int  # bytes of this file
    total: int
    files_done: int
    files_total: int
    bytes_done: int  # bytes of all files to copy
    bytes_total: int
    finished: bool = False  # the file's last event (copied, present, a conflict or failed)


ProgressCallback = Callable[[CopyProgress], None]


@dataclass(frozen=True)
class Copied:
    path: str
    source: str
    size: int
    sha256: str
    seconds: float


@dataclass(frozen=True)
class Conflict:
    path: str
    reason: str  # one line


@dataclass(frozen=True)
class Failed:
    path: str
    source: str
    error: str  # one line


@dataclass(frozen=True)
class PlannedCopy:
    path: str
    source: str
    size: int


@dataclass(frozen=True)
class CollectPlan:
    step: int
    role: str | None
    target: str
    copies: tuple[PlannedCopy, ...]  # the target lacks these
    existing: tuple[tuple[str, str], ...]  # (path, another holder): on the target already
    conflicts: tuple[Conflict, ...]  # sizes that disagree: nothing copied for these

    @property
    def bytes_total(self) -> int:
        return sum(c.size for c in self.copies)


@dataclass
class CollectReport:
    step: int
    role: str | None
    target: str
    copied: list[Copied] = field(default_factory=list)
    present: list[str] = field(default_factory=list)  # already on the target, same content
    conflicts: list[Conflict] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    seconds: float = 0.0  # the whole collect, the checks of existing files included
    copy_seconds: float = 0.0  # the copies alone (files in parallel)

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.failed

    @property
    def bytes_copied(self) -> int:
        return sum(c.size for c in self.copied)

    @property
    def mb_per_s(self) -> float:
        """Bytes copied per second of the copy phase (start-up and commits included)."""
        return self.bytes_copied / self.copy_seconds / 1e6 if self.copy_seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "role": self.role,
            "target": self.target,
            "ok": self.ok,
            "copied": [
                {
                    "path": c.path,
                    "source": c.source,
                    "size": c.size,
                    "sha256": c.sha256,
                    "seconds": round(c.seconds, 3),
                }
                for c in self.copied
            ],
            "present": self.present,
            "conflicts": [{"path": c.path, "reason": c.reason} for c in self.conflicts],
            "failed": [{"path": f.path, "source": f.source, "error": f.error} for f in self.failed],
            "bytes_copied": self.bytes_copied,
            "seconds": round(self.seconds, 3),
            "copy_seconds": round(self.copy_seconds, 3),
        }


def _safe_rel(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "" not in parts


def _in_scope(path: str, role: str | None) -> bool:
    return role is None or path.startswith(role + "/")


def plan_collect(index: CheckpointIndex, step: int, role: str | None, target: str) -> CollectPlan:
    """What to copy where from (pure). ``role`` None: the whole step (every role, data.pt)."""
    state: StepState | None = index.step(step)
    if state is None:
        have = ", ".join(str(s.step) for s in index.steps) or "none"
        raise CkptError(f"no global_step_{step} under {index.root} on any host (steps: {have})")
    if target not in index.hosts:
        raise CkptError(f"{target!r} is not a host of this inventory")
    if not index.hosts[target].ok:
        raise CkptError(f"{target} could not be scanned: {index.hosts[target].error}")
    if (
        role is not None
        and role not in state.roles
        and not any(p.startswith(role + "/") for p in state.files)
    ):
        raise CkptError(
            f"global_step_{step} has no {role}/ folder (roles: {', '.join(state.roles) or 'none'})"
        )
    order = list(index.hosts)
    copies, existing, conflicts = [], [], []
    for path in sorted(state.files):
        by_host = state.files[path]
        if not _in_scope(path, role) or not _safe_rel(path):
            continue
        others = sorted((h for h in by_host if h != target), key=order.index)
        if not others:
            continue
        sizes = {by_host[h].size for h in others}
        if target in by_host:
            if by_host[target].size not in sizes or len(sizes) > 1:
                where = ", ".join(f"{h}: {by_host[h].size} B" for h in [target, *others])
                conflicts.append(Conflict(path, f"a different file of this name ({where})"))
            else:
                existing.append((path, others[0]))
            continue
        if len(sizes) > 1:
            where = ", ".join(f"{h}: {by_host[h].size} B" for h in others)
            conflicts.append(Conflict(path, f"the holders disagree ({where}); not copied"))
            continue
        copies.append(PlannedCopy(path, others[0], by_host[others[0]].size))
    copies.sort(key=lambda c: (c.size, c.path))  # the small metadata first
    return CollectPlan(step, role, target, tuple(copies), tuple(existing), tuple(conflicts))


# -- one file ----------------------------------------------------------------------------------


async def _within(aw: Awaitable[T1], timeout: float) -> T1:
    """``aw`` within ``timeout`` s (asyncio.TimeoutError otherwise). Unlike asyncio.wait_for
    before Python 3.12, it never swallows a cancellation that lands as ``aw`` completes — which,
    once per chunk, would let a cancelled copy run on."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise asyncio.TimeoutError
    return task.result()


async def _answer(
    lines: AsyncIterator[str], proc: StreamProcess, host: str, what: str, timeout: float
) -> dict[str, Any]:
    """The helper's next JSON line; CkptError (one line) when it fails or ends without one."""
    try:
        while True:
            line = await _within(anext(lines), timeout)
            data = parse_json_line(line)
            if data is not None:
                break
    except asyncio.TimeoutError:
        raise CkptError(f"{host}: no answer from {what} within {timeout:g} s") from None
    except (StopAsyncIteration, TransportError, OSError):
        tail = (await proc.stderr_tail()).strip().splitlines()
        why = tail[-1] if tail else "connection lost"
        raise CkptError(f"{host}: {what} ended early ({why})") from None
    if "error" in data:
        raise CkptError(f"{host}: {data['error']}")
    return data


async def _both(first: Awaitable[T1], second: Awaitable[T2]) -> tuple[T1, T2]:
    """Both results; if one fails the other is cancelled and awaited (so its cleanup is
    registered before the caller unwinds), then the failure is raised."""
    task_a, task_b = asyncio.ensure_future(first), asyncio.ensure_future(second)
    tasks: list[asyncio.Future[Any]] = [task_a, task_b]
    try:
        a, b = await asyncio.gather(task_a, task_b)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return a, b


async def _reply(reader: asyncio.StreamReader, host: str, timeout: float) -> dict[str, Any]:
    """The receiver's next JSON line on the data connection."""
    try:
        line = await _within(reader.readline(), timeout)
    except asyncio.TimeoutError:
        raise CkptError(f"{host}: no answer from the receiver within {timeout:g} s") from None
    data = parse_json_line(line.decode("utf-8", "replace"))
    if data is None:
        raise CkptError(f"{host}: the receiver hung up")
    if "error" in data:
        raise CkptError(f"{host}: {data['error']}")
    return data


async def _pump(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, on_bytes: Callable[[int], None]
) -> int:
    done = 0
    while True:
        chunk = await _within(src.read(CHUNK), IO_TIMEOUT)
        if not chunk:
            return done
        dst.write(chunk)
        await _within(dst.drain(), IO_TIMEOUT)
        done += len(chunk)
        on_bytes(done)


async def copy_file(
    fleet: Fleet,
    source: str,
    src_path: str,
    target: str,
    dst_path: str,
    *,
    on_bytes: Callable[[int, int], None] | None = None,
) -> tuple[int, str, str]:
    """Relay one file; returns (size, sha256, "ok" | "same" | "conflict") once the target's copy
    is verified and under its name ("same"/"conflict": the name existed meanwhile; nothing was
    overwritten). CkptError (one line) when it could not be copied; no partial file remains."""
    src_py = fleet.inventory.host(source).python
    dst_py = fleet.inventory.host(target).python
    try:
        st = await host_transport(fleet, source)
        dt = await host_transport(fleet, target)
    except TransportError as exc:
        raise CkptError(str(exc)) from None
    async with contextlib.AsyncExitStack() as stack:

        async def start(
            transport: Transport, argv: list[str], host: str, what: str
        ) -> tuple[StreamProcess, AsyncIterator[str], dict[str, Any]]:
            proc = await transport.stream(argv)
            # Closing a helper's stdin ends it; the receiver then deletes its temp file.
            stack.push_async_callback(proc.close)
            lines = aiter(proc.lines())
            return proc, lines, await _answer(lines, proc, host, what, HELLO_TIMEOUT)

        try:
            # Sender and receiver start together: an interpreter start each, on two hosts.
            (sproc, slines, hello), (_, _, dhello) = await _both(
                start(st, script_argv(src_py, "send", src_path), source, "the sender"),
                start(dt, script_argv(dst_py, "recv", dst_path), target, "the receiver"),
            )
            size = int(hello["size"])
            # Streams over the existing connections: no listener here for anyone to reach.
            # A forward's open waits on the host's sshd: bounded like every other step.
            sr, sw = await _within(st.open_connection("127.0.0.1", int(hello["port"])), IO_TIMEOUT)
            stack.callback(sw.close)
            dr, dw = await _within(dt.open_connection("127.0.0.1", int(dhello["port"])), IO_TIMEOUT)
            stack.callback(dw.close)
            sw.write(str(hello["token"]).encode())
            # The receiver takes exactly this many bytes: a short stream is never committed.
            dw.write(str(dhello["token"]).encode() + struct.pack(">Q", size))
            await _within(asyncio.gather(sw.drain(), dw.drain()), IO_TIMEOUT)
            report = on_bytes or (lambda done, total: None)
            pumped = await _pump(sr, dw, lambda done: report(done, size))
            sent = await _answer(slines, sproc, source, "the sender", IO_TIMEOUT)
            if sent.get("sent") != size or pumped != size or sent.get("changed"):
                raise CkptError(
                    f"{source}: {src_path} changed while being copied "
                    f"(sent {pumped} of {size} B); not kept"
                )
            got = await _reply(dr, target, FINISH_TIMEOUT)
            sha = str(sent.get("sha256"))
            if got.get("received") != size or got.get("sha256") != sha:
                raise CkptError(
                    f"{target}: received {got.get('received')} of {size} B, sha256 "
                    f"{str(got.get('sha256'))[:12]} vs {sha[:12]} on {source}; "
                    "not kept"
                )
            dw.write(f"commit {sha}\n".encode())
            await _within(dw.drain(), IO_TIMEOUT)
            done = await _reply(dr, target, FINISH_TIMEOUT)
        except (OSError, asyncio.TimeoutError, TransportError) as exc:
            why = str(exc) or type(exc).__name__
            raise CkptError(f"{source} → {target}: {src_path}: {why}") from None
        except (KeyError, TypeError, ValueError):
            raise CkptError(f"{source} → {target}: unexpected helper answer") from None
        return size, sha, str(done.get("result"))
    raise AssertionError("unreachable")  # the exit stack swallows nothing


# -- a step ------------------------------------------------------------------------------------


async def _shas(fleet: Fleet, host: str, paths: list[str], size: int) -> dict[str, str | None]:
    if not paths:
        return {}
    data = await run_op(fleet, host, "sha", *paths, timeout=60 + size / HASH_RATE)
    return {str(k): (v if isinstance(v, str) else None) for k, v in data["sha256"].items()}


async def _check_existing(
    fleet: Fleet, index: CheckpointIndex, plan: CollectPlan, report: CollectReport
) -> None:
    """Same-name files on the target: identical to a holder's (sha256 on both), or a conflict."""
    state = index.step(plan.step)
    assert state is not None
    base = posixpath.join(index.root, f"global_step_{plan.step}")
    by_source: dict[str, list[str]] = {}
    for path, holder in plan.existing:
        by_source.setdefault(holder, []).append(path)
    full = {p: posixpath.join(base, p) for p, _ in plan.existing}
    total = sum(state.files[p][plan.target].size for p, _ in plan.existing)
    jobs = {plan.target: [full[p] for p, _ in plan.existing]}
    for holder, paths in by_source.items():
        jobs[holder] = [full[p] for p in paths]
    hosts = list(jobs)
    results = await asyncio.gather(
        *(_shas(fleet, h, jobs[h], total) for h in hosts), return_exceptions=True
    )
    got = dict(zip(hosts, results, strict=True))
    for path, holder in plan.existing:
        mine, theirs = got[plan.target], got[holder]
        if isinstance(mine, BaseException) or isinstance(theirs, BaseException):
            err = mine if isinstance(mine, BaseException) else theirs
            report.conflicts.append(Conflict(path, f"could not compare with {holder}: {err}"))
        elif mine.get(full[path]) == theirs.get(full[path]) and mine.get(full[path]):
            report.present.append(path)
        else:
            report.conflicts.append(
                Conflict(
                    path,
                    f"a different file of this name (sha256 {str(mine.get(full[path]))[:12]} "
                    f"here, {str(theirs.get(full[path]))[:12]} on {holder}); left untouched",
                )
            )


class _Tally:
    """Progress across the files in flight: bytes of all files, files finished."""

    def __init__(self, plan: CollectPlan, callback: ProgressCallback | None):
        self.callback = callback
        self.files_total = len(plan.copies)
        self.bytes_total = plan.bytes_total
        self.files_done = 0
        self.bytes_done = 0
        self.per_file: dict[str, int] = {}

    def update(self, item: PlannedCopy, done: int, *, finished: bool = False) -> None:
        self.bytes_done += done - self.per_file.get(item.path, 0)
        self.per_file[item.path] = done
        if finished:
            self.files_done += 1
        if self.callback is not None:
            self.callback(
                CopyProgress(
                    item.path,
                    item.source,
                    done,
                    item.size,
                    self.files_done,
                    self.files_total,
                    self.bytes_done,
                    self.bytes_total,
                    finished,
                )
            )


async def collect(
    fleet: Fleet,
    index: CheckpointIndex,
    step: int,
    role: str | None,
    target_host: str,
    *,
    progress: ProgressCallback | None = None,
    verify_existing: bool = True,
    parallel: int = PARALLEL,
) -> CollectReport:
    """Copy every file of ``global_step_{step}/{role}/`` (role None: the whole step) that
    ``target_host`` lacks from a host that has it, verified by sha256 on both ends.

    Files the target already has are compared with a holder's (size, then sha256 unless
    ``verify_existing`` is False): a different one is reported as a conflict and left untouched.
    ``parallel`` files are in flight at once (their helpers' start-up overlaps; the bytes all
    pass through the cockpit). One file failing (its source went down, …) does not stop the
    others. CkptError (one line) for what stops the whole collect: an unknown step/role/host,
    the target down. Cancelling it ends every helper and leaves no partial file.
    """
    t0 = time.monotonic()
    plan = plan_collect(index, step, role, target_host)
    report = CollectReport(step=step, role=role, target=target_host, conflicts=list(plan.conflicts))
    try:
        await host_transport(fleet, target_host)
    except TransportError as exc:
        raise CkptError(str(exc)) from None
    if plan.existing:
        if verify_existing:
            await _check_existing(fleet, index, plan, report)
        else:
            report.present += [p for p, _ in plan.existing]
    base = posixpath.join(index.root, f"global_step_{step}")
    tally = _Tally(plan, progress)
    slots = asyncio.Semaphore(max(1, parallel))

    async def one(item: PlannedCopy) -> None:
        path = posixpath.join(base, item.path)
        async with slots:
            tally.update(item, 0)
            started = time.monotonic()
            try:
                size, sha, result = await copy_file(
                    fleet,
                    item.source,
                    path,
                    target_host,
                    path,
                    on_bytes=lambda done, total: tally.update(item, done),
                )
            except CkptError as exc:
                report.failed.append(Failed(item.path, item.source, str(exc)))
            else:
                if result == "ok":
                    report.copied.append(
                        Copied(item.path, item.source, size, sha, time.monotonic() - started)
                    )
                elif result == "same":
                    report.present.append(item.path)
                else:
                    report.conflicts.append(
                        Conflict(
                            item.path,
                            "a different file of this name appeared on the target "
                            "during the copy; left untouched",
                        )
                    )
            tally.update(item, item.size, finished=True)

    copy_t0 = time.monotonic()
    await asyncio.gather(*(one(item) for item in plan.copies))
    report.copy_seconds = time.monotonic() - copy_t0
    order = {c.path: i for i, c in enumerate(plan.copies)}
    report.copied.sort(key=lambda c: order[c.path])
    report.failed.sort(key=lambda f: order[f.path])
    report.seconds = time.monotonic() - t0
    return report
