"""The Debugger screen: a post-mortem worker and a legacy breakpoint of the recorded run."""

from snapshot_apps.replay import ScreenApp, replay_debug_targets

from tui.screens.debugger import DebuggerScreen

app = ScreenApp(
    lambda app: DebuggerScreen(app.ray),
    patches=[("tui.screens.debugger", "debug_targets", replay_debug_targets)],
)
