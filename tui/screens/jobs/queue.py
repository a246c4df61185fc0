"""The Jobs screen's queue part: queued jobs as rows on top (position, what they wait for), the
keys that cancel and reorder them, and sweep runs kept together: what a queued row and its
details show, and the queue the screen reads (JobsScreen holds the rows and the keys)."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text

from tui.fmt import age, duration
from tui.jobs.owner import me
from tui.jobs.queue import QueueEntry
from tui.jobs.queue_shared import AnyQueue, cluster_queue
from tui.jobs.service import JobRow
from tui.sanitize import cell, one_line

QUEUE_KEY = "queued:"  # row keys of queued jobs (a submission id never has a ':')


def queue_for(cluster: Any, notify: Any = None) -> AnyQueue:
    """The cluster's shared queue (on its head; the local file where there is no head)."""
    return cluster_queue(cluster.inv, getattr(cluster, "fleet", None), on_notice=notify)


def sweep_of(row: JobRow) -> str | None:
    rec = row.record
    tags = getattr(rec, "tags", None) if rec is not None else None
    return tags.get("sweep") if isinstance(tags, dict) else None


def grouped(rows: list[JobRow]) -> list[JobRow]:
    """`rows` (newest first) with each sweep's runs together, where its newest run is."""
    out: list[JobRow] = []
    placed: set[str] = set()
    for r in rows:
        name = sweep_of(r)
        if name is None:
            out.append(r)
        elif name not in placed:
            placed.add(name)
            out.extend(x for x in rows if sweep_of(x) == name)
    return out


def profile_label(row: JobRow) -> str:
    profile = row.record.profile if row.record and row.record.profile else "-"
    name = sweep_of(row)
    return f"⊞ {name}: {profile}" if name else profile


def waiting_text(entry: QueueEntry, position: int) -> str:
    """Why an entry without a reason waits: only the head of the queue is judged against Ray's
    free resources, so one further back waits for the entries before it."""
    needs = f"needs {entry.needs.describe()}"
    if position > 1:
        return f"{needs}; starts after the {position - 1} before it"
    return f"{needs}; waits for the supervisor's next pass"


def queue_cells(entry: QueueEntry, position: int) -> list[Text]:
    """One queued job as the Jobs table's nine columns (a queued job has no health yet)."""
    if entry.state == "starting":
        status, style = "STARTING", "bold cyan"
    elif entry.blocked:
        status, style = f"BLOCKED #{position}", "magenta"
    else:
        status, style = f"QUEUED #{position}", "blue"
    profile = entry.profile or "-"
    if entry.group:
        profile = f"⊞ {entry.group}: {profile}"
    return [
        cell(entry.submission_id),
        cell(status, style=style),
        Text("-", style="dim"),
        Text(age(entry.queued_at)),
        Text("-"),
        cell(profile),
        cell(entry.owner or "-"),
        Text("-"),
        cell(entry.reason or waiting_text(entry, position), 60),
    ]


def queue_detail(entry: QueueEntry, position: int) -> Text:
    t = Text()
    t.append(one_line(entry.submission_id), "bold")
    by = f" by {one_line(entry.owner, 80)}" if entry.owner else ""
    t.append(f"  queued #{position:d}{by}, priority {entry.priority:d}, ")
    t.append(f"waiting {duration(time.time() - entry.queued_at)}\n")
    t.append("needs: ", "dim")
    t.append(one_line(entry.needs.describe()) + "\n")
    if entry.tags:
        t.append("sweep: ", "dim")
        t.append(one_line(", ".join(f"{k}={v}" for k, v in entry.tags.items()), 300) + "\n")
    if entry.overrides:
        t.append("overrides: ", "dim")
        t.append(one_line(" ".join(entry.overrides), 400) + "\n")
    if entry.reason:
        t.append(one_line(entry.reason, 300), "italic")
    t.append("\n[ and ] move it, del cancels it", "dim")
    return t


def not_yours(entry: QueueEntry) -> str:
    """The confirmation's line naming another user's entry (empty for one's own)."""
    if entry.owner is None or entry.owner == me():
        return ""
    return f" It was queued by {one_line(entry.owner, 80)}, not you."
