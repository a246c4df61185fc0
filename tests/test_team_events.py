"""Issue 30's notifications and retry policies on the head, without a cluster: the shared event
log and the retry policies are the real head helper (tui/remote/head_state.py) run over the local
transport on a temp folder standing for the head's; notify targets are real commands. The
acting supervisor's notifier appends every user's job events; each account's notifier delivers
only its own jobs' (and the owners its targets name) past its cursor, once, catching up within
bounds after a restart; one process of an account delivers at a time. Policies: put before the
POST, read by any supervisor, settled once; an account's older policies moved once."""

from __future__ import annotations

import json
import sys
import time

from tui.config.hosts import local_inventory
from tui.config.notify import NotifyOptions
from tui.jobs.history import JobHistory, JobRecord
from tui.jobs.owner import me
from tui.jobs.queue_shared import SharedPolicies
from tui.supervisor import event_log
from tui.supervisor.event_log import EVENTS_FILE, Cursor, SharedEvents
from tui.supervisor.events import Decision
from tui.supervisor.notify import Notifier
from tui.transport.fleet import Fleet

ALICE = "alice@login9"


def target(tmp_path, name: str, owner: str | None) -> NotifyOptions:
    out = tmp_path / f"{name}.jsonl"
    code = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    return NotifyOptions(
        command=(sys.executable, "-c", code), owner=owner, events=("job-failed", "retry", "error")
    )


def heard(tmp_path, name: str) -> list[tuple[str, str]]:
    path = tmp_path / f"{name}.jsonl"
    docs = (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )
    return [(d["submission_id"], d["details"].get("event_id", "")) for d in docs]


def failed(sid: str, owner: str) -> Decision:
    return Decision("job-failed", sid, "failed", details={"owner": owner})


async def test_job_events_reach_their_owners_targets_once_through_the_log(tmp_path, monkeypatch):
    monkeypatch.setattr(event_log, "CATCHUP_COUNT", 4)  # the bound, kept small (a process each)
    inv = local_inventory()
    head = str(tmp_path / "head")
    async with Fleet(inv) as fleet:
        log = SharedEvents(inv, fleet, directory=head)
        # This account's targets: the default (my jobs and what has no owner), `mine`, one
        # naming a teammate, and `all` (every account's jobs).
        targets = [
            target(tmp_path, "default", None),
            target(tmp_path, "mine", "mine"),
            target(tmp_path, "alice", ALICE),
            target(tmp_path, "all", "all"),
        ]
        cursor = Cursor(tmp_path / "me-state")
        acting = Notifier(targets, "c", shared=log, cursor=cursor)
        # The acting supervisor (this account's) decides about everyone's jobs: each goes to
        # the log, nothing straight to its targets.
        await acting(failed("j-mine", me()))
        await acting(failed("j-alice", ALICE))
        await acting(failed("j-bob", "bob@login2"))
        assert heard(tmp_path, "default") == heard(tmp_path, "all") == [] and acting.sent == 0
        # A job with no owner (not verl-tui's) and the cluster's errors: straight to the
        # default and `all` targets, never to `mine` or a teammate's.
        await acting(Decision("job-failed", "j-raw", "failed"))
        await acting(Decision("error", None, "the head cannot be reached"))
        assert [s for s, _ in heard(tmp_path, "default")] == ["j-raw", None]
        assert [s for s, _ in heard(tmp_path, "all")] == ["j-raw", None]
        assert heard(tmp_path, "mine") == heard(tmp_path, "alice") == []

        assert await acting.catch_up() == 3  # mine; alice's (named); bob's (only `all` wants it)
        ids = [e for _s, e in heard(tmp_path, "mine")]
        assert [s for s, _ in heard(tmp_path, "mine")] == ["j-mine"] and ids[0]
        assert [s for s, _ in heard(tmp_path, "default")] == ["j-raw", None, "j-mine"]
        assert [s for s, _ in heard(tmp_path, "alice")] == ["j-alice"]  # never bob's
        assert [s for s, _ in heard(tmp_path, "all")] == [
            "j-raw",
            None,
            "j-mine",
            "j-alice",
            "j-bob",
        ]
        assert await acting.catch_up() == 0  # nothing twice

        # A large detail (a stall's stack dump): trimmed in the log, whole from its maker.
        big = {"owner": me(), "reasons": ["no_step"], "stack_dump": {"text": "x" * 10_000}}
        await acting(Decision("job-failed", "j-big", "stalled", details=big))
        (logged,) = [e for e in (await log.read()).events if e.decision.submission_id == "j-big"]
        assert logged.decision.details["stack_dump"] == "(trimmed)"
        assert logged.decision.details["reasons"] == ["no_step"]
        assert await acting.catch_up() == 1
        body = json.loads((tmp_path / "mine.jsonl").read_text().splitlines()[-1])
        assert body["details"]["stack_dump"] == big["stack_dump"] and body["details"]["event_id"]

        # A restart (a new process, same account): the cursor holds; new events only.
        again = Notifier(targets, "c", shared=log, cursor=Cursor(tmp_path / "me-state"))
        await again(failed("j-mine2", me()))
        assert await again.catch_up() == 1
        assert [s for s, _ in heard(tmp_path, "mine")] == ["j-mine", "j-big", "j-mine2"]

        # Two processes of one account at once: only the one holding the cursor delivers.
        other = Notifier(targets, "c", shared=log, cursor=Cursor(tmp_path / "me-state"))
        with cursor.held() as first:
            assert first
            assert await other.catch_up() == 0

        # An account that never ran a supervisor catches up, bounded by age and count.
        fresh = [target(tmp_path, "late", "mine")]
        for i in range(event_log.CATCHUP_COUNT + 2):
            await acting(failed(f"j-many-{i}", me()))
        late = Notifier(fresh, "c", shared=log, cursor=Cursor(tmp_path / "late-state"))
        delivered = await late.catch_up()
        assert delivered == event_log.CATCHUP_COUNT  # of 6 of mine, the newest 4
        assert heard(tmp_path, "late")[-1][0] == f"j-many-{event_log.CATCHUP_COUNT + 1}"

        # The log wiped (a new /tmp/ray): a new epoch, read from the catch-up bound, not lost.
        (tmp_path / "head" / EVENTS_FILE).unlink()
        await acting(failed("j-after-wipe", me()))
        assert await again.catch_up() == 1
        assert heard(tmp_path, "mine")[-1][0] == "j-after-wipe"

        # Hostile lines in the log are input: a malformed event is left out, never delivered.
        doc = json.loads((tmp_path / "head" / EVENTS_FILE).read_text())
        doc["events"].append({"id": "x", "seq": 10**6, "at": time.time(), "owner": "not an owner"})
        doc["events"].append({"id": "y", "seq": 10**6 + 1, "owner": me(), "decision": {}})
        (tmp_path / "head" / EVENTS_FILE).write_text(json.dumps(doc))
        assert await again.catch_up() == 0


