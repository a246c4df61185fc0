"""What a log signature is: a pattern, the cause it names and the fix it gives.

The tables live in tui/logs/causes_job.py (failures of the job: its config, code, memory,
environment) and tui/logs/causes_cluster.py (failures of the cluster: network, Ray, nodes);
tui/logs/signatures.py orders them and matches lines against them.

Each pattern is compiled with re.ASCII (case-insensitive parts fold ASCII letters only, as
`bytes.lower` does, so the prefilter's literals are found whenever the pattern matches) and must
have no unbounded wildcard: `.{0,N}?` and `[^x]{1,N}`, never `.*` or `\\S+` (a line repeating an
anchor word would cost the rest of the line per repeat; tests/test_faults_bounds.py checks).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tui.logs.prefilter import required_literals

# Per-line flag bits (one byte per line in the store).
ERROR, WARNING, TRACEBACK, HINT = 1, 2, 4, 8

# Whose failure a signature names, for the supervisor's retry decision (tui/logs/retriable.py).
JOB, CLUSTER, NEUTRAL = "job", "cluster", "neutral"


@dataclass(frozen=True)
class Hint:
    key: str
    text: str


HintFn = Callable[[re.Match[str]], str]


@dataclass(frozen=True)
class Signature:
    key: str
    pattern: re.Pattern[str]
    hint: str | HintFn  # a template naming the pattern's groups ({key}), or a function of the match
    what: str  # the cause in a few words (retry verdicts, `submit --help`)
    owner: str = JOB  # JOB: a retry fails the same way; CLUSTER: a retry may heal it
    severity: int = ERROR
    # Lowercase text one of which every match contains (derived from `pattern`).
    literals: tuple[str, ...] = field(default=())

    def explain(self, m: re.Match[str]) -> Hint:
        if callable(self.hint):
            return Hint(self.key, self.hint(m))
        groups = {k: v or "?" for k, v in m.groupdict().items()}
        return Hint(self.key, self.hint.format(**groups))


def sig(
    key: str,
    pattern: str,
    hint: str | HintFn,
    what: str,
    owner: str = JOB,
    severity: int = ERROR,
    *,
    ignore_case: bool = False,
) -> Signature:
    rx = re.compile(pattern, re.ASCII | (re.IGNORECASE if ignore_case else 0))
    return Signature(key, rx, hint, what, owner, severity, required_literals(rx))


def group(m: re.Match[str], *names: str) -> str:
    """The first of the named groups that matched, or ''."""
    for name in names:
        value = m.groupdict().get(name)
        if value:
            return value
    return ""
