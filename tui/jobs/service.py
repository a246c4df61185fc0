"""Jobs on the cluster, as data for the CLI and the Jobs screen: the head's list joined with
the local history, submit-and-record, stop, delete."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tui.cluster.dashboard import TERMINAL, DashboardError, check_job_id
from tui.cluster.job_logs import LOST, head_session_start
from tui.cluster.ray_cluster import RayCluster
from tui.config.hosts import Inventory
from tui.errors import VerlTuiError
from tui.jobs.history import NOT_SUBMITTED, SUBMITTING, JobHistory, JobRecord
from tui.jobs.owner import owner_of_metadata
from tui.jobs.secrets import env_for_record
from tui.jobs.submit import Submission, resolved_interpreter, submit
from tui.state import StateError
from tui.transport.types import TransportError

if TYPE_CHECKING:
    from tui.cluster.dashboard import DashboardClient


class SubmitOutcomeUnknown(DashboardError, title="submission outcome unknown"):
    """The POST went out and no answer came back, and the head could not be asked afterwards:
    the job may run. Its record stays (status SUBMITTING); the message says how to check."""


@dataclass
class JobRow:
    submission_id: str
    status: str
    entrypoint: str
    start_time: float | None
    end_time: float | None
    driver_node: str | None
    message: str | None
    record: JobRecord | None
    # False: only in our history (the head forgot it, e.g. restarted). `status` is then the
    # last one known: a finished job keeps its outcome and times; one that had not finished
    # when the head's Ray restarted is LOST (its outcome is unknown).
    on_head: bool = True
    head_restarted_at: float | None = None  # Ray on the head restarted since (its session start)
    ray_owner: str | None = None  # the owner in the job's Ray metadata (tui/jobs/owner.py)

    @property
    def owner(self) -> str | None:
        """Who submitted it (user@host): Ray's metadata, else our record; None: unknown."""
        return self.ray_owner or (self.record.owner if self.record else None)

    @property
    def status_text(self) -> str:
        if self.on_head or self.status == LOST or self.status in TERMINAL:
            return self.status
        return f"{self.status} (history)"

    @property
    def duration_s(self) -> float | None:
        """Seconds it ran: up to now only while it runs on the head; a finished job's never
        grows (None when its end is not known, e.g. LOST)."""
        if not self.start_time:
            return None
        if self.end_time:
            end = self.end_time
        elif self.on_head and self.status not in TERMINAL:
            end = time.time()
        else:
            return None
        return max(0.0, end - self.start_time)

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "submission_id": self.submission_id,
            "owner": self.owner,
            "status": self.status,
            "entrypoint": self.entrypoint,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "duration_s": self.duration_s,
            "driver_node": self.driver_node,
            "message": self.message,
            "profile": r.profile if r else None,
            "config_hash": r.config_hash if r else None,
            "in_history": r is not None,
            "on_head": self.on_head,
            "last_known_status": r.status if r else None,
            "head_restarted_at": self.head_restarted_at,
            "ray_restarted_since": self.head_restarted_at is not None,
            # Runs that heal themselves: the chain of retries (tui/supervisor/retry.py).
            "attempt": r.attempt if r else 1,
            "retry_of": r.retry_of if r else None,
            "retry_policy": r.retry_policy if r else None,
            "decisions": list(r.decisions or [])[-10:] if r else [],
            "tags": dict(r.tags or {}) if r else {},  # a sweep's name and grid values
        }


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _ms(v: Any) -> float | None:
    return v / 1000.0 if isinstance(v, (int, float)) and v else None


async def list_jobs(cluster: RayCluster, history: JobHistory) -> list[JobRow]:
    """The head's jobs joined with our history; jobs only in history (a head since restarted)
    are listed too, with their last known status."""
    client = await cluster.dashboard()
    # Both answers are checked by their schemas (tui/cluster/dashboard_schema.py).
    jobs, nodes = await asyncio.gather(client.list_jobs(), client.alive_nodes())
    # Jobs name their driver's node by id; the hosts file knows IPs.
    node_ips = {_text(n.get("node_id")): _text(n.get("node_ip")) for n in nodes}
    node_host = {nid: cluster.inv.host_of_ip(ip) or ip for nid, ip in node_ips.items()}
    rows: dict[str, JobRow] = {}
    records = {rec.submission_id: rec for rec in history.all()}
    for j in jobs:
        sid = str(j.get("submission_id") or j.get("job_id") or "?")
        rec = records.get(sid)
        status = str(j.get("status", "?"))
        start, end = _ms(j.get("start_time")), _ms(j.get("end_time"))
        if rec is not None and _settle(rec, status, start, end):
            # Only a cache of the last status seen: a full disk must not stop the list.
            with contextlib.suppress(StateError):
                history.save(rec)
        info = j.get("driver_info")
        driver_ip = _text(info.get("node_ip_address")) if isinstance(info, dict) else None
        driver = node_host.get(_text(j.get("driver_node_id"))) or (
            cluster.inv.host_of_ip(driver_ip) or driver_ip
        )
        message = j.get("message")
        rows[sid] = JobRow(
            sid,
            status,
            str(j.get("entrypoint") or ""),
            start,
            end,
            None if driver is None else str(driver),
            None if message is None else str(message),
            rec,
            ray_owner=owner_of_metadata(j.get("metadata")),
        )
    gone = [rec for rec in records.values() if rec.submission_id not in rows]
    unsent = [rec for rec in gone if rec.status in (SUBMITTING, NOT_SUBMITTED)]
    gone = [rec for rec in gone if rec.status not in (SUBMITTING, NOT_SUBMITTED)]
    for rec in unsent:
        rows[rec.submission_id] = JobRow(
            rec.submission_id,
            rec.status or SUBMITTING,
            rec.entrypoint,
            rec.submitted_at,
            None,
            None,
            rec.note
            or "not on the head: its submission was cut off (sent or not); submit it again",
            rec,
            on_head=False,
        )
    restarted = await _session_start_or_none(cluster) if gone else None
    for rec in gone:
        rows[rec.submission_id] = remembered_row(rec, restarted)
    return sorted(rows.values(), key=lambda r: r.start_time or 0, reverse=True)


