"""What the supervisor decided, as plain data: printed by `verl-tui watch` (a line or a JSON
line), shown on the job in the cockpit, recorded in the job's history, sent to notifiers."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tui.sanitize import one_line

KINDS = (
    "retry",  # a failed job was resubmitted (details: new_submission_id, attempt, resume_from)
    "no-retry",  # a failed job is not retried (message: why)
    "waiting",  # a retry waits (hosts unreachable, nodes not alive, collecting shards)
    "job-end",  # a job ended SUCCEEDED/STOPPED
    "job-failed",  # a job ended FAILED (before the retry decision)
    "job-stalled",  # a running job makes no progress (details: the stall, its stack dump)
    "job-unhealthy",  # a training-health rule fired (details: health: the alert; stopped)
    "queue-start",  # a queued job was submitted
    "queue-wait",  # the head of the queue waits for resources
    "lock",  # the supervisor took, lost or was refused the cluster's supervisor lease
    "error",  # a duty failed this tick (the loop goes on)
)


@dataclass
class Decision:
    kind: str  # one of KINDS
    submission_id: str | None  # the job it is about (None: about the cluster / the queue)
    message: str  # one line, for people
    at: float = field(default_factory=time.time)
    details: dict[str, Any] = field(default_factory=dict)  # JSON-able

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown decision kind {self.kind!r}")
        # Messages may quote logs or hosts: one clean line whatever came in.
        self.message = one_line(self.message, 400)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> Decision | None:
        """A recorded decision back (None for anything malformed: history files are input)."""
        if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
            return None
        sid, at, details = doc.get("submission_id"), doc.get("at"), doc.get("details")
        return cls(
            str(doc["kind"]),
            sid if isinstance(sid, str) else None,
            str(doc.get("message") or ""),
            float(at) if isinstance(at, (int, float)) else 0.0,
            details if isinstance(details, dict) else {},
        )

    def line(self) -> str:
        """`HH:MM:SS kind [submission] message`: what `verl-tui watch` prints."""
        stamp = time.strftime("%H:%M:%S", time.localtime(self.at))
        job = f" {self.submission_id}" if self.submission_id else ""
        return one_line(f"{stamp} {self.kind}{job}: {self.message}", 600)
