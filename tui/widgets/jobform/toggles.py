"""The job form's run switches (debuggers, print-config-only) and its secret fields."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Checkbox, Input, Static

from tui.jobs.formstate import Toggles
from tui.sanitize import one_line


class FormToggles(Vertical):
    """The run switches: debuggers and print-config-only."""

    DEFAULT_CSS = """
    FormToggles { height: auto; padding: 0 1; }
    FormToggles Checkbox { width: 100%; border: none; height: 1; padding: 0; }
    """

    def __init__(self, toggles: Toggles) -> None:
        super().__init__()
        self._initial = toggles

    def compose(self) -> ComposeResult:
        t = self._initial
        yield Checkbox(
            "post-mortem debugging (RAY_DEBUG_POST_MORTEM=1)",
            t.post_mortem,
            id="toggle-post-mortem",
        )
        yield Checkbox(
            "legacy ray debug (RAY_DEBUG=legacy)", t.legacy_debug, id="toggle-legacy-debug"
        )
        yield Checkbox(
            "print config only (main_ppo --cfg job: verl composes and prints the "
            "config on the cluster, no GPU)",
            t.print_config,
            id="toggle-print-config",
        )

    @property
    def value(self) -> Toggles:
        return Toggles(
            post_mortem=self.query_one("#toggle-post-mortem", Checkbox).value,
            legacy_debug=self.query_one("#toggle-legacy-debug", Checkbox).value,
            print_config=self.query_one("#toggle-print-config", Checkbox).value,
        )


class SecretFields(Vertical):
    """A resubmitted job's secrets, by name: each typed here or taken from this environment
    (the history keeps no values)."""

    DEFAULT_CSS = """
    SecretFields { height: auto; }
    """

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self.names = list(names)

    def compose(self) -> ComposeResult:
        for name in self.names:
            here = name in os.environ
            state = "set here" if here else "not set here"
            yield Static(
                Text(f"secret: from ${one_line(name)} — {one_line(state)}"), classes="secret-label"
            )
            yield Input(
                password=True,
                id=f"secret-{name}",
                placeholder=(f"${name} is used" if here else f"type {name} (required)"),
            )

    def values(self) -> tuple[dict[str, str], list[str]]:
        """(name → value, names set nowhere): typed here first, else this environment."""
        out: dict[str, str] = {}
        missing: list[str] = []
        for name in self.names:
            value = self.query_one(f"#secret-{name}", Input).value or os.environ.get(name)
            if value:
                out[name] = value
            else:
                missing.append(name)
        return out, missing
