"""A post-mortem session with a paused worker: the exception, the stack, the source around the
selected frame (read over SSH from the worker's host), its variables, an expression prompt,
and continue / disconnect. DAP runs over an SSH forward through the worker's host."""

from __future__ import annotations

import contextlib

from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Input, RichLog, Static, Tree
from textual.widgets.tree import TreeNode

from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.debug.dap import DapClient, DapError, Frame, Stopped, Variable
from tui.debug.targets import PausedWorker, open_debug_connection
from tui.sanitize import cell, clean, markup, one_line, styled
from tui.screens.error import ReportsWorkerFailures
from tui.transport.types import Forward, TransportError
from tui.widgets.footer import KeysFooter

CONTEXT_LINES = 12


class DapSessionScreen(ReportsWorkerFailures, Screen):
    BINDINGS = [
        Binding("c", "continue", "Continue (task fails as usual)"),
        Binding("d", "disconnect", "Detach (the task fails as usual)"),
        Binding("e,colon", "prompt", "Evaluate"),
        Binding("escape", "back", "Back"),
    ]

    DEFAULT_CSS = """
    DapSessionScreen #dap-title { height: 1; background: $panel; text-style: bold; }
    DapSessionScreen #dap-exception { height: auto; max-height: 4; color: $error; padding: 0 1; }
    DapSessionScreen #dap-left { width: 45%; }
    DapSessionScreen #dap-stack { height: 1fr; }
    DapSessionScreen #dap-vars { height: 1fr; border-top: solid $primary 50%; }
    DapSessionScreen #dap-source { height: 1fr; padding: 0 1; }
    DapSessionScreen #dap-eval-log { height: 10; border-top: solid $primary 50%; }
    DapSessionScreen #dap-eval { dock: bottom; }
    """

    def __init__(self, cluster: RayCluster, target: PausedWorker):
        super().__init__()
        self.cluster = cluster
        self.target = target
        self.forward: Forward | None = None
        self.dap: DapClient | None = None
        self.stopped: Stopped | None = None
        self.frames: list[Frame] = []
        self.frame: Frame | None = None
        self.state = "connecting"
        self._sources: dict[str, list[str]] = {}

    def compose(self) -> ComposeResult:
        t = self.target
        # Task, host, frames, variables and source come from the paused worker: all cleaned.
        yield Static(
            f" post-mortem — {markup(t.task)} on {markup(t.host)} pid {markup(t.pid)}"
            "   connecting…",
            id="dap-title",
        )
        yield Static("", id="dap-exception")
        with Horizontal():
            with Vertical(id="dap-left"):
                stack: DataTable[Text] = DataTable(id="dap-stack", cursor_type="row")
                stack.add_columns("frame", "where")
                yield stack
                yield Tree("variables", id="dap-vars")
            with Vertical():
                yield Static("", id="dap-source")
                yield RichLog(id="dap-eval-log", wrap=True, markup=False)
        yield Input(
            placeholder="expression in the selected frame (Enter evaluates, Escape leaves)",
            id="dap-eval",
        )
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#dap-stack", DataTable).focus()
        self.connect()

    def _title(self, state: str) -> None:
        self.state = state
        t = self.target
        self.query_one("#dap-title", Static).update(
            f" post-mortem — {markup(t.task)} on {markup(t.host)} pid {markup(t.pid)}   "
            f"{markup(state)}"
        )

    @work(exclusive=True, group="dap", exit_on_error=False, description="The debugger session")
    async def connect(self) -> None:
        try:
            self.dap = DapClient(*await open_debug_connection(self.cluster, self.target))
            self.stopped = await self.dap.attach_post_mortem(timeout=20)
            thread = self.stopped.thread_id
            if thread is None:  # DAP lets a stopped event name no thread; these need one
                raise DapError("the stopped event names no thread")
            info = await self.dap.exception_info(thread)
            self.frames = await self.dap.stack_trace(thread)
        except (DapError, TransportError, DashboardError, OSError) as exc:
            self._title(f"attach failed: {exc}")
            await self._close()
            return
        text = Text()
        text.append(f"{one_line(info.exception_id)}: ", "bold")
        text.append(clean(info.description or self.stopped.description or ""))
        self.query_one("#dap-exception", Static).update(text)
        stack = self.query_one("#dap-stack", DataTable)
        for f in self.frames:
            where = f"{f.path.rsplit('/', 1)[-1]}:{f.line}" if f.path else "-"
            stack.add_row(cell(f.name), cell(where), key=str(f.id))
        self._title("paused")
        if self.frames:
            # The innermost frame is the function that raised.
            own = next((i for i, f in enumerate(self.frames) if f.path), 0)
            stack.move_cursor(row=own)
            await self.show_frame(self.frames[own])

    async def show_frame(self, frame: Frame) -> None:
        self.frame = frame
        await self._show_source(frame)
        await self._show_variables(frame)

    async def _show_source(self, frame: Frame) -> None:
        box = self.query_one("#dap-source", Static)
        if not frame.path:
            box.update(
                Text(f"{one_line(frame.name)}: no source (native or generated code)", style="dim")
            )
            return
        lines = self._sources.get(frame.path)
        if lines is None:
            try:
                transport = await self.cluster.fleet.wait_up(self.target.host, 10)
                res = await transport.run(["cat", "--", frame.path], timeout=15)
                lines = res.stdout.splitlines() if res.ok else []
            except TransportError:
                lines = []
            self._sources[frame.path] = lines
        if not lines:
            box.update(
                Text(
                    f"{one_line(frame.path)}:{one_line(frame.line)}\n(source not "
                    f"readable on {one_line(self.target.host)})",
                    style="dim",
                )
            )
            return
        start = max(1, frame.line - CONTEXT_LINES)
        end = min(len(lines), frame.line + CONTEXT_LINES)
        code = clean("\n".join(lines[start - 1 : end]))
        box.update(
            Syntax(
                code,
                "python",
                line_numbers=True,
                start_line=start,
                highlight_lines={frame.line},
                word_wrap=False,
            )
        )
        box.border_title = markup(f"{frame.path}:{frame.line}")

    async def _show_variables(self, frame: Frame) -> None:
        tree = self.query_one("#dap-vars", Tree)
        tree.clear()
        tree.root.label = Text(f"variables of {one_line(frame.name)}")  # str labels are markup
        if self.dap is None:
            return
        try:
            for scope in await self.dap.scopes(frame.id):
                node = tree.root.add(
                    Text(one_line(scope.name), "bold"),
                    data=scope.reference,
                    expand=scope.name.lower().startswith("local"),
                )
                if node.is_expanded:
                    await self._fill_node(node, scope.reference)
        except DapError as exc:
            tree.root.add_leaf(Text(one_line(exc), "red"))
        tree.root.expand()

    async def _fill_node(self, node: TreeNode, reference: int) -> None:
        assert self.dap is not None
        node.remove_children()
        for var in await self.dap.variables(reference):
            label = self._label(var)
            if var.reference:
                node.add(label, data=var.reference)
            else:
                node.add_leaf(label)

    @staticmethod
    def _label(var: Variable) -> Text:
        t = Text()
        t.append(one_line(var.name), "bold")
        if var.type:
            t.append(f": {one_line(var.type)}", "dim")
        t.append(f" = {one_line(var.value, 200)}")
        return styled(t)

    @on(Tree.NodeExpanded, "#dap-vars")
    async def _expand(self, event: Tree.NodeExpanded) -> None:
        node = event.node
        if isinstance(node.data, int) and node.data and not node.children and self.dap:
            with contextlib.suppress(DapError):
                await self._fill_node(node, node.data)

    @on(DataTable.RowHighlighted, "#dap-stack")
    async def _frame_highlighted(self, event: DataTable.RowHighlighted) -> None:
        frame = next((f for f in self.frames if str(f.id) == event.row_key.value), None)
        if frame is not None and frame is not self.frame and self.state == "paused":
            await self.show_frame(frame)

    def action_prompt(self) -> None:
        self.query_one("#dap-eval", Input).focus()

    @on(Input.Submitted, "#dap-eval")
    async def _evaluate(self, event: Input.Submitted) -> None:
        expr = event.value.strip()
        log = self.query_one("#dap-eval-log", RichLog)
        if not expr:
            return
        if self.dap is None or self.state != "paused":
            log.write(Text(f"not paused ({one_line(self.state)})", "yellow"))
            return
        log.write(Text(f">>> {one_line(expr)}", "bold"))
        try:
            result = await self.dap.evaluate(expr, self.frame.id if self.frame else None)
            log.write(Text(clean(result.result)))
        except DapError as exc:
            log.write(Text(clean(exc), "red"))
        event.input.value = ""

    def on_key(self, event) -> None:
        if event.key == "escape" and self.query_one("#dap-eval", Input).has_focus:
            self.query_one("#dap-stack", DataTable).focus()
            event.stop()

    @work(exclusive=True, group="dap", exit_on_error=False, description="The debugger session")
    async def action_continue(self) -> None:
        if self.dap is None or self.stopped is None or self.state != "paused":
            return
        if self.stopped.thread_id is None:  # connect() does not get to "paused" then
            return
        try:
            await self.dap.continue_(self.stopped.thread_id)
            self._title("continued: the task fails as usual and the job goes on")
        except DapError as exc:
            self._title(f"continue failed: {exc}")
        await self._close()

    @work(exclusive=True, group="dap", exit_on_error=False, description="The debugger session")
    async def action_disconnect(self) -> None:
        await self._close()
        # debugpy resumes the worker when its client goes: the task fails as it would have.
        self._title("detached: the worker resumed and its task failed as usual")

    async def _close(self) -> None:
        dap, self.dap = self.dap, None
        if dap is not None:
            with contextlib.suppress(DapError, OSError):
                await dap.close()
        if self.forward is not None:
            self.forward.close()
            self.forward = None

    async def action_back(self) -> None:
        # Leaving ends the session; debugpy then resumes the worker (the task fails).
        await self._close()
        self.app.pop_screen()

    async def on_unmount(self) -> None:
        await self._close()
