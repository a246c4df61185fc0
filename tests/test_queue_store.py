"""The queue's file (tui/jobs/queue.py) without a cluster: real processes adding at the same
time lose and duplicate nothing; priority then FIFO; move/cancel through the real CLI
(`verl-tui queue`'s function on the local store); a damaged or hand-edited file does not
crash it; the fit rule is the validator's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.jobs.queue import (
    JobQueue,
    Needs,
    QueueEntry,
    QueueError,
    free_after,
    free_from_report,
)
from tui.jobs.rules_base import ClusterResources, NodeResources
from tui.state import StateError

VENV_PY = sys.executable


def entry(sid: str, priority: int = 0, nnodes: int = 1, per: int = 4) -> QueueEntry:
    return QueueEntry(
        submission_id=sid,
        cluster="c1",
        queued_at=time.time(),
        entrypoint_argv=["python3", "-c", "print(1)"],
        priority=priority,
        needs=Needs(nnodes, per),
    )


def test_two_processes_adding_at_once_lose_nothing(tmp_path):
    """Two real processes (the cockpit and a CLI, say) add 40 entries each, interleaved with
    moves; every entry is there once."""
    worker = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from pathlib import Path
        from tui.jobs.queue import JobQueue
        from test_queue_store import entry
        q = JobQueue("c1", Path({str(tmp_path)!r}))
        tag = sys.argv[1]
        for i in range(40):
            q.add(entry(f"{{tag}}-{{i}}", priority=i % 3))
            if i % 7 == 0:
                q.move(f"{{tag}}-{{i}}", 1)
        """
    )
    procs = [
        subprocess.Popen([VENV_PY, "-c", worker, tag], stderr=subprocess.PIPE, text=True)
        for tag in ("a", "b")
    ]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    ids = [e.submission_id for e in JobQueue("c1", tmp_path).entries()]
    assert len(ids) == 80 and len(set(ids)) == 80
    assert set(ids) == {f"{t}-{i}" for t in "ab" for i in range(40)}


def test_priority_then_fifo_move_cancel(tmp_path):
    q = JobQueue("c1", tmp_path)
    for sid, prio in (("a", 0), ("b", 0), ("c", 5), ("d", 1), ("e", 5)):
        q.add(entry(sid, prio))
    assert [e.submission_id for e in q.entries()] == ["c", "e", "d", "a", "b"]
    with pytest.raises(QueueError, match="already used"):
        q.add(entry("a"))
    with pytest.raises(QueueError, match="already used"):
        q.add(entry("z"), taken=lambda sid: sid == "z")  # in the history already
    assert q.move("b", 1) == 1 and q.move("c", 99) == 5
    assert [e.submission_id for e in q.entries()] == ["b", "e", "d", "a", "c"]
    assert q.cancel("d").submission_id == "d" and q.position("a") == 3
    with pytest.raises(QueueError, match="not in the queue"):
        q.cancel("d")
    # A sweep is queued all or none: one taken id and nothing of it is added.
    with pytest.raises(QueueError):
        q.add_all([entry("s1"), entry("a")])
    assert q.get("s1") is None
    # An entry being started cannot be cancelled (the supervisor is sending it).
    assert q.begin_start("e") is not None
    with pytest.raises(QueueError, match="being submitted"):
        q.cancel("e")


