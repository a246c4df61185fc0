"""A job's log (the recorded demo job: verl's console metric lines, then CUDA OOM + its hint)."""

from snapshot_apps.replay import ScreenApp

from tui.screens.logs.job_logs import JobLogsScreen

app = ScreenApp(lambda app: JobLogsScreen(app.ray, "grpo-gsm8k-1122", metrics=False))
