"""Pick a profile for a new job: the repo's presets and the user's own, name + description;
a broken file is listed with its one-line error (and cannot be picked)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui.jobs.profiles import ProfileEntry, list_profiles, profile_dirs
from tui.sanitize import markup, one_line
from tui.screens.error import ReportsWorkerFailures, report


def clip_words(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary and marked with … when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:-") + "…"


class ProfilePickerScreen(ReportsWorkerFailures, ModalScreen[Path | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    ProfilePickerScreen { align: center middle; }
    ProfilePickerScreen > Vertical {
        width: 110; max-width: 95%; height: auto; max-height: 80%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    ProfilePickerScreen #picker-title { text-style: bold; height: 1; }
    ProfilePickerScreen OptionList { height: auto; max-height: 30; border: none; }
    """

    def __init__(self, dirs: list[Path] | None = None) -> None:
        super().__init__()
        self.dirs = dirs if dirs is not None else profile_dirs()
        self.entries: list[ProfileEntry] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                "New job from a profile  [dim](enter picks, esc cancels)[/dim]", id="picker-title"
            )
            yield OptionList(id="profiles")
            yield Static(
                "[dim]" + "   ".join(markup(d) for d in self.dirs) + "[/dim]", id="picker-dirs"
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self.load()

    @work(
        exclusive=True,
        group="profiles-list",
        exit_on_error=False,
        description="Listing the profiles",
    )
    async def load(self) -> None:
        self.entries = await asyncio.to_thread(list_profiles, self.dirs)
        options = self.query_one(OptionList)
        options.clear_options()
        if not self.entries:
            options.add_option(
                Option(
                    "no profiles found in " + ", ".join(markup(d) for d in self.dirs), disabled=True
                )
            )
            return
        for i, e in enumerate(self.entries):
            t = Text()
            t.append(one_line(e.name), "bold" if e.profile else "bold red")
            if e.profile is not None:
                if e.profile.description:
                    t.append("\n  " + clip_words(one_line(e.profile.description), 200), "dim")
            else:
                t.append("\n  " + one_line(e.error or "cannot be read"), "red")
            options.add_option(Option(t, id=str(i), disabled=e.profile is None))
        first = next((i for i, e in enumerate(self.entries) if e.profile is not None), None)
        if first is not None:
            options.highlighted = first

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is None:
            return
        entry = self.entries[int(event.option.id)]
        if entry.profile is None:
            report(self, entry.error or "this profile cannot be read", title="not opened")
            return
        self.dismiss(entry.path)

    def action_cancel(self) -> None:
        self.dismiss(None)
