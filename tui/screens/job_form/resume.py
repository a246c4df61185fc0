"""The job form's resume-from-a-checkpoint picker (ctrl+o): the checkpoints under
trainer.default_local_dir, and the keys that resume from the one picked. A part of
JobFormScreen."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.screen import Screen

from tui.jobs.validate import cluster_shape
from tui.sanitize import markup
from tui.screens.error import ReportsWorkerFailures
from tui.widgets.jobform import AddKey

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster
    from tui.jobs.profiles import Profile
    from tui.jobs.rules import ClusterResources
    from tui.widgets.jobform import FormField


class FormResume(ReportsWorkerFailures, Screen[str | None]):
    """JobFormScreen's resume part (a base class: the form's state is the screen's)."""

    if TYPE_CHECKING:  # the screen's, used here
        cluster: RayCluster
        profile: Profile | None
        resources: ClusterResources | None
        fields: dict[str, FormField]

    def _int_text(self, key: str) -> int | None:
        f = self.fields.get(key)
        text = f.text.strip() if f is not None else ""
        return int(text) if text.isdigit() else None

    def action_resume_from(self) -> None:
        """Pick a complete checkpoint under trainer.default_local_dir; sets resume_mode and
        resume_from_path, and warns when its world size is not this job's."""
        from tui.ckpt.resume import resume_values, world_size_warning
        from tui.screens.ckpt_picker import CheckpointPickerScreen

        f = self.fields.get("trainer.default_local_dir")
        root = (f.text if f is not None else "").strip().strip("'\"")
        if not root and self.profile is not None:
            root = str(self.profile.overrides.get("trainer.default_local_dir", ""))
        if not root.startswith("/"):
            self.notify(
                "set trainer.default_local_dir to an absolute folder first: that is "
                "where the checkpoints are",
                severity="warning",
                timeout=6,
            )
            return
        nnodes, per_node = cluster_shape(self.resources) if self.resources is not None else (1, 1)
        nnodes = self._int_text("trainer.nnodes") or nnodes
        per_node = self._int_text("trainer.n_gpus_per_node") or per_node

        def picked(step: Any) -> None:
            if step is None:
                return
            path = f"{root.rstrip('/')}/global_step_{step.step}"
            for key, text in resume_values(path).items():
                self.post_message(AddKey.Add(key, text))
            warn = world_size_warning(step.world_size, nnodes, per_node)
            self.notify(
                markup(warn or f"resuming from global_step_{step.step}"),
                severity="warning" if warn else "information",
                timeout=10,
            )

        self.app.push_screen(
            CheckpointPickerScreen(
                self.cluster.fleet, self.cluster.inv, root, nnodes=nnodes, gpus_per_node=per_node
            ),
            picked,
        )
