"""The boundary for the dashboard's answers: one schema per answer, checked before use.

The head's dashboard is outside input (a broken or hostile one, or something else listening on
its port, answers what it likes). Every answer the services read is checked here against what
Ray sends, by the client's typed methods (tui/cluster/dashboard.py): the answer is the JSON type
it should be, the rows are objects, and each field the services use has its type (strings are
strings, capped; numbers are finite numbers, never bools). What is wrong raises AnswerError with
one line naming the field (`[3].status is a number of 5, not a string`); fields the services do
not use are dropped, so nothing unchecked gets past.

Unlike the GPU agent's lines (agent_schema: a bad field becomes None, the rest of the sample is
kept), a wrong answer here is an error: the services act on it (stop, submit, queue), and
guessing around a wrong job list is worse than saying the dashboard is not Ray's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from tui.cluster.agent_schema import describe

# Ray 2.60 itself accepts any string as a submission id (JobSubmitRequest only checks the type),
# then uses it as a URL path segment (/api/jobs/{id}/...), an actor name and a file name
# (logs/job-driver-{id}.log). Its own ids are `raysubmit_` + 16 of [A-Za-z0-9] (job_manager.
# generate_job_id) and driver job ids are hex ("02000000"). We accept exactly what is safe in
# all three places: letters, digits, '_', '-', '.', not starting with '.', at most 200
# characters (the log file name stays under 255 bytes), starting with a letter, digit or '_'
# (so it is never read as an option or a dot segment).
SUBMISSION_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
SUBMISSION_ID_RULE = (
    "letters, digits, '_', '-', '.'; starting with a letter, digit or '_'; at most 200 characters"
)
TEXT_CAP = 64 * 1024  # characters of a message or an entrypoint kept (cut with "…")
SHORT_CAP = 512  # ids, states, versions, addresses


class AnswerError(ValueError):
    """An answer that is not what Ray sends: one line naming what is wrong."""


Check = Callable[[Any, str], Any]


def _at(where: str, key: str | int) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key


def _bad(value: Any, where: str, want: str) -> AnswerError:
    return AnswerError(f"{where or 'the answer'} is {describe(value)}, not {want}")


def text(cap: int = SHORT_CAP) -> Check:
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise _bad(value, where, "a string")
        return value if len(value) <= cap else value[: cap - 1] + "…"

    return check


def number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(value, where, "a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad(value, where, "a finite number")
    if isinstance(value, int) and abs(value) > 1 << 63:
        raise _bad(value, where, "a number in range")
    return value


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(value, where, "true or false")
    return value


def pid(value: Any, where: str) -> int:
    """A process id: an int, or the digits of one (Ray's driver_info.pid is a string)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 12:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise _bad(value, where, "a process id")
    return value


def count(value: Any, where: str) -> int:
    """A count of at least 0: an int, or the digits of one (protobuf's int64 is a string)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(value, where, "a count")
    return value


def submission_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not SUBMISSION_ID_RE.fullmatch(value):
        raise _bad(value, where, f"a submission id ({SUBMISSION_ID_RULE})")
    return value


def port(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise _bad(value, where, "a port number")
    return value


def any_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(value, where, "an object")
    return value


def map_of(check: Check) -> Check:
    def checked(value: Any, where: str) -> dict[str, Any]:
        return {str(k): check(v, _at(where, str(k))) for k, v in any_object(value, where).items()}

    return checked


# A spec: field -> (check, required). A missing or null optional field reads as None.
Spec = dict[str, tuple[Check, bool]]


def obj(spec: Spec) -> Check:
    def checked(value: Any, where: str) -> dict[str, Any]:
        return check_object(value, spec, where)

    return checked


def obj_with(**fields: Check) -> Check:
    """An object kept whole (its other fields unread here), `fields` checked when present."""

    def checked(value: Any, where: str) -> dict[str, Any]:
        d = any_object(value, where)
        for key, check in fields.items():
            if d.get(key) is not None:
                check(d[key], _at(where, key))
        return d

    return checked


def check_object(value: Any, spec: Spec, where: str = "") -> dict[str, Any]:
    """The fields of `spec` out of the object `value`, each checked (AnswerError otherwise)."""
    d = any_object(value, where)
    out: dict[str, Any] = {}
    for key, (check, required) in spec.items():
        v = d.get(key)
        if v is None:
            if required:
                raise AnswerError(f"{_at(where, key)} is missing")
            out[key] = None
        else:
            out[key] = check(v, _at(where, key))
    return out


def list_of(value: Any, spec: Spec, where: str = "") -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _bad(value, where, "a list")
    return [check_object(row, spec, _at(where, i)) for i, row in enumerate(value)]


# ---- the Jobs API -----------------------------------------------------------------------------

DRIVER_INFO: Spec = {
    "id": (text(), False),
    "node_ip_address": (text(), False),
    "pid": (pid, False),
}

# One job, as GET /api/jobs/ (each row) and GET /api/jobs/{id} answer it (Ray's JobDetails).
JOB: Spec = {
    "type": (text(), False),
    "job_id": (text(), False),
    "submission_id": (text(), False),
    "status": (text(), True),
    "entrypoint": (text(TEXT_CAP), False),
    "message": (text(TEXT_CAP), False),
    "error_type": (text(), False),
    "start_time": (number, False),  # ms since 1970
    "end_time": (number, False),
    "driver_exit_code": (number, False),
    "driver_node_id": (text(), False),
    "driver_info": (obj(DRIVER_INFO), False),
    "metadata": (map_of(text(TEXT_CAP)), False),
    "runtime_env": (obj_with(working_dir=text(TEXT_CAP)), False),
}

# POST /api/jobs/ (JobSubmitResponse).
SUBMITTED: Spec = {"submission_id": (submission_id, True), "job_id": (text(), False)}
STOPPED: Spec = {"stopped": (flag, True)}
DELETED: Spec = {"deleted": (flag, True)}
LOGS: Spec = {"logs": (text(1 << 62), True)}  # bounded by the answer's size cap

# ---- the state API (/api/v0/…) ----------------------------------------------------------------

NODE: Spec = {
    "node_id": (text(), True),
    "node_ip": (text(), True),
    "state": (text(), True),
    "node_name": (text(), False),
    "is_head_node": (flag, False),
    "resources_total": (map_of(number), False),
}
WORKER: Spec = {
    "worker_id": (text(), False),
    "job_id": (text(), False),
    "ip": (text(), False),
    "pid": (pid, False),
    "is_alive": (flag, False),
    "debugger_port": (port, False),
}
TASK: Spec = {
    "task_id": (text(), False),
    "job_id": (text(), False),
    "name": (text(), False),
    "func_or_class_name": (text(), False),
    "state": (text(), False),
    "node_id": (text(), False),
    "worker_id": (text(), False),
    "worker_pid": (pid, False),
    "type": (text(), False),
    "actor_id": (text(), False),
    "required_resources": (map_of(number), False),
    "placement_group_id": (text(), False),
    "error_message": (text(), False),
}
ACTOR: Spec = {
    "actor_id": (text(), False),
    "job_id": (text(), False),
    "state": (text(), False),
    "node_id": (text(), False),
    "pid": (pid, False),
    "class_name": (text(), False),
    "name": (text(), False),
    "repr_name": (text(), False),
    "num_restarts": (count, False),
    "death_cause": (any_object, False),  # nested contexts: read by tui/stack/ray_view.py
    "placement_group_id": (text(), False),
}


def rows(spec: Spec, cap: int = 10_000) -> Check:
    """A list of objects of `spec`, at most `cap` of them."""

    def checked(value: Any, where: str) -> list[dict[str, Any]]:
        if isinstance(value, list) and len(value) > cap:
            raise _bad(value, where, f"a list of at most {cap}")
        return list_of(value, spec, where)

    return checked


BUNDLE: Spec = {
    "node_id": (text(), False),
    "unit_resources": (map_of(number), False),
}
PLACEMENT_GROUP: Spec = {
    "placement_group_id": (text(), False),
    "name": (text(), False),
    "creator_job_id": (text(), False),
    "state": (text(), False),
    "bundles": (rows(BUNDLE), False),
    "stats": (obj_with(scheduling_state=text()), False),
}
STATE_ROWS: dict[str, Spec] = {
    "nodes": NODE,
    "workers": WORKER,
    "tasks": TASK,
    "actors": ACTOR,
    "placement_groups": PLACEMENT_GROUP,
}

METADATA: Spec = {"rayVersion": (text(), False), "pythonVersion": (text(), False)}


def envelope(value: Any) -> Any:
    """The `data` of a state-API answer ({"result": true, "msg": …, "data": …}); AnswerError
    with Ray's own message when it says it failed."""
    d = any_object(value, "")
    if d.get("result") is False:
        msg = d.get("msg")
        raise AnswerError(
            f"Ray says it failed: {describe(msg) if not isinstance(msg, str) else msg}"
        )
    if "data" not in d:
        raise AnswerError("data is missing")
    return d["data"]


def state_rows(value: Any, kind: str) -> list[dict[str, Any]]:
    """The rows of a /api/v0/{kind} answer: data.result.result (Ray ≥ 2.x), or data.result."""
    data = any_object(envelope(value), "data")
    result = data.get("result")
    where = "data.result"
    if isinstance(result, dict):
        result, where = result.get("result"), "data.result.result"
    return list_of(result, STATE_ROWS[kind], where)


def cluster_status(value: Any) -> dict[str, Any]:
    """/api/cluster_status: an object whose data is an object (jobs/queue.py reads inside)."""
    d = any_object(value, "")
    any_object(envelope(d), "data")
    return d
