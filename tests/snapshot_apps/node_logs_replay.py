"""Node logs: the recorded host's Ray log files; raylet.out opened (its recorded tail)."""

from snapshot_apps.replay import ScreenApp

from tui.screens.logs.node_logs import NodeLogsScreen


class NodeLogsApp(ScreenApp):
    # The followed pane's vertical scrollbar is drawn on one frame or the next depending on when
    # the last chunk of the tail lands (a race with the snapshot); the test pins everything else.
    CSS = "NodeLogsScreen LogView { scrollbar-size-vertical: 0; }"


app = NodeLogsApp(
    lambda app: NodeLogsScreen(app.fleet, [h.name for h in app.inventory.hosts], host="node2")
)
