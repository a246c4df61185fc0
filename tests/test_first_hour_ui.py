"""What a new user tripped on in the cockpit (issue 24), under Textual's Pilot with the real app
on this machine (local transport; no Ray runs here, so the form checks without the cluster):
the form names the keys with errors and takes the cursor to them; a field keeps its own editing
keys (ctrl+d, ctrl+k) and the draft is discarded only after a yes; the Queue switch is one key
away and says its state in words."""

from __future__ import annotations

from pathlib import Path

from test_job_form import _open_form, local_app, type_into, until
from textual.widgets import Checkbox, Input
from textual.widgets._footer import FooterKey

from tui.screens.confirm import ConfirmScreen

APPS = Path(__file__).parent / "snapshot_apps"

__all__ = ["local_app"]  # the fixture, shared with test_job_form

BATCH = "data.train_batch_size"
ROLLOUT_N = "actor_rollout_ref.rollout.n"


def _summary(form) -> str:
    return str(form.query_one("#form-summary").render())


def _focused_field(app) -> str | None:
    from tui.widgets.jobform import FormField

    node = app.focused
    while node is not None and not isinstance(node, FormField):
        node = node.parent
    return node.key if node is not None else None


async def test_errors_are_named_and_the_cursor_goes_to_them(local_app):
    app = local_app()
    notes: list[str] = []
    async with app.run_test(size=(160, 50)) as pilot:
        original = app.notify

        def notify(message, *a, **kw):
            notes.append(str(message))
            return original(message, *a, **kw)

        app.notify = notify  # type: ignore[method-assign]
        form = await _open_form(app, pilot)
        before = form.error_keys()  # none, unless a Ray on this machine lacks the GPUs
        await type_into(pilot, form.fields[BATCH].query_one(Input), "many")
        await type_into(pilot, form.fields[ROLLOUT_N].query_one(Input), "two")
        await until(
            pilot,
            lambda: form.validated and {BATCH, ROLLOUT_N} <= set(form.error_keys()),
            20,
            "two errors",
        )
        assert form.error_keys()[:2] == [BATCH, ROLLOUT_N], form.error_keys()  # form order
        # The submit bar names both keys, in the form's order, and the key that finds them.
        summary = _summary(form)
        assert f"{form.error_count} errors: {BATCH}, {ROLLOUT_N}" in summary, summary
        assert summary.index(BATCH) < summary.index(ROLLOUT_N), summary
        assert "ctrl+n next error" in summary

        # Refused: the message names the keys and the cursor lands on the first error.
        form.query_one("#toggle-print-config", Checkbox).focus()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(n.startswith("not submitted") for n in notes), 10)
        refusal = next(n for n in notes if n.startswith("not submitted"))
        assert BATCH in refusal and ROLLOUT_N in refusal, refusal
        assert "submit is off" not in refusal and "error(s)" not in refusal
        assert _focused_field(app) == BATCH
        assert isinstance(app.focused, Input)
        # ctrl+n / ctrl+b walk the errors (wrapping), wherever the cursor is.
        await pilot.press("ctrl+n")
        assert _focused_field(app) == ROLLOUT_N
        await pilot.press("ctrl+n")
        assert _focused_field(app) == BATCH  # wrapped
        await pilot.press("ctrl+b")
        assert _focused_field(app) == ROLLOUT_N
        assert form.fields[ROLLOUT_N].region.y < app.size.height  # scrolled into view

        # Fixed: the summary says ready and ctrl+n has nothing to go to.
        await type_into(pilot, form.fields[BATCH].query_one(Input), "256")
        await type_into(pilot, form.fields[ROLLOUT_N].query_one(Input), "5")
        await until(pilot, lambda: form.validated and form.error_keys() == before, 20, "fixed")
        if not before:
            assert "ready" in _summary(form)
            notes.clear()
            await pilot.press("ctrl+n")
            assert notes == ["no errors"]


