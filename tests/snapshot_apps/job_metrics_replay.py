"""The same job's Metrics tab: the charts from verl's `step:N - key:value` lines."""

from snapshot_apps.replay import ScreenApp

from tui.screens.logs.job_logs import JobLogsScreen

app = ScreenApp(
    lambda app: JobLogsScreen(app.ray, "grpo-gsm8k-1122", metrics=True, total_steps=240)
)
