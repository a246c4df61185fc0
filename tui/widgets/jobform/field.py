"""One override key in the job form: label, dotted key, editor, verl's help, inline problem.

The editor is an Input (verl's default as placeholder; empty means "not overridden"), a Switch
for plain bools, or a Select for keys with a fixed set of values. Every edit posts
`FormField.Changed`; the screen debounces and re-validates. No I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Select, Static, Switch

from tui.jobs.formstate import default_text
from tui.jobs.rules import Problem
from tui.jobs.schema import KeyInfo
from tui.sanitize import clean, one_line

_BOOL_TEXT = {True: "true", False: "false"}


class FormField(Vertical):
    DEFAULT_CSS = """
    FormField { height: auto; padding: 0 1; margin-bottom: 1; }
    FormField .field-head { height: 1; }
    FormField .field-label { width: auto; text-style: bold; }
    FormField .field-key { width: 1fr; color: $text-muted; padding-left: 2; }
    FormField .field-remove { min-width: 5; width: 5; height: 1; border: none; margin: 0; }
    FormField Input { width: 100%; height: 1; border: none; padding: 0 1; background: $boost; }
    FormField Input:focus { background: $primary 30%; border: none; }
    FormField Select { width: 60; }
    FormField .field-switch { height: auto; }
    FormField .field-switch Static { width: 1fr; padding: 1 0 0 1; color: $text-muted; }
    FormField .field-help { color: $text-muted; }
    FormField.-from-cluster .field-key { color: $accent; }
    FormField .field-problem { display: none; }
    FormField.-error .field-problem { display: block; color: $error; text-style: bold; }
    FormField.-warn .field-problem { display: block; color: $warning; }
    FormField.-error Input { background: $error 25%; }
    FormField.-warn Input { background: $warning 15%; }
    """

    class Changed(Message):
        def __init__(self, field: FormField) -> None:
            super().__init__()
            self.field = field

        @property
        def control(self) -> FormField:
            return self.field

    class Remove(Message):
        def __init__(self, field: FormField) -> None:
            super().__init__()
            self.field = field

    def __init__(
        self, key: str, label: str, info: KeyInfo | None, text: str = "", *, removable: bool = False
    ) -> None:
        super().__init__(classes="form-field")
        self.key = key
        self.label = label
        self.info = info
        self.removable = removable
        self._text = text
        self.local_problem: str | None = None
        # The value the check filled in from the live cluster (trainer.nnodes /
        # n_gpus_per_node left empty): what is submitted, so the field shows it, marked.
        self.from_cluster: str | None = None
        self._placeholder = ""

    # -- layout --------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        info = self.info
        if info is not None and info.choices:
            return "select"
        if info is not None and info.type == "bool" and self._text in ("", "true", "false"):
            return "switch"
        return "input"

    def compose(self) -> ComposeResult:
        with Horizontal(classes="field-head"):
            if self.label:
                yield Static(one_line(self.label), classes="field-label", markup=False)
            yield Static(one_line(self.key), classes="field-key", markup=False)
            if self.removable:
                yield Button("✕", classes="field-remove", tooltip="remove this key")
        info = self.info
        default = default_text(info.default) if info is not None else ""
        if info is not None and info.follows:
            default = f"{default}  (follows {info.follows})"
        kind = self.kind
        if kind == "select":
            assert info is not None
            options = list(info.choices)
            if self._text and self._text not in options:
                options.append(self._text)
            yield Select(
                [(o, o) for o in options],
                prompt=f"verl's default: {default}",
                allow_blank=True,
                value=self._text or Select.NULL,
            )
        elif kind == "switch":
            assert info is not None
            on = self._text == "true" if self._text else bool(info.default)
            with Horizontal(classes="field-switch"):
                yield Switch(value=on)
                yield Static(one_line(self._switch_note()), classes="switch-note", markup=False)
        else:
            self._placeholder = default or "not in verl's config"
            yield Input(value=self._text, placeholder=self._placeholder)
        if info is not None and info.help:
            lines = info.help.splitlines()
            text = "\n".join(lines[:3]) + (" …" if len(lines) > 3 else "")
            yield Static(clean(text), classes="field-help", markup=False)
        yield Static("", classes="field-problem", markup=False)

    def _switch_note(self) -> str:
        default = _BOOL_TEXT.get(bool(self.info.default)) if self.info else "?"
        return (
            f"set to {self._text}" if self._text else "not set"
        ) + f"  (verl's default: {default})"

    def show_from_cluster(self, value: object | None) -> None:
        """Mark the field as filled from the cluster with `value` (None: not, or no longer):
        an empty field shows that value, not verl's default, since that is what is sent."""
        text = None if value is None else str(value)
        if text == self.from_cluster:
            return
        self.from_cluster = text
        self.set_class(text is not None, "-from-cluster")
        key = one_line(self.key) + (f"   ← from cluster: {one_line(text)}" if text else "")
        self.query_one(".field-key", Static).update(key)
        if self.kind == "input":
            self.query_one(Input).placeholder = (
                f"{text}  (from cluster; type a value to pin it)" if text else self._placeholder
            )

    def focus_editor(self) -> None:
        """Focus this field's editor and bring it into view (the form's next-error keys)."""
        for editor in self.query("Input, Select, Switch"):
            if editor.focusable:
                editor.focus()
                break
        self.scroll_visible(top=True, animate=False)

    # -- value ---------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return self._text

    def set_text(self, text: str) -> None:
        """Set what the field holds (draft restore, discard); posts no Changed."""
        self._text = text
        kind = self.kind
        with self.prevent(Input.Changed, Select.Changed, Switch.Changed):
            if kind == "input":
                self.query_one(Input).value = text
            elif kind == "select":
                sel = self.query_one(Select)
                sel.value = text if text else Select.NULL
            else:
                self.query_one(Switch).value = (
                    text == "true" if text else bool(self.info and self.info.default)
                )
                self.query_one(".switch-note", Static).update(one_line(self._switch_note()))

    def _set_from_editor(self, text: str) -> None:
        if text == self._text:
            return
        self._text = text
        self.post_message(self.Changed(self))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._set_from_editor(event.value.strip())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        value = event.value
        self._set_from_editor("" if value is Select.NULL or value is None else str(value))

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        text = _BOOL_TEXT[bool(event.value)]
        self._set_from_editor(text)
        self.query_one(".switch-note", Static).update(one_line(self._switch_note()))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.Remove(self))

    # -- problems ------------------------------------------------------------------------

    def show_problems(self, problems: Sequence[Problem]) -> None:
        msgs: list[tuple[str, str]] = []
        if self.local_problem:
            msgs.append(("error", self.local_problem))
        msgs += [(p.level, p.message) for p in problems]
        level = "error" if any(lv == "error" for lv, _ in msgs) else "warn" if msgs else None
        self.set_class(level == "error", "-error")
        self.set_class(level == "warn", "-warn")
        line = Text()
        for i, (lv, msg) in enumerate(msgs):
            if i:
                line.append("\n")
            line.append("✗ " if lv == "error" else "! ", "bold")
            line.append(clean(msg))  # validation text quotes the profile's values
        self.query_one(".field-problem", Static).update(line)

    @property
    def problem_text(self) -> str:
        return str(self.query_one(".field-problem", Static).render())
