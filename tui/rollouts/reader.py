"""A job's rollout dump folder read over SSH a bounded piece at a time (tui/remote/
rollout_dump.py runs on the host that has it): the step files, one pass per step that sends
an index (offset, length, score, output length, prompt key per line; a grep runs there too),
then pages of samples read by byte range and parsed there, each field past FIELD_CHARS sent
as its head and its end. The cockpit holds the index and one page, never a file.

Where the folder is: verl prints ``Dumped generations to <dir>/<step>.jsonl`` from its trainer
process after each dump (Ray's ``ip=`` prefix names the node), so the driver log gives the
folder and its host; else the job's command line (``trainer.rollout_data_dir``, or
``trainer.validation_data_dir``) on the driver's node or the head; ``--dir`` names the folder
for a job submitted as a raw command.
"""

from __future__ import annotations

import itertools
import json
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.errors import VerlTuiError
from tui.metrics.filelog import entry_value, find_marked_lines
from tui.remote import python_argv
from tui.rollouts.samples import (
    Histogram,
    IndexEntry,
    Sample,
    entry_of,
    flags_of,
    histogram,
    sample_from,
    sort_entries,
)
from tui.sanitize import one_line

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.types import Transport

DUMP_MARK = "Dumped generations to "
ROLLOUT_KEY = "trainer.rollout_data_dir"
VALIDATION_KEY = "trainer.validation_data_dir"
FIELD_CHARS = 64 << 10  # of one field sent to the cockpit (a longer one: its head and its end)
PAGE = 50  # samples read at a time
MAX_INDEX = 250_000  # lines indexed per step (~0.4 KB each here: ~95 MB at most)
MAX_STEPS = 100_000
LIST_TIMEOUT_S = 20.0
INDEX_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 20.0
HOST_WAIT_S = 20.0
_GREP_MARK = 'grep -a -F -e "$1" -- "$2" | tail -n 64 | cut -c 1-8192'


class RolloutError(VerlTuiError, title="rollouts unreadable"):
    """One line saying why the dump cannot be read (no folder, host down, bad answer)."""


@dataclass
class StepIndex:
    """One step file's index: every sample line (or only the matches of a grep) in file order,
    and the lines that are not samples (reported as file:line)."""

    step: int
    path: str
    size: int
    entries: list[IndexEntry]
    bad: list[str] = field(default_factory=list)
    stopped: str | None = None

    @property
    def samples(self) -> list[IndexEntry]:
        return [e for e in self.entries if e.bad is None]

    def by_key(self, key: str) -> IndexEntry | None:
        return next((e for e in self.entries if e.bad is None and e.input_key == key), None)


