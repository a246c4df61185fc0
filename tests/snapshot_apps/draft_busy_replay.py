"""The question a job form asks when its profile's draft is open in another form, over the
replayed Cluster screen (the owner record as a second real form process writes it)."""

import os
import time

from snapshot_apps.cluster_replay import ReplayApp

from tui.jobs.formstate import DraftOwner
from tui.screens.job_form.draft_busy import DraftBusyScreen

os.environ["TZ"] = "UTC"  # the owner's "since" is shown in local time
time.tzset()

OWNER = DraftOwner(user="alice", host="login1", pid=4242, since=1795471390.0, token="recorded")


class DraftBusyApp(ReplayApp):
    def start_telemetry(self) -> None:
        super().start_telemetry()
        self.push_screen(DraftBusyScreen(OWNER))


app = DraftBusyApp()
