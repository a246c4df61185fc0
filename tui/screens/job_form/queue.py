"""The job form's queue part: the "Queue" switch (submit waits in the local queue until the GPUs
are free; the form's submit asks the flow for mode "queue") and the sweep builder (ctrl+g: a
grid of values, every combination validated, then all queued). A part of JobFormScreen; both
go through the one submission flow (tui/jobs/flow.py), as `verl-tui submit --queue` and
`verl-tui sweep` do, and only render its steps and outcome here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.screen import Screen
from textual.widgets import Checkbox

from tui.config.yamlfile import ConfigError
from tui.sanitize import markup
from tui.screens.error import ReportsWorkerFailures
from tui.screens.job_form.sweep_builder import SweepBuilderScreen, SweepRequest

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.flow import Outcome, Step
    from tui.jobs.formstate import DraftSaver
    from tui.jobs.history import JobHistory
    from tui.jobs.profiles import Profile
    from tui.jobs.rules import ClusterResources
    from tui.jobs.validate import Report
    from tui.widgets.jobform import FormField


def queue_label(on: bool) -> str:
    return "Queue: on " if on else "Queue: off"


class FormQueue(ReportsWorkerFailures, Screen[str | None]):
    """JobFormScreen's queue and sweep part (a base class: the form's state is the screen's)."""

    # ctrl+g (action_sweep) is bound in JobFormScreen.BINDINGS, after Submit in the footer.
    _sweep_refused: tuple[str, ...] = ()  # the runs' config hashes a preflight refused
    _sweep_runs = 0

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
        def empty_unknown(self) -> list[str]: ...
        def _secret_values(self) -> dict[str, str] | None: ...
        def spec_of(self, *args: Any) -> Any: ...
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
        """Every combination through the one submission flow (tui/jobs/flow.py) against the
        live cluster, as `verl-tui sweep` runs it: all validated, each run's job preflight,
        then all queued (or none, with the first invalid or refused combination named)."""
        from tui.jobs.flow import Request, Sweep, outcome, submission_flow
        from tui.jobs.sweep import parse_grid

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
        texts, toggles, unknown = self.texts(), self.toggles, self.empty_unknown()
        try:
            grids = tuple(parse_grid(g, "sweep") for g in req.grids)
            spec, local = await asyncio.to_thread(self.spec_of, texts, toggles, unknown, env)
        except (ConfigError, ValueError) as exc:
            self.notify(f"sweep not queued: {markup(exc)}", severity="error", timeout=8)
            return
        if local:
            key, why = next(iter(local.items()))
            self.notify(f"sweep not queued: {markup(key)}: {markup(why)}", severity="error")
            return
        request = Request(
            Sweep(spec, grids, req.name),
            mode="queue",
            asked_again=self._sweep_refused,
            profile_path=str(self.profile_path.resolve()),
            working_dir_bytes=self.wd_bytes,
        )
        resources = self.resources

        async def known() -> ClusterResources:  # just read from Ray by the form
            return resources

        self.notify(f"validating sweep {markup(req.name)}…", timeout=3)
        steps = submission_flow(
            self.cluster.inv, self.cluster, self.history, request, resources=known
        )
        done = await outcome(steps, self._sweep_step)
        self._sweep_done(req.name, done)

    def _sweep_step(self, step: Step) -> None:
        from tui.jobs.flow import Checked, Checking, PreflightSkipped

        if isinstance(step, Checked):
            self._sweep_runs = len(step.subs)
        elif isinstance(step, Checking) and step.stage == "preflight":
            self.notify(f"job preflight of {int(self._sweep_runs)} runs…", timeout=3)
        elif isinstance(step, PreflightSkipped):
            self._sweep_refused = ()
            self.notify("queued without the job preflight (sweep asked for again)", timeout=6)

    def _sweep_done(self, name: str, done: Outcome) -> None:
        from tui.jobs.flow import Queued, Refusal, Refused

        if isinstance(done, Queued):
            first, last = done.placed[0], done.placed[-1]
            self.notify(
                f"sweep {markup(name)}: {len(done.placed)} runs queued "
                f"(positions {first.position:d}–{last.position:d})",
                timeout=8,
            )
            self.dismiss(first.sub.submission_id)
            return
        assert isinstance(done, Refused)
        if done.kind is Refusal.INVALID and done.per_run:
            what = f" ({done.reason}): combination {done.run}: {done.detail}"
        elif done.kind is Refusal.PREFLIGHT:
            self._sweep_refused = done.config_hashes
            what = f": {done.text()} (ctrl+g with the same grid queues anyway)"
        else:
            what = f": {done.detail or done.text()}"
        self.notify(f"sweep not queued{markup(what)}", severity="error", timeout=15)
