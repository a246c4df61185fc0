"""A post-mortem DAP session with the recorded worker: exception, stack, source, variables."""

from snapshot_apps.replay import ReplayDap, ScreenApp, debug_data, replay_open_debug_connection

from tui.screens.dap_session import DapSessionScreen

app = ScreenApp(
    lambda app: DapSessionScreen(app.ray, debug_data().paused[0]),
    patches=[
        ("tui.screens.dap_session", "open_debug_connection", replay_open_debug_connection),
        ("tui.screens.dap_session", "DapClient", ReplayDap),
    ],
)
