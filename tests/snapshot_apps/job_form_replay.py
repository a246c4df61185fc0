"""The job form for the gsm8k preset, checked against the recorded cluster (its Ray nodes)."""

from snapshot_apps.replay import ScreenApp, fixed_presets

from tui.screens.job_form.screen import JobFormScreen

PROFILE = fixed_presets() / "grpo-gsm8k-qwen2.5-0.5b.yaml"
app = ScreenApp(lambda app: JobFormScreen(app.services, PROFILE))
