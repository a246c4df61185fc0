"""The cockpit's one error presenter (VerlTuiApp.report): an error of ours (tui/errors.py
VerlTuiError) from a screen's background worker is a toast with its title, its line and its
hint; anything unexpected opens the error modal titled by the worker's own description; and
every worker in tui/ has a description (so every failure is named in words)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from tui.errors import VerlTuiError
from tui.screens.error import ErrorScreen, ReportsWorkerFailures, report

TUI = Path(__file__).resolve().parents[1] / "tui"


def _is_work(node: ast.expr) -> bool:
    func = node.func if isinstance(node, ast.Call) else node
    return isinstance(func, ast.Name) and func.id == "work"


def test_every_worker_has_a_description() -> None:
    """@work(...) and run_worker(...) calls in tui/ carry description=: the failure title."""
    found, bare = 0, []
    for path in sorted(TUI.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            calls: list[ast.expr] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = [d for d in node.decorator_list if _is_work(d)]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "run_worker"
            ):
                calls = [node]
            for call in calls:
                found += 1
                words = [
                    k.value.value
                    for k in (call.keywords if isinstance(call, ast.Call) else [])
                    if k.arg == "description" and isinstance(k.value, ast.Constant)
                ]
                if not (words and isinstance(words[0], str) and words[0].strip()):
                    bare.append(f"{path.relative_to(TUI.parent)}:{call.lineno}")
    assert found >= 40, found  # the walk sees the workers (44 when written)
    assert not bare, "workers without description=: " + ", ".join(bare)


class CannotConnect(VerlTuiError, title="cannot connect", kind="unavailable"):
    pass


class FailingScreen(ReportsWorkerFailures, Screen[None]):
    """A screen whose workers fail, as a screen's own do (their StateChanged goes to it)."""

    def compose(self) -> ComposeResult:
        yield Static("failing")

    @work(exclusive=True, group="t-ours", exit_on_error=False, description="Reading node7's log")
    async def ours(self) -> None:
        raise CannotConnect("node7: connection refused", hint="is sshd running? `verl-tui doctor`")

    @work(exclusive=True, group="t-os", exit_on_error=False, description="Saving the draft")
    async def disk_full(self) -> None:
        raise OSError(28, "No space left on device")

    @work(exclusive=True, group="t-bug", exit_on_error=False, description="Drawing the chart")
    async def unexpected(self) -> None:
        raise KeyError("step")


async def test_report_presents_ours_as_a_toast_and_the_unexpected_in_the_modal() -> None:
    from snapshot_apps.cluster_replay import ReplayApp

    app = ReplayApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = FailingScreen()
        await app.push_screen(screen)
        screen.ours()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not any(n.severity == "error" for n in app._notifications):
            assert loop.time() < deadline, [n.message for n in app._notifications]
            await pilot.pause(0.05)
        (toast,) = [n for n in app._notifications if n.severity == "error"]
        assert toast.title == "Reading node7's log failed: cannot connect", toast.title
        assert toast.severity == "error" and toast.timeout == 12.0
        assert toast.message == "node7: connection refused\nis sshd running? `verl-tui doctor`"
        assert app.screen is screen  # a toast, no modal

        screen.disk_full()  # the system's errors too: a full disk is no bug
        while not any(n.title.startswith("Saving the draft") for n in app._notifications):
            assert loop.time() < deadline, [n.title for n in app._notifications]
            await pilot.pause(0.05)
        (disk,) = [n for n in app._notifications if n.title.startswith("Saving the draft")]
        assert disk.title == "Saving the draft failed: system error"
        # (markup-escaped: a toast's message is Textual markup)
        assert disk.message == "\\[Errno 28] No space left on device" and app.screen is screen

        # A screen's own refusal, worded there: the title says what did not happen.
        report(screen, "its profile /p.yaml is gone", title="not opened")
        while not any(n.title == "not opened" for n in app._notifications):
            assert loop.time() < deadline, [n.title for n in app._notifications]
            await pilot.pause(0.05)

        screen.unexpected()
        while not isinstance(app.screen, ErrorScreen):
            assert loop.time() < deadline + 10, "no error modal"
            await pilot.pause(0.05)
        modal = app.screen
        assert modal.title_text == "Drawing the chart failed"
        assert modal.message == "KeyError: 'step'"
        await pilot.press("escape")
        assert app.screen is screen
