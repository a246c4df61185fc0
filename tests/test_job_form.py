"""The job form (issue 4): inline problems from verl's composed config against the live Ray
cluster, submit gated on them, a real `main_ppo --cfg job` run; drafts across app restarts;
add-a-key completion and "did you mean"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import test_jobs
from harness.pilot import until
from test_jobs import job_logs, wait_status
from textual.widgets import Button, Checkbox, Input, OptionList

ray_up = test_jobs.ray_up  # the module fixture: the shared two-node cluster (ray_shared2)

PRESET = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"


async def type_into(pilot, inp: Input, text: str) -> None:
    inp.focus()
    await pilot.pause()
    inp.value = ""
    await pilot.press(*text)


def _ready(form) -> bool:
    return form.validated and bool(form.fields)


async def test_form_inline_errors_gate_submit_and_runs_verl(ray_up, monkeypatch):
    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.jobs.history import JobHistory
    from tui.screens.job_form.screen import JobFormScreen
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.profile_picker import ProfilePickerScreen

    cluster, path, env = ray_up
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    monkeypatch.setenv("VERL_TUI_SUPERVISE", "0")  # the queued resubmission stays queued
    inv = load_inventory(path)
    app = VerlTuiApp(inv, interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen))
        await pilot.press("n")
        await until(
            pilot,
            lambda: isinstance(app.screen, ProfilePickerScreen) and bool(app.screen.entries),
            what="the profile list",
        )
        picker = app.screen
        index = next(i for i, e in enumerate(picker.entries) if e.path.resolve() == PRESET)
        picker.query_one(OptionList).highlighted = index
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobFormScreen))
        form = app.screen
        opened = await until(
            pilot,
            lambda: _ready(form) and form.resources is not None and form.validated,
            60,
            "form loaded and checked on the cluster",
        )
        print(f"\nform open → first check on the cluster: {opened:.2f} s")
        assert "2 Ray nodes × 4 GPUs" in str(form.query_one("#form-title").render())
        # What the cluster fills in is what the field shows, marked (verl's default is 8).
        gpus = form.fields["trainer.n_gpus_per_node"]
        assert gpus.text == "" and gpus.from_cluster == "4"
        assert gpus.query_one(Input).placeholder.startswith("4  (from cluster")
        assert "from cluster: 4" in str(gpus.query_one(".field-key").render())
        submit = form.query_one("#submit", Button)
        assert not submit.disabled, form.report.problems

        field = form.fields["data.train_batch_size"]
        await type_into(pilot, field.query_one(Input), "7")
        t0 = time.perf_counter()
        await until(pilot, lambda: "divisible" in field.problem_text, 10, "divisibility error")
        shown = time.perf_counter() - t0
        assert field.has_class("-error")
        assert "must be divisible by 4" in field.problem_text
        assert submit.disabled
        assert "error" in str(form.query_one("#form-summary").render())

        await type_into(pilot, field.query_one(Input), "256")
        t0 = time.perf_counter()
        await until(
            pilot, lambda: form.validated and not field.problem_text.strip(), 10, "error gone"
        )
        cleared = time.perf_counter() - t0
        assert not submit.disabled and not field.has_class("-error")
        print(
            f"keystroke → inline error {shown * 1000:.0f} ms, → cleared {cleared * 1000:.0f}"
            f" ms (debounce 300 ms); check_profile runs: "
            + ", ".join(f"{x * 1000:.0f}" for x in form.latencies)
            + " ms"
        )

        form.query_one("#toggle-print-config", Checkbox).value = True
        await pilot.pause(0.1)
        assert form.toggles.print_config
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 60, "back on Jobs")
        records = JobHistory(inv.cluster).all()
        rec = records[0]
        assert rec.profile == "grpo-gsm8k-qwen2.5-0.5b"
        assert "data.train_batch_size=256" in rec.overrides
        assert rec.profile_path == str(PRESET.resolve())
        await _resubmit_queued_and_cancel(app, pilot, rec.submission_id)
    sid = rec.submission_id
    job = wait_status(env, path, sid, {"SUCCEEDED", "FAILED"}, timeout=120)
    logs = job_logs(cluster, sid)
    assert job["status"] == "SUCCEEDED", logs[-3000:]
    assert "train_batch_size: 256" in logs
    assert "n_gpus_per_node: 4" in logs  # derived from the live cluster, not the profile


async def _resubmit_queued_and_cancel(app, pilot, sid: str) -> None:
    """Back on Jobs after a submit the cursor is on the new job; `e` resubmits it with the
    Queue switch on (ctrl+l) and the cursor goes to the queued entry; del + y cancels it."""
    from textual.widgets import DataTable

    from tui.jobs.queue_shared import cluster_queue
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.job_form.screen import JobFormScreen
    from tui.screens.jobs.queue import QUEUE_KEY

    jobs = app.screen
    table = jobs.query_one(DataTable)
    await until(pilot, lambda: jobs.cursor_key(table) == sid, 20, "the cursor on the new job")
    await pilot.press("e")
    await until(pilot, lambda: isinstance(app.screen, JobFormScreen), 10, "the resubmit form")
    form = app.screen
    await until(pilot, lambda: _ready(form) and form.resources is not None, 60, "checked")
    form.query_one("#toggle-print-config", Checkbox).value = True
    await pilot.press("ctrl+l")
    assert form.queue_wanted
    await until(pilot, lambda: form.validated and form.can_submit, 30, "submittable")
    await pilot.press("ctrl+s")
    await until(pilot, lambda: app.screen is jobs, 60, "back on Jobs")
    queue = cluster_queue(app.inventory, app.fleet)  # the cluster's, on its head
    (entry,) = await queue.entries()
    assert entry.submission_id != sid
    await until(
        pilot,
        lambda: jobs.cursor_key(table) == QUEUE_KEY + entry.submission_id,
        20,
        "the cursor on the queued resubmission",
    )
    await pilot.press("delete")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10, "cancel asks")
    await pilot.press("y")
    for _ in range(200):  # the queue is read over SSH: asked here, not in until's lambda
        if not await queue.entries():
            break
        await pilot.pause(0.1)
    assert not await queue.entries(), "the queued entry cancelled"


@pytest.fixture
def local_app(tmp_path, monkeypatch):
    """The cockpit on this machine (no Ray: the form checks without the cluster)."""
    from tui.app import VerlTuiApp
    from tui.config.hosts import local_inventory

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def make() -> VerlTuiApp:
        return VerlTuiApp(local_inventory(), interval=0.5)

    return make


async def _open_form(app, pilot, initial_sets=None):
    from tui.screens.job_form.screen import JobFormScreen

    form = JobFormScreen(app.services, PRESET, initial_sets=initial_sets)
    await app.push_screen(form)
    await until(
        pilot,
        lambda: (
            _ready(form) and form.cluster_note is not None and "asking" not in form.cluster_note
        ),
        60,
        "form loaded",
    )
    return form


async def test_draft_survives_an_app_restart_and_ctrl_t_discards(local_app):
    from tui.jobs.formstate import draft_path

    app = local_app()
    async with app.run_test(size=(160, 50)) as pilot:
        form = await _open_form(app, pilot)
        assert "Ray is not running (u starts it)" in form.cluster_note  # checked without Ray
        assert form.draft_note is None
        await type_into(
            pilot, form.fields["trainer.experiment_name"].query_one(Input), "from-draft"
        )
        await type_into(pilot, form.fields["data.train_batch_size"].query_one(Input), "12")
        path = draft_path(app.inventory.cluster, "grpo-gsm8k-qwen2.5-0.5b")
        # No pause for the debounce: leaving the app writes what is pending.
    assert path.is_file()

    app = local_app()
    async with app.run_test(size=(160, 50)) as pilot:
        form = await _open_form(app, pilot)
        assert form.fields["trainer.experiment_name"].text == "from-draft"
        assert form.fields["trainer.experiment_name"].query_one(Input).value == "from-draft"
        assert form.fields["data.train_batch_size"].text == "12"
        assert form.draft_note and form.draft_note.startswith("draft restored")
        await pilot.press("ctrl+t", "y")  # asks first; test_first_hour_ui checks the no
        await until(
            pilot,
            lambda: (
                form.validated
                and form.fields["trainer.experiment_name"].text == "qwen2.5-0.5b-grpo"
            ),
            10,
        )
        assert form.fields["data.train_batch_size"].text == "256"
        assert not path.exists()


async def test_add_key_completion_and_did_you_mean(local_app):
    from tui.widgets.jobform import AddKey

    app = local_app()
    async with app.run_test(size=(160, 50)) as pilot:
        form = await _open_form(app, pilot)
        add = form.query_one(AddKey)
        add.focus()
        await pilot.press(*"actor_rollout_ref.rollout.tempe")
        await until(
            pilot,
            lambda: add._suggestion == "actor_rollout_ref.rollout.temperature",
            5,
            "completion",
        )
        await pilot.press("right", "enter")  # accept the completion, add the row
        key = "actor_rollout_ref.rollout.temperature"
        await until(pilot, lambda: key in form.fields, 5)
        assert form.fields[key].text == ""  # a catalog key already on the form: focused

        bad = "actor_rollout_ref.rollout.temprature"
        add.focus()
        add.value = f"{bad}=0.7"
        await pilot.press("enter")
        await until(pilot, lambda: bad in form.fields, 5)
        row = form.fields[bad]
        await until(pilot, lambda: "did you mean" in row.problem_text, 10, "did you mean")
        assert "actor_rollout_ref.rollout.temperature" in row.problem_text
        assert row.has_class("-error") and form.query_one("#submit", Button).disabled

        # An unknown key added without a value is flagged at once (nothing to compose).
        add.focus()
        add.value = "trainer.total_epoch"
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (
                "trainer.total_epoch" in form.fields
                and "did you mean trainer.total_epochs"
                in form.fields["trainer.total_epoch"].problem_text
            ),
            10,
        )
        # Removing the bad rows clears the errors again.
        for k in (bad, "trainer.total_epoch"):
            form.fields[k].post_message(form.fields[k].Remove(form.fields[k]))
        await until(pilot, lambda: form.validated and form.error_count == 0, 10)
