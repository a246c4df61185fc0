"""SVG snapshots of the real screens, fed by replayed agent lines (deterministic)."""

from __future__ import annotations

from pathlib import Path

APPS = Path(__file__).parent / "snapshot_apps"


def test_cluster_screen(snap_compare):
    assert snap_compare(APPS / "cluster_replay.py", terminal_size=(150, 48))


def test_cluster_screen_cursor_on_gpu_sorted_by_util(snap_compare):
    assert snap_compare(APPS / "cluster_replay.py", terminal_size=(150, 48),
                        press=["j", "j", "s"])


def test_help_screen(snap_compare):
    assert snap_compare(APPS / "cluster_replay.py", terminal_size=(150, 48),
                        press=["question_mark"])
