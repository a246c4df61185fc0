"""A job's rollout samples (verl's trainer.rollout_data_dir, read over SSH a page at a time by
tui/rollouts): the dumped steps, the step's samples sorted or searched, their flags, the step's
score histogram; enter shows a sample whole, c the same prompt in another step beside it.
Reached with `v` from the Jobs screen. Every read runs in a worker; nothing waits on a host."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Input, OptionList, Static
from textual.widgets.option_list import Option

from tui.cluster.dashboard import DashboardError
from tui.fmt import plural
from tui.rollouts.reader import (
    PAGE,
    DumpDir,
    RolloutError,
    StepView,
    first_page,
    turn_page,
    view_step,
)
from tui.rollouts.samples import SORTS, Sample
from tui.sanitize import cell, markup, one_line
from tui.screens.error import ReportsWorkerFailures
from tui.screens.rollouts.sample import CompareStepsScreen, SampleScreen
from tui.transport.types import TransportError
from tui.widgets.footer import KeysFooter

if TYPE_CHECKING:
    from tui.cluster.ray_cluster import RayCluster

PREVIEW = 120
Opener = Callable[[], Awaitable[DumpDir]]


def opener_for(cluster: RayCluster, sid: str, folder: str | None = None) -> Opener:
    """The live opener: the job's dump folder found on the cluster (tui/rollouts/reader.py)."""
    from tui.rollouts.reader import locate_dump

    return lambda: locate_dump(cluster, sid, folder=folder)


