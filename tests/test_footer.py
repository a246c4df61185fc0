"""The key footer (tui/widgets/footer.py): rebuilt when the keys it shows change — a key hidden
or shown by check_action, disabled, another screen — and not on a focus move that leaves them
as they are (each rebuild mounts and styles every key again)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input
from textual.widgets._footer import FooterKey  # the footer's key widget (not exported)

from tui.widgets.footer import KeysFooter


class Fields(Screen):
    BINDINGS = [
        Binding("f2", "send", "Send"),
        Binding("f3", "stop", "Stop"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.can_stop: bool | None = True  # True: shown; None: shown disabled; False: hidden

    def compose(self) -> ComposeResult:
        yield Input(id="a")
        yield Input(id="b")
        yield Input(id="c")
        yield KeysFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.can_stop if action == "stop" else True

    def action_send(self) -> None:
        pass

    def action_stop(self) -> None:
        pass


class Other(Screen):
    BINDINGS = [Binding("f4", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield Input()
        yield KeysFooter()


class FooterApp(App):
    def on_mount(self) -> None:
        self.push_screen(Fields())


async def settle(pilot) -> None:
    # A rebuild runs after the next refresh (Footer's call_after_refresh).
    for _ in range(3):
        await pilot.pause()


def keys(screen: Screen) -> list[tuple[str, bool]]:
    footer = screen.query_one(KeysFooter)
    return [(k.description, k.has_class("-disabled")) for k in footer.query(FooterKey)]


def key_widgets(screen: Screen) -> list[int]:
    return [id(k) for k in screen.query_one(KeysFooter).query(FooterKey)]


async def test_focus_moves_keep_the_keys_and_changes_rebuild_them() -> None:
    app = FooterApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, Fields)
        await pilot.pause()
        assert ("Send", False) in keys(screen) and ("Stop", False) in keys(screen)
        before = key_widgets(screen)
        for _ in range(4):  # a -> b -> c -> a: the same keys everywhere
            await pilot.press("tab")
            await settle(pilot)
        assert key_widgets(screen) == before  # not rebuilt

        screen.can_stop = None  # shown, disabled
        screen.refresh_bindings()
        await settle(pilot)
        assert ("Stop", True) in keys(screen) and key_widgets(screen) != before

        screen.can_stop = False  # hidden
        screen.refresh_bindings()
        await settle(pilot)
        assert [d for d, _ in keys(screen)] == ["Send", "palette"]

        screen.can_stop = True
        screen.refresh_bindings()
        await settle(pilot)
        assert ("Stop", False) in keys(screen)

        app.push_screen(Other())
        await settle(pilot)
        assert [d for d, _ in keys(app.screen)] == ["Back", "palette"]
        await pilot.press("f4")
        await settle(pilot)
        assert app.screen is screen and ("Stop", False) in keys(screen)