def test_damaged_and_hand_edited_files(tmp_path):
    """A queue file that is not entirely ours is refused naming it, never read as empty: a
    change would otherwise write back a queue that lost its entries (issue 23)."""
    q = JobQueue("c1", tmp_path)
    q.add(entry("good"))
    doc = json.loads(q.path.read_text())
    bad_entries = [
        {"submission_id": "../../etc", "entrypoint_argv": ["x"], "queued_at": 1, "cluster": "c"},
        {"submission_id": "noargv", "entrypoint_argv": [], "queued_at": 1, "cluster": "c"},
        {"submission_id": "x", "queued_at": "yesterday", "entrypoint_argv": ["x"], "cluster": "c"},
        "not a dict",
        {**entry("tags").to_json(), "tags": ["x"]},
        {**entry("over").to_json(), "overrides": "a=1"},
        {**entry("prof").to_json(), "profile": {"$(x)": 1}},
    ]
    for bad in bad_entries:
        text = json.dumps({**doc, "entries": [*doc["entries"], bad]})
        q.path.write_text(text)
        with pytest.raises(StateError, match=r"queue\.json: damaged \(entry 2 is not"):
            q.entries()
        with pytest.raises(StateError):
            q.add(entry("after"))
        assert q.path.read_text() == text  # nothing rewritten
    q.path.write_text(json.dumps(doc) + "\n{ one bad line appended")
    with pytest.raises(StateError, match=r"queue\.json:2: damaged: not JSON") as info:
        q.add(entry("after"))
    assert "\n" not in str(info.value) and "move the file away" in str(info.value)
    q.path.write_text(json.dumps(doc))  # fixed by hand: both are there
    q.add(entry("after"))
    assert [e.submission_id for e in q.entries()] == ["good", "after"]


def test_fit_uses_the_validators_rule():
    needs = Needs(2, 4)  # 2 nodes × 4 GPUs, 12 CPUs each
    two = ClusterResources([NodeResources("n1", 4, 12), NodeResources("n2", 4, 12)])
    assert needs.problems(two) == []
    short_cpu = ClusterResources([NodeResources("n1", 4, 12), NodeResources("n2", 4, 11)])
    (p,) = needs.problems(short_cpu)
    assert p.key == "trainer.n_gpus_per_node" and "n2 (11 CPUs)" in p.message
    (p,) = needs.problems(ClusterResources([NodeResources("n1", 4, 12)]))
    assert "needs 8 GPUs" in p.message
    # A job just started keeps its share: the next one does not fit until it shows in Ray.
    assert Needs(1, 4).problems(free_after(two, [Needs(1, 4)])) == []
    assert Needs(2, 4).problems(free_after(two, [Needs(1, 4)]))
    assert Needs().problems(ClusterResources([])) == []  # a raw command: only its turn
    # Extra resource pools count (the reward model's own GPUs).
    pools = {
        "reward": {
            "reward_model": {"enable_resource_pool": True, "nnodes": 1, "n_gpus_per_node": 2}
        }
    }
    assert Needs(1, 4, pools).gpus == 6
    assert Needs(1, 4, pools).problems(ClusterResources([NodeResources("n1", 4, 12)]))


def test_free_from_the_dashboards_report():
    """The shape Ray 2.60's /api/cluster_status answers (seen on the namespace cluster)."""
    from tui.config.hosts import parse_inventory

    inv = parse_inventory("hosts:\n  - name: h1\n    address: 10.0.0.1\n")
    report = {
        "data": {
            "clusterStatus": {
                "loadMetricsReport": {
                    "usageByNode": {
                        "abc": {"GPU": [3.0, 4.0], "CPU": [5.0, 12.0]},
                        "dead": {"GPU": [0.0, 8.0]},
                        "weird": {"GPU": "lots"},
                    }
                }
            }
        }
    }
    nodes = [
        {"node_id": "abc", "node_ip": "10.0.0.1"},
        {"node_id": "weird", "node_ip": "10.0.0.9"},
    ]
    free = free_from_report(report, nodes, inv)
    assert free is not None
    assert [(n.host, n.gpus, n.cpus) for n in free.nodes] == [
        ("h1", 1.0, 7.0),
        ("10.0.0.9", 0.0, 0.0),
    ]
    assert free_from_report({"data": {}}, nodes, inv) is None


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=60)


