"""`up` refuses as soon as one host's link fails, naming it, without waiting for the probes of
the others (issue 16: with 128 hosts, one down must not cost the slowest probe), nor for the
head's connection and lock. Real OpenSSH namespace hosts; nothing is started."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from tui.cluster.lock import HEAD_LOCK_DIR, LOCK_NAME
from tui.cluster.ray_cluster import BringUpError, ClusterBusy, RayCluster
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet


@pytest.fixture
def three_hosts(ns_cluster_factory):
    return ns_cluster_factory(3)


def refuse_yaml(cluster, tmp_path: Path, *, slow_host: str) -> Path:
    """hosts.yaml for the three hosts, `slow_host`'s interpreter taking 4 s to start."""
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 4\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    return cluster.write_hosts_yaml(
        tmp_path / "hosts.yaml",
        python=sys.executable,
        extra_host_fields={slow_host: {"python": str(slow)}},
        ssh_fields={"config": "", "connect_timeout": 3},
    )


async def test_up_refuses_at_once_when_a_host_is_down(three_hosts, tmp_path):
    # node2's interpreter takes 4 s to start: its probe answers long after node3 is known down.
    _, n2, n3 = three_hosts.hosts
    path = refuse_yaml(three_hosts, tmp_path, slow_host=n2.name)
    three_hosts.kill_host(n3.name)
    inv = load_inventory(path)
    events = []
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv, events.append)
        t0 = time.monotonic()
        with pytest.raises(BringUpError) as err:
            await cluster.bring_up()
        took = time.monotonic() - t0
        await cluster.close()
    assert n3.name in err.value.failures and "not starting" in str(err.value)
    assert "unreachable" in err.value.failures[n3.name]
    # Refused before node2's (slow) probe answered: no probe result for node2 at all.
    assert not [e for e in events if e.host == n2.name and e.phase == "probe"], events
    assert took < 4.0, took  # the slow probe alone takes 4 s: it was not waited for


async def test_up_refuses_while_the_head_lock_is_pending(three_hosts, tmp_path):
    # The head's interpreter takes 4 s to start, so its lock helper answers 4 s after the
    # head connected; node3 is down. The refusal must not wait for the head's lock.
    n1, _, n3 = three_hosts.hosts
    path = refuse_yaml(three_hosts, tmp_path, slow_host=n1.name)
    lock_file = f"{HEAD_LOCK_DIR}/{LOCK_NAME}"
    assert three_hosts.exec_in(n1.name, ["test", "-e", lock_file]).returncode != 0
    three_hosts.kill_host(n3.name)
    inv = load_inventory(path)
    events = []
    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv, events.append)
        t0 = time.monotonic()
        with pytest.raises(BringUpError) as err:
            await cluster.bring_up()
        took = time.monotonic() - t0
        assert not isinstance(err.value, ClusterBusy), err.value
        assert n3.name in err.value.failures and "unreachable" in err.value.failures[n3.name]
        assert took < 3.0, took  # the head's lock alone takes 4 s: it was not waited for
        # Nothing was probed: the refusal came while the lock was pending.
        assert [e.host for e in events if e.phase == "probe"] == [n3.name], events

        # The head lock's acquisition went on; once taken it is let go (while the fleet, and
        # so the helper's SSH channel, stays open): the lock file exists, empty, no helper
        # runs, and the next action gets the lock.
        def helper_left() -> bool:
            res = three_hosts.exec_in(n1.name, ["pgrep", "-f", LOCK_NAME])
            return res.returncode == 0

        deadline = time.monotonic() + 20
        while True:
            held = three_hosts.exec_in(n1.name, ["cat", lock_file])
            if held.returncode == 0 and held.stdout == "" and not helper_left():
                break
            assert time.monotonic() < deadline, (held.returncode, held.stdout, helper_left())
            await asyncio.sleep(0.2)
        async with cluster.lock("down"):  # ClusterBusy if the late lock were still held
            owner = three_hosts.exec_in(n1.name, ["cat", lock_file]).stdout
            assert f'"pid": {os.getpid()}' in owner and '"action": "down"' in owner, owner
        await cluster.close()
