"""What a new user tripped on in the cockpit (issue 24), under Textual's Pilot with the real app
on this machine (local transport; no Ray runs here, so the form checks without the cluster):
the form names the keys with errors and takes the cursor to them; a field keeps its own editing
keys (ctrl+d, ctrl+k) and the draft is discarded only after a yes; the Queue switch is one key
away and says its state in words."""

from __future__ import annotations

from test_job_form import _open_form, local_app, type_into, until
from textual.widgets import Checkbox, Input

from tui.screens.confirm import ConfirmScreen

__all__ = ["local_app"]  # the fixture, shared with test_job_form

BATCH = "data.train_batch_size"
ROLLOUT_N = "actor_rollout_ref.rollout.n"


def _summary(form) -> str:
    return str(form.query_one("#form-summary").render())


def _focused_field(app) -> str | None:
    from tui.widgets.jobform import FormField

    node = app.focused
    while node is not None and not isinstance(node, FormField):
        node = node.parent
    return node.key if node is not None else None


async def test_errors_are_named_and_the_cursor_goes_to_them(local_app):
    app = local_app()
    notes: list[str] = []
    async with app.run_test(size=(160, 50)) as pilot:
        original = app.notify

        def notify(message, *a, **kw):
            notes.append(str(message))
            return original(message, *a, **kw)

        app.notify = notify  # type: ignore[method-assign]
        form = await _open_form(app, pilot)
        before = form.error_keys()  # none, unless a Ray on this machine lacks the GPUs
        await type_into(pilot, form.fields[BATCH].query_one(Input), "many")
        await type_into(pilot, form.fields[ROLLOUT_N].query_one(Input), "two")
        await until(
            pilot,
            lambda: form.validated and {BATCH, ROLLOUT_N} <= set(form.error_keys()),
            20,
            "two errors",
        )
        assert form.error_keys()[:2] == [BATCH, ROLLOUT_N], form.error_keys()  # form order
        # The submit bar names both keys, in the form's order, and the key that finds them.
        summary = _summary(form)
        assert f"{form.error_count} errors: {BATCH}, {ROLLOUT_N}" in summary, summary
        assert summary.index(BATCH) < summary.index(ROLLOUT_N), summary
        assert "ctrl+n next error" in summary

        # Refused: the message names the keys and the cursor lands on the first error.
        form.query_one("#toggle-print-config", Checkbox).focus()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(n.startswith("not submitted") for n in notes), 10)
        refusal = next(n for n in notes if n.startswith("not submitted"))
        assert BATCH in refusal and ROLLOUT_N in refusal, refusal
        assert "submit is off" not in refusal and "error(s)" not in refusal
        assert _focused_field(app) == BATCH
        assert isinstance(app.focused, Input)
        # ctrl+n / ctrl+b walk the errors (wrapping), wherever the cursor is.
        await pilot.press("ctrl+n")
        assert _focused_field(app) == ROLLOUT_N
        await pilot.press("ctrl+n")
        assert _focused_field(app) == BATCH  # wrapped
        await pilot.press("ctrl+b")
        assert _focused_field(app) == ROLLOUT_N
        assert form.fields[ROLLOUT_N].region.y < app.size.height  # scrolled into view

        # Fixed: the summary says ready and ctrl+n has nothing to go to.
        await type_into(pilot, form.fields[BATCH].query_one(Input), "256")
        await type_into(pilot, form.fields[ROLLOUT_N].query_one(Input), "5")
        await until(pilot, lambda: form.validated and form.error_keys() == before, 20, "fixed")
        if not before:
            assert "ready" in _summary(form)
            notes.clear()
            await pilot.press("ctrl+n")
            assert notes == ["no errors"]


async def test_fields_keep_their_editing_keys_and_discard_asks_first(local_app):
    app = local_app()
    async with app.run_test(size=(160, 50)) as pilot:
        form = await _open_form(app, pilot)
        name = form.fields["trainer.experiment_name"]
        inp = name.query_one(Input)
        await type_into(pilot, inp, "abcdef")
        inp.cursor_position = 2
        await pilot.press("ctrl+d")  # delete the character right of the cursor
        assert inp.value == "abdef" and name.text == "abdef"
        await pilot.press("ctrl+k")  # delete to the end of the line
        assert inp.value == "ab"
        assert app.screen is form  # neither key left the form or opened anything
        await until(pilot, lambda: form.validated, 20, "checked")

        # The draft goes only after a yes; a no keeps every field.
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the question")
        await pilot.press("n")
        await until(pilot, lambda: app.screen is form, 5)
        assert name.text == "ab"
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the question")
        await pilot.press("y")
        await until(
            pilot,
            lambda: app.screen is form and form.fields["trainer.experiment_name"].text != "ab",
            10,
            "the profile's value back",
        )
        assert form.fields["trainer.experiment_name"].text == "qwen2.5-0.5b-grpo"


async def test_queue_switch_is_one_key_away_and_says_its_state(local_app):
    app = local_app()
    async with app.run_test(size=(160, 50)) as pilot:
        form = await _open_form(app, pilot)
        box = form.query_one("#form-queue", Checkbox)
        assert str(box.label) == "Queue: off" and not form.queue_wanted
        form.fields[BATCH].focus_editor()  # from inside a field, far from the switch
        await pilot.press("ctrl+l")
        assert form.queue_wanted and str(box.label).strip() == "Queue: on"
        assert _focused_field(app) == BATCH  # the cursor stayed where it was
        await pilot.press("ctrl+l")
        assert not form.queue_wanted and str(box.label) == "Queue: off"


def test_form_binds_no_input_editing_key():
    """Every key an Input edits with stays the Input's: none is a form binding."""
    from textual.binding import Binding

    from tui.screens.job_form import JobFormScreen

    bound = {
        k.strip()
        for b in JobFormScreen.BINDINGS
        for k in (b if isinstance(b, Binding) else Binding(*b)).key.split(",")
    }
    editing = {k.strip() for b in Input.BINDINGS for k in b.key.split(",")}
    assert {"ctrl+d", "ctrl+k", "ctrl+u", "ctrl+w"} <= editing
    assert not (bound & editing), bound & editing
