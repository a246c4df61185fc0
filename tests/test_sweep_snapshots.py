"""SVG snapshot of the job form's sweep builder (two keys, 3 × 2 values: 6 runs)."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"


def test_sweep_builder(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        from textual.widgets import Input

        screen = pilot.app.screen
        await wait_for(pilot, lambda: screen.query_one("#sweep-values-1", Input).value != "")
        # Off the inputs: a focused input's cursor and scroll position vary between frames.
        screen.query_one("#sweep-queue").focus()
        await wait_for(pilot, lambda: getattr(pilot.app.focused, "id", None) == "sweep-queue")

    assert snap_compare(APPS / "sweep_builder_replay.py", terminal_size=(150, 48), run_before=ready)


async def test_form_sweep_builder_queues_all_or_nothing():
    """The job form (gsm8k preset, recorded cluster) → ctrl+g → a 2×2 grid → ctrl+s: four
    validated runs in the queue; a grid with an invalid value queues nothing and says which; a
    grid whose job preflight fails queues nothing, and the same grid again queues anyway. (The
    recorded cluster runs no remote program: the preflight's answer is given here; the
    preflight itself runs on real hosts in test_preflight.py.)"""
    from snapshot_apps.job_form_replay import PROFILE
    from snapshot_apps.replay import ScreenApp, wait_for
    from textual.widgets import Input

    from tui.jobs.queue import JobQueue
    from tui.jobs.rules import ClusterResources, NodeResources
    from tui.screens.job_form.screen import JobFormScreen
    from tui.screens.job_form.sweep_builder import SweepBuilderScreen

    def open_form(app):
        return JobFormScreen(app.services, PROFILE)

    from tui.cluster.doctor.findings import Finding

    preflights: list[list[str]] = []

    async def preflight(fleet, inv, runs, *, unasked):  # refused: the second run's data file
        preflights.append([run.label for run in runs])
        finding = Finding("path:data.train_files", "data", "fail", "node2", "no such file", "")
        return runs[1], [finding]

    app = ScreenApp(open_form, patches=[("tui.jobs.flow", "first_refused_preflight", preflight)])
    notes: list[str] = []
    async with app.run_test(size=(160, 46)) as pilot:
        form = pilot.app.screen
        await wait_for(pilot, lambda: form.validated and form.cluster_note is None, 60)
        # The recorded run was on CPU machines (Ray counted 0 GPUs): give the form the shape a
        # GPU cluster has, as Ray's answer would (2 nodes × 4 GPUs, 12 CPUs).
        form.resources = ClusterResources(
            [NodeResources("node1", 4, 12), NodeResources("node2", 4, 12)]
        )
        real_notify = pilot.app.notify
        # A toast's title (an error's: "sweep not queued") and its message, as one note.
        pilot.app.notify = lambda msg, **kw: (
            notes.append(f"{kw.get('title') or ''}: {msg}"),
            real_notify(msg, **kw),
        )

        async def grid(rows: dict[str, str]) -> None:
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, SweepBuilderScreen))
            for selector, value in rows.items():
                pilot.app.screen.query_one(selector, Input).value = value
            await pilot.pause(0.1)
            await pilot.press("ctrl+s")

        await grid(
            {
                "#sweep-name": "bad",
                "#sweep-key-0": "data.train_batch_size",
                "#sweep-values-0": "64,3",
            }
        )
        await wait_for(pilot, lambda: any("sweep not queued" in n for n in notes), 60)
        assert any("combination data.train_batch_size=3" in n for n in notes), notes
        assert JobQueue("grpo-demo").entries() == []
        assert pilot.app.screen is form  # still open, nothing lost

        lrbs = {
            "#sweep-name": "lrbs",
            "#sweep-key-0": "actor_rollout_ref.actor.optim.lr",
            "#sweep-values-0": "1e-6,2e-6",
            "#sweep-key-1": "data.train_batch_size",
            "#sweep-values-1": "64,128",
        }
        assert preflights == []  # an invalid sweep gets no preflight
        await grid(lrbs)
        await wait_for(pilot, lambda: any("job preflight failed" in n for n in notes), 60)
        refused = next(n for n in notes if "job preflight failed" in n)
        assert "lr=1e-6, data.train_batch_size=128" in refused and "node2: no such file" in refused
        assert JobQueue("grpo-demo").entries() == [] and pilot.app.screen is form
        await grid(lrbs)  # the same sweep again: queued without asking
        await wait_for(pilot, lambda: len(JobQueue("grpo-demo").entries()) == 4, 60)
        assert len(preflights) == 1 and any("without the job preflight" in n for n in notes)
        entries = JobQueue("grpo-demo").entries()
        assert [e.submission_id for e in entries] == [
            "lrbs-lr1e-6-tbs64",
            "lrbs-lr1e-6-tbs128",
            "lrbs-lr2e-6-tbs64",
            "lrbs-lr2e-6-tbs128",
        ]
        assert "data.train_batch_size=128" in entries[1].overrides
        assert all(e.group == "lrbs" and e.needs.nnodes >= 1 for e in entries)
        await wait_for(pilot, lambda: any("4 runs queued" in n for n in notes), 10)


async def test_form_queue_switch_queues_instead_of_submitting(monkeypatch):
    """The form's Queue switch: ctrl+s validates as for a submit (the live cluster asked
    again), then the job goes to the local queue, not to Ray."""
    from snapshot_apps.job_form_replay import PROFILE
    from snapshot_apps.replay import ScreenApp, wait_for
    from textual.widgets import Checkbox

    import tui.screens.job_form.submit as job_form
    from tui.jobs.queue import JobQueue
    from tui.jobs.rules import ClusterResources, NodeResources
    from tui.screens.job_form.screen import JobFormScreen

    gpus = ClusterResources([NodeResources("node1", 4, 12), NodeResources("node2", 4, 12)])
    asked: list[int] = []

    async def live(cluster, **_kw):  # Ray's answer on a GPU cluster (the recording had none)
        asked.append(1)
        return gpus

    monkeypatch.setattr(job_form, "live_resources", live)
    posted: list[str] = []
    app = ScreenApp(lambda app: JobFormScreen(app.services, PROFILE))
    async with app.run_test(size=(160, 46)) as pilot:
        form = pilot.app.screen
        await wait_for(pilot, lambda: form.validated and form.cluster_note is None, 60)
        form.resources = gpus
        monkeypatch.setattr(
            "tui.jobs.service.submit_and_record", lambda *a, **k: posted.append("sent")
        )
        form.query_one("#toggle-print-config", Checkbox).value = True  # no data needed
        form.query_one("#form-queue", Checkbox).value = True
        await pilot.pause(0.3)
        form.validate()
        await wait_for(pilot, lambda: form.can_submit, 60)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: len(JobQueue("grpo-demo").entries()) == 1, 60)
        (entry,) = JobQueue("grpo-demo").entries()
        assert entry.profile == "grpo-gsm8k-qwen2.5-0.5b" and entry.needs.gpus_per_node == 4
        assert "--cfg" in entry.entrypoint_argv and asked and not posted
        await wait_for(pilot, lambda: pilot.app.screen is not form, 10)  # the form closed