async def test_retry_policies_live_on_the_head_settle_once_and_move_once(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tui.state import atomic_write_json, state_path
    from tui.supervisor.policy import migrate_policies

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = local_inventory()
    policy = {"retries": 2, "retry_on": ["node_died"]}
    rec = JobRecord("direct-1", inv.cluster, time.time(), "python3 -c 'print(1)'", kind="raw")
    rec.owner, rec.runtime_env = ALICE, {"env_vars": {"TOKEN": {"name": "TOKEN", "from": "env"}}}
    async with Fleet(inv) as fleet:
        said: list[str] = []
        shared = SharedPolicies(inv, fleet, on_notice=said.append, directory=str(tmp_path / "h"))
        await shared.put(rec, policy)
        (entry,) = (await shared.table()).values()
        back = entry.record()
        assert entry.owner == ALICE and back is not None and back.retry_policy == policy
        assert back.entrypoint == rec.entrypoint and back.runtime_env == rec.runtime_env
        await shared.settle("direct-1", "retry direct-1-retry1")
        assert (await shared.table())["direct-1"].settled == "retry direct-1-retry1"

        # This account's older policies: a recent undecided record's, a stashed one (its queue
        # entry waits locally here: no remote head), a decided record's stays.
        history = JobHistory(inv.cluster)
        mine = JobRecord(
            "old-direct", inv.cluster, time.time(), "python3 -c 'print(2)'", kind="raw"
        )
        mine.retry_policy = {"retries": 1, "retry_on": ["node_died"]}
        done = JobRecord("old-done", inv.cluster, time.time(), "true", kind="raw")
        done.retry_policy, done.decisions = {"retries": 1}, [{"kind": "no-retry"}]
        history.save(mine)
        history.save(done)
        from tui.jobs.queue import JobQueue, Needs, QueueEntry

        JobQueue(inv.cluster).add(
            QueueEntry("old-queued", inv.cluster, time.time(), ["python3", "-V"], needs=Needs())
        )
        stash = state_path("supervisor", inv.cluster, "policies")
        atomic_write_json(stash / "old-queued.json", {"retries": 3, "retry_on": ["node_died"]})
        ctx = SimpleNamespace(inv=inv, history=history, fleet=fleet)
        assert await migrate_policies(ctx, shared) == 2
        assert len(said) == 1 and "moved 2" in said[0] and "policies.moved" in said[0]
        table = await shared.table()
        assert table["old-direct"].owner == me() and table["old-direct"].policy["retries"] == 1
        assert "old-done" not in table
        assert JobQueue(inv.cluster).get("old-queued").retry_policy["retries"] == 3
        assert not stash.exists() and stash.with_name("policies.moved").is_dir()
        assert await migrate_policies(ctx, shared) == 0 and len(said) == 1  # once


async def test_a_supervisor_standing_by_delivers_its_accounts_events(tmp_path, monkeypatch):
    """Another supervisor holds the lease (a real lease on the local head's folder): this one's
    tick does not act, yet hands its account's jobs' events to its targets."""
    from tui.cluster.ray_cluster import RayCluster
    from tui.supervisor.core import Supervisor
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.lease import HeadLease

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = local_inventory()
    head = str(tmp_path / "head")
    async with Fleet(inv) as fleet:
        holder = HeadLease(inv, fleet, directory=head)
        await holder.acquire()
        cluster = RayCluster(fleet, inv)
        ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), tmp_path / "state")
        sup = Supervisor(ctx, [], lease=HeadLease(inv, fleet, directory=head))
        ctx.notify = Notifier(
            [target(tmp_path, "mine", "mine")],
            "c",
            shared=SharedEvents(inv, fleet, directory=head),
            cursor=Cursor(tmp_path / "cursor"),
        )
        elsewhere = SharedEvents(inv, fleet, directory=head)  # the holder's log writes
        await elsewhere.append(failed("j-standby", me()), me())
        await elsewhere.append(failed("j-theirs", ALICE), ALICE)
        await sup.tick()
        assert not sup.acting and sup.supervised_by()
        assert [s for s, _ in heard(tmp_path, "mine")] == ["j-standby"]
        await holder.release()
