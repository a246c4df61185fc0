"""The Doctor screen with the findings of a real check run on the recorded hosts."""

from snapshot_apps.replay import ScreenApp, replay_doctor

from tui.screens.doctor import DoctorScreen

app = ScreenApp(
    lambda app: DoctorScreen(app.fleet, app.inventory),
    patches=[("tui.screens.doctor", "run_doctor", replay_doctor)],
)
