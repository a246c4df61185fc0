"""Checkpoints: verl's real FSDP checkpoint as both recorded hosts' scans saw it (step 60 on
node1 whole, step 120 spread over node1 and node2)."""

from snapshot_apps.replay import ScreenApp, load

from tui.screens.checkpoints import CheckpointsScreen

app = ScreenApp(
    lambda app: CheckpointsScreen(app.fleet, app.inventory, load("checkpoints.json")["root"])
)
