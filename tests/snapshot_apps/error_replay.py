"""The error modal over the replayed Cluster screen, with a failure worded as the cockpit
words one (a background action's failure, never a traceback)."""

from snapshot_apps.cluster_replay import ReplayApp

from tui.screens.error import ErrorScreen


class ErrorApp(ReplayApp):
    def start_telemetry(self) -> None:
        super().start_telemetry()
        self.push_screen(
            ErrorScreen(
                "Stopping job grpo-gsm8k-1122 failed",
                "DashboardError: POST /api/jobs/grpo-gsm8k-1122/stop: HTTP 500 Internal Server "
                "Error",
            )
        )


app = ErrorApp()
