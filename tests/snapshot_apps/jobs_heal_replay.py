"""The Jobs screen over the recorded run, as it looks after the supervisor healed it: the failed
run retried (NCCL watchdog timeout) from its latest complete checkpoint, the retry failed the
same way and was retried again; another `verl-tui watch` holds the cluster."""

import copy
from types import SimpleNamespace

from snapshot_apps.replay import DASH, ScreenApp

from tui.jobs.history import JobRecord
from tui.screens.jobs.screen import JobsScreen

FIRST = DASH["answers"]["/api/jobs/"][0]
SID = FIRST["submission_id"]
END = FIRST["end_time"] / 1000.0
CKPT = "/data/checkpoints/grpo-gsm8k/global_step_40"
POLICY = {"retries": 2, "retry_on": ["nccl_timeout", "node_died", "host_lost"]}


def _job(sid, start, end, status, message):
    job = copy.deepcopy(FIRST)
    job.update(
        submission_id=sid,
        start_time=int(start * 1000),
        end_time=int(end * 1000) if end else None,
        status=status,
        message=message,
    )
    return job


def _decision(kind, sid, at, message):
    return {"kind": kind, "submission_id": sid, "message": message, "at": at, "details": {}}


def _dash():
    dash = copy.deepcopy(DASH)
    dash["answers"]["/api/jobs/"] = [
        FIRST,
        _job(f"{SID}-retry1", END + 6, END + 50, "FAILED", FIRST["message"]),
        _job(f"{SID}-retry2", END + 57, None, "RUNNING", "Job is currently running."),
    ]
    return dash


def make(app):
    base = JobRecord(**DASH["history"][f"{SID}.json"])
    chain = [
        (SID, 1, None, END - 5, [("job-failed", END + 0.5), ("retry", END + 5.7)]),
        (f"{SID}-retry1", 2, SID, END + 5.7, [("job-failed", END + 50.4), ("retry", END + 56.1)]),
        (f"{SID}-retry2", 3, f"{SID}-retry1", END + 56.1, []),
    ]
    for i, (sid, attempt, retry_of, at, decisions) in enumerate(chain):
        rec = copy.deepcopy(base)
        rec.submission_id, rec.attempt, rec.retry_of = sid, attempt, retry_of
        rec.submitted_at, rec.retry_policy = at, POLICY
        rec.status = "RUNNING" if i == 2 else "FAILED"
        nxt = f"{SID}-retry{attempt}"
        rec.decisions = [
            _decision(
                kind,
                sid,
                t,
                "FAILED: Job entrypoint command failed with exit code 1"
                if kind == "job-failed"
                else f"resubmitted as {nxt}, attempt {attempt + 1}/3 from {CKPT}",
            )
            for kind, t in decisions
        ]
        app.history.save(rec)

    async def close():
        pass

    app.services.supervisor = SimpleNamespace(  # type: ignore[assignment]
        acting=False, supervised_by=lambda: "supervised by alice@login1 (pid 48122)", close=close
    )
    return JobsScreen(app.services)


app = ScreenApp(make, patches=[("snapshot_apps.replay", "DASH", _dash())])
