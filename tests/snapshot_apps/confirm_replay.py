"""The confirm question `D` asks over the replayed Cluster screen (Ray is up there)."""

from snapshot_apps.cluster_replay import ReplayApp

from tui.screens.confirm import ConfirmScreen


class ConfirmApp(ReplayApp):
    def start_telemetry(self) -> None:
        super().start_telemetry()
        self.push_screen(
            ConfirmScreen(
                "Stop Ray on every host?", "Workers first, then the head; running jobs are killed."
            )
        )


app = ConfirmApp()