class DumpDir:
    """One dump folder on one host."""

    def __init__(self, transport: Transport, python: str, host: str, folder: str) -> None:
        self.transport, self.python, self.host, self.folder = transport, python, host, folder

    @property
    def where(self) -> str:
        return f"{self.host}:{self.folder}"

    def path(self, step: int) -> str:
        return posixpath.join(self.folder, f"{step}.jsonl")

    async def _ask(self, req: dict[str, Any], timeout: float, what: str) -> Iterator[Any]:
        """The reader's JSON lines, parsed one at a time as the caller takes them (an index
        of a big step is never held as parsed rows all at once)."""
        from tui.transport.types import TransportError

        try:
            res = await self.transport.run(
                python_argv(self.python, "rollout_dump"),
                input=json.dumps(req),
                timeout=timeout,
                what=what,
            )
        except TransportError as exc:
            raise RolloutError(one_line(str(exc), 300)) from None
        lines = res.stdout.splitlines()
        if not lines:
            why = (res.stderr.strip().splitlines() or [f"exit status {res.exit_status}"])[-1]
            raise RolloutError(f"{self.host}: {what}: {one_line(why, 300)}")

        def parse(line: str) -> Any:
            try:
                return json.loads(line)
            except ValueError:
                raise RolloutError(f"{self.host}: {what}: not the reader's answer") from None

        first = parse(lines[0])
        if isinstance(first, dict) and isinstance(first.get("error"), str):
            raise RolloutError(f"{self.host}: {one_line(first['error'], 300)}")
        return itertools.chain([first], (parse(line) for line in itertools.islice(lines, 1, None)))

    async def steps(self) -> list[tuple[int, int]]:
        """The dumped steps and their file sizes, in step order."""
        doc = next(
            await self._ask(
                {"op": "list", "dir": self.folder, "max": MAX_STEPS}, LIST_TIMEOUT_S, "list steps"
            )
        )
        got = doc.get("steps") if isinstance(doc, dict) else None
        if not isinstance(got, list):
            raise RolloutError(f"{self.host}: list steps: not the reader's answer")
        return [
            (s[0], s[1])
            for s in got
            if isinstance(s, list) and len(s) == 2 and all(isinstance(v, int) for v in s)
        ]

    async def index(
        self,
        step: int,
        pattern: str | None = None,
        *,
        ignore_case: bool = False,
        max_lines: int = MAX_INDEX,
    ) -> StepIndex:
        """One pass over the step's file on the host; `pattern` (a regex on input and output)
        keeps only the matching samples (bad lines are always listed); `max_lines` stops it
        early (the first page of a big file, shown before its whole index)."""
        path = self.path(step)
        req = {
            "op": "index",
            "path": path,
            "max_lines": max_lines,
            "pattern": pattern,
            "ignore_case": ignore_case,
        }
        rows = await self._ask(req, INDEX_TIMEOUT_S, f"index {path}")
        head = next(rows)
        size = head.get("size") if isinstance(head, dict) else None
        if not isinstance(size, int):
            raise RolloutError(f"{self.host}: index {path}: not the reader's answer")
        out = StepIndex(step, path, size, [])
        for row in rows:
            if isinstance(row, dict):
                done = row.get("done")
                if isinstance(done, dict) and isinstance(done.get("stopped"), str):
                    out.stopped = done["stopped"]
                continue
            entry = entry_of(row)
            if entry is None:
                continue
            out.entries.append(entry)
            if entry.bad is not None:
                out.bad.append(f"{path}:{entry.line}: {one_line(entry.bad, 200)}")
        return out

    async def read(self, index: StepIndex, entries: list[IndexEntry]) -> list[Sample]:
        """The samples of `entries` (a page), parsed and flagged; a line that does not parse
        is added to index.bad as file:line."""
        if not entries:
            return []
        req = {
            "op": "read",
            "path": index.path,
            "spans": [[e.offset, e.length] for e in entries],
            "field_chars": FIELD_CHARS,
        }
        rows = list(await self._ask(req, READ_TIMEOUT_S, f"read {index.path}"))
        longest = max((e.output_chars for e in index.samples), default=0)
        out = []
        if len(rows) != len(entries):
            raise RolloutError(f"{self.host}: read {index.path}: not the reader's answer")
        for entry, row in zip(entries, rows, strict=True):
            doc = row.get("doc") if isinstance(row, dict) else None
            if not isinstance(doc, dict):
                why = row.get("why") if isinstance(row, dict) else None
                why = why if isinstance(why, str) else "not the reader's answer"
                index.bad.append(f"{index.path}:{entry.line}: {one_line(why, 200)}")
                continue
            got = sample_from(doc, index.step, entry.line)
            cut = row.get("cut")
            if isinstance(cut, dict):
                got.cut = {str(k)[:200]: v for k, v in cut.items() if isinstance(v, int)}
            got.flags = flags_of(got, longest, entry.output_chars)
            out.append(got)
        return out


async def _marked_dirs(cluster: RayCluster, sid: str) -> list[tuple[str, str | None]]:
    """(folder, node IP) of every "Dumped generations to" line in the driver log, newest
    first, each folder once."""
    from tui.cluster import driver_log

    head = await cluster.fleet.ready(cluster.inv.head.name, HOST_WAIT_S)
    log = await driver_log.locate(head, sid, tail_bytes=1)
    if log is None:
        return []
    res = await head.run(
        ["sh", "-c", _GREP_MARK, "sh", DUMP_MARK, log.path],
        timeout=READ_TIMEOUT_S,
        what=f"find {sid}'s rollout dumps",
    )
    out: list[tuple[str, str | None]] = []
    for found in reversed(find_marked_lines(res.stdout, DUMP_MARK) if res.ok else []):
        folder = posixpath.dirname(found.path)
        if folder not in [f for f, _ in out]:
            out.append((folder, found.node_ip))
    return out


def _host_of(cluster: RayCluster, ip: str | None) -> str | None:
    return cluster.inv.host_of_ip(ip) if ip else None


