"""Screens are given their services (tui/screens/services.py) through their constructors: no
module of the UI looks one up on the app by name (getattr/hasattr on an app), so each screen's
needs are typed and visible where it is made."""

from __future__ import annotations

import ast
from pathlib import Path

TUI = Path(__file__).resolve().parents[1] / "tui"
UI = [
    TUI / "palette.py",
    *sorted((TUI / "screens").rglob("*.py")),
    *(TUI / "widgets").rglob("*.py"),
]


def _names_an_app(node: ast.expr) -> bool:
    """`app`, `self.app`, `screen.app`, `cast(Any, self).app`: an expression ending in app."""
    return (isinstance(node, ast.Name) and node.id == "app") or (
        isinstance(node, ast.Attribute) and node.attr == "app"
    )


def test_no_ui_module_looks_a_service_up_on_the_app() -> None:
    found = []
    for path in UI:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and node.args
                and _names_an_app(node.args[0])
            ):
                found.append(f"{path.relative_to(TUI.parent)}:{node.lineno}")
    assert len(UI) > 40  # the walk sees the UI
    assert not found, "a service looked up on the app: " + ", ".join(found)


def test_the_walk_finds_a_lookup() -> None:
    """Guards the check above on the forms it refused."""
    for text in ('getattr(self.app, "monitor", None)', 'hasattr(app, "reconnect")'):
        call = ast.parse(text).body[0].value  # type: ignore[attr-defined]
        assert isinstance(call, ast.Call) and _names_an_app(call.args[0])


async def test_cluster_keys_reach_the_app_and_the_fleet_without_importing_the_app() -> None:
    """l on the Cluster screen runs the app's node_logs action by name (for the row's host), r
    reconnects through the fleet the screen was given."""
    from snapshot_apps.cluster_replay import ReplayApp

    from tui.screens.logs.node_logs import NodeLogsScreen

    app = ReplayApp()
    async with app.run_test(size=(160, 46)) as pilot:
        await pilot.pause(0.3)
        row = app.cluster_screen.table.current_row
        assert row is not None
        await pilot.press("l")
        for _ in range(60):
            if isinstance(app.screen, NodeLogsScreen):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, NodeLogsScreen) and app.screen.only == row.host
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.screen is app.cluster_screen and app.cluster_screen.fleet is app.fleet
        await pilot.press("r")
        await pilot.pause(0.1)
        assert f"reconnecting {row.host}" in [str(n.message) for n in app._notifications]
