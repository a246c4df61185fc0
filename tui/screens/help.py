"""`?`: every key binding of the screen underneath, generated from the bindings themselves."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.screens.error import ReportsWorkerFailures

# Keys Textual renders by name; show them the way people type them.
_KEY_NAMES = {
    "slash": "/",
    "question_mark": "?",
    "space": "space",
    "escape": "esc",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "ctrl+p": "ctrl+p",
}


def key_label(keys: str) -> str:
    return ", ".join(_KEY_NAMES.get(k.strip(), k.strip()) for k in keys.split(","))


def node_title(node) -> str:
    """The section a node's keys are listed under (help and the command palette)."""
    if getattr(node, "HELP_TITLE", None):
        return node.HELP_TITLE
    name = type(node).__name__
    return name.removesuffix("Screen") + " screen" if name.endswith("Screen") else name


# A text field's own editing keys, by the action Textual's Input binds them to: listed (keys
# read from Input.BINDINGS, so they cannot drift) on a screen of fields, where they are the
# field's and never a screen action (the job form binds none of them).
_FIELD_ACTIONS = {
    "delete_right": "delete the character right of the cursor",
    "delete_right_all": "delete to the end of the line",
    "delete_left_all": "delete to the start of the line",
    "delete_left_word": "delete the word left of the cursor",
    "home": "to the start of the line",
    "end": "to the end of the line",
    "cut": "cut (copy: ctrl+c, paste: ctrl+v)",
}
FIELD_KEYS_TITLE = "In a text field"


def field_key_rows() -> list[tuple[str, str, str]]:
    from textual.widgets import Input

    rows = []
    for b in Input.BINDINGS:
        binding = b if isinstance(b, Binding) else Binding(*b)
        desc = _FIELD_ACTIONS.get(binding.action)
        if desc:
            rows.append((FIELD_KEYS_TITLE, key_label(binding.key), desc))
    return rows


def offered(node, binding: Binding) -> bool:
    """Whether `binding` is offered now: its target's check_action does not hide it (as the
    footer does; e.g. Ray up where Ray is not installed). Help and the palette both ask."""
    action = binding.action
    target = node
    if action.startswith("app."):
        target, action = node.app, action.removeprefix("app.")
    elif action.startswith("screen."):
        target, action = node.screen, action.removeprefix("screen.")
    name = action.split("(", 1)[0]
    try:
        return target.check_action(name, ()) is not False
    except Exception:  # a node not mounted (no app): offered
        return True


def collect_bindings(screen) -> list[tuple[str, str, str]]:
    """(where, keys, description) for the app, the screen and every widget on it; a screen
    of text fields (HELP_FIELD_KEYS) also gets the fields' editing keys."""
    rows: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    sources = [("Everywhere", screen.app), (node_title(screen), screen)]
    # Our own widgets only: Textual's Input editing keys are standard and would drown ours.
    sources += [
        (node_title(w), w)
        for w in screen.query("*")
        if getattr(w, "BINDINGS", None) and type(w).__module__.startswith("tui.")
    ]
    for where, node in sources:
        for b in node.BINDINGS:
            binding = b if isinstance(b, Binding) else Binding(*b)
            desc = binding.description or binding.action
            key = (binding.key, desc)
            if key in seen or not desc or not offered(node, binding):
                continue
            seen.add(key)
            rows.append((where, key_label(binding.key), desc))
    if getattr(screen, "HELP_FIELD_KEYS", False):
        rows += field_key_rows()
    return rows


class HelpScreen(ReportsWorkerFailures, ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close help")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-height: 90%; height: auto;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, rows: list[tuple[str, str, str]]):
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        lines = ["[b]Keys[/b]  [dim](esc or ? closes)[/dim]"]
        section = None
        for where, keys, desc in self.rows:
            if where != section:
                section = where
                lines.append(f"\n[b $accent]{where}[/]")
            lines.append(f"  [b]{keys:<18}[/b] {desc}")
        lines.append(
            "\n[dim]Hosts fold with enter; the command palette (ctrl+p) lists every "
            "action by name.[/dim]"
        )
        with VerticalScroll():
            yield Static("\n".join(lines), markup=True)
