"""Issue 30 across real accounts: two non-root OS users (useradd, own homes, own SSH keys) who
log in to the namespace hosts AS THEMSELVES (hosts.yaml `ssh: user:`) share one Ray (the
session's ray_shared1, started by root, as a lab's would be by an admin). On one bring-up:

- the shared folder on the head: one line naming the admin's fix while it is another account's
  0755 folder; made by user A, written by user B (queue, policies, events);
- both users' queued jobs start in queue order from B's supervisor (holding the lease);
- a job A sent directly (not queued) with `--retries 1` fails and is retried by B's supervisor
  from the policy on the head, the retry still A's;
- each user's own webhook (a loopback HTTP server per user) hears only that user's jobs: B's
  while B's supervisor acts, A's when A's supervisor starts later and catches up, none twice."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from harness.raycluster import wait_job
from team_accounts import NAMES, login_user
from test_notify import Hook

from tui.cluster.head_files import SHARED_DIR

SHORT = [sys.executable, "-c", "import time; time.sleep(1)"]
NCCL_FAIL = [
    sys.executable,
    "-c",
    "import sys; print('[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600001 milliseconds "
    "before timing out.'); sys.exit(1)",
]
EVENTS = "[job-end, job-failed, retry, no-retry, queue-start]"


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, f"{res.args}: {res.stdout}{res.stderr}"
    return res


def decisions(res: subprocess.CompletedProcess) -> list[tuple[str, str | None]]:
    docs = [json.loads(x) for x in ok(res).stdout.splitlines() if x.startswith("{")]
    return [(d["kind"], d["submission_id"]) for d in docs]


def heard(hook: Hook) -> list[tuple[str, str]]:
    return [(b["event"], b["submission_id"]) for b in hook.bodies]


@pytest.fixture(scope="module")
def hooks():
    made = {name: Hook() for name in NAMES}
    yield made
    for h in made.values():
        h.close()


def test_two_accounts_share_queue_policies_and_events(ray_shared1, hooks):
    cluster, hosts, env = ray_shared1
    head = cluster.hosts[0].name

    def notify(name: str) -> str:
        return f"notify:\n  webhook: {hooks[name].url}\n  events: {EVENTS}\n"

    def on_head(*argv: str) -> subprocess.CompletedProcess:
        return cluster.exec_in(head, list(argv))

    with (
        login_user(cluster, hosts, NAMES[0], notify(NAMES[0])) as a,
        login_user(cluster, hosts, NAMES[1], notify(NAMES[1])) as b,
    ):
        try:
            # Another account's 0755 folder (Ray's /tmp/ray as root leaves it): one line
            # naming what an admin runs.
            on_head("rm", "-rf", SHARED_DIR)
            on_head("mkdir", "-m", "0755", SHARED_DIR)
            res = a.cli("queue", str(a.hosts), "--json")
            lines = res.stderr.strip().splitlines()
            assert res.returncode != 0 and len(lines) == 1, res
            assert f"install -d -m 0777 {SHARED_DIR}" in lines[0] and NAMES[0] in lines[0]
            on_head("rm", "-rf", SHARED_DIR)

            # A makes the folder; B writes the queue file A made (and the other way round).
            ok(a.cli("submit", str(a.hosts), "--queue", "--submission-id", "acc-qa1", "--", *SHORT))
            ok(b.cli("submit", str(b.hosts), "--queue", "--submission-id", "acc-qb1", "--", *SHORT))
            ok(a.cli("submit", str(a.hosts), "--queue", "--submission-id", "acc-qa2", "--", *SHORT))
            owner_mode = on_head("stat", "-c", "%U %a", SHARED_DIR).stdout.split()
            assert owner_mode == [NAMES[0], "777"]

            # B's supervisor holds the lease: every user's entries start, in queue order.
            first = decisions(b.cli("watch", str(b.hosts), "--once", "--gpus", "0", "--json"))
            starts = [sid for kind, sid in first if kind == "queue-start"]
            assert starts == ["acc-qa1", "acc-qb1", "acc-qa2"], first

            # A sends a job directly, with a retry policy; it fails with a retriable signature.
            ok(
                a.cli(
                    "submit", str(a.hosts), "--retries", "1", "--submission-id", "acc-fa1",
                    "--", *NCCL_FAIL,
                )
            )  # fmt: skip
            for sid in ("acc-qa1", "acc-qb1", "acc-qa2"):
                wait_job(env, hosts, sid, {"SUCCEEDED"}, timeout=60)
            wait_job(env, hosts, "acc-fa1", {"FAILED"}, timeout=60)

            # B's supervisor retries A's job from the policy on the head; the retry is A's.
            second = decisions(b.cli("watch", str(b.hosts), "--once", "--gpus", "0", "--json"))
            assert ("retry", "acc-fa1") in second, second
            jobs = json.loads(ok(b.cli("jobs", str(b.hosts), "--json")).stdout)["jobs"]
            retry = next(j for j in jobs if j["submission_id"] == "acc-fa1-retry1")
            assert retry["owner"] == a.owner and retry["retry_of"] == "acc-fa1"

            # B's webhook: B's jobs only, delivered by B's own supervisor as it acted.
            b_heard = heard(hooks[NAMES[1]])
            assert ("queue-start", "acc-qb1") in b_heard and ("job-end", "acc-qb1") in b_heard
            assert {sid for _e, sid in b_heard} == {"acc-qb1"}
            assert heard(hooks[NAMES[0]]) == []  # A's supervisor has not run yet

            # A's supervisor starts later: it catches up on A's jobs' events, B's never.
            decisions(a.cli("watch", str(a.hosts), "--once", "--gpus", "0", "--json"))
            a_heard = heard(hooks[NAMES[0]])
            for want in (
                ("queue-start", "acc-qa1"),
                ("queue-start", "acc-qa2"),
                ("job-end", "acc-qa1"),
                ("job-failed", "acc-fa1"),
                ("retry", "acc-fa1"),
            ):
                assert want in a_heard, a_heard
            assert all(sid.startswith(("acc-qa", "acc-fa")) for _e, sid in a_heard), a_heard
            ids = [body["details"]["event_id"] for body in hooks[NAMES[0]].bodies]
            assert len(ids) == len(set(ids))  # none twice
            before = len(a_heard)
            decisions(a.cli("watch", str(a.hosts), "--once", "--gpus", "0", "--json"))
            again = heard(hooks[NAMES[0]])[before:]
            assert not [x for x in again if x in a_heard], again  # nothing sent twice
            assert {sid for _e, sid in heard(hooks[NAMES[1]])} == {"acc-qb1"}
        finally:
            for sid in ("acc-qa1", "acc-qb1", "acc-qa2"):
                a.cli("queue", str(a.hosts), "--cancel", sid, "--force")
            # Root's own tests after this one make the folder again as theirs.
            on_head("rm", "-rf", SHARED_DIR)
