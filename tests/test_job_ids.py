"""Job ids in dashboard URLs (issue 10, item 3), on a real Ray cluster over a namespace host: a
RUNNING victim job; hostile ids through the CLI (stop, logs, submit --submission-id, resubmit)
and through the service functions the Jobs screen calls. Nothing reaches another endpoint: every
hostile id is refused with one line (exit 2) and the victim keeps RUNNING."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import unquote

import pytest
from harness.cli import run_cli
from harness.raycluster import VENV_PY, wait_job
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.cluster.dashboard import (
    BadJobId,
    DashboardError,
    api_path,
    check_job_id,
    is_job_id,
    job_path,
)

VICTIM = "victim2"
HOSTILE = [
    f"{VICTIM}/stop?",
    f"{VICTIM}/stop",
    f"{VICTIM}?",
    f"{VICTIM}#x",
    f"../jobs/{VICTIM}",
    f"{VICTIM}/..",
    f"{VICTIM}%2Fstop",
    f"{VICTIM}%3F",
    f" {VICTIM}",
    f"{VICTIM}\n",
    ".",
    "..",
    f"-{VICTIM}",
    f"{VICTIM}\x1b]0;t\x07",
    f"{VICTIM}\\stop",
    "a" * 201,
    "",
    f"{VICTIM}&x=1",
    f"{VICTIM};stop",
    "vic tim2",
    "vïctim2",
    f"{VICTIM}\x00",
]


@pytest.fixture(scope="module")
def ray_one(ray_shared1):
    return ray_shared1


def cli(env, *args: str, timeout: float = 120):

    return run_cli([*args], env=env, timeout=timeout)


def status_of(env, path, sid: str) -> str:
    doc = json.loads(cli(env, "jobs", str(path), "--json").stdout)
    return next((j["status"] for j in doc["jobs"] if j["submission_id"] == sid), "absent")


def wait_status(env, path, sid, want, timeout=90.0) -> str:
    return wait_job(env, path, sid, want, timeout)["status"]


def test_ray_rule_and_encoding_offline():
    # Ray's own ids pass: generated submission ids and hex driver job ids.
    for ok in (
        "raysubmit_4LamXRuQpYdSMg7J",
        "02000000",
        "wd-job-1",
        "grpo-20261123-101010-ab12",
        "a.b_c-d",
        "_x",
        "a" * 200,
    ):
        assert check_job_id(ok) == ok
    for bad in HOSTILE:
        with pytest.raises(BadJobId) as err:
            check_job_id(bad)
        msg = str(err.value)
        assert "\n" not in msg and "\x1b" not in msg and "\x00" not in msg
        assert isinstance(err.value, DashboardError)  # screens already show those
    assert job_path(VICTIM, "stop") == "/api/jobs/victim2/stop"
    with pytest.raises(BadJobId):
        job_path(f"{VICTIM}/stop?", "stop")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(max_size=30), min_size=1, max_size=4),
    st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=3),
)
def test_api_path_encodes_every_value(segments, query):
    path = api_path(*segments, query=query)
    base, _, q = path.partition("?")
    parts = base.split("/")[1:]
    assert [unquote(p) for p in parts] == segments  # no value added or merged a segment
    assert "#" not in path and " " not in path and all(ord(c) > 32 for c in path)
    if query:
        pairs = [kv.split("=") for kv in q.split("&")]
        assert all(len(kv) == 2 for kv in pairs)
        assert {unquote(k): unquote(v) for k, v in pairs} == query
    else:
        assert "?" not in path
    assert is_job_id("x") and not is_job_id(segments[0] + "/")


def test_hostile_ids_never_reach_another_job(ray_one):
    _cluster, path, env = ray_one
    sub = cli(
        env,
        "submit",
        str(path),
        "--submission-id",
        VICTIM,
        "--",
        VENV_PY,
        "-c",
        "import time; print('victim up', flush=True); time.sleep(600)",
    )
    assert sub.returncode == 0, sub.stderr
    assert wait_status(env, path, VICTIM, {"RUNNING"}) == "RUNNING"

    # CLI: stop, logs, submit --submission-id, resubmit: each one line, exit 2, nothing sent.
    # (A subset: each CLI run starts a Python; the service calls below take every id.)
    for bad in (
        f"{VICTIM}/stop?",
        f"../jobs/{VICTIM}",
        f"{VICTIM}%2Fstop",
        "..",
        f"{VICTIM}\x1b]0;t\x07",
        f"{VICTIM}#x",
    ):
        for args in (
            ["stop", str(path), bad],
            ["logs", str(path), bad],
            ["submit", str(path), "--submission-id", bad, "--", "true"],
            ["submit", str(path), "--resubmit", bad],
        ):
            res = cli(env, *args)
            assert res.returncode == 2, (args, res.stdout, res.stderr)
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in res.stderr, (args, res.stderr)
            assert "not a Ray submission id" in lines[0]
            assert "\x1b" not in res.stderr
    assert status_of(env, path, VICTIM) == "RUNNING"

    # The service functions the Jobs screen calls, in this process, over the real tunnel.
    from tui.cluster.job_logs import job_log_chunks, job_status
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import load_inventory
    from tui.jobs.history import JobHistory
    from tui.jobs.service import delete_job, stop_job
    from tui.transport.fleet import Fleet

    async def screen_calls() -> list[str]:
        refused = []
        async with Fleet(load_inventory(path)) as fleet:
            rc = RayCluster(fleet, fleet.inventory)
            hist = JobHistory(fleet.inventory.cluster, root=None)
            try:
                for bad in HOSTILE:
                    for call in (
                        lambda b: stop_job(rc, b, hist, wait=1),
                        lambda b: delete_job(rc, b, hist),
                    ):
                        with pytest.raises(BadJobId):
                            await call(bad)
                    client = await rc.dashboard()
                    with pytest.raises(BadJobId):
                        await job_status(client, bad)
                    with pytest.raises(BadJobId):
                        async for _ in job_log_chunks(client, bad, follow=False):
                            pass
                    refused.append(bad)
                # Encoding alone (validation bypassed): the hostile text stays one segment,
                # the head answers for a job of that exact name (none), not victim2's stop.
                client = await rc.dashboard()
                with pytest.raises(DashboardError) as err:
                    await client._call("POST", api_path("api", "jobs", f"{VICTIM}/stop?", "stop"))
                assert "HTTP 404" in str(err.value) or "HTTP 4" in str(err.value)
                # A raw path the helper did not build is refused before it is sent.
                with pytest.raises(DashboardError, match="not built by api_path"):
                    await client._call("POST", f"/api/jobs/{VICTIM}/stop?x y")
                assert (await job_status(client, VICTIM))[0] == "RUNNING"
            finally:
                await rc.close()
        return refused

    refused = asyncio.run(screen_calls())
    assert refused == HOSTILE
    assert status_of(env, path, VICTIM) == "RUNNING"

    # The valid id still works end to end.
    stop = cli(env, "stop", str(path), VICTIM)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == f"{VICTIM}: STOPPED"
