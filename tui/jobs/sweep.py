"""Sweeps: a profile run over a grid of values (1–3 keys), every combination validated through
the one pipeline first (all or nothing), then queued as one group.

Each run gets a readable submission id built from the sweep's name and its values
(`NAME-lr1e-6-tbs64`), in Ray's id charset, unique against the queue and the history.
The submission flow (tui/jobs/flow.py) calls `plan_sweep` and `queue_sweep` for `verl-tui
sweep` and the job form's sweep builder.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tui.config.hosts import Inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.pipeline import JobSpec, prepare_submission
from tui.jobs.profiles import check_set, override_key
from tui.jobs.queue import JobQueue, Needs, QueueEntry, entry_for
from tui.jobs.rules_base import ClusterResources, Problem
from tui.jobs.submit import Submission

MAX_KEYS = 3
MAX_RUNS = 64  # a grid past this is a typo more often than a plan
_ID_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_ID_MAX = 200


@dataclass(frozen=True)
class Grid:
    key: str
    values: tuple[str, ...]


@dataclass
class Run:
    """One combination: its (key, value) pairs and the submission id it gets."""

    values: tuple[tuple[str, str], ...]
    submission_id: str

    @property
    def sets(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.values]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values)


@dataclass
class SweepPlan:
    name: str
    runs: list[Run]
    subs: list[Submission] = field(default_factory=list)  # one per run, when all are valid
    configs: list[dict[str, Any] | None] = field(default_factory=list)
    # run label → its errors (empty when every run validated)
    invalid: dict[str, list[Problem]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.invalid and len(self.subs) == len(self.runs)

    def first_error(self) -> str:
        for label, problems in self.invalid.items():
            p = problems[0]
            return f"combination {label}: {p.key or 'profile'}: {p.message}"
        return ""


def split_values(text: str) -> list[str]:
    """`a,b,[1,2],'x,y'` → ['a', 'b', '[1,2]', "'x,y'"]: commas inside brackets, braces or
    quotes belong to the value (Hydra lists and quoted strings)."""
    out, cur, depth, quote = [], "", 0, ""
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    out.append(cur.strip())
    return out


def parse_grid(text: str, what: str = "--grid") -> Grid:
    """`KEY=V1,V2,…` → Grid; ConfigError (one line) for anything else."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{what} {text!r}: expected KEY=V1,V2,…")
    values = split_values(rest)
    if any(not v for v in values):
        raise ConfigError(f"{what} {text!r}: an empty value (two commas, or one at an end)")
    if len(set(values)) != len(values):
        raise ConfigError(f"{what} {text!r}: a value is given twice")
    for v in values:
        try:
            check_set(f"{key}={v}")  # Hydra's own parser: one line naming the bad value
        except ConfigError as exc:
            why = str(exc).split("': ", 1)[-1]
            raise ConfigError(f"{what} {key}: value {v!r}: {why}") from None
    return Grid(key, tuple(values))


def check_grids(grids: Sequence[Grid]) -> None:
    if not grids:
        raise ConfigError("--grid KEY=V1,V2: give at least one")
    if len(grids) > MAX_KEYS:
        raise ConfigError(f"--grid: at most {MAX_KEYS} keys (got {len(grids)})")
    keys = [override_key(g.key) for g in grids]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup:
        raise ConfigError(f"--grid {dup}: the key is given twice")
    count = 1
    for g in grids:
        count *= len(g.values)
    if count > MAX_RUNS:
        raise ConfigError(f"--grid: {count} combinations, more than {MAX_RUNS}")


def short_key(key: str) -> str:
    """The part of a key that names it in an id: the last segment, or its words' initials
    when long (`data.train_batch_size` → tbs, `actor.optim.lr` → lr)."""
    last = override_key(key).rsplit(".", 1)[-1]
    words = [w for w in last.split("_") if w]
    if len(last) > 8 and len(words) > 1:
        return "".join(w[0] for w in words)
    return last


def clean_id(text: str) -> str:
    """Text in Ray's submission id charset (tui/cluster/dashboard.SUBMISSION_ID_RE)."""
    out = _ID_BAD.sub("-", text).strip("-.")
    out = re.sub(r"-{2,}", "-", out)
    if not out or not (out[0].isalnum() or out[0] == "_"):
        out = "run-" + out
    return out[:_ID_MAX].rstrip("-.")


def runs_of(name: str, grids: Sequence[Grid], taken: Callable[[str], bool]) -> list[Run]:
    """Every combination (the first grid varies slowest), each with a unique readable id."""
    check_grids(grids)
    base = clean_id(name)
    seen: set[str] = set()
    out = []
    for combo in itertools.product(*(g.values for g in grids)):
        values = tuple((g.key, v) for g, v in zip(grids, combo, strict=True))
        stem = clean_id(base + "-" + "-".join(f"{short_key(k)}{v}" for k, v in values))
        sid, n = stem, 2
        while sid in seen or taken(sid):
            suffix = f"-{n}"
            sid = stem[: _ID_MAX - len(suffix)] + suffix
            n += 1
        seen.add(sid)
        out.append(Run(values, sid))
    return out


def plan_sweep(
    inv: Inventory,
    spec: JobSpec,
    grids: Sequence[Grid],
    *,
    name: str,
    resources: ClusterResources | None,
    taken: Callable[[str], bool] = lambda _sid: False,
    working_dir_bytes: int | None = None,
) -> SweepPlan:
    """Validate every combination of `grids` on top of `spec` (its --set first, then the
    run's values). Blocking (composes verl's config once per run): call it in a thread."""
    plan = SweepPlan(name, runs_of(name, grids, taken))
    for run in plan.runs:
        one = replace(spec, sets=[*spec.sets, *run.sets], submission_id=run.submission_id)
        sub, report = prepare_submission(inv, one, resources, working_dir_bytes=working_dir_bytes)
        if sub is None or not report.ok:
            plan.invalid[run.label] = report.errors or [
                Problem(None, "verl's config did not compose")
            ]
            continue
        sub.metadata["sweep"] = name
        plan.subs.append(sub)
        plan.configs.append(report.config)
    return plan


def queue_sweep(
    inv: Inventory,
    plan: SweepPlan,
    queue: JobQueue,
    *,
    priority: int = 0,
    profile_path: str | None = None,
    taken: Callable[[str], bool] | None = None,
) -> list[tuple[QueueEntry, int]]:
    """Queue every run of a valid plan as one group (all or none: QueueError when an id is
    taken meanwhile). (entry, position) per run."""
    entries = sweep_entries(inv, plan, priority=priority, profile_path=profile_path)
    positions = queue.add_all(entries, taken=taken)
    return list(zip(entries, positions, strict=True))


def sweep_entries(
    inv: Inventory, plan: SweepPlan, *, priority: int = 0, profile_path: str | None = None
) -> list[QueueEntry]:
    """The queue entries of every run of a valid plan, one group."""
    if not plan.ok:
        raise ValueError("a sweep with invalid combinations is not queued")
    return [
        entry_for(
            sub,
            inv,
            needs=Needs.from_config(cfg),
            priority=priority,
            profile_path=profile_path,
            group=plan.name,
            tags={"sweep": plan.name, "grid": run.label},
        )
        for run, sub, cfg in zip(plan.runs, plan.subs, plan.configs, strict=True)
    ]


def grid_summary(grids: Sequence[Grid]) -> Mapping[str, Any]:
    count = 1
    for g in grids:
        count *= len(g.values)
    return {"keys": [g.key for g in grids], "runs": count}
