"""Compare archived runs: their metric series aligned by step, a summary each (steps, score,
speed, GPU use), and the config keys that differ between them (with verl's default where a run
did not set a key). One home for the compare screen and `verl-tui compare`."""

from __future__ import annotations

import csv
import io
import json
import math
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.archive import metrics_file
from tui.archive.store import ArchiveStore, Series
from tui.jobs.history import JobHistory
from tui.jobs.profiles import override_key
from tui.metrics.health import series_alerts
from tui.metrics.phases import breakdown

MIN_RUNS, MAX_RUNS = 2, 8
SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")
STEP_TIME_KEY = "timing_s/step"
THROUGHPUT_KEY = "perf/throughput"
UNSET = None  # a key neither set by a run nor one of verl's: no value


@dataclass
class Run:
    submission_id: str
    status: str | None
    series: Series
    meta: dict[str, Any]
    overrides: list[str] = field(default_factory=list)
    total_steps: int | None = None

    def summary(self) -> dict[str, Any]:
        return summarize(self)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _overrides_of(meta: dict[str, Any]) -> list[str]:
    """The run's Hydra overrides: as recorded, or (a raw command) its `key=value` words."""
    recorded = meta.get("overrides")
    if isinstance(recorded, list) and recorded:
        return [o for o in recorded if isinstance(o, str)]
    entry = meta.get("entrypoint")
    if not isinstance(entry, str):
        return []
    try:
        words = shlex.split(entry)
    except ValueError:
        words = entry.split()
    return [w for w in words if "=" in w and not w.startswith("-") and _is_key(override_key(w))]


def _is_key(key: str) -> bool:
    parts = key.split(".")
    return bool(key) and all(p.replace("_", "a").replace("-", "a").isalnum() for p in parts)


def load_runs(
    store: ArchiveStore, sids: Sequence[str], history: JobHistory | None = None
) -> tuple[list[Run], list[str]]:
    """The archived runs of `sids`, in order; and the ids the archive does not hold."""
    runs, missing = [], []
    for sid in sids:
        meta = store.meta(sid)
        if meta is None:
            missing.append(sid)
            continue
        if not meta.get("overrides") and history is not None:
            rec = history.get(sid)
            if rec is not None and rec.overrides:
                meta["overrides"] = list(rec.overrides)
        got = store.series(sid)
        series, total = got if got is not None else ({}, None)
        from_file = metrics_file.load(store, sid)  # verl's file logger: exact, every key
        if from_file is not None and from_file.series:
            series = from_file.series
        status = meta.get("status")
        runs.append(
            Run(
                sid,
                status if isinstance(status, str) else None,
                series,
                meta,
                _overrides_of(meta),
                total,
            )
        )
    return runs, missing


def common_keys(runs: Sequence[Run]) -> list[str]:
    """Metric keys every run has, in the first run's order."""
    if not runs:
        return []
    rest = [set(r.series) for r in runs[1:]]
    return [k for k in runs[0].series if all(k in s for s in rest)]


def score_key(run: Run) -> str | None:
    return next((k for k in SCORE_KEYS if run.series.get(k)), None)


