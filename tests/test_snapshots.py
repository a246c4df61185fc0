"""SVG snapshots of the real screens, fed by replayed agent lines (deterministic)."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"


def test_cluster_screen(snap_compare):
    assert snap_compare(APPS / "cluster_replay.py", terminal_size=(150, 48))


def test_cluster_screen_cursor_on_gpu_sorted_by_util(snap_compare):
    assert snap_compare(APPS / "cluster_replay.py", terminal_size=(150, 48), press=["j", "j", "s"])


def test_help_screen(snap_compare):
    assert snap_compare(
        APPS / "cluster_replay.py", terminal_size=(150, 48), press=["question_mark"]
    )


def test_cluster_footer_at_160_columns(snap_compare):
    # The footer must show the five screen keys 1-5 at a common terminal width.
    assert snap_compare(APPS / "cluster_replay.py", terminal_size=(160, 46))


# -- every other screen, each over recorded data (snapshot_apps/recorded, see record.py) -----

SIZE = (160, 46)


def test_jobs_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))

    assert snap_compare(APPS / "jobs_replay.py", terminal_size=SIZE, run_before=ready)


def _log_ready(pilot):
    from snapshot_apps.replay import wait_for

    return wait_for(pilot, lambda: getattr(pilot.app.screen, "status", None) is not None)


def test_job_log_screen(snap_compare):
    assert snap_compare(APPS / "job_log_replay.py", terminal_size=SIZE, run_before=_log_ready)


def test_job_metrics_screen(snap_compare):
    assert snap_compare(APPS / "job_metrics_replay.py", terminal_size=SIZE, run_before=_log_ready)


def test_job_form_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(
            pilot,
            lambda: (
                getattr(pilot.app.screen, "validated", False)
                and getattr(pilot.app.screen, "cluster_note", "x") is None
            ),
            60,
        )

    assert snap_compare(APPS / "job_form_replay.py", terminal_size=SIZE, run_before=ready)


def test_node_logs_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        screen = pilot.app.screen
        table = screen.query_one("DataTable")
        await wait_for(pilot, lambda: table.row_count > 0)
        table.move_cursor(row=table.get_row_index("node2\traylet.out"))
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.opened is not None)
        # Every recorded line in the pane (it may have a scrollbar only then), then a frame.
        from snapshot_apps.replay import load

        from tui.widgets.logview import LogPane

        want = len(load("node_logs.json")["text"].splitlines())
        pane = screen.query_one(LogPane)
        await wait_for(
            pilot, lambda: len(pane.store) >= want and pane.log_view.virtual_size.height >= want
        )
        await pilot.pause(0.5)

    assert snap_compare(APPS / "node_logs_replay.py", terminal_size=SIZE, run_before=ready)


def test_doctor_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: bool(getattr(pilot.app.screen, "findings", None)))

    assert snap_compare(APPS / "doctor_replay.py", terminal_size=SIZE, run_before=ready)


def test_checkpoints_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "index", None) is not None)

    assert snap_compare(APPS / "checkpoints_replay.py", terminal_size=SIZE, run_before=ready)


def test_checkpoint_picker(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "index", None) is not None)

    assert snap_compare(APPS / "ckpt_picker_replay.py", terminal_size=SIZE, run_before=ready)


def test_debugger_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))

    assert snap_compare(APPS / "debugger_replay.py", terminal_size=SIZE, run_before=ready)


def test_dap_session_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "state", "") == "paused")
        await pilot.press("e", *"secret", "space", "asterisk", "space", "2", "enter")
        await pilot.pause(0.3)

    assert snap_compare(APPS / "dap_session_replay.py", terminal_size=SIZE, run_before=ready)


def test_pdb_console_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "console", None) is not None)
        log = pilot.app.screen.transcript
        for line in ("p x", "where"):
            before = len(log.lines)
            await pilot.press(*[("space" if c == " " else c) for c in line], "enter")
            # its prompt line and its reply, however slow the machine
            await wait_for(pilot, lambda n=before: len(log.lines) >= n + 2)

    assert snap_compare(APPS / "pdb_console_replay.py", terminal_size=SIZE, run_before=ready)


def test_ray_progress_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "finished", False))

    assert snap_compare(APPS / "ray_progress_replay.py", terminal_size=SIZE, run_before=ready)


def test_profile_picker(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: bool(getattr(pilot.app.screen, "entries", None)))

    assert snap_compare(APPS / "profile_picker_replay.py", terminal_size=SIZE, run_before=ready)


def test_error_modal(snap_compare):
    assert snap_compare(APPS / "error_replay.py", terminal_size=(150, 48))


def test_confirm_modal(snap_compare):
    assert snap_compare(APPS / "confirm_replay.py", terminal_size=(150, 48))


def test_draft_busy_modal(snap_compare):
    assert snap_compare(APPS / "draft_busy_replay.py", terminal_size=(150, 48))


def test_command_palette(snap_compare):
    assert snap_compare(
        APPS / "cluster_replay.py", terminal_size=(150, 48), press=["ctrl+p", *"ray"]
    )


def test_rollouts_screen(snap_compare):
    from snapshot_apps.replay import wait_for

    async def ready(pilot):
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))

    assert snap_compare(APPS / "rollouts_replay.py", terminal_size=SIZE, run_before=ready)
