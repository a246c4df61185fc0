"""The job form's errors, found without scrolling: how many there are and which keys they are on
(the submit bar names them), next/previous error keys that focus the field, and the first error
focused when a submit is refused. A part of JobFormScreen; the problems are the pipeline's
report (tui/jobs/validate.py) and each field's own parse problem."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.widgets import Static

from tui.fmt import plural
from tui.sanitize import markup
from tui.screens.error import ReportsWorkerFailures
from tui.widgets.jobform.summary import NAMED_KEYS, place_problems

if TYPE_CHECKING:
    from tui.jobs.validate import Report
    from tui.widgets.jobform import FormField

PROFILE = "profile"  # where an error no field owns is said to be (it is listed above the form)


class FormErrors(ReportsWorkerFailures, Screen[str | None]):
    """JobFormScreen's errors part (a base class: the form's state is the screen's)."""

    if TYPE_CHECKING:  # the screen's, used here
        fields: dict[str, FormField]
        report: Report | None

    @property
    def error_count(self) -> int:
        n = sum(1 for f in self.fields.values() if f.local_problem)
        if self.report is not None:
            n += len(self.report.errors)
            if self.report.config is None and not self.report.errors:
                n += 1
        return n

    def error_keys(self) -> list[str]:
        """The keys with an error, in the form's order (each once); errors no field owns
        follow as their own key, or `profile`."""
        report = self.report
        placed, loose = place_problems(report.errors if report else [], self.fields)
        keys = [k for k, f in self.fields.items() if f.local_problem or placed.get(k)]
        for p in loose:
            key = p.key or PROFILE
            if key not in keys:
                keys.append(key)
        if report is not None and report.config is None and not report.errors and not keys:
            keys.append(PROFILE)
        return keys

    def errors_named(self) -> str:
        """``2 errors: data.train_batch_size, actor_rollout_ref.rollout.n``."""
        keys = self.error_keys()
        named = ", ".join(keys[:NAMED_KEYS])
        more = f" (+{len(keys) - NAMED_KEYS} more)" if len(keys) > NAMED_KEYS else ""
        return f"{plural(self.error_count, 'error')}: {named}{more}" if keys else ""

    def _error_fields(self) -> list[FormField]:
        keys = set(self.error_keys())
        return [f for k, f in self.fields.items() if k in keys]

    def _field_of_focus(self) -> FormField | None:
        from tui.widgets.jobform import FormField

        node = self.app.focused
        while node is not None and not isinstance(node, FormField):
            node = node.parent  # type: ignore[assignment]
        return node

    def focus_error(self, step: int = 1, *, first: bool = False) -> bool:
        """Focus the next (`step` 1) or previous (-1) field with an error after the focused
        one, wrapping; `first`: the first one. An error no field owns scrolls the form to the
        list above it. False when there is no error to go to."""
        fields = self._error_fields()
        if not fields:  # only errors no field owns: they are listed above the form
            return bool(self.query_one("#form-problems", Static).display)
        here = None if first else self._field_of_focus()
        order = list(self.fields.values())
        if here is None or here not in order:
            target = fields[0] if step > 0 else fields[-1]
        else:
            at = order.index(here)
            ahead = [f for f in fields if (order.index(f) - at) * step > 0]
            if ahead:
                target = ahead[0] if step > 0 else ahead[-1]
            else:  # wrap around
                target = fields[0] if step > 0 else fields[-1]
        target.focus_editor()
        return True

    def action_next_error(self) -> None:
        self._go_to_error(1)

    def action_previous_error(self) -> None:
        self._go_to_error(-1)

    def _go_to_error(self, step: int) -> None:
        if not self.focus_error(step):
            self.notify("no errors", timeout=2)
        elif not self._error_fields():  # nothing to focus: say where they are
            self.notify(f"{markup(self.errors_named())} — listed above the form", timeout=4)
