"""verl's `file` tracking backend: its JSON lines, and where the file is.

verl 0.9.1's ``verl.utils.tracking.FileLogger`` writes one line per logged step::

    {"step":37,"data":{"critic/score/mean":0.61,"actor/entropy":0.42,...}}

with orjson (``OPT_SERIALIZE_NUMPY``), which writes NaN and ±Inf as ``null``: a null value is a
non-finite number here (kept as NaN), never a missing key. The file is
``$VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT`` (default ``.``, the process's
working directory) ``/<trainer.project_name>/<trainer.experiment_name>.jsonl``; the logger
prints ``Creating file logger at <absolute path>`` when it opens it, from the process that runs
the trainer (verl's TaskRunner actor, behind Ray's ``(TaskRunner pid=…, ip=…)`` prefix).

Plain Python: the file's text comes from whoever reads it (tui/archive/metrics_file.py).
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tui.metrics.parse import clean_line

# A line longer than this is not one of verl's (a step of a few hundred keys is ~10 KB).
MAX_LINE_BYTES = 4 << 20
MAX_STEP = 10**18
LOGGER_MARK = "Creating file logger at "
PATH_ENV = "VERL_FILE_LOGGER_PATH"
ROOT_ENV = "VERL_FILE_LOGGER_ROOT"
# verl 0.9.1's trainer defaults (ppo_trainer.yaml: trainer.project_name / experiment_name).
DEFAULT_PROJECT = "verl_examples"
DEFAULT_EXPERIMENT = "gsm8k"
_IP = re.compile(r"\bip=([0-9A-Fa-f.:]{2,45})\)")
MAX_PATH = 4096


def as_number(v: object) -> float | None:
    """A JSON value as a metric: numbers (a huge integer is ±inf), null (orjson's NaN/±Inf) as
    NaN, booleans as 1/0; None for anything else (text, lists, objects are not metrics)."""
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, float):
        return v
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    return None


def parse_file_line(line: str | bytes) -> tuple[int, dict[str, float]] | None:
    """``(step, {key: value})`` of one FileLogger line, or None for a line that is not one
    (bad JSON, no integer step, no numeric value, longer than MAX_LINE_BYTES)."""
    if len(line) > MAX_LINE_BYTES or not line.strip():
        return None
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: "[[[[…" nested past the stack
        return None
    if not isinstance(doc, dict):
        return None
    step, data = doc.get("step"), doc.get("data")
    if isinstance(step, bool) or not isinstance(step, int) or not -MAX_STEP < step < MAX_STEP:
        return None
    if not isinstance(data, dict):
        return None
    metrics: dict[str, float] = {}
    for key, raw in data.items():
        value = as_number(raw)
        if value is not None and key:
            metrics[key] = value
    return (step, metrics) if metrics else None


class FileLines:
    """Text of the file in chunks → parsed rows; a line split across chunks waits for its
    newline (a partial line longer than MAX_LINE_BYTES is dropped, not kept growing)."""

    def __init__(self) -> None:
        self._tail = ""
        self.bad_lines = 0

    def feed(self, text: str) -> list[tuple[int, dict[str, float]]]:
        data = self._tail + text if self._tail else text
        end = data.rfind("\n")
        if end < 0:
            self._tail = data if len(data) <= MAX_LINE_BYTES else ""
            return []
        self._tail = data[end + 1 :]
        if len(self._tail) > MAX_LINE_BYTES:
            self._tail = ""
        return self._rows(data[:end].split("\n"))

    def flush(self) -> list[tuple[int, dict[str, float]]]:
        data, self._tail = self._tail, ""
        return self._rows([data]) if data.strip() else []

    def _rows(self, lines: Iterable[str]) -> list[tuple[int, dict[str, float]]]:
        out = []
        for line in lines:
            if not line.strip():
                continue
            row = parse_file_line(line)
            if row is None:
                self.bad_lines += 1
            else:
                out.append(row)
        return out


@dataclass(frozen=True)
class LoggerLine:
    """What FileLogger's "Creating file logger at PATH" line says: the file, and the node of
    the process that printed it (Ray's prefix ``ip=…``; None when the driver printed it)."""

    path: str
    node_ip: str | None


def find_logger_line(text: str) -> LoggerLine | None:
    """The last "Creating file logger at /abs/path" line of some driver log text (a resumed
    run opens the file again: the last one is the file written now)."""
    found = find_marked_lines(text, LOGGER_MARK)
    return found[-1] if found else None


def find_marked_lines(text: str, mark: str) -> list[LoggerLine]:
    """Every line of driver log text that is `mark` then an absolute path, printed by the
    trainer itself (nothing before the mark but Ray's prefix): the path and the node that
    printed it, in order. verl prints its FileLogger's file and each rollout dump this way."""
    found: list[LoggerLine] = []
    for raw in text.splitlines():
        if mark not in raw:
            continue
        head, _, path = clean_line(raw).partition(mark)
        path = path.strip()
        if head.strip() or not _good_path(path):
            continue
        m = _IP.search(raw.partition(mark)[0])
        found.append(LoggerLine(path, m.group(1) if m else None))
    return found


def _good_path(path: str) -> bool:
    return (
        path.startswith("/")
        and len(path) <= MAX_PATH
        and not any(ord(c) < 32 or ord(c) == 127 for c in path)
    )


def _override(argv: list[str], key: str) -> str | None:
    found = None
    for word in argv:
        for prefix in (f"{key}=", f"+{key}=", f"++{key}="):
            if word.startswith(prefix):
                found = word[len(prefix) :].strip("'\"")
    return found


def entry_value(entrypoint: str, key: str) -> str | None:
    """The value the job's command line gives a Hydra key (the last one wins), or None."""
    try:
        return _override(shlex.split(entrypoint), key)
    except ValueError:
        return None


def loggers_of(entrypoint: str) -> list[str] | None:
    """trainer.logger as the command line sets it (None: not set there, verl's default)."""
    try:
        argv = shlex.split(entrypoint)
    except ValueError:
        return None
    value = _override(argv, "trainer.logger")
    if value is None:
        return None
    return [w.strip(" '\"") for w in value.strip("[]").split(",") if w.strip(" '\"")]


def configured_path(entrypoint: str, env: Mapping[str, str]) -> str | None:
    """The file the job's own command line and environment name, when that is an absolute
    path (a relative one depends on the trainer process's working directory, which only its
    "Creating file logger at" line tells); None when it logs no `file` or the path is not
    known from here."""
    loggers = loggers_of(entrypoint)
    if loggers is not None and "file" not in loggers:
        return None
    path = env.get(PATH_ENV)
    if path:
        return path if _good_path(path) else None
    try:
        argv = shlex.split(entrypoint)
    except ValueError:
        return None
    root = env.get(ROOT_ENV, ".")
    if not root.startswith("/"):
        return None
    project = _override(argv, "trainer.project_name") or DEFAULT_PROJECT
    experiment = _override(argv, "trainer.experiment_name") or DEFAULT_EXPERIMENT
    if "/" in project + experiment or "$" in project + experiment:
        return None  # an interpolation or a nested name: not worked out here
    path = posixpath.join(root, project, f"{experiment}.jsonl")
    return path if _good_path(path) else None
