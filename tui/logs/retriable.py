"""Which failures a retry can heal, next to the log signatures (tui/logs/signatures.py).

A job that ended FAILED is retried (tui/supervisor/retry.py) only when its log shows a failure of
the cluster rather than of the job: the network between ranks, a node or Ray itself going away.
A failure of the job — its config, its code, its memory — would fail the same way again, so the
non-retriable signatures win whenever both appear (ranks time out in NCCL after one ran out of
memory: the cause is the OOM). Keys are the log signatures' keys where one exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tui.logs.signatures import match_signature, split_source, strip_ansi


@dataclass(frozen=True)
class Retriable:
    key: str
    what: str  # one line for `submit --help` and `explain --retriable`


RETRIABLE: tuple[Retriable, ...] = (
    Retriable("nccl_timeout", "NCCL collective timeout / watchdog (a rank or link went away)"),
    Retriable("gloo_full_mesh", "Gloo connectFullMesh failed (ranks could not connect)"),
    Retriable("nccl_network", "NCCL network/system error between nodes"),
    Retriable("actor_died", "a Ray actor or worker process died"),
    Retriable("node_died", "a Ray node was marked dead / its raylet died"),
    Retriable("ray_connection", "connection to the raylet or Ray's GCS lost"),
    Retriable("host_lost", "a host of the cluster was unreachable when the job failed"),
)
RETRIABLE_KEYS = tuple(r.key for r in RETRIABLE)

# Failures of the job itself: retrying repeats them.
NOT_RETRIABLE: dict[str, str] = {
    "hydra_override": "a config error (unknown or renamed key)",
    "config_error": "a config error",
    "cuda_oom": "CUDA out of memory",
    "vllm_cumem_oom": "CUDA out of memory (vLLM wake-up)",
    "kv_cache": "no GPU memory for vLLM's KV cache",
    "host_oom": "a node ran out of host memory",
    "import_missing": "a package is missing on the cluster",
    "upload_too_large": "the working_dir is too large to upload",
    "ray_version": "Ray/Python versions differ across the cluster",
    "vllm_pg_gpus": "the rollout does not fit the placement group",
    "gpus_short": "the job wants more GPUs than the cluster has",
    "hf_cache_perm": "the Hugging Face cache is not writable",
    "mkl_gomp": "MKL/libgomp clash in the job's environment",
}

# Ray's own words for a node or its connection going away (no hint signature of their own).
_EXTRA = (
    (
        "node_died",
        re.compile(
            r"NodeDiedError|RayletDiedError|node (?:\S+ )?(?:has been|was) marked dead"
            r"|The node with node id:? \S+ .*has been marked dead|raylet (?:has )?died"
            r"|Raylet is terminated|node (?:\S+ )?died unexpectedly",
            re.IGNORECASE,
        ),
    ),
    (
        "ray_connection",
        re.compile(
            r"(?:lost|lose) (?:the )?connection to (?:the )?(?:raylet|GCS)"
            r"|GCS (?:server )?(?:connection|client) (?:lost|failed|timed out)"
            r"|Failed to connect to (?:the )?raylet|RaySystemError: System error: .*(?:raylet|GCS)"
            r"|Failed to connect to (?:the )?GCS|Unable to connect to GCS",
            re.IGNORECASE,
        ),
    ),
    (
        "config_error",
        re.compile(
            r"omegaconf\.errors\.\w+|ConfigAttributeError|ConfigKeyError|MissingMandatoryValue"
            r"|InterpolationResolutionError"
        ),
    ),
)
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b:?.*")


@dataclass
class Verdict:
    retriable: bool
    signature: str | None  # the key that decided (None: no known signature)
    reason: str  # one line: why (what the log showed)


def log_signatures(text: str) -> tuple[list[str], str | None]:
    """The signature keys seen in a log (first appearance order) and its last exception line."""
    seen: list[str] = []
    last_exc = None
    for raw in text.splitlines():
        _source, msg = split_source(strip_ansi(raw))
        found = match_signature(msg)
        keys = [found[0].key] if found else []
        keys += [k for k, rx in _EXTRA if rx.search(msg)]
        for k in keys:
            if k not in seen:
                seen.append(k)
        body = msg.strip()
        if _EXCEPTION_LINE.match(body):
            last_exc = body
    return seen, last_exc


def judge(
    text: str, *, retry_on: tuple[str, ...] = RETRIABLE_KEYS, host_lost: bool = False
) -> Verdict:
    """Whether a FAILED job with log `text` may be retried. `host_lost`: a host was unreachable
    (or its Ray node missing) when the job failed — a cluster failure the log may not name."""
    keys, last_exc = log_signatures(text)
    for k in keys:
        if k in NOT_RETRIABLE:
            return Verdict(False, k, f"not retriable: {NOT_RETRIABLE[k]} ({k})")
    if host_lost and "host_lost" not in keys:
        keys.append("host_lost")
    found = [k for k in keys if k in RETRIABLE_KEYS]
    wanted = [k for k in found if k in retry_on]
    if wanted:
        what = next(r.what for r in RETRIABLE if r.key == wanted[0])
        return Verdict(True, wanted[0], f"retriable: {what} ({wanted[0]})")
    if found:
        return Verdict(
            False,
            found[0],
            f"not retriable here: {found[0]} is not in retry_on ({', '.join(retry_on)})",
        )
    if last_exc:
        return Verdict(False, None, f"not retriable: an error in the job: {last_exc}")
    return Verdict(False, None, "not retriable: no known cluster failure in the log")


def check_retry_on(values: list[str] | tuple[str, ...], where: str) -> tuple[str, ...]:
    """Validated retry_on keys; ValueError (one line naming `where`) for an unknown one."""
    pre = f"{where}: " if where else ""
    out = []
    for v in values:
        v = str(v).strip()
        if not v:
            continue
        if v not in RETRIABLE_KEYS:
            raise ValueError(
                f"{pre}unknown retriable signature {v!r} (one of: {', '.join(RETRIABLE_KEYS)})"
            )
        out.append(v)
    if not out:
        raise ValueError(f"{pre}name at least one signature ({', '.join(RETRIABLE_KEYS)})")
    return tuple(dict.fromkeys(out))


def help_text() -> str:
    return "; ".join(f"{r.key}: {r.what}" for r in RETRIABLE)
