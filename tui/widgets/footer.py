"""The key footer every screen shows: Textual's Footer, rebuilt only when what it shows changed.

Textual's Footer rebuilds itself (every key widget unmounted, mounted and styled again) each
time its screen publishes a bindings change, which it does on every focus move and every
`refresh_bindings()`. Moving through the job form's fields, or a table refreshing which keys
apply, mostly leaves the shown keys as they were: those rebuilds were a third of the CPU of
the form's keyboard tests and are work a login node's cockpit does on each key.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    """A Footer that skips a rebuild when the keys it would show are the ones it shows."""

    # None of its own: Help lists our widgets' BINDINGS, and a footer is never focused (the
    # scroll keys it inherits still merge in, as Textual's Footer has them).
    BINDINGS: ClassVar[list[BindingType]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple[Any, ...] | None = None  # what the last compose showed

    def _keys(self) -> tuple[Any, ...]:
        """Everything compose reads: each active binding's key, text, action, group and state,
        and the footer's own options."""
        keys: list[Any] = [self.compact, self.show_command_palette, self.app.app_focus]
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            group = binding.group
            keys.append(
                (
                    binding.key,
                    binding.action,
                    binding.description,
                    binding.show,
                    binding.key_display,
                    (group.description, group.compact) if group is not None else None,
                    enabled,
                    tooltip,
                )
            )
        return tuple(keys)

    def compose(self) -> ComposeResult:
        self._shown = self._keys() if self._bindings_ready else None
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        if (
            self._shown is not None
            and self.is_attached
            and screen is self.screen
            and self._keys() == self._shown
        ):
            return
        super().bindings_changed(screen)
