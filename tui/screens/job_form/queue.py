"""The job form's queue part: the "Queue" switch (submit waits in the queue until the GPUs are
free; the form's submit asks the flow for mode "queue") and sweeps (ctrl+g: a grid of values,
every combination validated, then all queued). Both go through the one submission flow
(tui/jobs/flow.py), as `verl-tui submit --queue` and `verl-tui sweep` do; FormSweep runs a
sweep and says its steps and outcome in the form's notifications."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.widgets import Checkbox

from tui.sanitize import markup

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.flow import Outcome, Step
    from tui.jobs.history import JobHistory
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.rules import ClusterResources
    from tui.jobs.sweep import Grid

Notify = Callable[..., Any]  # the form's notify (message, severity=…, timeout=…)


def queue_label(on: bool) -> str:
    return "Queue: on " if on else "Queue: off"


def queue_switch() -> Checkbox:
    box = Checkbox(markup(queue_label(False)), id="form-queue", compact=True)
    box.tooltip = "ctrl+l: wait in the local queue until the GPUs are free (priority 0)"
    return box


class FormSweep:
    """A form's sweeps: every combination through the one flow against the cluster the form
    just read, as `verl-tui sweep` runs it (all validated, each run's job preflight, then all
    queued, or none with the first invalid or refused combination named). A preflight refusal
    is remembered: ctrl+g again with the same grid queues anyway."""

    def __init__(
        self,
        cluster: RayCluster,
        history: JobHistory,
        notify: Notify,
        refuse: Callable[[str], None],
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.notify = notify  # progress and the outcome
        self.refuse = refuse  # why nothing was queued (the app's one error presenter)
        self.refused: tuple[str, ...] = ()  # the runs' config hashes a preflight refused
        self.runs = 0

    async def run(
        self,
        name: str,
        spec: JobSpec,
        grids: tuple[Grid, ...],
        resources: ClusterResources,
        *,
        profile_path: str,
        working_dir_bytes: int | None,
    ) -> str | None:
        """Queue the sweep; the first run's submission id when queued, None when refused (said
        in a notification)."""
        # The flow's names looked up when called: tests spy on tui.jobs.flow.outcome.
        from tui.jobs.flow import Request, Sweep, outcome, submission_flow

        request = Request(
            Sweep(spec, grids, name),
            mode="queue",
            asked_again=self.refused,
            profile_path=profile_path,
            working_dir_bytes=working_dir_bytes,
        )

        async def known() -> ClusterResources:  # just read from Ray by the form
            return resources

        self.notify(f"validating sweep {markup(name)}…", timeout=3)
        steps = submission_flow(
            self.cluster.inv, self.cluster, self.history, request, resources=known
        )
        return self._done(name, await outcome(steps, self._step))

    def _step(self, step: Step) -> None:
        from tui.jobs.flow import Checked, Checking, PreflightSkipped

        if isinstance(step, Checked):
            self.runs = len(step.subs)
        elif isinstance(step, Checking) and step.stage == "preflight":
            self.notify(f"job preflight of {int(self.runs)} runs…", timeout=3)
        elif isinstance(step, PreflightSkipped):
            self.refused = ()
            self.notify("queued without the job preflight (sweep asked for again)", timeout=6)

    def _done(self, name: str, done: Outcome) -> str | None:
        from tui.jobs.flow import Queued, Refusal, Refused

        if isinstance(done, Queued):
            first, last = done.placed[0], done.placed[-1]
            self.notify(
                f"sweep {markup(name)}: {len(done.placed)} runs queued "
                f"(positions {first.position:d}–{last.position:d})",
                timeout=8,
            )
            return first.sub.submission_id
        assert isinstance(done, Refused)
        if done.kind is Refusal.INVALID and done.per_run:
            why = f"{done.reason}: combination {done.run}: {done.detail}"
        elif done.kind is Refusal.PREFLIGHT:
            self.refused = done.config_hashes
            why = f"{done.text()} (ctrl+g with the same grid queues anyway)"
        else:
            why = done.detail or done.text()
        self.refuse(why)
        return None
