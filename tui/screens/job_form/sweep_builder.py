"""The job form's sweep builder: pick 1–3 keys and their comma-separated values, see how many
runs that makes, queue them all. The form validates every combination (tui/jobs/sweep.py) before
anything is queued; this modal only collects the grid and checks its syntax."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from tui.config.yamlfile import ConfigError
from tui.fmt import plural
from tui.jobs.sweep import MAX_KEYS, MAX_RUNS, clean_id, split_values
from tui.sanitize import one_line, styled
from tui.screens.error import ReportsWorkerFailures


@dataclass(frozen=True)
class SweepRequest:
    name: str
    grids: list[str]  # "KEY=V1,V2" each, as `verl-tui sweep --grid` takes them


def count_runs(rows: list[tuple[str, str]]) -> int:
    """Runs a grid makes: the product of each filled row's value count (0: no row filled)."""
    n, any_row = 1, False
    for key, values in rows:
        if key.strip() and values.strip():
            any_row = True
            n *= len([v for v in split_values(values) if v])
    return n if any_row else 0


class SweepBuilderScreen(ReportsWorkerFailures, ModalScreen[SweepRequest | None]):
    BINDINGS = [
        Binding("ctrl+s", "queue_all", "Queue all", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    DEFAULT_CSS = """
    SweepBuilderScreen { align: center middle; }
    SweepBuilderScreen > Vertical {
        width: 96; height: auto; border: thick $primary; background: $surface; padding: 0 1;
    }
    SweepBuilderScreen .sweep-row { height: 3; }
    SweepBuilderScreen .sweep-key { width: 44; }
    SweepBuilderScreen .sweep-values { width: 1fr; }
    SweepBuilderScreen #sweep-count { height: 2; padding: 1 0 0 0; }
    SweepBuilderScreen #sweep-buttons { height: 3; align-horizontal: right; }
    """

    def __init__(self, profile: str, keys: list[str], default_name: str | None = None) -> None:
        super().__init__()
        self.profile = profile
        self.keys = keys  # the form's keys, offered first (the first ones pre-filled as hints)
        self.default_name = clean_id(default_name or profile)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                styled(
                    Text.assemble(
                        ("Sweep ", "bold"),
                        (one_line(self.profile, 60), "bold"),
                        ("  — 1 to 3 keys, values separated by commas", "dim"),
                    )
                )
            )
            yield Input(value=self.default_name, placeholder="sweep name", id="sweep-name")
            for i in range(MAX_KEYS):
                with Horizontal(classes="sweep-row"):
                    yield Input(
                        placeholder=self.keys[i] if i < len(self.keys) else "a.dotted.key",
                        id=f"sweep-key-{i}",
                        classes="sweep-key",
                    )
                    yield Input(
                        placeholder="V1,V2,…", id=f"sweep-values-{i}", classes="sweep-values"
                    )
            yield Static("", id="sweep-count")
            with Horizontal(id="sweep-buttons"):
                yield Button("Queue all (ctrl+s)", id="sweep-queue", variant="success")
                yield Button("Cancel (esc)", id="sweep-cancel")

    def on_mount(self) -> None:
        self.query_one("#sweep-key-0", Input).focus()
        self._update_count()

    def rows(self) -> list[tuple[str, str]]:
        return [
            (
                self.query_one(f"#sweep-key-{i}", Input).value.strip(),
                self.query_one(f"#sweep-values-{i}", Input).value.strip(),
            )
            for i in range(MAX_KEYS)
        ]

    @on(Input.Changed)
    def _update_count(self) -> None:
        n = count_runs(self.rows())
        box = self.query_one("#sweep-count", Static)
        if n == 0:
            box.update(Text("fill a key and its values", "dim"))
        elif n > MAX_RUNS:
            box.update(Text(f"{n:d} runs: more than {MAX_RUNS:d}", "bold red"))
        else:
            box.update(
                styled(
                    Text.assemble(
                        (plural(n, "run"), "bold"),
                        (" — each one validated before any is queued", "dim"),
                    )
                )
            )
        self.query_one("#sweep-queue", Button).disabled = not 0 < n <= MAX_RUNS

    def request(self) -> SweepRequest:
        """The grid as entered; ConfigError (one line) for a half-filled row or a bad value."""
        from tui.jobs.sweep import check_grids, parse_grid

        grids = []
        for i, (key, values) in enumerate(self.rows(), 1):
            if bool(key) != bool(values):
                raise ConfigError(f"row {i}: give both a key and its values")
            if key:
                grids.append(f"{key}={values}")
        parsed = [parse_grid(g, "sweep") for g in grids]
        check_grids(parsed)
        name = self.query_one("#sweep-name", Input).value.strip() or self.default_name
        return SweepRequest(name, grids)

    @on(Button.Pressed, "#sweep-queue")
    def action_queue_all(self) -> None:
        try:
            req = self.request()
        except ConfigError as exc:
            self.query_one("#sweep-count", Static).update(Text(one_line(exc, 200), "bold red"))
            return
        self.dismiss(req)

    @on(Button.Pressed, "#sweep-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
