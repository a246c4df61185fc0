"""Parse verl's console-logger lines out of a Ray job log.

verl's ``console`` tracking backend prints one line per logged step, built by
``verl.utils.logger.aggregate_logger.concat_dict_to_str``::

    step:37 - critic/score/mean:0.61 - actor/entropy:np.float64(0.42) - training/epoch:0 - ...

Each value is ``pprint.pformat(v)`` of a ``numbers.Number``: Python floats and ints, ``nan``,
``inf``, ``True``, and numpy scalars, which numpy >= 2 writes as ``np.float64(0.42)``.
Printed by the TaskRunner actor, the line reaches the job log behind Ray's prefix
(``(TaskRunner pid=1234, ip=10.0.0.2) ``), sometimes coloured with ANSI codes.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's worker prefix: "(TaskRunner pid=1234) " or "(TaskRunner pid=1234, ip=10.0.0.2) ".
_RAY_PREFIX = re.compile(r"\s*(?:\([^()]*\)\s*)+")
# Ray's log deduplication appends this to a line other processes printed too.
_REPEATED = re.compile(r"\[repeated \d+x across cluster\]")
_REPEATED_END = "across cluster]"
# numpy >= 2 repr of a scalar: np.float64(0.5), np.int64(3), np.float32(nan).
_NP_SCALAR = re.compile(r"np\.[a-z]+[0-9]*\((.*)\)")
# A step or a total is at most 18 digits (int() of a 5,000-digit string raises): a longer
# number is not verl's.
_HEAD = re.compile(r"step:(-?[0-9]{1,18})(?: - |$)")
_NP_SUB = re.compile(r"np\.[a-z]+[0-9]*\('?([^()' ]*)'?\)")
_TOTAL = re.compile(r"Total training steps:[ \t]*(\d{1,18})(?!\d)")

TOTAL_MARK = "Total training steps"


def parse_value(raw: str) -> float | None:
    """One value as verl prints it (``pprint.pformat`` of a number), or None."""
    s = raw.strip()
    if s.startswith("np."):
        m = _NP_SCALAR.fullmatch(s)
        if m is None:
            return None
        s = m.group(1).strip("'\"")  # np.longdouble('0.1') quotes its argument
    if s == "True":
        return 1.0
    if s == "False":
        return 0.0
    try:
        return float(s)
    except ValueError:
        return None


def clean_line(line: str) -> str:
    """The line as the process printed it: no ANSI codes, Ray prefix or dedup suffix."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = line.strip()
    if line.startswith("("):
        line = _RAY_PREFIX.sub("", line, count=1)
    if line.endswith(_REPEATED_END):
        # Found from the end, not by a regex scan: `\s*…$` tried at every blank of a long line
        # is quadratic.
        cut = line.rfind("[repeated ")
        if cut >= 0 and _REPEATED.fullmatch(line, cut):
            line = line[:cut].rstrip()
    return line


def _np_value(m: re.Match[str]) -> str:
    return m.group(1)


def _parse_fields(body: str) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for field in body.split(" - "):
        # rpartition: a value never holds ":", a data-source name inside a key might.
        key, _, raw = field.rpartition(":")
        if key and " " not in key:
            value = parse_value(raw)
            if value is not None:
                metrics[key] = value
    return metrics


def parse_metrics_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, {key: value})`` for one verl console-logger line, else None.

    The line must start (after Ray's prefix) with ``step:N`` and carry at least one
    ``key:value`` field; fields that are not ``key:number`` are skipped, so stray text that
    happens to contain "step:" does not become a metric."""
    if "step:" not in line:
        return None
    line = clean_line(line)
    head = _HEAD.match(line)
    if head is None:
        return None
    body = line[head.end() :]
    if "np." in body:
        body = _NP_SUB.sub(_np_value, body)
    # Fast path, all in C (a verl line has ~100 fields): every field is "key:value" with one
    # colon and no spaces, so the line flattens to key, value, key, value...
    fields = body.count(" - ") + 1
    if body.count(":") == fields and body.count(" ") == 2 * (fields - 1):
        flat = body.replace(" - ", ":").split(":")
        try:
            metrics = dict(zip(flat[0::2], map(float, flat[1::2]), strict=True))
        except ValueError:  # True/False, or a field that is not a number
            metrics = _parse_fields(body)
        else:
            metrics.pop("", None)
    else:
        metrics = _parse_fields(body)
    if not metrics:
        return None
    return int(head.group(1)), metrics


def parse_total_steps(line: str) -> int | None:
    """verl's ``Total training steps: N`` (ray_trainer prints it, v1 and SFT log it)."""
    m = _TOTAL.search(line)
    return int(m.group(1)) if m else None
