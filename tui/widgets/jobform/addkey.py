"""Add any of verl's keys to the form: completion over every composed key; enter adds a row
(`key` or `key=value`)."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import Input


class AddKey(Input):
    DEFAULT_CSS = """
    AddKey { width: 100%; }
    """

    class Add(Message):
        def __init__(self, key: str, text: str) -> None:
            super().__init__()
            self.key = key
            self.text = text

    def __init__(self, keys: Iterable[str], **kwargs) -> None:
        super().__init__(
            placeholder="add a key: type a dotted key (→ completes), enter adds; key=value works",
            suggester=SuggestFromList(list(keys), case_sensitive=False),
            **kwargs,
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        line = event.value.strip()
        if not line:
            return
        key, _, text = line.partition("=")
        self.value = ""
        self.post_message(self.Add(key.strip(), text.strip()))


class AddKeyBox(Vertical):
    """The add-a-key input's place at the end of the form (new rows are mounted before it)."""

    DEFAULT_CSS = """
    AddKeyBox { height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, add: AddKey) -> None:
        super().__init__()
        self._add = add

    def compose(self) -> ComposeResult:
        yield self._add
