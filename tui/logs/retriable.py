"""Which failures a retry can heal, next to the log signatures (tui/logs/signatures.py).

A job that ended FAILED is retried (tui/supervisor/retry.py) only when its log shows a failure of
the cluster rather than of the job: the network between ranks, a node or Ray itself going away.
A failure of the job — its config, its code, its memory — would fail the same way again, so the
non-retriable signatures win whenever both appear (ranks time out in NCCL after one ran out of
memory: the cause is the OOM). Keys are the log signatures' keys where one exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.logs.cause import CONFIG_ERROR, LogScan, scan_log
from tui.logs.sigdef import JOB
from tui.logs.signatures import SIGNATURES


@dataclass(frozen=True)
class Retriable:
    key: str
    what: str  # one line for `submit --help` and `explain --retriable`


RETRIABLE: tuple[Retriable, ...] = (
    Retriable("nccl_timeout", "NCCL collective timeout / watchdog (a rank or link went away)"),
    Retriable("nccl_peer_lost", "a NCCL peer disconnected (broken pipe, remote peer closed)"),
    Retriable("nccl_ib", "an InfiniBand/RoCE completion error between nodes"),
    Retriable("gloo_full_mesh", "Gloo connectFullMesh failed (ranks could not connect)"),
    Retriable("nccl_network", "NCCL network/system error between nodes"),
    Retriable("c10d_timeout", "torch distributed rendezvous (c10d store) timeout"),
    Retriable("actor_died", "a Ray actor or worker process died"),
    Retriable("node_died", "a Ray node was marked dead / its raylet died"),
    Retriable("ray_connection", "connection to the raylet or Ray's GCS lost"),
    Retriable("worker_register", "Ray workers did not start in time"),
    Retriable("host_lost", "a host of the cluster was unreachable when the job failed"),
)
RETRIABLE_KEYS = tuple(r.key for r in RETRIABLE)

# Failures of the job itself: retrying repeats them. Every signature the tables mark as the
# job's (tui/logs/sigdef.py JOB), with its cause in a few words, and Hydra/OmegaConf errors.
NOT_RETRIABLE: dict[str, str] = {
    **{sig.key: sig.what for sig in SIGNATURES if sig.owner == JOB},
    CONFIG_ERROR: "a config error",
}


@dataclass
class Verdict:
    retriable: bool
    signature: str | None  # the key that decided (None: no known signature)
    reason: str  # one line: why (what the log showed)


def judge(
    text: str, *, retry_on: tuple[str, ...] = RETRIABLE_KEYS, host_lost: bool = False
) -> Verdict:
    """Whether a FAILED job with log `text` may be retried. `host_lost`: a host was unreachable
    (or its Ray node missing) when the job failed — a cluster failure the log may not name."""
    return judge_scan(scan_log(text), retry_on=retry_on, host_lost=host_lost)


def judge_scan(
    scan: LogScan, *, retry_on: tuple[str, ...] = RETRIABLE_KEYS, host_lost: bool = False
) -> Verdict:
    """`judge` on a log already scanned (tui/logs/cause.py; the scan is not changed)."""
    keys, last_exc = list(scan.keys), scan.last_exception
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