def _settle(rec: JobRecord, status: str, start: float | None, end: float | None) -> bool:
    """Bring `rec` up to what the head says (status; a finished job's start and end times);
    True when it changed. The head is the truth; a SUBMITTING record is settled here."""
    changed = rec.status != status
    rec.status = status
    if status in TERMINAL and (start, end) != (rec.started_at, rec.ended_at) and end:
        rec.started_at, rec.ended_at = start, end
        changed = True
    return changed


def remembered_row(rec: JobRecord, restarted: float | None) -> JobRow:
    """A job the head no longer lists, from its record. Its last known status stands when it
    had finished (with its recorded times, so its duration stays what it was), with "Ray
    restarted since" as a note. One that had not finished and was submitted before the head's
    current Ray session began (`restarted`) is LOST: that Ray and its job table are gone, its
    outcome is unknown (the driver log is still in the old session directory on the head)."""
    since = restarted is not None and rec.submitted_at < restarted
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(restarted)) if since else ""
    start = rec.started_at or rec.submitted_at
    if rec.status in TERMINAL:
        note = f"Ray restarted since (at {when})" if since else "not on the head"
        return JobRow(
            rec.submission_id,
            rec.status or "",
            rec.entrypoint,
            start,
            rec.ended_at,
            None,
            note,
            rec,
            on_head=False,
            head_restarted_at=restarted if since else None,
        )
    if since:
        return JobRow(
            rec.submission_id,
            LOST,
            rec.entrypoint,
            start,
            None,
            None,
            f"Ray on the head restarted at {when} while it was {rec.status or '?'}: "
            "outcome unknown",
            rec,
            on_head=False,
            head_restarted_at=restarted,
        )
    return JobRow(
        rec.submission_id,
        rec.status or "UNKNOWN",
        rec.entrypoint,
        start,
        None,
        None,
        "not on the head",
        rec,
        on_head=False,
    )


async def _session_start_or_none(cluster: RayCluster) -> float | None:
    try:
        return await head_session_start(cluster)
    except (TransportError, OSError):
        return None  # the list still shows; such jobs stay "(history)"


def record_for(sub: Submission, inv: Inventory, *, profile_path: str | None = None) -> JobRecord:
    """The history entry: secrets only as references ({name, from}), never their values."""
    runtime_env = sub.runtime_env()
    if "env_vars" in runtime_env:
        runtime_env["env_vars"] = env_for_record(
            sub.env_vars, sub.env_sources, (*sub.secret_extra, *inv.secret_env)
        )
    return JobRecord(
        submission_id=sub.submission_id,
        cluster=inv.cluster,
        submitted_at=time.time(),
        entrypoint=sub.entrypoint,
        kind="profile" if sub.profile else "raw",
        profile=sub.profile,
        profile_path=profile_path,
        overrides=sub.overrides,
        config_hash=sub.config_hash,
        runtime_env=runtime_env,
        hosts_file=str(inv.source) if inv.source else None,
        status=SUBMITTING,
        owner=owner_of_metadata(sub.metadata),
    )


def _answered(exc: DashboardError) -> bool:
    """Whether the head answered the request (an HTTP status): a refusal, not a lost answer."""
    status = getattr(exc, "status", None)
    return isinstance(status, int) or " HTTP " in f" {exc}"


def _not_submitted(history: JobHistory, record: JobRecord, exc: BaseException) -> None:
    record.status = NOT_SUBMITTED
    record.note = f"not submitted: {exc}"
    with contextlib.suppress(StateError):  # the error raised next says it all the same
        history.save(record)


