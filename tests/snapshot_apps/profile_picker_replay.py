"""The profile picker over the repository's presets (profiles/, copied to a fixed folder)."""

from snapshot_apps.replay import ScreenApp, fixed_presets

from tui.screens.profile_picker import ProfilePickerScreen

app = ScreenApp(lambda app: ProfilePickerScreen([fixed_presets()]))
