"""Which log lines are errors, warnings or traceback, and what a known failure means.

Every line of a log goes to the matcher, yet a job log is mostly metrics and progress lines, so
a line that no rule can fire on must cost next to nothing. Each signature's regex is parsed once
and the literal text every match must contain is derived from it (`required_literals`); from
those, a few short anchor words are chosen (`Prefilter`; both live in tui/logs/prefilter.py)
such that every signature literal contains one. A log block is scanned for the anchors with
C-level `bytes.find` (one pass per anchor over the lowercased block, ~25); only lines holding
an anchor, plus every line while a traceback is open, reach `LineClassifier.feed`. No line a
signature would match is skipped: the literals come from the patterns themselves (compiled
with re.ASCII, so case-insensitive parts fold ASCII only, exactly as `bytes.lower` does).
`scan_block` is the one code path shared by the log store (the log pane) and `verl-tui
explain`.

Matching is linear in a line's length: a line is classified by its first MATCH_CHARS (4,096)
characters (a log line can be a megabyte; a failure's words come first), and no signature
pattern has an unbounded wildcard (`.*`, `[^x]+`, `\\S*`): each is written `.{0,N}?`, so a line
repeating an anchor word thousands of times costs N steps per repeat, not the rest of the line
(tests/test_faults_bounds.py checks the table; bench/log_hostile.py measures it).

What Ray, torchrun, mpirun and srun put before a line (`(WorkerDict pid=…, ip=…)`,
`[rank7]:`, `[1,3]<stderr>:`), Ray's `[repeated 7x across cluster]` tail and the timestamps and
levels of every logger come off in one normaliser (tui/logs/lineprefix.py) before matching;
tracebacks are followed per origin, since several workers can fail at once and their lines
interleave. The table itself lives in tui/logs/causes_*.py (tui/logs/sigdef.py says what a
signature is).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tui.logs.causes_cluster import CLUSTER_SIGNATURES
from tui.logs.causes_job import JOB_SIGNATURES
from tui.logs.causes_setup import HYDRA_FAILED as HYDRA_FAILED
from tui.logs.causes_setup import SETUP_SIGNATURES

# The one normaliser of prefixes and the signature's shape: names kept here for the callers.
from tui.logs.lineprefix import ANSI_RE as ANSI_RE
from tui.logs.lineprefix import ANSI_RE_B as ANSI_RE_B
from tui.logs.lineprefix import normalize as normalize
from tui.logs.lineprefix import split_source as split_source
from tui.logs.lineprefix import strip_ansi as strip_ansi
from tui.logs.lineprefix import strip_header

# The prefilter and the literals it is built from: tui/logs/prefilter.py; names kept here.
from tui.logs.prefilter import CLASS_NEEDLES as CLASS_NEEDLES
from tui.logs.prefilter import MIN_LITERAL as MIN_LITERAL
from tui.logs.prefilter import Prefilter as Prefilter
from tui.logs.prefilter import required_literals as required_literals
from tui.logs.sigdef import ERROR as ERROR
from tui.logs.sigdef import HINT as HINT
from tui.logs.sigdef import TRACEBACK as TRACEBACK
from tui.logs.sigdef import WARNING as WARNING
from tui.logs.sigdef import Hint as Hint
from tui.logs.sigdef import Signature as Signature

# Characters of a line the classifier and the signatures look at (the rest is kept and shown).
MATCH_CHARS = 4096

# Severity. Each regex runs only after a cheap substring test passes (see classify): this is
# the per-line cost of every candidate line, so it must stay at a few microseconds.
LEVEL_ERROR_RE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b")
LEVEL_WARNING_RE = re.compile(r"\b(?:WARNING|WARN)\b")
EXCEPTION_RE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b(?:\([\w.]+\))?:")
WARNING_CLASS_RE = re.compile(r"\b[A-Z]\w*Warning\b:")
# glog / torch c10 ([E1118 03:18:39.86 …] or [E ProcessGroupNCCL.cpp:475]) and Ray's C++ logs
# ([2025-01-16 08:48:22,123 E 1234 1250] …): the level letter after the bracket or the date.
GLOG_RE = re.compile(
    r"\[?([EFW])(?:\d{4} \d\d:\d\d| \S+\.(?:cpp|cc|h|hpp):\d+\])"
    r"|\[\d{4}-\d\d-\d\d [\d:,.]+ ([EFW]) \d+ \d+\]"
)
# ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=…): frames follow, indented.
RAY_ERROR_HEADER_RE = re.compile(r"(?:ray\.exceptions\.)?Ray(?:Task|Actor)Error(?:\([\w.]+\))?: ")
RAY_ERROR_HEADS = (
    "RayTaskError",
    "RayActorError",
    "ray.exceptions.RayTaskError",
    "ray.exceptions.RayActorError",
)
TRACEBACK_HEAD = "Traceback (most recent call last)"
CHAIN_HEADS = (
    "During handling of the above exception",
    "The above exception was the direct cause of the following exception",
)


# Hydra writes its summary line, then the traceback of what verl raised (hydra/core/utils.py,
# then run_and_report's print_exception): the exception line that ends that traceback gets a
# hint of its own, quoting it (LineClassifier._hydra).
HYDRA_CAUSE = "hydra_cause"
MAX_CAUSE_CHARS = 300


def hydra_cause(summary_line: int, exception: str) -> Hint:
    text = " ".join(exception.split())
    if len(text) > MAX_CAUSE_CHARS:
        text = text[: MAX_CAUSE_CHARS - 1] + "…"
    return Hint(
        HYDRA_CAUSE,
        f"why verl failed (Hydra's summary is line {summary_line + 1}, above): {text}",
    )


# The table: failures of the job first (the more specific causes), then its setup, then the
# cluster's (a NCCL line that quotes an out-of-memory is the OOM).
SIGNATURES: tuple[Signature, ...] = JOB_SIGNATURES + SETUP_SIGNATURES + CLUSTER_SIGNATURES


PREFILTER = Prefilter.build(tuple(sig.literals for sig in SIGNATURES))
_ANCHORS_B = tuple(a.encode() for a in PREFILTER.anchors)
HINT_REPEAT_GAP = 1000  # lines before the same hint is attached again (ranks repeat failures)
MAX_TRACEBACK_LINES = 400  # of its own origin: a traceback that never ends closes here
MAX_TRACEBACK_SPAN = 5000  # of the whole log: an origin that went quiet mid-traceback


def classify(msg: str) -> int:
    """ERROR / WARNING bits of one message (origin prefix already stripped), from its first
    MATCH_CHARS characters."""
    msg = msg[:MATCH_CHARS]
    head = msg[:1]
    if head in ("[", "E", "F", "W"):
        m = GLOG_RE.match(msg)
        if m is not None:
            return WARNING if (m.group(1) or m.group(2)) == "W" else ERROR
    if ("ERROR" in msg or "FATAL" in msg or "CRITICAL" in msg) and LEVEL_ERROR_RE.search(msg):
        return ERROR
    if "Error" in msg or "Exception" in msg or "rror: " in msg:
        body = strip_header(msg)  # `2025-01-16 08:48:22 ValueError: …` is an exception line
        if body[:1].isalpha() and EXCEPTION_RE.match(body):
            return ERROR
        if body.startswith(("Error: ", "error: ")):
            return ERROR
    if "WARN" in msg and LEVEL_WARNING_RE.search(msg):
        return WARNING
    if "Warning" in msg and (msg.startswith("Warning: ") or WARNING_CLASS_RE.search(msg)):
        return WARNING
    return 0


def match_signature(msg: str) -> tuple[Signature, Hint] | None:
    """The first known failure signature in `msg` (table order), with its hint filled in; the
    first MATCH_CHARS characters are read. A pattern is tried on the message and, where a
    timestamp or log level leads it, on the text after them (for patterns anchored at `^`;
    the header itself may hold the words a pattern wants: `[E… ProcessGroupNCCL.cpp:1664]`)."""
    msg = msg[:MATCH_CHARS]
    body = strip_header(msg)
    low = msg.lower()
    for i in PREFILTER.candidates(low):  # a literal of each is in the line
        sig = SIGNATURES[i]
        m = sig.pattern.search(msg)
        if m is None and body is not msg:
            m = sig.pattern.search(body)
        if m is not None:
            return sig, sig.explain(m)
    return None


def candidate_starts(data: bytes) -> list[int]:
    """Start offsets of the lines of `data` (whole lines, plain text) that hold an anchor,
    ascending: the anchors the block's tokens allow (Prefilter.present), each found with C-level
    scans over the lowercased block."""
    low = data.lower()
    find, rfind = low.find, low.rfind
    starts: set[int] = set()
    for i in PREFILTER.present(low):
        needle = _ANCHORS_B[i]
        p = find(needle)
        while p >= 0:
            starts.add(rfind(b"\n", 0, p) + 1)
            eol = find(b"\n", p)
            if eol < 0:
                break
            p = find(needle, eol + 1)
    return sorted(starts)


def scan_block(
    clf: LineClassifier, data: bytes, first: int
) -> Iterator[tuple[int, int, Hint | None, str]]:
    """(line number, flags, hint, text) of every line of `data` (plain text, whole lines, the
    first numbered `first`) that gets a flag. Lines without an anchor are skipped unread unless
    a traceback is open, when every line is fed. The log store and `explain` both use this."""
    cands = candidate_starts(data)
    if not cands and not clf.active:
        return
    ci, nc = 0, len(cands)
    pos, line_no, end = 0, first, len(data)
    while pos < end:
        if not clf.active:
            while ci < nc and cands[ci] < pos:
                ci += 1
            if ci == nc:
                return
            line_no += data.count(b"\n", pos, cands[ci])
            pos = cands[ci]
        eol = data.find(b"\n", pos)
        if eol < 0:
            eol = end
        text = data[pos:eol].decode("utf-8", "replace")
        flags, hint = clf.feed(line_no, text)
        if flags:
            yield line_no, flags, hint, text
        pos, line_no = eol + 1, line_no + 1


class LineClassifier:
    """Flags and hints for lines fed in order; follows tracebacks per origin."""

    def __init__(self) -> None:
        # origin -> [first line, own lines seen, closing]; `closing`: the exception line came,
        # but Ray may continue with the remote frames (indented `File "…"` lines).
        self._open: dict[str, list[int]] = {}
        self._last_hint: dict[str, int] = {}
        # origin -> the line of Hydra's summary whose traceback is being followed
        self._hydra: dict[str, int] = {}
        self._exception_line = False  # the line just fed ended a traceback (_traceback)

    @property
    def active(self) -> bool:
        """A traceback is open (or awaited after Hydra's summary): every following line must
        be fed, not just candidates."""
        return bool(self._open or self._hydra)

    def reset(self) -> None:
        self._open.clear()
        self._last_hint.clear()
        self._hydra.clear()

    def feed(self, line_no: int, raw: str) -> tuple[int, Hint | None]:
        source, msg = normalize(raw[:MATCH_CHARS])
        self._exception_line = False
        flags = self._traceback(line_no, source, msg) | classify(msg)
        hint = None
        found = match_signature(msg)
        if found is not None:
            sig, hint = found
            flags |= sig.severity
            last = self._last_hint.get(sig.key)
            if last is not None and line_no - last < HINT_REPEAT_GAP:
                hint = None
            else:
                self._last_hint[sig.key] = line_no
                flags |= HINT
        if self._hydra and not line_no & 255:  # an origin that went quiet: stop waiting
            for key in [k for k, n in self._hydra.items() if line_no - n > MAX_TRACEBACK_LINES]:
                del self._hydra[key]
        if source in self._hydra:
            hint, flags = self._hydra_cause(line_no, source, msg, flags, hint)
        if found is not None and found[0].key == HYDRA_FAILED:
            self._hydra[source] = line_no
        return flags, hint

    def _hydra_cause(
        self, line_no: int, source: str, msg: str, flags: int, hint: Hint | None
    ) -> tuple[Hint | None, int]:
        """After Hydra's summary: the exception line(s) of the traceback that follows get the
        cause hint; the first line of that origin outside a traceback ends the watch."""
        if self._exception_line:
            return hint or hydra_cause(self._hydra[source], msg), flags | HINT
        if not flags & TRACEBACK or line_no - self._hydra[source] > MAX_TRACEBACK_LINES:
            del self._hydra[source]
        return hint, flags

    def _traceback(self, line_no: int, source: str, msg: str) -> int:
        opened = self._open
        if opened and not line_no & 255:
            for key in [k for k, st in opened.items() if line_no - st[0] > MAX_TRACEBACK_SPAN]:
                del opened[key]
        body = msg.lstrip()
        if body.startswith(TRACEBACK_HEAD) or (
            msg.startswith(RAY_ERROR_HEADS) and RAY_ERROR_HEADER_RE.match(msg)
        ):
            opened[source] = [line_no, 0, 0]
            return TRACEBACK | ERROR
        st = opened.get(source)
        if st is None:
            return TRACEBACK if msg.startswith(CHAIN_HEADS) else 0
        if st[2]:  # after the exception line: only remote frames keep it going
            if body.startswith('File "') and msg[:1] in (" ", "\t"):
                st[2] = 0
                return TRACEBACK
            del opened[source]
            return 0
        st[1] += 1
        if st[1] > MAX_TRACEBACK_LINES:
            del opened[source]
            return 0
        if not msg or msg[0] in " \t" or msg.startswith(CHAIN_HEADS) or body.startswith("[Prev"):
            return TRACEBACK
        st[2] = 1  # the first unindented line is the exception itself
        self._exception_line = True
        return TRACEBACK | ERROR
