"""All five callers of the one submission flow (tui/jobs/flow.py) on one real leased Ray cluster
(ray_shared2: two namespace hosts, Ray told 4 GPUs and 12 CPUs each) with real verl: the job form
(ctrl+s under Pilot), `verl-tui submit` and its --queue, `verl-tui sweep` (each through the
function the CLI calls), the queue's jobs sent by the supervisor's queue duty, and the
supervisor's own submit (a retry's path). One profile and one --set; what Ray itself recorded of
each job (entrypoint, runtime_env, metadata) must be the same (the form's entrypoint as Hydra
reads it: it writes the value typed in a field quoted, where --set passes Hydra text as given;
the composed config, its config_hash, is the same). Then the job preflight refuses a
data path no host has: the same failing findings for the form, submit, submit --queue and sweep
(the supervisor runs no preflight: what it sends passed one when it was queued). The form keeps
that refusal on its submit bar until a field changes (issue 24).

Each job is stopped as soon as Ray has recorded it: what is compared here is what Ray keeps of
a job from its submission on, and verl's driver run to its end (its `--cfg job` output) is
test_jobs.py::test_profile_submit_runs_verl_with_the_overrides's and test_job_form.py's point;
five drivers importing verl and torch to print a config cost ~60 s of CPU here."""

from __future__ import annotations

import asyncio
import re
import shlex

import pytest
from harness.pilot import until
from harness.raycluster import on_ray_cluster
from test_submission_flow import PROFILE  # the same profile, with and without hosts

from tui.config.hosts import load_inventory
from tui.jobs.flow import Outcome, Refusal, Refused, Submitted
from tui.jobs.history import JobHistory
from tui.jobs.pipeline import JobSpec
from tui.jobs.profiles import load_profile

SAME = "trainer.experiment_name=flowsame"  # the one --set (a sweep's one-value grid)
NO_DATA = "data.train_files=/nonexistent/flow/train.parquet"  # on no host


def queued_ids(inv) -> list[str]:
    """The ids in the cluster's queue (on its head since issue 30)."""
    from tui.jobs.queue_shared import SharedQueue
    from tui.transport.fleet import Fleet

    async def go() -> list[str]:
        async with Fleet(inv) as fleet:
            return [e.submission_id for e in await SharedQueue(inv, fleet).entries()]

    return asyncio.run(go())


@pytest.fixture(scope="module")
def ray_up(ray_shared2):
    return ray_shared2


@pytest.fixture
def spied(monkeypatch):
    """Each caller's outcome, recorded as it comes back from the flow (nothing replaced)."""
    import tui.commands.submit_output as submit_output
    import tui.screens.job_form.submit as job_form_submit
    import tui.supervisor.submitting as submitting
    from tui.jobs import flow

    seen: list[tuple[str, Outcome]] = []
    real = flow.outcome

    def spy(who: str):
        async def recorded(steps, on_step=None):
            done = await real(steps, on_step)
            seen.append((who, done))
            return done

        return recorded

    monkeypatch.setattr(submit_output, "outcome", spy("submit"))
    monkeypatch.setattr(job_form_submit, "outcome", spy("form"))
    monkeypatch.setattr(submitting, "outcome", spy("supervisor"))
    monkeypatch.setattr(flow, "outcome", spy("sweep"))  # `verl-tui sweep` imports it late
    return seen


def as_hydra_reads(entrypoint: str) -> list:
    """The entrypoint's words, each `key=value` with its value as Hydra's parser reads it."""
    from tui.jobs.hydra_values import read_value

    out: list = []
    for word in shlex.split(entrypoint):
        key, sep, raw = word.partition("=")
        out.append((key, read_value(raw)) if sep and not word.startswith("-") else word)
    return out


def _cli_submit(inv, profile, sets, *, sid, queue=False, print_config=True) -> int:
    from tui.commands.jobs import run_submit_profile

    return run_submit_profile(
        inv,
        profile,
        sets=sets,
        env={},
        working_dir=None,
        excludes=[],
        submission_id=sid,
        post_mortem=False,
        legacy_debug=False,
        dry_run=False,
        as_json=False,
        print_config=print_config,
        queue=queue,
    )