class RolloutsScreen(ReportsWorkerFailures, Screen[None]):
    BINDINGS = [
        Binding("o", "open", "Whole sample (also enter)"),
        Binding("c", "compare", "Same prompt, other step"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse sort", show=False),
        Binding("slash", "search", "Search"),
        Binding("n", "page(1)", "Next page"),
        Binding("N", "page(-1)", "Previous page", show=False),
        Binding("r", "reload", "Reload", show=False),
        Binding("escape", "back", "Back (esc first clears a search)"),
    ]

    DEFAULT_CSS = """
    RolloutsScreen #ro-title { height: 1; background: $panel; text-style: bold;
        text-wrap: nowrap; text-overflow: ellipsis; }
    RolloutsScreen #ro-steps { width: 14; height: 1fr; border-right: solid $primary 50%; }
    RolloutsScreen #ro-samples { height: 1fr; }
    RolloutsScreen #ro-side { width: 52; padding: 0 1; border-left: solid $primary 50%; }
    RolloutsScreen #ro-preview { height: 12; border-top: solid $primary 50%; padding: 0 1;
        overflow-y: auto; }
    RolloutsScreen #ro-search { display: none; }
    RolloutsScreen #ro-search.visible { display: block; }
    """

    def __init__(self, open_dump: Opener, sid: str) -> None:
        super().__init__()
        self.open_dump, self.sid = open_dump, sid
        self.dump: DumpDir | None = None
        self.steps: list[int] = []
        self.step: int | None = None
        self.sort = "file"
        self.reverse = False
        self.pattern: str | None = None
        self.view: StepView | None = None
        self.loaded = False  # a step's page is shown (tests and snapshots wait on it)

    def compose(self) -> ComposeResult:
        yield Static(f" Rollouts of {markup(self.sid)}", id="ro-title")
        with Horizontal():
            yield OptionList(id="ro-steps")
            with Vertical():
                table: DataTable[Text] = DataTable(id="ro-samples", cursor_type="row")
                table.add_columns("line", "score", "chars", "flags", "output (end)")
                yield table
                yield Static("", id="ro-preview")
            yield Static("", id="ro-side")
        yield Input(
            placeholder="search input and output (a regex; enter: apply, esc: clear)",
            id="ro-search",
        )
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.load_steps()

    # --- reading (workers) -------------------------------------------------------------------

    @work(
        exclusive=True,
        group="rollouts-steps",
        exit_on_error=False,
        description="Listing the rollout steps",
    )
    async def load_steps(self) -> None:
        self._title("finding the dump…")
        try:
            self.dump = self.dump or await self.open_dump()
            steps = [s for s, _size in await self.dump.steps()]
        except (RolloutError, DashboardError, TransportError) as exc:
            self._title(f"no rollouts: {exc}", error=True)
            return
        self.steps = steps
        box = self.query_one(OptionList)
        box.clear_options()
        box.add_options([Option(f"step {s:d}", id=str(s)) for s in steps])
        if not steps:
            self._title(f"{self.dump.where}: no step dumped yet")
            return
        box.highlighted = len(steps) - 1
        self.load_step(steps[-1] if self.step not in steps else self.step)

    @work(
        exclusive=True,
        group="rollouts-step",
        exit_on_error=False,
        description="Reading the step's rollouts",
    )
    async def load_step(self, step: int) -> None:
        assert self.dump is not None
        self.step = step
        self.loaded = False
        self._title(f"reading step {step}…")
        try:
            if self.sort == "file" and not self.pattern and not self.reverse:
                # A big step's index takes seconds on its host: its first page comes first.
                self.show(await first_page(self.dump, step), final=False)
            view = await view_step(
                self.dump, step, sort=self.sort, reverse=self.reverse, pattern=self.pattern
            )
        except RolloutError as exc:
            self._title(f"step {step}: {exc}", error=True)
            return
        self.show(view)

    @work(
        exclusive=True,
        group="rollouts-step",
        exit_on_error=False,
        description="Reading the step's rollouts",
    )
    async def load_page(self, start: int) -> None:
        assert self.dump is not None and self.view is not None
        try:
            await turn_page(self.dump, self.view, start)
        except RolloutError as exc:
            self._title(f"page: {exc}", error=True)
            return
        self.show(self.view)

    async def find(self, step: int, key: str) -> Sample | None:
        """The sample with this prompt in `step` (the compare screen's reader)."""
        assert self.dump is not None
        index = await self.dump.index(step)
        entry = index.by_key(key)
        got = await self.dump.read(index, [entry]) if entry else []
        return got[0] if got else None

    # --- drawing -----------------------------------------------------------------------------

    def show(self, view: StepView, *, final: bool = True) -> None:
        self.view = view
        table = self.query_one(DataTable)
        table.clear()
        for i, s in enumerate(view.samples):
            score = "-" if s.score is None else f"{s.score:.4g}"
            flags = cell(" ".join(s.flags), 30, "bold red")
            tail = s.output[-PREVIEW:] if s.output.strip() else "(empty)"
            table.add_row(
                cell(s.line),
                cell(score),
                cell(len(s.output)),
                flags,
                cell(tail, PREVIEW),
                key=str(i),
            )
        total = len(view.order)
        end = view.start + len(view.samples)
        search = f"  /{one_line(self.pattern, 40)}/" if self.pattern else ""
        where = self.dump.where if self.dump else ""
        self._title(
            f"step {view.index.step}: {view.start + 1 if total else 0}–{end} of "
            f"{plural(total, 'sample')}, sorted by {self.sort}"
            f"{' reversed' if self.reverse else ''}{search}"
            f"{'' if final else ' (indexing the step…)'}   {where}"
        )
        self._side(view)
        self._preview(0)
        self.loaded = final

    def _side(self, view: StepView) -> None:
        flagged: dict[str, int] = {}
        for s in view.samples:
            for f in s.flags:
                flagged[f] = flagged.get(f, 0) + 1
        out = Text()
        out.append("score histogram\n", style="bold")
        lines = view.histogram.lines(width=22)
        for line in lines:
            out.append(one_line(line, 60) + "\n")
        if not lines:
            out.append("no scores\n", style="dim")
        out.append("\nflags on this page\n", style="bold")
        for flag, n in sorted(flagged.items()):
            out.append(one_line(f"{flag}: {n}", 60) + "\n")
        if not flagged:
            out.append("none\n", style="dim")
        if view.index.bad:
            out.append(f"\n{plural(len(view.index.bad), 'line')} not samples\n", style="bold red")
            for bad in view.index.bad[:8]:
                out.append(one_line(bad, 300) + "\n")
        if view.index.stopped:
            out.append("\n")
            out.append(one_line(f"index stopped at {view.index.stopped}", 80), style="yellow")
        self.query_one("#ro-side", Static).update(out)

    def _preview(self, row: int) -> None:
        panel = self.query_one("#ro-preview", Static)
        samples = self.view.samples if self.view else []
        if not 0 <= row < len(samples):
            panel.update("")
            return
        s = samples[row]
        text = Text()
        text.append("in:  ", style="bold cyan")
        text.append(one_line(s.input[-400:], 400) + "\n")
        text.append("out: ", style="bold cyan")
        text.append(one_line(s.output[:800], 800))
        panel.update(text)

    def _title(self, text: str, *, error: bool = False) -> None:
        body = f"[b red]{markup(text, 300)}[/]" if error else markup(text, 300)
        self.query_one("#ro-title", Static).update(f" Rollouts of {markup(self.sid)}   {body}")

    def current(self) -> Sample | None:
        table = self.query_one(DataTable)
        samples = self.view.samples if self.view else []
        row = table.cursor_row
        return samples[row] if 0 <= row < len(samples) else None

    # --- events and keys ---------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._preview(event.cursor_row)

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_open()  # the table takes enter itself: its selection opens the sample

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.load_step(int(event.option.id))
            self.query_one(DataTable).focus()

    def action_open(self) -> None:
        sample = self.current()
        if sample is not None and self.dump is not None:
            self.app.push_screen(SampleScreen(sample, self.dump.where))

    def action_compare(self) -> None:
        sample, view = self.current(), self.view
        if sample is None or view is None or len(self.steps) < 2:
            self.notify("needs a sample and a second dumped step", timeout=3)
            return
        key = next((e.input_key for e in view.order if e.line == sample.line), None)
        if key is None:
            return
        here = self.steps.index(sample.step)
        other = self.steps[here - 1] if here > 0 else self.steps[here + 1]
        self.app.push_screen(CompareStepsScreen(sample, key, self.steps, other, self.find))

    def action_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self._reload()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._reload()

    def action_page(self, delta: int) -> None:
        if self.view is not None:
            start = self.view.start + delta * PAGE
            if 0 <= start < len(self.view.order):
                self.load_page(start)

    def action_reload(self) -> None:
        self.load_steps()

    def action_search(self) -> None:
        box = self.query_one("#ro-search", Input)
        box.add_class("visible")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        import re

        if event.input.id != "ro-search":
            return
        text = event.value.strip()
        try:
            re.compile(text)
        except re.error as exc:
            self.notify(markup(f"not a regex: {exc}"), severity="warning", timeout=4)
            return
        event.input.remove_class("visible")
        self.pattern = text or None
        self.query_one(DataTable).focus()
        self._reload()

    def _reload(self) -> None:
        if self.step is not None and self.dump is not None:
            self.load_step(self.step)

    def action_back(self) -> None:
        box = self.query_one("#ro-search", Input)
        if self.pattern or box.has_class("visible"):
            box.value = ""
            box.remove_class("visible")
            self.query_one(DataTable).focus()
            if self.pattern:
                self.pattern = None
                self._reload()
            return
        self.app.pop_screen()
