"""The one normaliser of log lines: what every launcher, logger and copy-paste puts before (and
after) the message, taken off so the signatures (tui/logs/signatures.py) see the message itself.

Two layers come off, in order:

origin  who printed the line, kept as the line's `source` (tracebacks are followed per origin):
        Ray's `(WorkerDict pid=1234, ip=10.0.0.2) `, `(TaskRunner pid=…)`, `(raylet, ip=…) `,
        `(autoscaler +1m2s) `; torchrun's `[rank7]:` and `[default3]:`; mpirun's
        `[1,3]<stderr>:`; srun --label's `  3: `; a bare `[0] ` tag; and Ray's colour codes
        around its prefix, also when a copy lost their ESC (`[36m(WorkerDict …)[0m`,
        `\ufffd[36m`). They nest (`(WorkerDict pid=1) [rank0]:`), so up to MAX_ORIGINS come off.
        Ray's `[repeated 7x across cluster]` tail comes off too.
header  when it was printed and at what level, dropped for matching only (`classify` still
        reads glog levels from the message): glog `[E1128 12:00:00.123 12 file.cc:45] ` (with
        or without the bracket), torch's `[E ProcessGroupNCCL.cpp:475] `, Ray's C++
        `[2025-01-16 08:48:22,123 E 1 2] file.cc:12: `, Python logging's `2025-01-16
        08:48:22,123 - name - ERROR - ` / `… ERROR worker.py:12 -- `, vLLM's `ERROR 01-16
        08:48:22 [engine.py:12] `, ISO times, dmesg's `[12345.678] ` and `[Sun Mar 30 08:24:00
        2025] `, DeepSpeed's `[2025-01-16 08:48:22,123] [ERROR] [file.py:12:fn] `.

Every pattern here is anchored at a position and bounded (`{0,N}`), so one call costs at most a
few hundred steps whatever the line holds; the loops are bounded by MAX_ORIGINS/MAX_HEADERS.
"""

from __future__ import annotations

import re

# CSI (colours, cursor moves), OSC (titles, links; never across a newline) and 2-byte escapes.
ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
ANSI_RE_B = re.compile(ANSI_RE.pattern.encode())

# An SGR code whose ESC was lost on the way (a copy from a terminal or a web page): `[36m`, or
# with the replacement character U+FFFD where the ESC byte was.
_ORPHAN_SGR = r"(?:\ufffd?\[[0-9;]{0,12}m)"
_ORIGIN_RE = re.compile(
    _ORPHAN_SGR + r"{0,3}"
    r"(?:"
    # Ray: (Name pid=1, ip=…), (pid=1), (raylet), (raylet, ip=…), (gcs_server), (autoscaler +1m)
    r"\((?:[^()\s]{1,120} )?(?:pid=\d{1,10}|raylet|gcs_server|dashboard\w{0,20}|monitor"
    r"|autoscaler \+[^,()]{0,40})(?:, ip=[^()\s]{1,120})?(?:, [^()]{1,200})?\)"
    # torchrun: [rank7]: [default3]:  (also local_rank)
    r"|\[(?:rank|default|local_rank)\d{1,6}\]:"
    # mpirun --tag-output: [1,3]<stderr>:
    r"|\[\d{1,6},\d{1,6}\]<std(?:out|err)>:"
    # srun --label / pdsh-like numeric tags: `  3: ` and `[0] `
    r"|[ ]{0,6}\d{1,5}:(?= )"
    r"|\[\d{1,3}\](?= )"
    r")" + _ORPHAN_SGR + r"{0,3} ?"
)
_SGR_ONLY_RE = re.compile(_ORPHAN_SGR + r"{1,3}")
REPEATED_RE = re.compile(r"\[repeated \d+x across cluster\]")
MAX_ORIGINS = 4