async def record_then_post(
    dashboard: Callable[[], Awaitable[DashboardClient]],
    sub: Submission,
    history: JobHistory,
    record: JobRecord,
) -> str:
    """The one order of every submission (CLI, form, queue, supervisor): the record is written
    first with status SUBMITTING (a full disk raises StateError here and nothing is sent), then
    the job is POSTed, then the record says PENDING. When the POST fails, the head is asked
    whether it has the id (a lost answer, or a resend after a crash, which Ray accepts at most
    once): if it has, that is success; if not, the record says NOT_SUBMITTED and why, and the
    error is raised; if the head cannot be asked, the record stays SUBMITTING and
    SubmitOutcomeUnknown says how to check."""
    record.status = SUBMITTING
    history.save(record)
    try:
        client = await dashboard()  # the tunnel, after the record: a kill here leaves SUBMITTING
    except (VerlTuiError, OSError) as exc:
        _not_submitted(history, record, exc)  # nothing was sent
        raise
    try:
        sid = await submit(client, sub)
    except (DashboardError, OSError) as exc:
        try:
            there = await client.job_exists(sub.submission_id)
        except (DashboardError, OSError) as check:
            why = "" if isinstance(exc, DashboardError) and _answered(exc) else " after sending"
            raise SubmitOutcomeUnknown(
                f"{sub.submission_id} may have been submitted: the request failed{why} ({exc}) "
                f"and the head could not be asked ({check}); check `verl-tui jobs` before "
                "submitting it again"
            ) from None
        if not there:
            _not_submitted(history, record, exc)
            raise
        sid = sub.submission_id
    # Sent: a record that cannot say PENDING now still says SUBMITTING, which the jobs list
    # settles from the head's own list; the job must not look failed.
    with contextlib.suppress(StateError):
        history.set_status(sid, "PENDING")
    return sid


class SubmissionIdTaken(DashboardError, title="submission id taken", kind="bad_input"):
    """The submission id is in the job history or on the head already: nothing was sent."""


async def submit_and_record(
    cluster: RayCluster,
    sub: Submission,
    history: JobHistory,
    *,
    profile_path: str | None = None,
    retry_policy: dict[str, Any] | None = None,
    resend: bool = False,
    attempt: int = 1,
    retry_of: str | None = None,
    dashboard: Callable[[], Awaitable[DashboardClient]] | None = None,
) -> str:
    """The send stage of the submission flow (tui/jobs/flow.py, which runs the checks and
    gates before it): record `sub`, then POST it (record_then_post: nothing is sent when the
    record cannot be written; `retry_policy`, `attempt` and `retry_of` go on the record
    first). A bare interpreter name (hosts.yaml `python: python` after an env_setup) is
    resolved on the head first: the job runs, and records, the absolute path.
    SubmissionIdTaken when the id is in the history or on the head, unless `resend` (the
    supervisor after a crash: the record it wrote is reused, and a head that has the id
    already counts as done). `dashboard`: the head's client (default the cluster's tunnel;
    the supervisor passes its context's)."""
    dashboard = dashboard or cluster.dashboard
    sub = await resolved_interpreter(cluster.fleet, sub)
    record = history.get(sub.submission_id)
    if record is not None and not resend:
        raise SubmissionIdTaken(
            f"submission id {sub.submission_id} is already in the job history of "
            f"{cluster.inv.cluster}: choose another one"
        )
    # The head's own jobs too: a POST refused as a duplicate must not read as ours.
    if not resend and await (await dashboard()).job_exists(sub.submission_id):
        raise SubmissionIdTaken(
            f"submission id {sub.submission_id} is already a job on the head: choose another one"
        )
    if record is None:
        record = record_for(sub, cluster.inv, profile_path=profile_path)
        record.attempt, record.retry_of, record.retry_policy = attempt, retry_of, retry_policy
    return await record_then_post(dashboard, sub, history, record)


async def stop_job(
    cluster: RayCluster, job: str, history: JobHistory, *, wait: float = 30.0
) -> str:
    """Ask the head to stop `job`; wait until it is in a final state (or `wait` passes).
    BadJobId (before anything is sent) when `job` is not a valid submission id."""
    check_job_id(job)
    client = await cluster.dashboard()
    await client.stop_job(job)
    deadline = time.monotonic() + wait
    status = "?"
    while time.monotonic() < deadline:
        status = (await client.job_info(job))["status"]
        if status in TERMINAL:
            break
        await asyncio.sleep(0.5)
    # The stop is done: a record that cannot be read or written (full disk, damaged file) is
    # only a stale cache here, settled by the next jobs list.
    with contextlib.suppress(StateError):
        history.set_status(job, status)
    return status


async def delete_job(cluster: RayCluster, job: str, history: JobHistory) -> None:
    """Forget a finished job on the head and here (BadJobId first for an invalid id)."""
    check_job_id(job)
    client = await cluster.dashboard()
    await client.delete_job(job)
    history.forget(job)
