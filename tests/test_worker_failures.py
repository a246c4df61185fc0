"""A failure in a screen's background worker reaches the app's one error modal.

Textual posts Worker.StateChanged to the node that started the worker and does not bubble it,
so before ReportsWorkerFailures a screen's failed worker (a draft that could not be saved, a
listing that broke) passed in silence.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from textual import work
from textual.app import ComposeResult
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

import tui.screens
from tui.app import VerlTuiApp
from tui.config.hosts import local_inventory
from tui.screens.error import ErrorScreen, ReportsWorkerFailures


def test_every_screen_reports_its_workers_failures() -> None:
    screens = []
    for mod in pkgutil.walk_packages(tui.screens.__path__, "tui.screens."):
        module = importlib.import_module(mod.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Screen) and cls.__module__ == module.__name__:
                screens.append(cls)
    assert len(screens) >= 16
    missing = [c.__name__ for c in screens if not issubclass(c, ReportsWorkerFailures)]
    assert not missing, missing


class _Failing(ReportsWorkerFailures, Screen):
    def compose(self) -> ComposeResult:
        yield Static("working…")

    def on_mount(self) -> None:
        self.save()

    @work(thread=True, group="draft", exit_on_error=False, description="Saving the draft")
    def save(self) -> None:
        raise RuntimeError("the draft store is broken")  # a bug: an OSError would be a toast


async def test_a_screens_failed_worker_opens_the_error_modal() -> None:
    app = VerlTuiApp(local_inventory())
    async with app.run_test(size=(120, 36)) as pilot:
        await app.push_screen(_Failing())
        for _ in range(50):
            if isinstance(app.screen, ErrorScreen):
                break
            await pilot.pause(0.1)
        assert isinstance(app.screen, ErrorScreen), app.screen
        text = "\n".join(str(w.render()) for w in app.screen.query(Static))
        assert "Saving the draft failed" in text and "the draft store is broken" in text
        assert isinstance(app.screen, ModalScreen)
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert isinstance(app.screen, _Failing)
