"""A job form's errors, found without scrolling: how many there are and which keys they are on
(the submit bar names them), and which field the next/previous error key goes to. Functions of
the form's fields and its last report (tui/jobs/validate.py), each field carrying its own parse
problem; the form moves the cursor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tui.fmt import plural
from tui.widgets.jobform.summary import NAMED_KEYS, place_problems

if TYPE_CHECKING:
    from tui.jobs.validate import Report
    from tui.widgets.jobform import FormField

PROFILE = "profile"  # where an error no field owns is said to be (it is listed above the form)


def error_count(fields: Mapping[str, FormField], report: Report | None) -> int:
    n = sum(1 for f in fields.values() if f.local_problem)
    if report is not None:
        n += len(report.errors)
        if report.config is None and not report.errors:
            n += 1
    return n


def error_keys(fields: Mapping[str, FormField], report: Report | None) -> list[str]:
    """The keys with an error, in the form's order (each once); errors no field owns follow as
    their own key, or `profile`."""
    placed, loose = place_problems(report.errors if report else [], dict(fields))
    keys = [k for k, f in fields.items() if f.local_problem or placed.get(k)]
    for p in loose:
        key = p.key or PROFILE
        if key not in keys:
            keys.append(key)
    if report is not None and report.config is None and not report.errors and not keys:
        keys.append(PROFILE)
    return keys


def errors_named(fields: Mapping[str, FormField], report: Report | None) -> str:
    """``2 errors: data.train_batch_size, actor_rollout_ref.rollout.n``."""
    keys = error_keys(fields, report)
    named = ", ".join(keys[:NAMED_KEYS])
    more = f" (+{len(keys) - NAMED_KEYS} more)" if len(keys) > NAMED_KEYS else ""
    return f"{plural(error_count(fields, report), 'error')}: {named}{more}" if keys else ""


def error_fields(fields: Mapping[str, FormField], report: Report | None) -> list[FormField]:
    keys = set(error_keys(fields, report))
    return [f for k, f in fields.items() if k in keys]


def next_error(
    fields: Mapping[str, FormField], with_error: list[FormField], here: FormField | None, step: int
) -> FormField:
    """The field with an error after `here` (`step` 1) or before it (-1), wrapping; from no
    field (or one not in the form): the first (1) or last (-1). `with_error` is not empty."""
    order = list(fields.values())
    if here is None or here not in order:
        return with_error[0] if step > 0 else with_error[-1]
    at = order.index(here)
    ahead = [f for f in with_error if (order.index(f) - at) * step > 0]
    if ahead:
        return ahead[0] if step > 0 else ahead[-1]
    return with_error[0] if step > 0 else with_error[-1]  # wrap around
