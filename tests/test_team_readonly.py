"""The read-only cockpit's one gate (tui/screens/readonly.py, asked by VerlTuiApp.run_action):
every action of ours is declared MUTATES or VIEWS (a key added later without a declaration
fails here), and in a read-only cockpit every mutating key binding and palette entry of the
real screens is refused with one line while nothing changes (the replayed Jobs screen with a
queue: no question asked, no form opened, the queue file as it was)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import tui.screens
import tui.widgets
from tui.app import VerlTuiApp
from tui.screens.readonly import MUTATES, VIEWS, declared, ours, owner_class


def _classes() -> list[type]:
    """Every class of ours that can hold actions: the app, every screen and widget."""
    found: dict[str, type] = {"VerlTuiApp": VerlTuiApp}
    for pkg in (tui.screens, tui.widgets):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            module = importlib.import_module(info.name)
            for _name, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ == module.__name__:
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def _actions(cls: type) -> set[str]:
    return {n.removeprefix("action_") for n in vars(cls) if n.startswith("action_")}


def test_every_action_and_binding_of_ours_is_declared():
    undeclared, both = [], []
    for cls in _classes():
        for action in _actions(cls):
            if declared(cls, action) is None:
                undeclared.append(f"{cls.__module__}.{cls.__name__}.action_{action}")
            if action in MUTATES.get(cls.__name__, ()) and action in VIEWS.get(cls.__name__, ()):
                both.append(f"{cls.__name__}.{action}")
        for b in getattr(cls, "BINDINGS", []):
            action = b.action if hasattr(b, "action") else b[1]
            target: type = VerlTuiApp if action.startswith("app.") else cls
            name = action.split(".", 1)[-1].split("(", 1)[0]
            if ours(target, name) and declared(target, name) is None:
                undeclared.append(f"{cls.__name__} binding {b!r}")
    assert not undeclared, "declare in tui/screens/readonly.py MUTATES or VIEWS:\n" + "\n".join(
        undeclared
    )
    assert not both, both
    # No stale declaration: each names an action its class defines.
    names = {c.__name__: c for c in _classes()}
    for table in (MUTATES, VIEWS):
        for cls_name, actions in table.items():
            assert cls_name in names, cls_name
            for action in actions:
                assert owner_class(names[cls_name], action) is names[cls_name], (cls_name, action)


async def test_a_read_only_cockpit_refuses_every_mutating_key_and_palette_entry():
    from snapshot_apps.jobs_queue_replay import CLOCK, ScreenApp, make
    from snapshot_apps.replay import wait_for

    from tui.jobs.queue import JobQueue
    from tui.palette import commands_for
    from tui.screens.jobs.screen import JobsScreen

    app = ScreenApp(make, patches=[("tui.screens.jobs.queue", "time", CLOCK)])
    app.read_only = True
    async with app.run_test(size=(160, 46)) as pilot:
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "loaded", False))
        screen = pilot.app.screen
        assert isinstance(screen, JobsScreen)
        before = [e.to_json() for e in JobQueue("grpo-demo").entries()]

        def refusals() -> list[str]:
            return [str(n.message) for n in app._notifications if "read-only" in str(n.message)]

        tried = 0
        for node in (app, screen):
            for b in node.BINDINGS:
                name = b.action.split(".", 1)[-1]
                if not declared(node, name):
                    continue
                n = len(refusals())
                for key in b.key.split(","):
                    await pilot.press(key)
                    await pilot.pause()
                    tried += 1
                    assert len(refusals()) == n + 1, (b, refusals())
                    n += 1
                    assert pilot.app.screen is screen, (b, pilot.app.screen)

        # The palette: every entry whose action mutates, run as the palette runs it.
        def mutates(node, action: str) -> bool:
            target = app if action.startswith("app.") else node
            return bool(declared(target, action.split(".", 1)[-1]))

        # The Cluster screen's Ray keys (app.ray_up/down/restart) are in the palette too.
        mutating = {
            b.description
            for node in (app, screen, app.cluster_screen)
            for b in node.BINDINGS
            if mutates(node, b.action)
        }
        mutating.add("New job from profile")
        ran = 0
        for cmd in commands_for(screen):
            # Every palette entry runs through the gate (app.run_action), or is a known view.
            fn = cmd.callback
            name = getattr(getattr(fn, "func", fn), "__name__", "")
            assert name in ("run_action", "set_sort", "reconnect"), (cmd.name, fn)
            if cmd.name in mutating:
                n = len(refusals())
                await cmd.callback()
                await pilot.pause()
                ran += 1
                assert len(refusals()) == n + 1 and pilot.app.screen is screen, cmd.name
        assert tried >= 7 and ran >= 10, (tried, ran)
        assert all(line.count("\n") == 0 for line in refusals())
        assert [e.to_json() for e in JobQueue("grpo-demo").entries()] == before
