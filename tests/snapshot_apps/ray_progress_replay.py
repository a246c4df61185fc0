"""Ray up's progress view with the step events of the recorded bring-up, at their times."""

from snapshot_apps.replay import ScreenApp, load

from tui.cluster.ray_cluster import StepEvent
from tui.screens.ray_progress import RayProgressScreen

DATA = load("ray_up.json")


def feed(screen: RayProgressScreen) -> None:
    for e in DATA["events"]:
        screen.add_event(
            StepEvent(e["host"], e["phase"], e["status"], e["message"], at=screen.started + e["at"])
        )
    screen.finish(True, DATA["outcome"])


app = ScreenApp(lambda app: RayProgressScreen(DATA["title"]), after=feed)
