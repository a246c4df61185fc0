"""The job form's text blocks: the submit bar's summary and the problems no field owns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.text import Text

from tui.fmt import plural
from tui.jobs.rules import Problem
from tui.sanitize import clean, one_line

MAX_LOOSE = 8  # problems listed above the form; the rest counted
NAMED_KEYS = 3  # keys with an error named in the submit bar and in a refusal; the rest counted


def summary_text(
    errors: int,
    warnings: int,
    *,
    against_ray: bool,
    latency_s: float | None,
    error_keys: Sequence[str] = (),
) -> Text:
    """The submit bar's line: ``2 errors: data.train_batch_size, actor_rollout_ref.rollout.n —
    ctrl+n next error`` (the keys named, so they are found without scrolling), or ready."""
    t = Text()
    if errors:
        t.append(plural(errors, "error"), "bold red")
        if error_keys:
            named = ", ".join(one_line(k, 60) for k in error_keys[:NAMED_KEYS])
            more = (
                f" (+{len(error_keys) - NAMED_KEYS} more)" if len(error_keys) > NAMED_KEYS else ""
            )
            t.append(f": {named}{more}", "red")
        t.append(" — ctrl+n next error, submit is off until fixed", "red")
        if warnings:
            t.append(f", {plural(warnings, 'warning')}", "yellow")
    else:
        t.append("ready", "bold green")
        if warnings:
            t.append(f" — {plural(warnings, 'warning')}", "yellow")
    if not against_ray:
        t.append("   (not checked against Ray's nodes)", "yellow")
    if latency_s is not None:
        t.append(f"   checked in {latency_s * 1000:.0f} ms", "dim")
    return t


def place_problems(
    problems: Iterable[Problem], keys: Iterable[str]
) -> tuple[dict[str, list[Problem]], list[Problem]]:
    """(field key → its problems, the problems no field owns). `+key`/`~key` are `key`."""

    def norm(key: str | None) -> str | None:
        return key.lstrip("+~") if key else key

    keys = list(keys)
    placed: dict[str, list[Problem]] = {k: [] for k in keys}
    by_norm = {norm(k): k for k in keys}
    loose: list[Problem] = []
    for p in problems:
        home = by_norm.get(norm(p.key))
        if home is not None:
            placed[home].append(p)
        else:
            loose.append(p)
    return placed, loose


def loose_text(loose: list[Problem]) -> Text:
    """The problems no field owns, one line each (empty Text when there are none)."""
    t = Text()
    for p in loose[:MAX_LOOSE]:
        t.append(
            "✗ " if p.level == "error" else "! ",
            "bold red" if p.level == "error" else "bold yellow",
        )
        t.append(f"{one_line(p.key or 'profile')}: ", "bold")
        t.append(clean(p.message) + "\n")
    if len(loose) > MAX_LOOSE:
        t.append(f"… {len(loose) - MAX_LOOSE} more\n", "dim")
    t.rstrip()  # in place (Rich's rstrip returns None): no blank line under the last one
    return t


def show_field_problems(fields: Mapping[str, Any], placed: Mapping[str, list[Problem]]) -> None:
    """Each field shows its problems, less the one it found itself (shown already)."""
    for key, f in fields.items():
        f.show_problems(
            [
                p
                for p in placed.get(key, [])
                if not (f.local_problem and p.message == f.local_problem)
            ]
        )
