"""Which exact config produced which job: one JSON record per submission, per cluster, kept
in the XDG state dir so jobs submitted in an earlier run of the app reappear with their config."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.cluster.dashboard import is_job_id
from tui.state import atomic_write_json, state_dir

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class JobRecord:
    submission_id: str
    cluster: str
    submitted_at: float
    entrypoint: str
    kind: str = "profile"  # profile | raw
    profile: str | None = None  # the profile's name
    profile_path: str | None = None
    overrides: list[str] = field(default_factory=list)  # the Hydra overrides, as submitted
    config_hash: str | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)
    hosts_file: str | None = None
    status: str | None = None  # last status seen (the head is the truth while it lives)
    note: str | None = None
    # Runs that heal themselves (tui/supervisor): all optional, so older records still load.
    attempt: int = 1  # 1 for a first submission, n for the (n-1)th retry
    retry_of: str | None = None  # the failed submission this one retries
    retry_policy: dict[str, Any] | None = None  # {"retries": N, "retry_on": [signature, ...]}
    decisions: list[dict[str, Any]] = field(default_factory=list)  # the supervisor's, newest last
    # The retry decided but maybe not yet sent: {"submission_id", "attempt", "resume_from", "at"}
    # written before the POST, so a supervisor restarted in between sends that same id again.
    pending_retry: dict[str, Any] | None = None
    # Queue and sweep labels: {"sweep": NAME, "grid": "key=value, …"} (tui/jobs/sweep.py).
    tags: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


MAX_DECISIONS = 50  # per record: a job retried all night must not grow its file without bound


class JobHistory:
    def __init__(self, cluster: str, root: Path | None = None):
        self.cluster = cluster
        self.dir = (root or state_dir() / "history") / _SAFE.sub("_", cluster)

    def _path(self, submission_id: str) -> Path:
        return self.dir / f"{_SAFE.sub('_', submission_id)}.json"

    def save(self, record: JobRecord) -> None:
        atomic_write_json(self._path(record.submission_id), record.to_json())

    def get(self, submission_id: str) -> JobRecord | None:
        if not is_job_id(submission_id):
            return None
        path = self._path(submission_id)
        try:
            rec = JobRecord(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return rec if rec.submission_id == submission_id else None

    def all(self) -> list[JobRecord]:
        out = []
        for path in self.dir.glob("*.json"):
            try:
                rec = JobRecord(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                continue  # a foreign or damaged file: skip it, never crash the list
            # An id that is not a submission id (an edited file) would reach URLs: skip it.
            if is_job_id(rec.submission_id) and isinstance(rec.submitted_at, (int, float)):
                out.append(rec)
        return sorted(out, key=lambda r: r.submitted_at, reverse=True)

    def set_status(self, submission_id: str, status: str) -> None:
        rec = self.get(submission_id)
        if rec is not None and rec.status != status:
            rec.status = status
            self.save(rec)

    def add_decision(self, submission_id: str, decision: dict[str, Any]) -> bool:
        """Append a supervisor decision to the job's record (the newest MAX_DECISIONS kept);
        False when the job is not in this history."""
        rec = self.get(submission_id)
        if rec is None:
            return False
        rec.decisions = [*(rec.decisions or []), decision][-MAX_DECISIONS:]
        self.save(rec)
        return True

    def retries_of(self, submission_id: str) -> list[JobRecord]:
        """Records that retry `submission_id` (at most one, unless a file was copied in)."""
        return [r for r in self.all() if r.retry_of == submission_id]

    def forget(self, submission_id: str) -> None:
        self._path(submission_id).unlink(missing_ok=True)
