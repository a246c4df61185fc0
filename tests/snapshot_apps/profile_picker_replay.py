"""The profile picker over the repository's presets (profiles/)."""

from snapshot_apps.replay import REPO, ScreenApp

from tui.screens.profile_picker import ProfilePickerScreen

app = ScreenApp(lambda app: ProfilePickerScreen([REPO / "profiles"]))
