"""Pick a checkpoint to resume from: the steps under the job's trainer.default_local_dir on
every host, complete ones selectable, with their world size against the cluster's."""

from __future__ import annotations

from typing import cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from tui.ckpt.hostcmd import CkptError
from tui.ckpt.resume import world_size_warning
from tui.ckpt.scan import CheckpointIndex, StepState, scan_fleet
from tui.fmt import plural
from tui.sanitize import cell, markup
from tui.screens.error import ReportsWorkerFailures
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError


class CheckpointPickerScreen(ReportsWorkerFailures, ModalScreen[StepState | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    CheckpointPickerScreen { align: center middle; }
    CheckpointPickerScreen > Vertical {
        width: 90; height: 24; border: thick $primary; background: $surface; padding: 0 1;
    }
    CheckpointPickerScreen DataTable { height: 1fr; }
    CheckpointPickerScreen #picker-note { height: auto; }
    """

    def __init__(self, fleet: Fleet, inventory, root: str, *, nnodes: int, gpus_per_node: int):
        super().__init__()
        self.fleet = fleet
        self.inv = inventory
        self.root = root
        self.nnodes = nnodes
        self.gpus_per_node = gpus_per_node
        self.index: CheckpointIndex | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"[b]Resume from[/b] {markup(self.root)}   scanning every host…", id="picker-title"
            )
            table: DataTable[Text] = DataTable(id="picker-steps", cursor_type="row")
            table.add_columns("step", "W", "complete", "where", "note")
            yield table
            yield Static("", id="picker-note")

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.scan()

    @work(
        exclusive=True, group="ckpt-picker", exit_on_error=False, description="Listing checkpoints"
    )
    async def scan(self) -> None:
        title = self.query_one("#picker-title", Static)
        try:
            self.index = await scan_fleet(self.fleet, self.inv, self.root)
        except (CkptError, TransportError) as exc:
            title.update(f"[b]Resume from[/b] {markup(self.root)}   scan failed: {markup(exc)}")
            return
        table = self.query_one(DataTable)
        for s in sorted(self.index.steps, key=lambda s: -s.step):
            warn = world_size_warning(s.world_size, self.nnodes, self.gpus_per_node)
            where = ", ".join(s.complete_on) or ("spread over hosts" if s.complete else "-")
            table.add_row(
                cell(s.step),
                cell(s.world_size or "?"),
                Text("yes", "green") if s.complete else Text("no", "red"),
                cell(where),
                cell(warn or "", style="yellow"),
                key=str(s.step),
            )
        title.update(
            f"[b]Resume from[/b] {markup(self.root)}   "
            f"{plural(len(self.index.steps), 'step')} "
            f"(enter picks a complete one)"
        )
        if not self.index.steps:
            self.query_one("#picker-note", Static).update("no global_step_N there on any host")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if self.index is None:
            return
        step = self.index.step(int(cast(str, event.row_key.value)))  # key=str(step)
        if step is None or not step.complete:
            self.query_one("#picker-note", Static).update(
                Text("that step is missing ranks: pick a complete one", "red")
            )
            return
        self.dismiss(step)

    def action_cancel(self) -> None:
        self.dismiss(None)