async def test_fields_keep_their_editing_keys_queue_is_one_key_discard_asks(local_app):
    app = local_app()
    async with app.run_test(size=(160, 50)) as pilot:
        form = await _open_form(app, pilot)
        # The Queue switch: ctrl+l from inside a field, its state in words.
        box = form.query_one("#form-queue", Checkbox)
        assert str(box.label) == "Queue: off" and not form.queue_wanted
        form.fields[BATCH].focus_editor()  # from inside a field, far from the switch
        await pilot.press("ctrl+l")
        assert form.queue_wanted and str(box.label).strip() == "Queue: on"
        assert _focused_field(app) == BATCH  # the cursor stayed where it was
        await pilot.press("ctrl+l")
        assert not form.queue_wanted and str(box.label) == "Queue: off"
        # The footer fits 160 columns: every key it shows is whole.
        shown = [k for k in form.query(FooterKey) if k.region.width]
        assert {"Submit", "Next error", "Queue on/off"} <= {str(k.description) for k in shown}
        assert all(k.region.right <= 160 for k in shown), [(k.description, k.region) for k in shown]

        # A field's own editing keys.
        name = form.fields["trainer.experiment_name"]
        inp = name.query_one(Input)
        await type_into(pilot, inp, "abcdef")
        inp.cursor_position = 2
        await pilot.press("ctrl+d")  # delete the character right of the cursor
        assert inp.value == "abdef" and name.text == "abdef"
        await pilot.press("ctrl+k")  # delete to the end of the line
        assert inp.value == "ab"
        assert app.screen is form  # neither key left the form or opened anything
        await until(pilot, lambda: form.validated, 20, "checked")

        # The draft goes only after a yes; a no keeps every field.
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the question")
        await pilot.press("n")
        await until(pilot, lambda: app.screen is form, 5)
        assert name.text == "ab"
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the question")
        await pilot.press("y")
        await until(
            pilot,
            lambda: app.screen is form and form.fields["trainer.experiment_name"].text != "ab",
            10,
            "the profile's value back",
        )
        assert form.fields["trainer.experiment_name"].text == "qwen2.5-0.5b-grpo"


def test_form_binds_no_input_editing_key():
    """Every key an Input edits with stays the Input's: none is a form binding."""
    from textual.binding import Binding

    from tui.screens.job_form.screen import JobFormScreen

    bound = {
        k.strip()
        for b in JobFormScreen.BINDINGS
        for k in (b if isinstance(b, Binding) else Binding(*b)).key.split(",")
    }
    editing = {k.strip() for b in Input.BINDINGS for k in b.key.split(",")}
    assert {"ctrl+d", "ctrl+k", "ctrl+u", "ctrl+w"} <= editing
    assert not (bound & editing), bound & editing


# -- the Jobs screen: movement keys, filter, sort, footer -------------------------------------


def _replay_app(name: str):
    import runpy

    return runpy.run_path(str(APPS / name))["app"]


def _row_keys(table) -> list[str]:
    from textual.coordinate import Coordinate

    return [
        table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value for i in range(table.row_count)
    ]


