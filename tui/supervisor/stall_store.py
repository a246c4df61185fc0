"""The stalls a supervisor found, as one small JSON file in its state folder: written by the
stall duty when they change, read by `jobs --json` and the Jobs screen (which may run in another
process than the supervisor, or while `verl-tui watch` supervises)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui.state import atomic_write_json, read_state_json, state_path

if TYPE_CHECKING:
    from tui.jobs.service import JobRow

MAX_BYTES = 4 << 20


def stalls_path(state_dir: Path, cluster: str) -> Path:
    return state_path("supervisor", cluster, "stalls.json", root=state_dir / "supervisor")


def write_stalls(state_dir: Path, cluster: str, stalls: dict[str, dict[str, Any]]) -> None:
    atomic_write_json(
        stalls_path(state_dir, cluster), {"checked_at": time.time(), "stalls": stalls}
    )


def read_stalls(state_dir: Path, cluster: str) -> dict[str, dict[str, Any]]:
    """Submission id → its stall object; {} when none were found (entries not shaped like one
    are left out: the file is input). StateError (an OSError) naming the file when it cannot
    be read or is not JSON."""
    doc = read_state_json(stalls_path(state_dir, cluster), max_bytes=MAX_BYTES)
    stalls = doc.get("stalls") if isinstance(doc, dict) else None
    if not isinstance(stalls, dict):
        return {}
    return {
        sid: s
        for sid, s in stalls.items()
        if isinstance(sid, str) and isinstance(s, dict) and isinstance(s.get("evidence"), str)
    }


def running_stalls(cluster: str, rows: list[JobRow]) -> dict[str, dict[str, Any]]:
    """The stalls of the jobs that still run on the head (a stall of a job that ended since is
    history). StateError naming the file when it cannot be read."""
    from tui.state import state_dir

    stalls = read_stalls(state_dir(), cluster)
    running = {r.submission_id for r in rows if r.on_head and r.status == "RUNNING"}
    return {sid: s for sid, s in stalls.items() if sid in running}