# Headers: timestamps, levels, source positions. Each alternative is anchored and bounded.
_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)"
_DATE = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_PATH_LINE = r"[\w.\-/]{1,200}:\d{1,6}"
_HEADERS = (
    # glog / c10: [E1128 12:00:00.123456 123 file.cc:45] and E1128 12:00:00.123 123 file.cc:45]
    r"\[?[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d{1,9})? {0,8}(?:\d{1,10} {1,4})?" + _PATH_LINE + r"\]",
    # torch's short form: [E ProcessGroupNCCL.cpp:475]
    r"\[[IWEF] " + _PATH_LINE + r"\]",
    # Ray C++: [2025-01-16 08:48:22,123 E 1234 1250] (raylet) file.cc:12:
    r"\[" + _DATE + r" [IWEFD] \d{1,10} \d{1,10}\](?: \([\w ]{1,40}\))?(?: " + _PATH_LINE + ":)?",
    # DeepSpeed / bracketed dates: [2025-01-16 08:48:22,123] [ERROR] [file.py:12:fn]
    r"\[" + _DATE + r"\](?: \[" + _LEVEL + r"\])?(?: \[" + _PATH_LINE + r"(?::\w{1,100})?\])?",
    # Python logging: 2025-01-16 08:48:22,123 - name - ERROR - / 2025-… ERROR file.py:12 --
    _DATE
    + r"(?: {1,3}- {1,3}[\w.\-]{1,100})?(?: {1,3}-)? {1,3}"
    + _LEVEL
    + r"(?: {1,3}"
    + _PATH_LINE
    + r")?(?: {1,3}--| {1,3}-|:)?",
    # a bare date/time (ISO)
    _DATE,
    # vLLM / SGLang: ERROR 01-16 08:48:22 [engine.py:12]
    _LEVEL + r" \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? (?:\[" + _PATH_LINE + r"\])?",
    # dmesg: [12345.678901] and dmesg -T: [Sun Mar 30 08:24:00 2025]
    r"\[ {0,8}\d{1,10}\.\d{1,9}\]",
    r"\[[A-Z][a-z]{2} [A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d \d{4}\]",
    # a level word alone: `[ERROR] `, `ERROR: `
    r"\[" + _LEVEL + r"\]",
    _LEVEL + r"(?=:)",
)
_HEADER_RE = re.compile("(?:" + "|".join(_HEADERS) + r")[:\s]{0,4}")
MAX_HEADERS = 4


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def split_source(plain: str) -> tuple[str, str]:
    """(origin prefix, message) of a line without ANSI codes: every origin the launchers and
    Ray put before it, and Ray's repeat tail after it."""
    msg = plain
    end = 0
    for _ in range(MAX_ORIGINS):
        if msg[end : end + 1] not in ("(", "[", " ", "\ufffd") and not msg[end : end + 1].isdigit():
            break
        m = _ORIGIN_RE.match(msg, end)
        if m is None or m.end() == end:
            break
        end = m.end()
    source = msg[:end].rstrip() if end else ""
    if end:
        msg = msg[end:]
    if "across cluster]" in msg:
        # Found by position, not `\s*…` tried at every blank of the line (quadratic).
        cut = msg.rfind("[repeated ")
        if cut >= 0 and REPEATED_RE.match(msg, cut):
            msg = msg[:cut].rstrip()
    if source and msg[:1] == "[":  # a colour code left after the origin
        m = _SGR_ONLY_RE.match(msg)
        if m is not None:
            msg = msg[m.end() :]
    return source, msg


def strip_header(msg: str) -> str:
    """The message without its timestamps, log level and source position (for matching)."""
    pos = 0
    for _ in range(MAX_HEADERS):
        m = _HEADER_RE.match(msg, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
    return msg[pos:] if pos else msg


def normalize(raw: str) -> tuple[str, str]:
    """(origin, message) of one raw line: ANSI codes, every origin prefix and Ray's repeat
    tail taken off. `strip_header` then gives the text the signatures match."""
    return split_source(strip_ansi(raw))
