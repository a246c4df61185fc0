"""Node logs: the recorded host's Ray log files; raylet.out opened (its recorded tail)."""

from snapshot_apps.replay import ScreenApp

from tui.screens.node_logs import NodeLogsScreen

app = ScreenApp(lambda app: NodeLogsScreen(app.fleet, [h.name for h in app.inventory.hosts],
                                           host="node2"))
