"""The job form's queue part: the "Queue" switch (submit waits in the local queue until the GPUs
are free) and the sweep builder (ctrl+g: a grid of values, every combination validated, then
all queued). A part of JobFormScreen; the checks are the pipeline's (tui/jobs/pipeline.py,
tui/jobs/sweep.py), as for `verl-tui submit --queue` and `verl-tui sweep`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.screen import Screen
from textual.widgets import Checkbox

from tui.config.yamlfile import ConfigError
from tui.jobs.queue import JobQueue, Needs, QueueError, entry_for
from tui.sanitize import markup
from tui.screens.error import ReportsWorkerFailures
from tui.screens.sweep_builder import SweepBuilderScreen, SweepRequest

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.formstate import DraftSaver
    from tui.jobs.history import JobHistory
    from tui.jobs.profiles import Profile
    from tui.jobs.rules import ClusterResources
    from tui.jobs.submit import Submission
    from tui.jobs.validate import Report
    from tui.widgets.jobform import FormField


def queue_label(on: bool) -> str:
    return "Queue: on " if on else "Queue: off"


class FormQueue(ReportsWorkerFailures, Screen[str | None]):
    """JobFormScreen's queue and sweep part (a base class: the form's state is the screen's)."""

    # ctrl+g (action_sweep) is bound in JobFormScreen.BINDINGS, after Submit in the footer.
    _sweep_refused: tuple[str, ...] | None = None  # the runs' config hashes a preflight refused

    if TYPE_CHECKING:  # the screen's, used here
        cluster: RayCluster
        history: JobHistory
        profile: Profile | None
        profile_path: Path
        report: Report | None
        resources: ClusterResources | None
        resources_from: str | None
        fields: dict[str, FormField]
        drafts: DraftSaver | None
        wd_bytes: int | None

        def texts(self) -> dict[str, str]: ...
        def _empty_unknown(self) -> list[str]: ...
        def _secret_values(self) -> dict[str, str] | None: ...
        def _spec(self, *args: Any) -> Any: ...
        @property
        def toggles(self) -> Any: ...

    def queue_switch(self) -> Checkbox:
        box = Checkbox(markup(queue_label(False)), id="form-queue", compact=True)
        box.tooltip = "ctrl+l: wait in the local queue until the GPUs are free (priority 0)"
        return box

    def show_queue_state(self) -> None:
        """The switch says on or off in words (its mark alone is only a colour)."""
        box = self.query_one("#form-queue", Checkbox)
        box.label = markup(queue_label(box.value))

    def action_toggle_queue(self) -> None:
        """ctrl+l from any field: the switch is last in the tab order, behind ~45 fields."""
        box = self.query_one("#form-queue", Checkbox)
        box.value = not box.value  # its Changed message updates the label
        self.notify(
            "Queue on: submit waits in the local queue for free GPUs"
            if box.value
            else "Queue off: submit sends the job to Ray now",
            timeout=3,
        )

    @property
    def queue_wanted(self) -> bool:
        try:
            return self.query_one("#form-queue", Checkbox).value
        except Exception:  # not built yet
            return False

    def _taken(self, sid: str) -> bool:
        return self.history.get(sid) is not None

    async def enqueue(self, sub: Submission) -> bool:
        """With the switch on: `sub` (just validated) goes to the queue, not to Ray; True then."""
        if not self.queue_wanted:
            return False
        config = self.report.config if self.report is not None else None
        entry = entry_for(
            sub,
            self.cluster.inv,
            needs=Needs.from_config(config),
            profile_path=str(self.profile_path.resolve()),
        )
        queue = JobQueue(self.cluster.inv.cluster)
        try:
            pos = await asyncio.to_thread(queue.add, entry, taken=self._taken)
        except QueueError as exc:
            self.notify(f"not queued: {markup(exc)}", severity="error", timeout=8)
            return True
        if self.drafts is not None:
            await asyncio.to_thread(self.drafts.discard)
        self.notify(
            f"queued {markup(sub.submission_id)} at position {pos:d} "
            f"(needs {markup(entry.needs.describe())})",
            timeout=6,
        )
        self.dismiss(sub.submission_id)
        return True

    # -- the sweep builder -----------------------------------------------------------------

    def action_sweep(self) -> None:
        if self.profile is None:
            self.notify("still loading", timeout=2)
            return
        keys = [k for k in self.fields if self.fields[k].text][:3]

        def done(req: SweepRequest | None) -> None:
            if req is not None:
                self.run_sweep(req)

        self.app.push_screen(SweepBuilderScreen(self.profile.name, keys), done)

    @work(exclusive=True, group="form-sweep", exit_on_error=False)
    async def run_sweep(self, req: SweepRequest) -> None:
        """Every combination through the pipeline against the live cluster, then all queued
        (or none, with the first invalid combination named)."""
        from tui.jobs.sweep import first_failing_preflight, parse_grid, plan_sweep, queue_sweep

        if self.resources_from != "ray" or self.resources is None:
            self.notify(
                "sweeps are checked against the live cluster: bring Ray up first (u on Cluster)",
                severity="error",
                timeout=8,
            )
            return
        env = self._secret_values()
        if env is None:
            return
        queue = JobQueue(self.cluster.inv.cluster)
        texts, toggles, unknown = self.texts(), self.toggles, self._empty_unknown()
        queued = {e.submission_id for e in queue.entries()}

        def taken(sid: str) -> bool:
            return sid in queued or self._taken(sid)

        def plan() -> Any:
            spec, local = self._spec(texts, toggles, unknown, env)
            if local:
                key, why = next(iter(local.items()))
                raise ConfigError(f"{key}: {why}")
            grids = [parse_grid(g, "sweep") for g in req.grids]
            return plan_sweep(
                self.cluster.inv,
                spec,
                grids,
                name=req.name,
                resources=self.resources,
                taken=taken,
                working_dir_bytes=self.wd_bytes,
            )

        self.notify(f"validating sweep {markup(req.name)}…", timeout=3)
        try:
            result = await asyncio.to_thread(plan)
        except (ConfigError, ValueError) as exc:
            self.notify(f"sweep not queued: {markup(exc)}", severity="error", timeout=8)
            return
        if not result.ok:
            self.notify(
                f"sweep not queued ({len(result.invalid)} of {len(result.runs)} invalid): "
                f"{markup(result.first_error())}",
                severity="error",
                timeout=12,
            )
            return
        # The job preflight of every run, as `verl-tui sweep` runs it; the same sweep asked for
        # again is queued anyway (the form's --skip-preflight, as for submit).
        again = tuple(sub.config_hash for sub in result.subs)
        if self._sweep_refused == again:
            self._sweep_refused = None
            self.notify("queued without the job preflight (sweep asked for again)", timeout=6)
        else:
            self.notify(f"job preflight of {len(result.runs)} runs…", timeout=3)
            refused = await first_failing_preflight(self.cluster.fleet, self.cluster.inv, result)
            if refused is not None:
                run, findings = refused
                self._sweep_refused = again
                bad = next(f for f in findings if f.status == "fail")
                where = f"{bad.host}: " if bad.host else ""
                self.notify(
                    f"sweep not queued: combination {markup(run.label)}: the job preflight "
                    f"failed: {markup(where + bad.finding)} (ctrl+g with the same grid queues "
                    "anyway)",
                    severity="error",
                    timeout=15,
                )
                return
        try:
            placed = await asyncio.to_thread(
                queue_sweep,
                self.cluster.inv,
                result,
                queue,
                profile_path=str(self.profile_path.resolve()),
                taken=self._taken,
            )
        except QueueError as exc:
            self.notify(f"sweep not queued: {markup(exc)}", severity="error", timeout=8)
            return
        self.notify(
            f"sweep {markup(req.name)}: {len(placed)} runs queued "
            f"(positions {placed[0][1]:d}–{placed[-1][1]:d})",
            timeout=8,
        )
        self.dismiss(placed[0][0].submission_id)