def _cli_sweep(inv, profile, grid, *, name, print_config=True) -> int:
    from tui.commands.sweep import run_sweep

    return run_sweep(
        inv,
        profile,
        grids=[grid],
        sets=[],
        name=name,
        priority=0,
        dry_run=False,
        as_json=False,
        print_config=print_config,
    )


async def _stop_flow_jobs(cluster) -> None:
    """Stop this test's jobs that Ray has not ended yet (what the test compares is recorded)."""
    client = await cluster.dashboard()
    for job in await client.list_jobs():
        sid = job.get("submission_id") or ""
        if sid.startswith("flow") and job.get("status") in ("PENDING", "RUNNING"):
            await client.stop_job(sid)


async def _cockpit(inv, profile, forms_done: list) -> None:
    """The form twice in one app: SAME submitted (print-config), then NO_DATA refused by the
    job preflight, the refusal kept on the submit bar until a field changes."""
    from textual.widgets import Checkbox, Input

    from tui.app import VerlTuiApp
    from tui.screens.job_form.screen import JobFormScreen

    app = VerlTuiApp(inv, interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:

        async def open_form(sets: list[str]) -> JobFormScreen:
            form = JobFormScreen(app.services, profile, initial_sets=sets)
            await app.push_screen(form, forms_done.append)
            ready = lambda: form.validated and form.fields and form.resources_from == "ray"  # noqa: E731
            await until(pilot, ready, 120, "the form checked on the cluster")
            return form

        form = await open_form([SAME])
        form.query_one("#toggle-print-config", Checkbox).value = True
        await until(pilot, lambda: form.validated and form.can_submit, 60, "print-config")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: bool(forms_done), 120, "the form submitted")
        await on_ray_cluster(inv, _stop_flow_jobs)

        form = await open_form([NO_DATA])
        await until(pilot, lambda: form.can_submit, 60, "a valid config")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: form.submission.refusal is not None, 120, "the refusal")
        summary = lambda: str(form.query_one("#form-summary").render())  # noqa: E731
        refused = "not submitted: the job preflight failed: "
        assert refused in summary() and "data.train_files" in summary(), summary()
        form.validate()  # a re-check of the same texts (Ray's nodes changed): it stays
        await pilot.pause(0.5)
        await until(pilot, lambda: form.validated, 30, "the re-check")
        assert refused in summary() and "data.train_files" in summary(), summary()
        field = form.fields["data.max_prompt_length"].query_one(Input)
        field.value = "128"  # the user changes something: the refusal goes
        await until(pilot, lambda: "preflight failed" not in summary(), 10, "the bar cleared")
        assert form.submission.refusal is None and app.screen is form  # nothing was sent


async def _supervisor(inv, profile, cluster) -> list:
    """The supervisor's submit of SAME, then one queue tick sending what submit --queue and
    sweep queued; then what Ray recorded of every job."""
    from tui.state import state_dir
    from tui.supervisor.duty import SupervisorContext
    from tui.supervisor.queue_duty import QueueDuty

    ctx = SupervisorContext(inv, cluster, JobHistory(inv.cluster), state_dir())
    spec = JobSpec(profile, sets=[SAME], print_config=True, submission_id="flow-sup")
    assert await ctx.submit(spec) == "flow-sup"
    await _stop_flow_jobs(cluster)
    duty, started, decisions = QueueDuty(), set(), []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while started != {"flow-queue", "flow-sweep-enflowsame"}:  # Ray's report may lag
        assert loop.time() < deadline, decisions
        decisions += await duty.tick(ctx)
        started = {d.submission_id for d in decisions if d.kind == "queue-start"}
        if started != {"flow-queue", "flow-sweep-enflowsame"}:
            await asyncio.sleep(0.5)  # the next tick (the supervisor's own pace is 5 s)
    await _stop_flow_jobs(cluster)
    client = await cluster.dashboard()
    ids = [r.submission_id for r in ctx.history.all()]
    return [await client.job_info(sid) for sid in ids if sid.startswith("flow")]


