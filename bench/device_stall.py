"""What bench/device_stall.sh saw on the lent 2-GPU machine, read back: the supervisor's
job-stalled decision for the NCCL job whose rank 1 never entered the all_reduce, the GPUs'
utilization while it hung, and where the waiting rank's thread sat (`verl-tui stack --native`).

    python3 bench/device_stall.py summary DIR   (there, at the script's end; here on the files
                                                 that came back)

DIR holds decisions.jsonl (`verl-tui watch --json`), times.json (when the job was submitted and
when its driver log first showed the hang, as the script saw them), util.csv (nvidia-smi's
utilization.gpu and memory.used, twice a second: `t,i, util, MiB;i, util, MiB`), stack.json
(`verl-tui stack --json --native`) and driver.log (the job's driver log: which pid holds which
GPU). Prints the summary and writes DIR/summary.json. Standard library only.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

# The workload's `nccl group:` line: "rank 0 on 127.0.0.1 (pid 123, GPU 0 holding 1 GiB)"
# (gloo's, of a dry run: "rank 0 on 127.0.0.1 (pid 123)")
_RANK = re.compile(r"rank (\d+) on \S+ \(pid (\d+)(?:, GPU (\S+) holding)?")
BUSY = 95.0  # % : the stall check's "flat out" (tui/supervisor/stall.py BUSY_ABOVE)
SETTLE_S = 3.0  # util samples this long after the hang are counted (NVML's window)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
    return out


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def ranks_of(driver_log: str) -> dict[int, tuple[int, str]]:
    """rank → (pid, GPU index as Ray showed it to the rank, "" without one) from the
    driver's `nccl group:` line."""
    for line in driver_log.splitlines():
        if "nccl group:" in line or "gloo group:" in line:
            return {int(r): (int(p), g) for r, p, g in _RANK.findall(line)}
    return {}


def util_samples(path: Path) -> list[tuple[float, dict[str, tuple[float, float]]]]:
    """(t, {gpu index: (util %, MiB)}) per line of util.csv."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        t, _, rest = line.partition(",")
        gpus = {}
        for part in rest.split(";"):
            fields = [f.strip() for f in part.split(",")]
            if len(fields) == 3:
                try:
                    gpus[fields[0]] = (float(fields[1]), float(fields[2]))
                except ValueError:
                    continue
        try:
            out.append((float(t), gpus))
        except ValueError:
            continue
    return out


def util_stats(samples, start: float, end: float) -> dict[str, dict[str, float]]:
    """Each GPU's utilization over (start, end]: samples, mean, min, max, share at ≥ BUSY."""
    per: dict[str, list[float]] = {}
    mem: dict[str, float] = {}
    for t, gpus in samples:
        if start < t <= end:
            for idx, (util, mib) in gpus.items():
                per.setdefault(idx, []).append(util)
                mem[idx] = mib
    return {
        idx: {
            "samples": len(v),
            "mean": round(statistics.mean(v), 1),
            "min": min(v),
            "max": max(v),
            "busy_share": round(sum(u >= BUSY for u in v) / len(v), 3),
            "memory_mib": mem[idx],
        }
        for idx, v in sorted(per.items())
        if v
    }


def group_of(stack: dict[str, Any] | None, pid: int | None) -> dict[str, Any] | None:
    for g in (stack or {}).get("groups") or []:
        if any(p.get("pid") == pid for p in g.get("processes") or []):
            return g
    return None


def named_frames(frames: list[str], limit: int = 12) -> list[str]:
    """The frames py-spy named (innermost first), up to the workload's train_step: an address
    alone ("0x7f18… (libcuda.so)") says nothing."""
    out = []
    for f in frames:
        if f.startswith("0x"):
            continue
        out.append(f)
        if f.startswith("train_step ") or len(out) >= limit:
            break
    return out


