"""One rollout sample full-screen, and the same prompt in two steps side by side (pushed from
the Rollouts screen, tui/screens/rollouts/screen.py). Every field is the dump's text: cleaned
(tui/sanitize.clean: control and invisible characters escaped) and never parsed as markup."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from tui.rollouts.reader import RolloutError
from tui.rollouts.samples import Sample
from tui.sanitize import clean, markup, one_line, styled
from tui.screens.error import ReportsWorkerFailures
from tui.widgets.footer import KeysFooter


def sample_text(sample: Sample | None, *, what: str = "") -> Text:
    """A sample as Rich Text (header, prompt, output, ground truth, extras), every character
    cleaned by styled()."""
    if sample is None:
        return Text(one_line(what or "no sample", 300), style="dim")
    score = "-" if sample.score is None else f"{sample.score:.6g}"
    if sample.score is not None and not math.isfinite(sample.score):
        score = str(sample.score)
    out = Text()
    out.append(f"step {sample.step}  line {sample.line}  score {score}", style="bold")
    if sample.flags:
        out.append("  " + " ".join(sample.flags), style="bold red")
    for name, chars in sample.cut.items():
        out.append(f"\n{name}: {chars:,} characters, shown as its head and its end", style="yellow")
    out.append("\n\nINPUT\n", style="bold cyan")
    out.append(clean(sample.input))
    out.append("\n\nOUTPUT\n", style="bold cyan")
    out.append(clean(sample.output) or "(empty)")
    if sample.gts:
        out.append("\n\nGROUND TRUTH\n", style="bold cyan")
        out.append(clean(sample.gts))
    if sample.extras:
        out.append("\n\nEXTRAS\n", style="bold cyan")
        for key, value in sample.extras.items():
            out.append(clean(f"{key}: {value}", keep_newlines=False) + "\n")
    return styled(out)


class SampleScreen(ReportsWorkerFailures, Screen[None]):
    """One sample, all of it (the reader cut a line past 128 KiB: the screen says so)."""

    BINDINGS = [Binding("escape,q", "back", "Back")]
    DEFAULT_CSS = """
    SampleScreen #sample-title { height: 1; background: $panel; text-style: bold; }
    SampleScreen VerticalScroll { height: 1fr; padding: 0 1; }
    """

    def __init__(self, sample: Sample, where: str) -> None:
        super().__init__()
        self.sample, self.where = sample, where

    def compose(self) -> ComposeResult:
        yield Static(f" Sample  {markup(self.where, 200)}", id="sample-title")
        with VerticalScroll():
            yield Static(styled(sample_text(self.sample)), id="sample-body")
        yield KeysFooter()

    def action_back(self) -> None:
        self.app.pop_screen()


# Finds the sample with this prompt key in another step: (step, key) -> the sample or None.
Finder = Callable[[int, str], Awaitable[Sample | None]]


class CompareStepsScreen(ReportsWorkerFailures, Screen[None]):
    """The selected sample's prompt in its step (left) and in another step (right); [ and ]
    move the right side to the previous / next dumped step."""

    BINDINGS = [
        Binding("left_square_bracket", "other(-1)", "Earlier step"),
        Binding("right_square_bracket", "other(1)", "Later step"),
        Binding("escape,q", "back", "Back"),
    ]
    DEFAULT_CSS = """
    CompareStepsScreen #cmp-title { height: 1; background: $panel; text-style: bold; }
    CompareStepsScreen Horizontal { height: 1fr; }
    CompareStepsScreen VerticalScroll { width: 1fr; padding: 0 1;
        border-left: solid $primary 50%; }
    """

    def __init__(
        self, sample: Sample, key: str, steps: list[int], other: int, find: Finder
    ) -> None:
        super().__init__()
        self.sample, self.key, self.steps, self.other = sample, key, steps, other
        self.find = find
        self.found: Sample | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="cmp-title")
        with Horizontal():
            with VerticalScroll():
                yield Static(styled(sample_text(self.sample)), id="cmp-left")
            with VerticalScroll():
                yield Static("", id="cmp-right")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.load(self.other)

    def _title(self, text: str) -> None:
        self.query_one("#cmp-title", Static).update(
            f" Same prompt: step {self.sample.step:d} | step {self.other:d}   {markup(text, 200)}"
        )

    def action_other(self, delta: int) -> None:
        here = self.steps.index(self.other) if self.other in self.steps else 0
        nxt = here + delta
        if 0 <= nxt < len(self.steps):
            self.load(self.steps[nxt])

    @work(
        exclusive=True,
        group="rollouts-compare",
        exit_on_error=False,
        description="Reading the two steps' rollouts",
    )
    async def load(self, step: int) -> None:
        self.other = step
        self._title("reading…")
        try:
            found = await self.find(step, self.key)
        except RolloutError as exc:
            self._title(f"not read: {exc}")
            return
        self.show_other(found)

    def show_other(self, found: Sample | None) -> None:
        self.found = found
        what = f"this prompt is not in step {self.other}"
        self.query_one("#cmp-right", Static).update(styled(sample_text(found, what=what)))
        self._title("" if found else what)

    def action_back(self) -> None:
        self.app.pop_screen()
