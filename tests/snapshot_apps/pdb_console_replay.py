"""A legacy breakpoint's pdb console with the recorded session's banner and replies."""

from snapshot_apps.replay import ReplayPdb, ScreenApp, debug_data, replay_open_debug_connection

from tui.screens.pdb_console import PdbConsoleScreen

app = ScreenApp(
    lambda app: PdbConsoleScreen(app.ray, debug_data().breakpoints[0]),
    patches=[
        ("tui.screens.pdb_console", "open_debug_connection", replay_open_debug_connection),
        ("tui.screens.pdb_console", "PdbConsole", ReplayPdb),
    ],
)
