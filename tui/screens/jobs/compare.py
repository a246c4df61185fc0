"""The Jobs screen's compare part: space marks 2–8 jobs, c opens the compare screen over their
archived runs (runs the archive lacks or that had not ended are read from the head first), and
a job's details name its archived GPU use. A mixin, so the Jobs screen keeps only a few lines."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from textual import work
from textual.screen import Screen

from tui.archive.compare import MAX_RUNS, MIN_RUNS, config_diff, load_runs
from tui.archive.gpu_use import gpu_use_text
from tui.archive.store import ArchiveStore
from tui.sanitize import one_line
from tui.screens.error import report

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.history import JobHistory
    from tui.jobs.service import JobRow

MARK = "● "


class CompareMarks:
    """Mixed into JobsScreen (which has cluster, history, current, notify, app, _fill)."""

    cluster: RayCluster
    history: JobHistory
    marked: list[str]

    def mark_prefix(self, sid: str) -> str:
        return MARK if sid in self._marks() else ""

    def _marks(self) -> list[str]:
        if not hasattr(self, "marked"):
            self.marked = []
        return self.marked

    def action_mark(self) -> None:
        row: JobRow | None = self.current  # type: ignore[attr-defined]
        if row is None:
            return
        marks = self._marks()
        if row.submission_id in marks:
            marks.remove(row.submission_id)
        elif len(marks) >= MAX_RUNS:
            self.notify(f"at most {MAX_RUNS} runs at once", timeout=3)  # type: ignore[attr-defined]
            return
        else:
            marks.append(row.submission_id)
        self._fill()  # type: ignore[attr-defined]

    def action_compare(self) -> None:
        marks = self._marks()
        if len(marks) < MIN_RUNS:
            self.notify(  # type: ignore[attr-defined]
                f"mark {MIN_RUNS}–{MAX_RUNS} jobs with space first ({len(marks)} marked)",
                timeout=4,
            )
            return
        self.notify(f"comparing {len(marks)} runs…", timeout=2)  # type: ignore[attr-defined]
        self._open_compare(list(marks))

    @work(
        exclusive=True,
        group="jobs-compare",
        exit_on_error=False,
        description="Opening the comparison",
    )
    async def _open_compare(self, sids: list[str]) -> None:
        from tui.archive.follow import refresh_archive
        from tui.screens.compare import CompareScreen

        store = ArchiveStore(self.cluster.inv.cluster)
        problems = await refresh_archive(self.cluster, sids, store)
        runs, missing = await asyncio.to_thread(load_runs, store, sids, self.history)
        diff = await asyncio.to_thread(config_diff, runs)  # verl's base config: ~0.5 s
        notes = [*problems, *store.take_warnings()]
        if missing:
            notes.append("not archived: " + ", ".join(missing))
        if len(runs) < MIN_RUNS:
            why = "; ".join(notes) or "nothing to compare"
            report(cast(Screen, self), why, title="not compared")
            return
        self.app.push_screen(  # type: ignore[attr-defined]
            CompareScreen(runs, diff, note=one_line("; ".join(notes), 300))
        )

    def gpu_detail(self, sid: str) -> str | None:
        """The archived GPU use line for a job's details, or None."""
        store = ArchiveStore(self.cluster.inv.cluster, max_bytes=0)
        meta = store.meta(sid)
        return gpu_use_text(meta.get("gpu_use")) if meta else None