def test_five_callers_send_identical_jobs_and_refuse_alike(ray_up, tmp_path, monkeypatch, spied):
    _, hosts, env = ray_up
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    inv = load_inventory(hosts)
    path = tmp_path / "flow-same.yaml"
    path.write_text(PROFILE)
    profile = load_profile(path)

    # -- the same job, five ways ----------------------------------------------------------
    assert _cli_submit(inv, path, [SAME], sid="flow-cli") == 0
    asyncio.run(on_ray_cluster(inv, _stop_flow_jobs))
    assert _cli_submit(inv, path, [SAME], sid="flow-queue", queue=True) == 0
    assert _cli_sweep(inv, path, SAME, name="flow-sweep") == 0
    queued = queued_ids(inv)
    assert queued == ["flow-queue", "flow-sweep-enflowsame"]
    forms_done: list = []
    asyncio.run(_cockpit(inv, path, forms_done))
    jobs = asyncio.run(on_ray_cluster(inv, lambda c: _supervisor(inv, profile, c)))

    ids = sorted(j["submission_id"] for j in jobs)
    known = {"flow-cli", "flow-queue", "flow-sup", "flow-sweep-enflowsame"}
    (form_id,) = [i for i in ids if i not in known]
    assert forms_done == [form_id]  # submitted; the refused one stays open
    # Submission id rules: the id asked for, the sweep's readable one, else profile-time-hex.
    assert re.fullmatch(r"flow-same-\d{8}-\d{6}-[0-9a-f]{4}", form_id), form_id
    assert len(ids) == 5 and "flow-sweep-enflowsame" in ids, ids
    by_id = {j["submission_id"]: j for j in jobs}
    cli = by_id["flow-cli"]
    assert "trainer.experiment_name=flowsame" in cli["entrypoint"] and "--cfg" in cli["entrypoint"]
    assert cli["metadata"]["profile"] == "flow-same" and cli["metadata"]["config_hash"]
    for sid, job in by_id.items():
        meta = dict(job["metadata"])
        assert meta.pop("sweep", "flow-sweep") == "flow-sweep"  # a sweep's runs say whose
        assert as_hydra_reads(job["entrypoint"]) == as_hydra_reads(cli["entrypoint"]), sid
        if sid != form_id:  # the form writes its typed value quoted ('flowsame'), --set as given
            assert job["entrypoint"] == cli["entrypoint"], sid
        assert job["runtime_env"] == cli["runtime_env"], sid
        assert meta == cli["metadata"], sid
    records = [r for r in JobHistory(inv.cluster).all() if r.submission_id in ids]
    hashes = {r.config_hash for r in records}
    overrides = {repr(as_hydra_reads(shlex.join(r.overrides))) for r in records}
    assert len(records) == 5 and hashes == {cli["metadata"]["config_hash"]} and len(overrides) == 1

    # -- the same refusal, four ways (and the form's kept on its bar, in _cockpit) ----------
    flow_outcomes = len(spied)
    assert _cli_submit(inv, path, [NO_DATA], sid="flow-pf-cli", print_config=False) == 1
    assert _cli_submit(inv, path, [NO_DATA], sid="flow-pf-q", queue=True, print_config=False) == 1
    assert _cli_sweep(inv, path, NO_DATA, name="flow-pf", print_config=False) == 2
    assert all(not isinstance(o, Refused) for _, o in spied[:flow_outcomes] if _ != "form")
    refusals = [(who, o) for who, o in spied if isinstance(o, Refused)]
    assert sorted(who for who, _ in refusals) == ["form", "submit", "submit", "sweep"], spied

    def core(r: Refused):
        failing = [f for f in r.findings if f.status == "fail"]
        return r.kind, r.reason, r.detail, failing

    first = core(refusals[0][1])
    assert first[0] is Refusal.PREFLIGHT and first[1] == "the job preflight failed", first
    data = [f for f in first[3] if f.check == "path:data.train_files"]
    assert data and all("/nonexistent/flow/train.parquet" in f.finding for f in data), first
    for who, r in refusals:
        assert core(r) == first, who
    assert queued_ids(inv) == []  # none of them queued
    assert not any(r.submission_id.startswith("flow-pf") for r in JobHistory(inv.cluster).all())
    assert sum(isinstance(o, Submitted) for _, o in spied) == 5  # form, submit, sup, 2 queued