async def test_jobs_screen_keys_move_filter_and_sort():
    """Over the recorded run healed twice (three jobs: FAILED, FAILED, RUNNING)."""
    from snapshot_apps.replay import wait_for
    from textual.widgets import DataTable

    from tui.screens.jobs.screen import JobsScreen

    app = _replay_app("jobs_heal_replay.py")
    async with app.run_test(size=(160, 46)) as pilot:
        await wait_for(pilot, lambda: getattr(app.screen, "loaded", False))
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        table = jobs.query_one(DataTable)
        rows = _row_keys(table)
        assert len(rows) == 3, rows
        sid = min(rows, key=len)  # the first run; its retries are SID-retry1, SID-retry2
        for key, row in (("G", 2), ("g", 0), ("j", 1), ("k", 0), ("end", 2), ("home", 0)):
            await pilot.press(key)
            assert table.cursor_row == row, key
        # o: by status (running first), then by name; O reverses.
        await pilot.press("o")
        assert jobs.sort_key == "status" and _row_keys(table)[0] == f"{sid}-retry2"
        await pilot.press("o")
        assert jobs.sort_key == "name" and _row_keys(table) == sorted(rows)
        await pilot.press("O")
        assert _row_keys(table) == sorted(rows, reverse=True)
        assert "sorted by name (reversed)" in str(jobs.query_one("#jobs-title").render())
        # /: as on the Cluster screen; enter keeps the filter, esc clears it, esc again leaves.
        await pilot.press("slash", *"retry2", "enter")
        assert _row_keys(table) == [f"{sid}-retry2"]
        assert "1 shown" in str(jobs.query_one("#jobs-title").render())
        await pilot.press("slash", "ctrl+u", *"failed", "enter")
        assert set(_row_keys(table)) == {sid, f"{sid}-retry1"}
        await pilot.press("escape")
        assert len(_row_keys(table)) == 3 and app.screen is jobs
        # The footer fits: every key it shows is whole inside 160 columns.
        shown = [k for k in jobs.query(FooterKey) if k.region.width]
        assert {str(k.description) for k in shown} >= {"Log", "Filter", "Sort", "Stop"}
        assert all(k.region.right <= 160 for k in shown), [(k.description, k.region) for k in shown]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is not jobs)


# -- the compare screen: names that differ only at the end stay apart -------------------------


async def test_compare_headers_keep_the_part_that_differs():
    from snapshot_apps.compare_replay import fixed_run
    from snapshot_apps.replay import ScreenApp
    from textual.widgets import DataTable

    from tui.archive.compare import config_diff
    from tui.screens.compare import CompareScreen
    from tui.widgets.compare import run_labels

    stem = "grpo-gsm8k-qwen2.5-0.5b-20261127-101500"
    runs = [
        fixed_run(f"{stem}-1", 0.10, "1e-6", None, 10),
        fixed_run(f"{stem}-2", 0.20, "3e-6", None, 10),
        fixed_run(f"{stem}-3", 0.15, "1e-6", "128", 8),
    ]
    app = ScreenApp(lambda app: CompareScreen(runs, config_diff(runs, defaults={})))
    async with app.run_test(size=(160, 46)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        diff = next(t for t in screen.query(DataTable) if t.columns and len(t.columns) == 4)
        headers = [str(c.label) for c in diff.columns.values()][1:]
        assert len(set(headers)) == 3, headers
        assert [h[-2:] for h in headers] == ["-1", "-2", "-3"], headers
        assert all(len(h) <= 24 and "…" in h and h.startswith("grpo") for h in headers)
        legend = screen.charts[0].border_subtitle or ""
        assert all(h in legend for h in headers), legend
    # Differing in the middle: the window moves to where they differ.
    mid = run_labels([f"{'a' * 30}X{'b' * 30}", f"{'a' * 30}Y{'b' * 30}"])
    assert len(set(mid)) == 2 and "X" in mid[0] and "Y" in mid[1]
    assert run_labels(["short", "also-short"]) == ["short", "also-short"]


# -- local mode without Ray: `u` is not offered, and says the pinned fix ----------------------


async def test_local_mode_without_ray_does_not_offer_u(tmp_path, monkeypatch):
    """A real interpreter without Ray: this venv's Python run isolated (`-I -S`, as
    test_no_verl builds one), as the local host's python."""
    import sys

    from textual.content import Content

    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory, local_inventory
    from tui.palette import commands_for

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_TUI_SUPERVISE", "0")
    bare = tmp_path / "python-without-ray"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    path = tmp_path / "hosts.yaml"
    path.write_text(f"hosts:\n  - name: localhost\n    transport: local\n    python: {bare}\n")

    def offered(app) -> bool:
        return any(b.binding.action == "app.ray_up" for b in app.screen.active_bindings.values())

    app = VerlTuiApp(load_inventory(path), interval=1.0)
    notes: list[str] = []
    async with app.run_test(size=(160, 46)) as pilot:
        original = app.notify

        def notify(message, *a, **kw):
            notes.append(str(message))
            return original(message, *a, **kw)

        app.notify = notify  # type: ignore[method-assign]
        await until(pilot, lambda: app.ray_missing is not None, 30, "the interpreter asked")
        assert not offered(app)  # not in the footer
        names = {c.name for c in commands_for(app.screen)}  # nor in the palette
        assert "Ray up" not in names and "Ray up: not installed here (the fix)" in names
        await pilot.press("u")
        await until(pilot, lambda: bool(notes), 5, "the refusal")
        (line,) = (Content.from_markup(n).plain for n in notes)  # as the toast shows it
        assert str(bare) in line and "-m pip install 'ray[default]==2.60.0'" in line, line
        assert "[ray] extra" in line and "\n" not in line
        assert not app.query("RayProgressScreen")  # nothing was started

    # This venv's own Python has Ray: `u` is offered (not pressed: it would start Ray).
    app = VerlTuiApp(local_inventory(), interval=1.0)
    async with app.run_test(size=(160, 46)) as pilot:
        await until(pilot, lambda: app.local_ray_asked, 30, "the interpreter asked")
        assert app.ray_missing is None and offered(app)


async def test_toasts_about_the_screen_left_behind_go_with_it():
    """A screen change drops the information toasts raised more than FRESH_TOAST_S before it
    (they would cover the new screen's details pane); fresh ones and warnings stay."""
    from snapshot_apps.replay import wait_for

    from tui.app import FRESH_TOAST_S
    from tui.screens.jobs.screen import JobsScreen

    app = _replay_app("cluster_replay.py")
    async with app.run_test(size=(160, 46)) as pilot:
        await pilot.pause()
        app.notify("about the cluster screen", timeout=60)
        app.notify("a warning", severity="warning", timeout=60)
        await wait_for(pilot, lambda: len(app._notifications) == 2)
        for note in app._notifications:  # raised a while ago
            note.raised_at -= FRESH_TOAST_S + 1
        app.notify("just raised", timeout=60)
        await wait_for(pilot, lambda: len(app._notifications) == 3)
        await pilot.press("2")
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen))
        left = sorted(n.message for n in app._notifications)
        assert left == ["a warning", "just raised"], left


