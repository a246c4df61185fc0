"""The job form's resume picker over the same recorded checkpoint scans."""

from snapshot_apps.replay import ScreenApp, load

from tui.screens.ckpt_picker import CheckpointPickerScreen

app = ScreenApp(
    lambda app: CheckpointPickerScreen(
        app.fleet, app.inventory, load("checkpoints.json")["root"], nnodes=2, gpus_per_node=1
    )
)
