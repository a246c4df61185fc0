"""Command palette entries: every cockpit action by name (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.widgets.gpu_table import SORT_KEYS


class CockpitCommands(Provider):
    def _commands(self) -> list[tuple[str, object, str]]:
        app = self.app
        screen = getattr(app, "cluster_screen", None)
        cmds: list[tuple[str, object, str]] = []
        if screen is not None:
            for key in SORT_KEYS:
                cmds.append((f"Sort by {key}", partial(screen.set_sort, key), "Cluster screen"))
            cmds += [
                ("Reverse sort order", screen.action_reverse_sort, "Cluster screen"),
                ("Filter hosts and GPUs", screen.action_filter, "Cluster screen"),
                ("Clear filter", screen.action_clear_filter, "Cluster screen"),
                ("Fold or unfold all hosts", screen.table.action_toggle_all, "Cluster screen"),
                ("Reconnect every host now", partial(app.reconnect, None), "Fleet"),
            ]
        if hasattr(app, "action_new_job"):
            cmds += [
                ("Jobs", app.action_show_jobs, "Jobs on the cluster (2)"),
                ("New job from profile", app.action_new_job,
                 "Pick a profile, edit it in the job form, submit"),
            ]
        if hasattr(app, "action_debugger"):
            cmds += [
                ("Node logs", app.action_node_logs, "Every host's Ray log files (3)"),
                ("Debugger", app.action_debugger,
                 "Paused post-mortem workers and legacy breakpoints (4)"),
            ]
        cmds.append(("Show key bindings", app.action_help, "Help"))
        return cmds

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