def summarize(d: Path) -> dict[str, Any]:
    times = _load(d / "times.json") or {}
    sid = times.get("submission_id")
    decisions = _json_lines(d / "decisions.jsonl")
    stalled = [
        x for x in decisions if x.get("kind") == "job-stalled" and x.get("submission_id") == sid
    ]
    flag = stalled[0] if stalled else None
    details = (flag or {}).get("details") or {}
    hang, sub = times.get("hang_seen_at"), times.get("submitted_at")
    driver = (d / "driver.log").read_text(errors="replace") if (d / "driver.log").exists() else ""
    ranks = ranks_of(driver)
    odd = max(ranks) if ranks else None  # the workload's default odd rank: the last
    end = times.get("stack_at") or float("inf")
    util = util_stats(util_samples(d / "util.csv"), (hang or 0) + SETTLE_S, end) if hang else {}
    stack = _load(d / "stack.json")
    frames: dict[str, list[str]] = {}
    for r, (pid, _) in sorted(ranks.items()):
        g = group_of(stack, pid)
        frames[f"rank {r}"] = named_frames((g or {}).get("frames") or [])
    out = {
        "submission_id": sid,
        "flagged": flag is not None,
        "hang_seen_at": hang,
        "flagged_at": (flag or {}).get("at"),
        "hang_to_flag_s": round(flag["at"] - hang, 1) if flag and hang else None,
        "submit_to_flag_s": round(flag["at"] - sub, 1) if flag and sub else None,
        "limit_s": details.get("limit_s"),
        "median_step_s": details.get("median_step_s"),
        "last_step": details.get("last_step"),
        "reasons": details.get("reasons"),
        "evidence": details.get("evidence"),
        "message": (flag or {}).get("message"),
        "auto_dump_groups": (details.get("stack_dump") or {}).get("groups"),
        "ranks": {str(r): {"pid": p, "gpu": g} for r, (p, g) in ranks.items()},
        "odd_rank": odd,
        "util_after_hang": util,
        "frames": frames,
        "stack_problems": (stack or {}).get("problems"),
        "other_decisions": [
            f"{x.get('kind')}: {x.get('message')}" for x in decisions if x not in stalled
        ][:10],
    }
    return out


def report(s: dict[str, Any]) -> list[str]:
    lines = []
    if not s["flagged"]:
        lines.append(f"NOT FLAGGED: no job-stalled decision for {s['submission_id']}")
    else:
        after = (
            f"{s['hang_to_flag_s']} s after the hang"
            if s["hang_to_flag_s"] is not None
            else f"{s['submit_to_flag_s']} s after the submit (no hang line)"
        )
        lines.append(
            f"flagged STALLED {after} "
            f"(limit {s['limit_s']} s, median step {s['median_step_s']} s, last step "
            f"{s['last_step']})"
        )
        lines.append(f"reasons: {', '.join(s['reasons'] or [])}")
        lines.append(f"evidence: {s['evidence']}")
        for g in s["auto_dump_groups"] or []:
            lines.append(f"automatic dump: {g}")
    for r, info in sorted(s["ranks"].items()):
        role = "sleeps (odd rank)" if int(r) == s["odd_rank"] else "waits in the all_reduce"
        u = s["util_after_hang"].get(str(info["gpu"]))
        ut = (
            f"GPU {info['gpu']} {u['mean']} % busy (min {u['min']:g}, max {u['max']:g}, "
            f"{u['samples']} samples, {u['busy_share']:.0%} at >= {BUSY:g} %), "
            f"{u['memory_mib']:g} MiB"
            if u
            else f"GPU {info['gpu']}: no utilization samples"
        )
        lines.append(f"rank {r} (pid {info['pid']}) {role}: {ut}")
        fr = s["frames"].get(f"rank {r}") or []
        lines.append("    " + (" <- ".join(fr) if fr else "no stack"))
    for p in s["stack_problems"] or []:
        lines.append(f"stack problem: {p}")
    for o in s["other_decisions"]:
        lines.append(f"decision: {o}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "summary":
        print(__doc__, file=sys.stderr)
        return 2
    d = Path(argv[1])
    s = summarize(d)
    (d / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    print("\n".join(report(s)))
    return 0 if s["flagged"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