async def locate_dump(
    cluster: RayCluster, sid: str, *, folder: str | None = None, validation: bool = False
) -> DumpDir:
    """The job's dump folder and its host. RolloutError naming what to fix when not found;
    DashboardError when the head does not know the job."""
    from tui.cluster.job_logs import job_info
    from tui.transport.types import TransportError

    client = await cluster.dashboard()
    info = await job_info(client, sid)
    driver = info.get("driver_info")
    driver_ip = driver.get("node_ip_address") if isinstance(driver, dict) else None
    fallback = [
        h for h in (_host_of(cluster, driver_ip if isinstance(driver_ip, str) else None),) if h
    ] + [cluster.inv.head.name]
    raw_entry = info.get("entrypoint")
    entry = raw_entry if isinstance(raw_entry, str) else ""
    key = VALIDATION_KEY if validation else ROLLOUT_KEY
    other = entry_value(entry, ROLLOUT_KEY if validation else VALIDATION_KEY)
    configured = folder or entry_value(entry, key)
    try:
        marked = await _marked_dirs(cluster, sid)
    except TransportError as exc:
        raise RolloutError(one_line(str(exc), 300)) from None
    candidates: list[tuple[str, str]] = []
    if folder is not None and not folder.startswith("/"):
        raise RolloutError(f"--dir {one_line(folder, 200)}: give the absolute folder")
    if configured is not None and configured not in ("", "null", "None"):
        if not configured.startswith("/"):
            found = [(d, ip) for d, ip in marked if d.endswith("/" + configured.strip("/"))]
            if not found:
                raise RolloutError(
                    f"{key}={one_line(configured, 200)} is relative to the trainer's working "
                    "folder and no dump was announced yet: pass --dir with the absolute folder"
                )
            marked = found
            configured = found[0][0]
        hosts = [_host_of(cluster, ip) for d, ip in marked if d == configured]
        candidates = [(h, configured) for h in [*hosts, *fallback] if h]
    else:
        for d, ip in marked:
            if other and d.rstrip("/") == other.rstrip("/"):
                continue
            candidates += [(h, d) for h in [_host_of(cluster, ip), *fallback] if h]
    if not candidates:
        raise RolloutError(
            f"job {sid} sets no {key} and announced no dump (verl prints "
            f"'{DUMP_MARK.strip()} …'): pass --dir with the folder"
        )
    tried = []
    for host, path in dict.fromkeys(candidates):
        try:
            transport = await cluster.fleet.ready(host, HOST_WAIT_S)
            res = await transport.run(["test", "-d", path], timeout=READ_TIMEOUT_S)
        except TransportError as exc:
            tried.append(one_line(str(exc), 200))
            continue
        if res.ok:
            return DumpDir(transport, cluster.inv.host(host).python, host, path)
        tried.append(f"{host}:{path}: no such folder")
    raise RolloutError("no rollout dump folder found (" + "; ".join(tried[:4]) + ")")


@dataclass
class StepView:
    """What one screenful or one `rollouts` call shows of a step: its index (sorted), a page
    of samples from `start`, the step's score histogram."""

    index: StepIndex
    order: list[IndexEntry]
    samples: list[Sample]
    histogram: Histogram
    start: int = 0


async def view_step(
    dump: DumpDir,
    step: int,
    *,
    sort: str = "file",
    reverse: bool = False,
    pattern: str | None = None,
    ignore_case: bool = False,
    start: int = 0,
    count: int = PAGE,
) -> StepView:
    """Index the step (with the grep), sort it, read the page [start, start + count)."""
    index = await dump.index(step, pattern, ignore_case=ignore_case)
    order = [e for e in sort_entries(index.entries, sort, reverse) if e.bad is None]
    samples = await dump.read(index, order[start : start + count])
    return StepView(index, order, samples, histogram([e.score for e in order]), start)


async def first_page(dump: DumpDir, step: int, count: int = PAGE) -> StepView:
    """The step's first samples in file order, without indexing the whole file: what the
    screen shows at once while view_step indexes a big step (its histogram covers only these)."""
    index = await dump.index(step, max_lines=count)
    order = [e for e in index.entries if e.bad is None]
    samples = await dump.read(index, order)
    index.stopped = None  # stopped on purpose: the whole index follows
    return StepView(index, order, samples, histogram([e.score for e in order]))


async def turn_page(dump: DumpDir, view: StepView, start: int, count: int = PAGE) -> None:
    """Another page of an indexed step into `view` (the index is not read again)."""
    start = max(0, min(start, max(0, len(view.order) - 1)))
    view.samples = await dump.read(view.index, view.order[start : start + count])
    view.start = start