def summarize(run: Run) -> dict[str, Any]:
    """steps, last and best score, mean s/step, tokens/s/GPU, GPU-hours, GPU use."""
    meta = run.meta
    steps = sorted({s for pts in run.series.values() for s, _ in pts})
    key = score_key(run)
    scores = [v for _, v in run.series.get(key, [])] if key else []
    finite = [v for v in scores if math.isfinite(v)]
    step_times = [v for _, v in run.series.get(STEP_TIME_KEY, []) if math.isfinite(v) and v > 0]
    tput = [v for _, v in run.series.get(THROUGHPUT_KEY, []) if math.isfinite(v)]
    start, end = _num(meta.get("start_time")), _num(meta.get("end_time"))
    if end is None and meta.get("status") in ("RUNNING", "PENDING"):
        end = _num(meta.get("updated_at"))
    duration = end - start if start is not None and end is not None and end >= start else None
    per_step = _mean(step_times)
    if per_step is None and duration and steps:
        per_step = duration / len(steps)
    raw_use = meta.get("gpu_use")
    use: dict[str, Any] = raw_use if isinstance(raw_use, dict) else {}
    gpus = _gpu_count(run, use)
    return {
        "steps": len(steps),
        "last_step": steps[-1] if steps else None,
        "total_steps": run.total_steps,
        "score_key": key,
        "last_score": scores[-1] if scores and math.isfinite(scores[-1]) else None,
        "best_score": max(finite) if finite else None,
        "mean_s_per_step": per_step,
        "tokens_per_s_per_gpu": _mean(tput),
        "duration_s": duration,
        "gpus": gpus,
        "gpu_hours": gpus * duration / 3600 if gpus and duration is not None else None,
        "gpu_util_mean": _num(use.get("util_mean")),
        "gpu_mem_mean_bytes": _num(use.get("mem_mean_bytes")),
        "hosts": [h for h in meta.get("hosts", []) if isinstance(h, str)]
        if isinstance(meta.get("hosts"), list)
        else [],
    }


def _gpu_count(run: Run, use: dict[str, Any]) -> int | None:
    seen = use.get("gpus")
    if isinstance(seen, list) and seen:
        return len(seen)
    values = {override_key(o): o.split("=", 1)[1].strip() for o in run.overrides}
    nodes, per = values.get("trainer.nnodes"), values.get("trainer.n_gpus_per_node")
    if nodes and per and nodes.isdigit() and per.isdigit():
        return int(nodes) * int(per)
    return None


# --- config diff -----------------------------------------------------------------------------


def _value(text: str) -> Any:
    from tui.jobs.hydra_values import NOT_A_VALUE, read_value

    try:
        value = read_value(text)
    except Exception:  # Hydra missing or refusing: the text itself
        return text
    return text if value is NOT_A_VALUE else value


def verl_defaults() -> dict[str, Any]:
    """verl's composed base config, flat (empty when verl or Hydra is not here)."""
    try:
        from tui.jobs.verl_compose import base_plain, flat_keys

        return flat_keys(base_plain().config)
    except Exception:  # no verl/Hydra here: keys set in one run only show as unset
        return {}


def _same(a: Any, b: Any) -> bool:
    na, nb = _num(a), _num(b)
    if na is not None and nb is not None:
        return na == nb
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def config_diff(
    runs: Sequence[Run], defaults: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """{key: {submission id: value}} for the keys whose values differ between runs; a run that
    did not set a key has verl's default (None when verl has no such key)."""
    per_run: list[dict[str, Any]] = []
    for run in runs:
        values: dict[str, Any] = {}
        for o in run.overrides:
            if "=" in o and not o.lstrip().startswith("~"):
                values[override_key(o)] = _value(o.split("=", 1)[1].strip())
        per_run.append(values)
    keys = sorted({k for v in per_run for k in v})
    if defaults is None:
        partial = any(k not in v for k in keys for v in per_run)
        defaults = verl_defaults() if partial else {}
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        vals = [v[key] if key in v else defaults.get(key, UNSET) for v in per_run]
        if any(not _same(vals[0], x) for x in vals[1:]):
            out[key] = {run.submission_id: val for run, val in zip(runs, vals, strict=True)}
    return out


def value_text(value: Any) -> str:
    """A config value as verl's command line would show it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return repr(value) if isinstance(value, float) else str(value)


def set_in(run: Run, key: str) -> bool:
    return any(override_key(o) == key for o in run.overrides)


# --- documents -------------------------------------------------------------------------------


def _json_num(v: float) -> float | None:
    return v if math.isfinite(v) else None


def compare_doc(
    runs: Sequence[Run], keys: Iterable[str] | None = None, diff: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`{"runs": [{submission_id, status, series, summary}], "config_diff": {...}}`."""
    keys = list(keys) if keys is not None else common_keys(runs)
    return {
        "runs": [
            {
                "submission_id": r.submission_id,
                "status": r.status,
                "series": {k: [[s, _json_num(v)] for s, v in r.series.get(k, [])] for k in keys},
                "summary": r.summary(),
                "phases": breakdown(r.series).to_json(),  # where the step's time went
                "health": [a.to_json() for a in series_alerts(r.series)],
            }
            for r in runs
        ],
        "config_diff": config_diff(runs) if diff is None else diff,
    }


def csv_text(runs: Sequence[Run], keys: Iterable[str] | None = None) -> str:
    """Every point, long form: submission_id,key,step,value."""
    keys = list(keys) if keys is not None else common_keys(runs)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["submission_id", "key", "step", "value"])
    for r in runs:
        for k in keys:
            for s, v in r.series.get(k, []):
                w.writerow([r.submission_id, k, s, "" if not math.isfinite(v) else repr(v)])
    return out.getvalue()