def test_queue_command_lists_moves_cancels_and_asks_before_others(tmp_path, monkeypatch, capsys):
    """`verl-tui queue`'s own function over the local store (the cluster's shared store is
    tests/test_team_cluster.py's): list, --json, move, cancel; another user's entry is refused
    without --force (exit 3, one line naming it); bad arguments end before any connection."""
    import asyncio
    import os

    from tui.commands.queue import queue_command
    from tui.config.hosts import load_inventory
    from tui.jobs.owner import me
    from tui.jobs.queue_shared import LocalQueue

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: c1\nhosts:\n  - name: h1\n    address: 10.0.0.1\n")
    inv = load_inventory(hosts)
    q = JobQueue("c1")

    def run(**kw) -> tuple[int, str, str]:
        code = asyncio.run(
            queue_command(inv, LocalQueue(q), as_json=kw.pop("as_json", False), **kw)
        )
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, _ = run()
    assert code == 0 and "empty" in out
    for sid, prio in (("first", 0), ("second", 0), ("urgent", 9)):
        q.add(entry(sid, prio))
    q.update("first", reason="waiting for free resources: needs 4 GPUs", blocked=False)
    q.update("second", owner=me())
    rows = json.loads(run(as_json=True)[1])["queue"]
    assert [(r["position"], r["submission_id"]) for r in rows] == [
        (1, "urgent"),
        (2, "first"),
        (3, "second"),
    ]
    assert rows[2]["owner"] == me() and rows[0]["owner"] is None
    assert rows[1]["needs"] == {"nnodes": 1, "gpus_per_node": 4, "cpus_per_node": 12, "gpus": 4}
    assert rows[1]["reason"].startswith("waiting") and rows[0]["waiting_s"] >= 0
    table = run()[1]
    assert "1×4 GPU, 12 CPU/node" in table and "3 jobs queued" in table and me() in table
    assert run(move="second", to=1)[0] == 0
    assert run(move="urgent", down=True)[0] == 0
    assert [e.submission_id for e in q.entries()] == ["second", "first", "urgent"]
    assert run(cancel="first")[0] == 0
    assert [e.submission_id for e in q.entries()] == ["second", "urgent"]
    code, _, err = run(cancel="first")
    assert code == 1 and "not in the queue" in err
    # Another user's entry: refused without --force, in one line naming the owner and --force.
    q.update("urgent", owner="alice@login9")
    for kw in ({"cancel": "urgent"}, {"move": "urgent", "to": 1}):
        code, _, err = run(**kw)
        assert code == 3 and err.count("\n") == 1 and "alice@login9" in err and "--force" in err
    assert [e.submission_id for e in q.entries()] == ["second", "urgent"]
    assert run(move="urgent", to=1, force=True)[0] == 0
    assert run(cancel="urgent", force=True)[0] == 0
    assert [e.submission_id for e in q.entries()] == ["second"]

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    bad = cli(env, "queue", str(hosts), "--cancel", "../x")
    assert bad.returncode == 2 and "not a Ray submission id" in bad.stderr
    alone = cli(env, "queue", str(hosts), "--to", "2")
    assert alone.returncode == 2 and "--move" in alone.stderr
    assert "Traceback" not in bad.stderr + alone.stderr


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = list(QueueEntry.__dataclass_fields__)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=8), max_size=4))
def test_any_file_content_reads_without_crashing(tmp_path, docs):
    """Whatever a hand edit leaves in an entry, reading refuses it naming the file (StateError)
    or reads it; listing and the fit rule of what it reads never raise."""
    q = JobQueue("c1", tmp_path)
    good = entry("base").to_json()
    q.dir.mkdir(parents=True, exist_ok=True)
    q.path.write_text(json.dumps({"entries": [{**good, **d} for d in docs] + docs}))
    try:
        entries = q.entries()
    except StateError as exc:
        assert str(exc).startswith(f"{q.path}: damaged") and "\n" not in str(exc)
        return
    for i, e in enumerate(entries, 1):
        assert json.dumps(e.summary_json(i))
        e.needs.problems(ClusterResources([NodeResources("n1", 4, 12)]))
        e.needs.describe()
