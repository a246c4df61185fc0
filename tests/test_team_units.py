"""Issue 30's logic without a cluster: the head's shared-file helper (tui/remote/head_state.py,
run as the real program), the shared queue over the local transport (a `localhost` head: the
same Fleet, a real subprocess; a temp folder for the head's), the one-time move of an old
local queue, two writers at once, owners stamped by the submission flow, the notify
`owner:` filter and hosts.yaml's `readonly:`/`owner:` checked at the config boundary."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from tui.config.hosts import load_inventory, local_inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.owner import OWNER_KEY, me, others, owner_of_metadata, stamp
from tui.jobs.queue import JobQueue, Needs, QueueEntry
from tui.jobs.queue_shared import MOVED_NAME, SharedQueue
from tui.remote import source
from tui.supervisor.notify import owner_wanted
from tui.transport.fleet import Fleet


def helper(d, op: str, version: str = "", data: bytes | None = None, limit: int = 1 << 16):
    res = subprocess.run(
        [sys.executable, "-c", source("head_state"), str(d), "q.json", op, version, str(limit)],
        input=data,
        capture_output=True,
        timeout=30,
    )
    return json.loads(res.stdout.decode().splitlines()[-1])


def test_the_head_helper_swaps_only_the_version_it_read_and_refuses_odd_files(tmp_path):
    d = tmp_path / "shared"
    assert helper(d, "read") == {"text": "", "version": ""}
    assert "written" in helper(d, "write", "", b'{"a": 1}')
    now = helper(d, "read")
    assert now["text"] == '{"a": 1}' and now["version"]
    assert "conflict" in helper(d, "write", "", b"{}")  # someone wrote since: nothing replaced
    assert helper(d, "read")["text"] == '{"a": 1}'
    assert "written" in helper(d, "write", now["version"], b'{"a": 2}')
    assert oct(d.stat().st_mode & 0o777) == "0o777"  # every user's verl-tui replaces files here
    assert oct((d / "q.json").stat().st_mode & 0o777) == "0o666"
    assert (
        "more than"
        in helper(d, "write", helper(d, "read")["version"], b"x" * 70, limit=64)["error"]
    )
    (d / "q.json").unlink()
    os.mkfifo(d / "q.json")  # a FIFO where the file belongs: refused at once, never a wait
    t0 = time.monotonic()
    assert "not a plain file" in helper(d, "read")["error"]
    assert time.monotonic() - t0 < 10
    (d / "q.json").unlink()
    (d / "q.json").write_bytes(b"\xff\xfe")
    assert "not UTF-8" in helper(d, "read")["error"]


def entry(sid: str, owner: str | None = None, priority: int = 0) -> QueueEntry:
    return QueueEntry(
        submission_id=sid,
        cluster="local",
        queued_at=time.time(),
        entrypoint_argv=["python3", "-c", "print(1)"],
        priority=priority,
        needs=Needs(),
        owner=owner,
    )


async def test_the_shared_queue_moves_the_old_one_once_and_two_writers_lose_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = local_inventory()
    old = JobQueue(inv.cluster)
    old.add_all([entry("old-1"), entry("old-2", priority=3)])
    said: list[str] = []
    head = str(tmp_path / "head")
    async with Fleet(inv) as fleet:
        first = SharedQueue(inv, fleet, on_notice=said.append, directory=head)
        second = SharedQueue(inv, fleet, on_notice=said.append, directory=head)
        entries = await first.entries()
        assert [(e.submission_id, e.owner) for e in entries] == [("old-2", me()), ("old-1", me())]
        assert len(said) == 1 and "moved 2 queued job(s)" in said[0] and MOVED_NAME in said[0]
        assert not old.path.exists() and old.path.with_name(MOVED_NAME).exists()
        await second.entries()
        assert len(said) == 1  # said once

        # Two writers at once (two users' CLIs): compare-and-swap keeps every entry once.
        async def add(q: SharedQueue, prefix: str) -> None:
            for i in range(6):
                await q.add(entry(f"{prefix}-{i}", owner=f"{prefix}@h1"))

        await asyncio.gather(add(first, "alice"), add(second, "bob"))
        ids = [e.submission_id for e in await first.entries()]
        assert len(ids) == len(set(ids)) == 14
        assert [i for i in ids if i.startswith("alice")] == [f"alice-{i}" for i in range(6)]
        mine = await first.cancel("old-1")
        assert mine.submission_id == "old-1"
        assert (await second.get("bob-3")).owner == "bob@h1"
        assert await first.move("bob-5", 1) == 1
        assert (await second.entries())[0].submission_id == "bob-5"


async def test_the_flow_stamps_the_owner_once(tmp_path, monkeypatch):
    from tui.jobs.flow import Queued, Request, outcome, submission_flow
    from tui.jobs.history import JobHistory
    from tui.jobs.submit import raw_submission

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = local_inventory()
    sub = raw_submission(["python3", "-c", "print(1)"], submission_id="own-1")
    done = await outcome(
        submission_flow(inv, None, JobHistory(inv.cluster), Request(sub, mode="queue"))
    )
    assert isinstance(done, Queued)
    (placed,) = done.placed
    assert placed.entry.owner == me() == owner_of_metadata(placed.sub.metadata)
    # A queued or retried job keeps the owner who asked for it.
    theirs = {OWNER_KEY: "alice@login9"}
    assert stamp(theirs) == "alice@login9" and theirs[OWNER_KEY] == "alice@login9"
    assert owner_of_metadata({OWNER_KEY: "x y@z"}) is None  # malformed: unknown
    assert others([me(), "alice@login9", None, "alice@login9"]) == ["alice@login9"]


def test_notify_owner_filter_and_readonly_are_checked_at_the_config_boundary(tmp_path):
    assert owner_wanted("all", None) and owner_wanted("mine", me())
    assert not owner_wanted("mine", "alice@login9") and not owner_wanted("mine", None)
    assert owner_wanted("alice@login9", "alice@login9") and not owner_wanted("bob@h", "alice@h")
    # Unset (the default): this account's jobs and what has no owner, never a teammate's.
    assert owner_wanted(None, None) and owner_wanted(None, me())
    assert not owner_wanted(None, "alice@login9") and owner_wanted("all", "alice@login9")

    def load(text: str):
        path = tmp_path / "hosts.yaml"
        path.write_text("cluster: c\nhosts:\n  - name: h1\n    address: 10.0.0.1\n" + text)
        return load_inventory(path)

    inv = load("readonly: true\nnotify:\n  command: [/bin/true]\n  owner: mine\n")
    assert inv.readonly and inv.notify[0].owner == "mine"
    assert load("notify:\n  command: [/bin/true]\n  owner: alice@login9\n").notify[0].owner == (
        "alice@login9"
    )
    with pytest.raises(ConfigError) as bad:
        load("notify:\n  command: [/bin/true]\n  owner: 'alice at home'\n")
    assert ":7" in str(bad.value) and "USER@HOST" in str(bad.value) and "\n" not in str(bad.value)
    with pytest.raises(ConfigError) as bad:
        load("readonly: maybe\n")
    assert ":5" in str(bad.value) and "readonly" in str(bad.value)


async def test_a_notify_target_hears_only_its_owners_jobs(tmp_path):
    """Real notifier commands: each target filtered by owner gets only those jobs' events."""
    from tui.config.notify import NotifyOptions
    from tui.supervisor.events import Decision
    from tui.supervisor.notify import Notifier

    def target(name: str, owner: str) -> NotifyOptions:
        out = tmp_path / f"{name}.jsonl"
        code = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
        return NotifyOptions(
            command=(sys.executable, "-c", code), owner=owner, events=("job-failed", "error")
        )

    notifier = Notifier(
        [target("all", "all"), target("mine", "mine"), target("alice", "alice@h1")], "c"
    )
    for sid, owner in (("j-mine", me()), ("j-alice", "alice@h1"), ("j-none", None)):
        await notifier(
            Decision("job-failed", sid, "failed", details={"owner": owner} if owner else {})
        )
    await notifier(Decision("error", None, "the head cannot be reached"))

    def heard(name: str) -> list:
        path = tmp_path / f"{name}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line)["submission_id"] for line in lines if line.strip()]

    assert heard("all") == ["j-mine", "j-alice", "j-none", None]
    assert heard("mine") == ["j-mine"]
    assert heard("alice") == ["j-alice"]