# --- text ------------------------------------------------------------------------------------

SUMMARY_COLUMNS = (
    "run",
    "status",
    "steps",
    "last score",
    "best score",
    "s/step",
    "tok/s/GPU",
    "GPU-h",
    "GPU busy",
    "GPU mem",
)


def _mean(values: Sequence[float]) -> float | None:
    """The mean of finite values, None for none: exact sums (fsum: six steps of 0.5 s mean
    0.5 s, not 0.49999999999999994), and where the sum would pass the largest float (values
    near 1.8e308) summed as v/n, so they average to themselves instead of overflowing."""
    n = len(values)
    if not n:
        return None
    try:
        mean = math.fsum(values) / n
    except OverflowError:
        mean = math.inf
    return mean if math.isfinite(mean) else math.fsum(v / n for v in values)


def _short(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if not math.isfinite(v) or abs(v) >= 1e12:  # nan, inf, or its magnitude (not 300 digits)
        return f"{v:.3g}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def summary_cells(run: Run, summary: dict[str, Any] | None = None) -> list[str]:
    """One summary row as text, in SUMMARY_COLUMNS order (texts from the archive: sanitize
    before showing)."""
    s = summary if summary is not None else run.summary()
    steps = str(s["steps"]) + (f"/{s['total_steps']}" if s.get("total_steps") else "")
    util, mem = s.get("gpu_util_mean"), s.get("gpu_mem_mean_bytes")
    return [
        run.submission_id,
        run.status or "?",
        steps,
        _short(s["last_score"]),
        _short(s["best_score"]),
        _short(s["mean_s_per_step"], 3),
        _short(s["tokens_per_s_per_gpu"]),
        _short(s["gpu_hours"], 3),
        "-" if util is None else f"{util:.0f} %",
        "-" if mem is None else f"{mem / (1 << 30):.1f} GiB",
    ]


def fastest_learner(runs: Sequence[Run]) -> str | None:
    """The questions compare answers first: which run reached the best score, and which got
    90 % of the way there (from the lowest first score) in the fewest steps."""
    points: dict[str, list[tuple[int, float]]] = {}
    for r in runs:
        key = score_key(r)
        pts = [(s, v) for s, v in r.series.get(key, [])] if key else []
        points[r.submission_id] = [(s, v) for s, v in pts if math.isfinite(v)]
    best: tuple[float, int, str] | None = None
    for sid, pts in points.items():
        for step, v in pts:
            if best is None or v > best[0] or (v == best[0] and step < best[1]):
                best = (v, step, sid)
    if best is None:
        return None
    text = f"{best[2]} reached the best score ({_short(best[0])} at step {best[1]})"
    start = min(pts[0][1] for pts in points.values() if pts)
    if best[0] <= start:
        return text
    goal = start + 0.9 * (best[0] - start)
    reached = {
        sid: next((s for s, v in pts if v >= goal), None) for sid, pts in points.items() if pts
    }
    order = sorted(reached, key=lambda sid: (reached[sid] is None, reached[sid] or 0))
    parts = [
        f"{sid} step {reached[sid]}" if reached[sid] is not None else f"{sid} never"
        for sid in order
    ]
    return f"{text}; fastest to {_short(goal)}: " + ", ".join(parts)
