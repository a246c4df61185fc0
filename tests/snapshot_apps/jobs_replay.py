"""The Jobs screen over the recorded run's Jobs API answers and job history."""

from snapshot_apps.replay import ScreenApp

from tui.screens.jobs.screen import JobsScreen

app = ScreenApp(lambda app: JobsScreen(app.services))
