"""Checkpoints screen: every global_step_N under a checkpoint root on every host, which ranks
each host holds and whether the step is complete somewhere; collect a step onto one host (with
a progress bar and checksums), merge it there with verl's model_merger (live output)."""

from __future__ import annotations

import time
from typing import cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Input, Label, ProgressBar, RichLog, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.ckpt.collect import CopyProgress, collect
from tui.ckpt.hostcmd import CkptError
from tui.ckpt.merge import merge
from tui.ckpt.scan import CheckpointIndex, StepState, check_root, scan_fleet
from tui.fmt import human_size, plural
from tui.sanitize import cell, clean, markup, one_line, styled
from tui.screens.error import ReportsWorkerFailures, report
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError
from tui.widgets.footer import KeysFooter


def _ranks(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


class CheckpointsScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("slash", "root", "Checkpoint folder"),
        Binding("r", "rescan", "Rescan"),
        Binding("c", "collect", "Collect onto the selected host"),
        Binding("m", "merge", "Merge on the selected host"),
        Binding("left,h", "host(-1)", "Previous host", show=False),
        Binding("right,l", "host(1)", "Next host", show=False),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    CheckpointsScreen #ckpt-title { height: 1; background: $panel; text-style: bold; }
    CheckpointsScreen #ckpt-steps { height: 1fr; }
    CheckpointsScreen #ckpt-detail { height: auto; max-height: 8; padding: 0 1; }
    CheckpointsScreen #ckpt-progress-row { height: 1; display: none; }
    CheckpointsScreen #ckpt-progress-row.-active { display: block; }
    CheckpointsScreen #ckpt-output { height: 12; border-top: solid $primary 50%; }
    CheckpointsScreen #ckpt-prompt-row { height: 3; display: none; }
    CheckpointsScreen #ckpt-prompt-row.-active { display: block; }
    CheckpointsScreen #ckpt-prompt-label { padding: 1 1 0 1; }
    CheckpointsScreen #ckpt-prompt { width: 1fr; }
    """

    def __init__(self, fleet: Fleet, inventory, root: str | None = None):
        super().__init__()
        self.fleet = fleet
        self.inv = inventory
        self.root = root
        self.index: CheckpointIndex | None = None
        self.host_names = [h.name for h in inventory.hosts]
        self.host_i = 0
        self.busy: str | None = None
        self._prompt_for: str | None = None

    # -- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(" Checkpoints", id="ckpt-title")
        table: DataTable[Text] = DataTable(id="ckpt-steps", cursor_type="row", zebra_stripes=True)
        table.add_columns("step", "W", "complete", *self.host_names, "size", "latest")
        yield table
        yield Static("", id="ckpt-detail")
        with Horizontal(id="ckpt-progress-row"):
            yield Label("", id="ckpt-progress-label")
            yield ProgressBar(id="ckpt-progress", show_eta=True)
        yield RichLog(id="ckpt-output", wrap=True, markup=False, highlight=False)
        with Horizontal(id="ckpt-prompt-row"):
            yield Label("", id="ckpt-prompt-label")
            yield Input(id="ckpt-prompt")
        yield KeysFooter()

    def on_mount(self) -> None:
        if self.root:
            self.rescan()
        else:
            # No folder yet: the prompt is open for one, but keys go to the table (/ types it).
            self.action_root()
        self.query_one("#ckpt-steps", DataTable).focus()

    # -- the root folder -----------------------------------------------------------------------

    def _ask(self, what: str, label: str, value: str) -> None:
        self._prompt_for = what
        self.query_one("#ckpt-prompt-label", Label).update(markup(label))
        row = self.query_one("#ckpt-prompt-row")
        row.add_class("-active")
        box = self.query_one("#ckpt-prompt", Input)
        box.value = value
        box.focus()

    def _close_prompt(self) -> None:
        self._prompt_for = None
        self.query_one("#ckpt-prompt-row").remove_class("-active")
        self.query_one("#ckpt-steps", DataTable).focus()

    def action_root(self) -> None:
        self._ask("root", "checkpoint folder (trainer.default_local_dir):", self.root or "")

    @on(Input.Submitted, "#ckpt-prompt")
    def _prompt_submitted(self, event: Input.Submitted) -> None:
        what, value = self._prompt_for, event.value.strip()
        if what == "root":
            try:
                self.root = check_root(value)
            except ValueError as exc:
                report(self, str(exc), title="not a checkpoint folder")
                return
            self._close_prompt()
            self.rescan()
        elif what == "merge":
            if not value.startswith("/"):
                report(self, "the merged model's folder must be an absolute path on that host")
                return
            self._close_prompt()
            step, host = self._merge_args
            self.run_merge(step, host, value)

    def on_key(self, event) -> None:
        if event.key == "escape" and self._prompt_for is not None:
            self._close_prompt()
            event.stop()

    # -- scan ----------------------------------------------------------------------------------

    @work(
        exclusive=True,
        group="ckpt-scan",
        exit_on_error=False,
        description="Scanning for checkpoints",
    )
    async def rescan(self) -> None:
        if not self.root:
            return
        self._title("scanning…")
        try:
            self.index = await scan_fleet(self.fleet, self.inv, self.root)
        except (CkptError, TransportError) as exc:
            self._title(f"scan failed: {exc}")
            return
        self._fill()

    def _title(self, note: str = "") -> None:
        text = f" Checkpoints — {markup(self.root or '(no folder: press /)')}"
        target = self.host_names[self.host_i] if self.host_names else "-"
        text += f"   target host: {markup(target)} (←/→)"
        if note:
            text += f"   {markup(note)}"
        self.query_one("#ckpt-title", Static).update(text)

    def _fill(self) -> None:
        table = self.query_one("#ckpt-steps", DataTable)
        current = self.current
        table.clear()
        index = self.index
        if index is None:
            return
        for s in index.steps:
            complete = Text("yes", "green") if s.complete else Text("no", "bold red")
            on = s.complete_on
            if s.complete and not on:
                complete = Text("spread", "yellow")  # all ranks exist, on no host alone
            cells = []
            for host in self.host_names:
                ranks = s.hosts.get(host)
                style = "green" if host in on else ""
                cells.append(cell(_ranks(ranks) if ranks is not None else "", style=style))
            latest = "◀ latest" if s.latest_on else ""
            table.add_row(
                cell(s.step),
                cell(s.world_size or "?"),
                complete,
                *cells,
                human_size(s.size_bytes),
                latest,
                key=str(s.step),
            )
        if current is not None and index.step(current.step) is not None:
            table.move_cursor(row=table.get_row_index(str(current.step)))
        down = [h for h, scan in index.hosts.items() if not scan.ok]
        note = plural(len(index.steps), "step")
        if down:
            note += "   unreachable: " + ", ".join(down)
        self._title(note)
        self._detail()

    @property
    def current(self) -> StepState | None:
        table = self.query_one("#ckpt-steps", DataTable)
        if self.index is None or table.row_count == 0 or table.cursor_row is None:
            return None
        try:
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except CellDoesNotExist:
            return None
        return self.index.step(int(cast(str, key)))  # rows are added with key=str(step)

    def _detail(self) -> None:
        s = self.current
        box = self.query_one("#ckpt-detail", Static)
        if s is None:
            box.update(
                ""
                if self.index is None
                else f"no global_step_N under {markup(self.root)} on any host"
            )
            return
        t = Text()
        t.append(f"global_step_{s.step}", "bold")
        t.append(f"   world size {s.world_size}   roles: {', '.join(s.roles)}\n")
        for role, missing in s.missing.items():
            for kind, ranks in missing.items():
                t.append(f"{role}/{kind}: ranks {_ranks(tuple(ranks))} exist on no host\n", "red")
        if s.complete and not s.complete_on:
            t.append(
                "complete across hosts, on none alone: c collects it onto the target "
                "host, then m merges there\n",
                "yellow",
            )
        elif s.complete_on:
            t.append(
                f"complete on {', '.join(s.complete_on)}: m merges there; resume from "
                f"it in the job form\n",
                "green",
            )
        box.update(styled(t))  # roles and host names come from the hosts' folders

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._detail()

    def action_host(self, step: int) -> None:
        if self.host_names:
            self.host_i = (self.host_i + step) % len(self.host_names)
            self._title()

    def action_rescan(self) -> None:
        self.rescan()

    # -- collect -------------------------------------------------------------------------------

    def action_collect(self) -> None:
        s = self.current
        if s is None or self.index is None:
            return
        if self.busy:
            self.notify(f"{markup(self.busy)} is running", timeout=3)
            return
        self.run_collect(s.step, self.host_names[self.host_i])

    @work(
        exclusive=True, group="ckpt-op", exit_on_error=False, description="The checkpoint operation"
    )
    async def run_collect(self, step: int, host: str) -> None:
        assert self.index is not None
        out = self.query_one("#ckpt-output", RichLog)
        row = self.query_one("#ckpt-progress-row")
        bar = self.query_one("#ckpt-progress", ProgressBar)
        label = self.query_one("#ckpt-progress-label", Label)
        self.busy = f"collect step {step} onto {host}"
        out.write(Text(f"collect global_step_{step:d} onto {one_line(host)}", "bold"))
        row.add_class("-active")
        last = [0.0]

        def progress(p: CopyProgress) -> None:
            now = time.monotonic()
            if p.finished:
                out.write(
                    Text(f"  {one_line(p.path)}  ← {one_line(p.source)}  {human_size(p.total)}")
                )
            if now - last[0] < 0.1 and not p.finished:
                return  # coalesced: at most ~10 updates a second
            last[0] = now
            bar.update(total=max(p.bytes_total, 1), progress=p.bytes_done)
            label.update(f" {p.files_done:d}/{p.files_total:d} files ")

        try:
            report = await collect(self.fleet, self.index, step, None, host, progress=progress)
        except (CkptError, TransportError) as exc:
            out.write(Text(f"collect failed: {clean(exc)}", "red"))
        else:
            for c in report.conflicts:
                out.write(
                    Text(
                        f"  conflict, left untouched: {one_line(c.path)}: {one_line(c.reason)}",
                        "bold red",
                    )
                )
            for f in report.failed:
                out.write(
                    Text(
                        f"  failed: {one_line(f.path)} from {one_line(f.source)}: "
                        f"{one_line(f.error)}",
                        "red",
                    )
                )
            verdict = "done" if report.ok else "NOT complete"
            out.write(
                Text(
                    f"{verdict}: {len(report.copied)} copied, {len(report.present)} "
                    f"already there, sha256 checked, {report.mb_per_s:.0f} MB/s",
                    "green" if report.ok else "red",
                )
            )
        finally:
            self.busy = None
            row.remove_class("-active")
        self.rescan()

    # -- merge ---------------------------------------------------------------------------------

    def action_merge(self) -> None:
        s = self.current
        if s is None or not self.root:
            return
        if self.busy:
            self.notify(f"{markup(self.busy)} is running", timeout=3)
            return
        host = self.host_names[self.host_i]
        if host not in s.complete_on:
            self.notify(
                f"global_step_{s.step:d} is not complete on {markup(host)}: collect it "
                "there first (c)",
                severity="warning",
                timeout=6,
            )
            return
        self._merge_args = (s.step, host)
        default = f"{self.root.rstrip('/')}/merged/global_step_{s.step}_hf"
        self._ask("merge", f"merged model folder on {host}:", default)

    @work(
        exclusive=True, group="ckpt-op", exit_on_error=False, description="The checkpoint operation"
    )
    async def run_merge(self, step: int, host: str, target: str) -> None:
        assert self.root is not None
        out = self.query_one("#ckpt-output", RichLog)
        local_dir = f"{self.root.rstrip('/')}/global_step_{step}/actor"
        self.busy = f"merge of step {step} on {host}"
        out.write(Text(one_line(f"merge {local_dir} → {target} on {host}"), "bold"))

        def show(line: str) -> None:
            out.write(Text(clean(line)))

        try:
            result = await merge(self.fleet, host, local_dir, target, backend=None, on_line=show)
        except (CkptError, TransportError) as exc:
            out.write(Text(f"merge refused: {clean(exc)}", "red"))
            return
        finally:
            self.busy = None
        if result.ok:
            out.write(Text(f"merged into {one_line(target)} on {one_line(host)}:", "green"))
            for path, size in result.files:
                out.write(Text(f"  {one_line(path)}  {human_size(size)}"))
        else:
            out.write(
                Text(f"merge failed (exit {result.exit_status:d}): {clean(result.error)}", "red")
            )

    def action_back(self) -> None:
        self.app.pop_screen()
