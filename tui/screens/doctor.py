"""Doctor screen: the preflight checks as a table, the selected finding's fix below it."""

from __future__ import annotations

import time

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tui.cluster.doctor import Finding, run_doctor, summarize
from tui.config.hosts import Inventory
from tui.fmt import plural
from tui.sanitize import cell, one_line, styled
from tui.screens.error import ReportsWorkerFailures
from tui.transport.fleet import Fleet
from tui.widgets.footer import KeysFooter

STATUS_CELLS = {
    "ok": Text("✓ ok", style="bold green"),
    "warn": Text("! warn", style="bold yellow"),
    "fail": Text("✗ fail", style="bold red"),
}
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class DoctorScreen(ReportsWorkerFailures, Screen):
    HELP_TITLE = "Doctor screen"
    BINDINGS = [
        Binding("c", "recheck", "Re-run checks"),
        Binding("f", "toggle_problems", "Only warn/fail"),
        Binding("escape,b", "back", "Back"),
    ]

    DEFAULT_CSS = """
    DoctorScreen #doctor-title { height: 1; background: $primary 30%; text-style: bold; }
    DoctorScreen #doctor-progress { height: 1; color: $text-muted; }
    DoctorScreen #findings { height: 1fr; }
    DoctorScreen #doctor-fix {
        height: auto; max-height: 8; border-top: solid $primary; padding: 0 1;
    }
    """

    def __init__(self, fleet: Fleet, inventory: Inventory):
        super().__init__()
        self.fleet = fleet
        self.inventory = inventory
        self.findings: list[Finding] = []
        self.only_problems = False
        self.running = False
        self.error: str | None = None
        self.progress_text = ""
        self._started = 0.0
        self._elapsed = 0.0
        self._shown: list[Finding] = []

    def compose(self) -> ComposeResult:
        yield Static(
            f"Doctor — {one_line(self.inventory.cluster)} "
            f"({plural(len(self.inventory.hosts), 'host')})",
            id="doctor-title",
            markup=False,
        )
        yield Static("", id="doctor-progress", markup=False)
        table: DataTable = DataTable(id="findings", cursor_type="row")
        table.add_columns("status", "check", "host", "finding")
        yield table
        yield Static("", id="doctor-fix", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#findings", DataTable).focus()
        self.set_interval(0.25, self._tick)
        self.run_checks()

    # -- the doctor run ------------------------------------------------------------------

    @work(group="doctor", exclusive=True, exit_on_error=False, description="The doctor's checks")
    async def run_checks(self) -> None:
        self.running = True
        self.error = None
        self._started = time.monotonic()
        self._set_progress("starting")
        try:
            findings = await run_doctor(self.fleet, self.inventory, progress=self._set_progress)
        except Exception as exc:  # the screen says why; the app must not die of it
            self.running = False
            self.error = f"doctor failed: {type(exc).__name__}: {exc}"
            self._show_progress()
            return
        self.running = False
        self._elapsed = time.monotonic() - self._started
        self.findings = findings
        self._fill()

    def _set_progress(self, text: str) -> None:
        self.progress_text = text
        self._show_progress()

    def _tick(self) -> None:
        if self.running:  # the spinner and the clock move only while checks run
            self._show_progress()

    def _show_progress(self) -> None:
        if not self.is_mounted:
            return
        line = self.query_one("#doctor-progress", Static)
        if self.running:
            spent = time.monotonic() - self._started
            frame = _SPINNER[int(spent * 4) % len(_SPINNER)]
            line.update(f"{frame} {one_line(self.progress_text)}… {spent:.1f} s")
        elif self.error:
            line.update(one_line(self.error))
        elif self.findings:
            counts = summarize(self.findings)
            shown = " (showing warn/fail only)" if self.only_problems else ""
            line.update(
                f"{counts['ok']:d} ok · {counts['warn']:d} warn · {counts['fail']:d} fail"
                f" in {self._elapsed:.1f} s{shown} — c re-runs, f filters"
            )
        else:
            line.update(one_line(self.progress_text))

    # -- table ---------------------------------------------------------------------------

    def _fill(self) -> None:
        table = self.query_one("#findings", DataTable)
        previous = self._current()
        table.clear()
        self._shown = [f for f in self.findings if not self.only_problems or f.status != "ok"]
        for i, f in enumerate(self._shown):
            # Findings quote hosts' answers (versions, errors): Text cells, cleaned.
            table.add_row(
                STATUS_CELLS[f.status],
                cell(f.title),
                cell(f.host or "(cluster)"),
                cell(f.finding),
                key=str(i),
            )
        if previous in self._shown:
            table.move_cursor(row=self._shown.index(previous))
        self._show_progress()
        self._show_fix()

    def _current(self) -> Finding | None:
        table = self.query_one("#findings", DataTable)
        row = table.cursor_row
        return self._shown[row] if 0 <= row < len(self._shown) else None

    def _show_fix(self) -> None:
        pane = self.query_one("#doctor-fix", Static)
        f = self._current()
        if f is None:
            pane.update("No warnings or failures." if self.only_problems and self.findings else "")
            return
        text = Text()
        text.append(f"{f.title}", style="bold")
        text.append(f"  [{f.check}]  {f.host or 'whole cluster'}\n", style="dim")
        text.append(f.finding + "\n")
        if f.fix:
            text.append("fix: ", style="bold")
            text.append(f.fix)
        else:
            text.append("nothing to fix", style="dim")
        pane.update(styled(text))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_fix()

    # -- actions -------------------------------------------------------------------------

    def action_recheck(self) -> None:
        self.run_checks()

    def action_toggle_problems(self) -> None:
        self.only_problems = not self.only_problems
        self._fill()

    def action_back(self) -> None:
        self.dismiss(None)

    @property
    def shown_findings(self) -> list[Finding]:
        """The rows on screen now (after the f filter), for tests and the palette."""
        return list(self._shown)