# -- Ray's bring-up view: its last line says the next key, and that key works from it ----------


def _status(gpus: float, cpus: float):
    from tui.cluster.ray_cluster import ClusterStatus, NodeInfo

    nodes = [
        NodeInfo(f"node{i}", f"10.0.0.{i}", True, i == 1, gpus, cpus, 10**9, None)
        for i in (1, 2, 3)
    ]
    return ClusterStatus(3, nodes, "2.60.0", "3.11.7", None, [])


def test_bring_up_outcome_says_what_ray_offers_and_the_next_key():
    from tui.screens.ray_progress import ray_up_outcome

    line = ray_up_outcome(_status(1, 3))
    assert line.startswith("3 nodes alive, Ray offers 3 GPUs, 9 CPUs")
    assert "2 Jobs, then n a job from a preset" in line and "num_gpus" not in line
    # No GPU: said here, with the hosts.yaml key, before a form refuses the job for it.
    bare = ray_up_outcome(_status(0, 2))
    assert "Ray offers 0 GPUs, 6 CPUs" in bare and "num_gpus: under each host" in bare


async def test_two_goes_from_the_bring_up_view_to_jobs(local_app):
    """The view is modal (it takes the app's keys), yet the 2 its outcome names works."""
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.ray_progress import RayProgressScreen, ray_up_outcome

    app = local_app()
    async with app.run_test(size=(120, 40)) as pilot:
        view = RayProgressScreen("Ray up — local")
        await app.push_screen(view)
        view.finish(True, ray_up_outcome(_status(1, 3)))
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10, "the Jobs screen")
        assert view not in app.screen_stack
