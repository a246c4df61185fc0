"""What a failed job's log says went wrong, in one line: the signatures it shows (first
appearance order, each with its hint) and its last exception line. The supervisor's retry
verdict (tui/logs/retriable.py) and the failure cause on job-failed decisions, in the Jobs
detail pane and in notifications, read the same scan.

The cause chosen is the job's own failure when the log shows one (an OOM that made the other
ranks time out in NCCL: the OOM), else the first cluster failure, else the last exception."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tui.logs.sigdef import JOB
from tui.logs.signatures import MATCH_CHARS, SIGNATURES, match_signature, normalize
from tui.sanitize import one_line

CAUSE_CHARS = 300  # of a cause line: a detail pane's line, a notification's sentence
_JOB_KEYS = frozenset(sig.key for sig in SIGNATURES if sig.owner == JOB)

# OmegaConf's own error classes, which have no hint of their own (the exception line shows them).
CONFIG_ERROR = "config_error"
_CONFIG_ERROR_RE = re.compile(
    r"omegaconf\.errors\.\w{1,100}|ConfigAttributeError|ConfigKeyError|MissingMandatoryValue"
    r"|InterpolationResolutionError"
)
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_][\w.]{0,200}\.)?[A-Z]\w{0,200}(?:Error|Exception)\b")


@dataclass
class LogScan:
    keys: list[str] = field(default_factory=list)  # signature keys, first appearance order
    hints: dict[str, str] = field(default_factory=dict)  # key → its first hint's text
    last_exception: str | None = None

    def cause(self) -> tuple[str | None, str] | None:
        """(signature key or None, one line) naming what failed, or None: nothing known."""
        job = [k for k in self.keys if k in _JOB_KEYS or k == CONFIG_ERROR]
        for key in [*job, *self.keys]:
            text = self.hints.get(key)
            if text:
                return key, one_line(text, CAUSE_CHARS)
        if self.last_exception:
            first = job or self.keys
            return (first[0] if first else None), one_line(self.last_exception, CAUSE_CHARS)
        return None


def scan_log(text: str) -> LogScan:
    """Every line of `text` (a log's tail) through the signature table, as the log pane does."""
    scan = LogScan()
    for raw in text.splitlines():
        _source, msg = normalize(raw[:MATCH_CHARS])
        keys = [CONFIG_ERROR] if _CONFIG_ERROR_RE.search(msg) else []  # the broader class first
        found = match_signature(msg)
        if found is not None:
            sig, hint = found
            keys.append(sig.key)
            scan.hints.setdefault(sig.key, hint.text)
        for k in keys:
            if k not in scan.keys:
                scan.keys.append(k)
        body = msg.strip()
        if _EXCEPTION_LINE.match(body):
            scan.last_exception = body
    return scan
