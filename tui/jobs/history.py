"""Which exact config produced which job: one JSON record per submission, per cluster, kept
in the XDG state dir so jobs submitted in an earlier run of the app reappear with their config."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.cluster.dashboard import check_job_id, is_job_id
from tui.state import (
    StateError,
    atomic_write_json,
    decode_state_text,
    parse_state_json,
    read_state_bytes,
    state_path,
)

# What a record's status is while its POST is out (written before it is sent), and after the
# head refused it (nothing runs; the record says why in `note`).
SUBMITTING = "SUBMITTING"
NOT_SUBMITTED = "NOT_SUBMITTED"
MAX_RECORD_BYTES = 4 << 20


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
    # The head's start and end times of a finished job, kept so a Ray restart (which forgets
    # the job) leaves its real duration: optional, so older records still load.
    started_at: float | None = None
    ended_at: float | None = None
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
    owner: str | None = None  # user@host who submitted it (tui/jobs/owner.py)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


MAX_DECISIONS = 50  # per record: a job retried all night must not grow its file without bound


def _opt_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _opt_num(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _shaped(rec: JobRecord) -> bool:
    """Every field of the type the code relies on: a record is a file anyone may have edited
    (an id that is not a submission id would reach URLs; a list where a map belongs would end a
    command in a TypeError)."""
    texts = (
        rec.profile,
        rec.profile_path,
        rec.config_hash,
        rec.hosts_file,
        rec.status,
        rec.note,
        rec.retry_of,
        rec.owner,
    )
    return (
        is_job_id(rec.submission_id)
        and rec.submitted_at is not None
        and _opt_num(rec.submitted_at)
        and all(_opt_num(t) for t in (rec.started_at, rec.ended_at))
        and isinstance(rec.cluster, str)
        and isinstance(rec.entrypoint, str)
        and isinstance(rec.kind, str)
        and all(_opt_str(v) for v in texts)
        and isinstance(rec.overrides, list)
        and all(isinstance(o, str) for o in rec.overrides)
        and isinstance(rec.runtime_env, dict)
        and isinstance(rec.attempt, int)
        and (rec.retry_policy is None or isinstance(rec.retry_policy, dict))
        and isinstance(rec.decisions, list)
        and all(isinstance(d, dict) for d in rec.decisions)
        and (rec.pending_retry is None or isinstance(rec.pending_retry, dict))
        and isinstance(rec.tags, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in rec.tags.items())
    )


class JobHistory:
    """One cluster's records, one JSON file per submission. A record that cannot be read is a
    StateError naming its file when that job is asked for (`get`); `all` lists the readable
    ones and keeps a one-line warning per damaged file in `problems`."""

    def __init__(self, cluster: str, root: Path | None = None):
        self.cluster = cluster
        self.dir = state_path("history", cluster, root=root)
        self.problems: list[str] = []

    def _path(self, submission_id: str) -> Path:
        return self.dir / f"{check_job_id(submission_id, 'submission id')}.json"

    def save(self, record: JobRecord) -> None:
        atomic_write_json(self._path(record.submission_id), record.to_json())

    def _load(self, path: Path) -> JobRecord | None:
        data = read_state_bytes(path, max_bytes=MAX_RECORD_BYTES)
        if data is None:
            return None
        doc = parse_state_json(decode_state_text(data, path), path)
        try:
            rec = JobRecord(**doc) if isinstance(doc, dict) else None
        except TypeError:
            rec = None
        if rec is None or not _shaped(rec):
            raise StateError(f"{path}: not a job record (its fields are damaged); move it away")
        return rec

    def get(self, submission_id: str) -> JobRecord | None:
        """The job's record; None when there is none. StateError when its file is damaged."""
        if not is_job_id(submission_id):
            return None
        rec = self._load(self._path(submission_id))
        return rec if rec is not None and rec.submission_id == submission_id else None

    def all(self) -> list[JobRecord]:
        """Every readable record, newest first; a damaged file is skipped with a warning in
        `problems` (one line naming it), never a crash of the list."""
        out = []
        problems = []
        try:
            paths = sorted(self.dir.glob("*.json"))
        except OSError as exc:
            raise StateError(f"{self.dir}: cannot list: {exc.strerror or exc}") from None
        for path in paths:
            if not is_job_id(path.stem):
                continue  # not a file we named
            try:
                rec = self._load(path)
            except StateError as exc:
                problems.append(str(exc))
                continue
            if rec is not None:
                out.append(rec)
        self.problems = problems
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
