"""The job log pane: a LogView with a search / save prompt and a status line."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from tui.logs.store import LogStore
from tui.sanitize import one_line, styled
from tui.widgets.logview.view import LogView

LOAD_SLICE = 256 << 10  # characters per step when loading a whole log at once
PROMPT_LABELS = {"search": "/", "filter": "filter /", "save": "save to"}


class _Prompt(Input):
    """The pane's one-line prompt (search pattern or save path)."""

    HELP_TITLE = "Log prompt"
    BINDINGS = [Binding("escape", "cancel", "Close the prompt (text kept)")]

    class Cancelled(Message):
        pass

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())


class LogPane(Widget):
    """A LogView with a search / save prompt and a status line."""

    HELP_TITLE = "Job log"

    BINDINGS = [
        Binding("slash", "search", "Search (n / N: next / previous)"),
        Binding("s", "save", "Save the log to a file"),
    ]

    DEFAULT_CSS = """
    LogPane { height: 1fr; layout: vertical; }
    LogPane > .log-title { height: 1; background: $panel; color: $text; text-style: bold;
                           padding: 0 1; }
    LogPane > LogView { height: 1fr; }
    LogPane > .log-prompt-row { height: 1; display: none; background: $panel; }
    LogPane > .log-prompt-row.-open { display: block; }
    LogPane > .log-prompt-row > Label { width: auto; padding: 0 1; color: $accent;
                                       text-style: bold; }
    LogPane > .log-prompt-row > _Prompt { height: 1; border: none; padding: 0; width: 1fr;
                                          background: $panel; }
    LogPane > .log-status { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    LogPane > .log-hint { height: auto; max-height: 4; display: none; background: $boost;
                          padding: 0 1; }
    LogPane > .log-hint.-shown { display: block; }
    """

    class Saved(Message):
        """The log was written to `path`."""

        def __init__(self, path: Path) -> None:
            self.path = path
            super().__init__()

    def __init__(
        self,
        title: str = "",
        save_path: str | Path | None = None,
        *,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._title = title
        self._title_bar = Static(one_line(title), classes="log-title", markup=False)
        self._title_bar.display = bool(title)
        self.save_path = save_path
        self.log_view = LogView()
        self._prompt = _Prompt(placeholder="")
        self._prompt_label = Label("")
        self._prompt_row = Horizontal(self._prompt_label, self._prompt, classes="log-prompt-row")
        self._status = Static("", classes="log-status", markup=False)
        # The hint of the line jumped to (h / H), else the latest, whole and wrapped: the hint
        # row under its line is one row, cut at the view's width.
        self._hint_box = Static("", classes="log-hint", markup=False)
        self._hint_key: tuple[int | None, int] | None = None
        self._mode = ""  # "search", "filter" or "save" while the prompt is open
        self._search_text = ""
        self._save_text = ""
        self._note = ""  # the pane's own remark (saved to …, save failed …)
        self._older: LogStore | None = None  # lines before the shown tail, while they load
        self._older_total = self._older_done = 0
        self._status_text = ""

    @property
    def store(self) -> LogStore:
        return self.log_view.store

    @property
    def title(self) -> str:
        return self._title

    @title.setter
    def title(self, value: str) -> None:
        """Shown on the pane's first row; an empty title hides the row."""
        self._title = value
        self._title_bar.update(one_line(value))  # a host's file name, a job id: outside text
        self._title_bar.display = bool(value)

    def compose(self) -> ComposeResult:
        yield self._title_bar
        yield self.log_view
        yield self._hint_box
        yield self._prompt_row
        yield self._status

    def on_mount(self) -> None:
        self._render_status()

    # -- the owner's API ---------------------------------------------------------------------

    def append(self, text: str) -> None:
        self.log_view.append(text)

    async def load(self, text: str, status: str | None = None) -> None:
        """A finished job's whole log: appended in slices so keys stay answered meanwhile."""
        for start in range(0, len(text), LOAD_SLICE):
            self.log_view.append(text[start : start + LOAD_SLICE])
            await asyncio.sleep(0)
        self.finish(status)

    def finish(self, status: str | None = None) -> None:
        self.log_view.finish(status)
        self._render_status()

    # A big log shows its end first: `append` feeds the shown store from the tail on, while
    # `backfill` collects the lines before the tail (in file order) in a store of their own;
    # `end_backfill` appends the shown lines to it and swaps it in (the view keeps its place).

    def start_backfill(self, total_bytes: int = 0) -> None:
        self._drop_backfill()
        self._older = LogStore()
        self._older_total, self._older_done = total_bytes, 0
        self._render_status()

    def backfill(self, text: str) -> None:
        """Older text, in file order, before everything `append` was given."""
        if self._older is None or self.store.closed:
            return
        self._older.append(text)
        self._older_done += len(text)
        self._render_status()

    def end_backfill(self) -> None:
        older, self._older = self._older, None
        if older is None or self.store.closed:
            return
        older.flush_pending()  # the tail began at a line start
        shift, shown = len(older), self.store
        batch: list[str] = []
        for i in range(len(shown)):
            batch.append(shown.line(i))
            if len(batch) >= 4096:
                older.append("\n".join(batch) + "\n")
                batch.clear()
        if batch:
            older.append("\n".join(batch) + "\n")
        older.append(shown.pending)
        self.log_view.replace_store(older, shift)
        self._render_status()

    @property
    def backfilling(self) -> bool:
        return self._older is not None

    def _drop_backfill(self) -> None:
        if self._older is not None:
            self._older.close()
            self._older = None

    def on_unmount(self) -> None:
        self._drop_backfill()

    def clear(self) -> None:
        self._drop_backfill()
        self.log_view.clear()
        self._note = ""
        self._save_text = ""  # another log: its owner's default path again
        self._render_status()

    # -- prompt ------------------------------------------------------------------------------

    def _open_prompt(self, mode: str) -> None:
        self._mode = mode
        self._prompt_label.update(PROMPT_LABELS[mode])
        if mode == "save":
            default = self._save_text or str(self.save_path or "verl-tui-job.log")
            self._prompt.placeholder = "file path (enter: save, esc: cancel)"
            self._prompt.value = default
        else:
            self._prompt.placeholder = "text (smart case; re:PATTERN for a regex) — esc closes"
            self._prompt.value = self._search_text
        self._prompt_row.add_class("-open")
        self._prompt.focus()
        self._prompt.cursor_position = len(self._prompt.value)

    def _close_prompt(self) -> None:
        if self._mode in ("search", "filter"):
            self._search_text = self._prompt.value
        elif self._mode == "save":
            self._save_text = self._prompt.value
        self._mode = ""
        self._prompt_row.remove_class("-open")
        self.log_view.focus()

    def action_search(self) -> None:
        self._open_prompt("search")

    def action_save(self) -> None:
        self._open_prompt("save")

    def on_log_view_search_requested(self, event: LogView.SearchRequested) -> None:
        event.stop()
        self._open_prompt("filter" if event.filter else "search")

    @on(_Prompt.Cancelled)
    def _prompt_cancelled(self, event: _Prompt.Cancelled) -> None:
        event.stop()
        self._close_prompt()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        mode, value = self._mode, event.value
        self._close_prompt()
        if mode == "save":
            self._save(value)
            return
        regex = value.startswith("re:")
        pattern = value[3:] if regex else value
        try:
            self.log_view.search(pattern, regex=regex, filter=True if mode == "filter" else None)
            self._note = ""
        except re.error as exc:
            self._note = f"bad regex: {exc}"
        self._render_status()

    def _save(self, value: str) -> None:
        if not value.strip():
            self._note = "save cancelled: no path"
        else:
            try:
                path = self.store.save(value.strip())
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self._note = f"save failed: {reason}: {value.strip()}"
            else:
                self._note = f"saved {len(self.store):,} lines to {path}"
                self.post_message(self.Saved(path))
        self._render_status()

    # -- status ------------------------------------------------------------------------------

    def on_log_view_status_changed(self, event: LogView.StatusChanged) -> None:
        event.stop()
        self._render_status()

    @property
    def status_text(self) -> str:
        """The status line as plain text."""
        return self._status_text

    def _render_hint(self) -> None:
        view, store = self.log_view, self.log_view.store
        hinted = store.hint_lines()
        key = (view.current, len(hinted))
        if key == self._hint_key:
            return  # called on every append: the box changes only with a new hint or a jump
        self._hint_key = key
        line = view.current if view.current is not None and store.hint(view.current) else None
        if line is None and hinted:
            line = hinted[-1]
        hint = store.hint(line) if line is not None else None
        self._hint_box.set_class(hint is not None, "-shown")
        if hint is not None and line is not None:
            text = Text.assemble(("↳ hint ", "bold"), (f"(line {line + 1:,}): ", "dim"))
            text.append(one_line(hint.text, 1000))
            self._hint_box.update(text)

    def _render_status(self) -> None:
        self._render_hint()
        view = self.log_view
        parts: list[tuple[str, str]] = [(f"{len(view.store):,} lines", "")]
        if self._older is not None:
            done = self._older_done / self._older_total if self._older_total else 0.0
            parts.append((f"loading older lines {min(done, 1.0):.0%}", "italic"))
        if view.search_query is not None:
            parts.append((f"/{view.search_query.pattern}  {view.match_info()}", "bold"))
        parts.append(
            ("FOLLOW", "bold green") if view.follow else ("PAUSED (F follows)", "bold yellow")
        )
        if view.wrap:
            parts.append(("WRAP", "bold"))
        if view.filter_on:
            parts.append(("FILTER", "bold magenta"))
        if view.ended:
            parts.append((view.ended, "bold"))
        note = view.message or self._note
        if note:
            parts.append((note, "italic"))
        text = Text()
        for i, (part, style) in enumerate(parts):
            if i:
                text.append("  ·  ")
            text.append(part, style)
        self._status_text = text.plain
        # (a job's end status and messages come from Ray: cleaned, styles kept)
        self._status.update(styled(text), layout=False)  # one fixed row: no layout pass
