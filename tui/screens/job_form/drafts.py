"""The job form's draft: claiming it (and the dialog when another form has it open), saving it
as you type (in a thread), flushing it on the way out, discarding it (ctrl+t, after a yes). A
part of JobFormScreen; the writer itself is formstate.DraftSaver."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual import work
from textual.screen import Screen

from tui.jobs.formstate import Draft, DraftLock, DraftSaver
from tui.sanitize import markup
from tui.screens.confirm import ConfirmScreen
from tui.screens.error import ReportsWorkerFailures
from tui.screens.job_form.draft_busy import DraftBusyScreen

if TYPE_CHECKING:
    from pathlib import Path

    from textual.timer import Timer

    from tui.jobs.formstate import Toggles
    from tui.jobs.profiles import Profile
    from tui.widgets.jobform import FormField


class FormDrafts(ReportsWorkerFailures, Screen[str | None]):
    """JobFormScreen's draft part (a base class: the form's state is the screen's)."""

    if TYPE_CHECKING:  # the screen's, used here
        drafts: DraftSaver | None
        profile: Profile | None
        profile_path: Path
        fields: dict[str, FormField]
        validated: bool
        _draft_restored: str | None
        _debounce: Timer | None
        _base_texts: dict[str, str]

        @property
        def cluster_name(self) -> str: ...
        @property
        def toggles(self) -> Toggles: ...
        def texts(self) -> dict[str, str]: ...
        def validate(self) -> Any: ...
        def _show_header(self) -> None: ...
        def _profile_toggles(self) -> Toggles: ...
        async def _build(self, texts: dict[str, str], toggles: Toggles) -> None: ...

    @property
    def read_only(self) -> bool:
        return self.drafts is not None and self.drafts.read_only

    @property
    def draft_lock(self) -> DraftLock | None:
        return self.drafts.lock if self.drafts is not None else None

    @property
    def draft_note(self) -> str | None:
        if self.drafts is not None and self.drafts.note:
            return self.drafts.note
        return self._draft_restored

    async def _claim_draft(self, profile: Profile) -> bool:
        """This form's claim on the profile's draft; when another form has it open, the user
        chooses: take over, a read-only copy, or cancel (False: the form closes)."""
        drafts = DraftSaver(self.cluster_name, profile.name, str(self.profile_path.resolve()))
        self.drafts = drafts
        if await asyncio.to_thread(drafts.acquire):
            return True
        choice = await self.app.push_screen_wait(DraftBusyScreen(drafts.other))
        if choice == "take":
            await asyncio.to_thread(drafts.take_over)
            self.notify("draft taken over: the other form stops saving it", timeout=6)
            return True
        if choice == "copy":
            drafts.copy()
            return True
        self.drafts = None
        self.dismiss(None)
        return False

    def save_draft(self) -> None:
        if self.drafts is None or self.profile is None or not self.fields:
            return
        pending = self.drafts.take(self.texts(), self.toggles)
        if pending is not None:
            self._write_draft(*pending)

    @work(thread=True, group="draft", exit_on_error=False)
    def _write_draft(self, draft: Draft, seq: int) -> None:
        assert self.drafts is not None
        if not self.drafts.store(draft, seq):
            self.app.call_from_thread(self._draft_lost)

    def _draft_lost(self) -> None:
        if self.is_mounted:
            self._show_header()
            self.notify(
                markup(self.draft_note or "draft taken over elsewhere"),
                severity="warning",
                timeout=8,
            )

    def flush_draft(self) -> None:
        """Write a pending draft now (leaving the screen, the app closing)."""
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        if self.drafts is None or self.profile is None or not self.fields:
            return
        pending = self.drafts.take(self.texts(), self.toggles)
        if pending is not None:
            self.drafts.store(pending[0])

    def action_discard_draft(self) -> None:
        """Throw the draft away, after a yes: the key is not an editing key, and it asks."""
        if self.profile is None or self.drafts is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.discard_draft()

        self.app.push_screen(
            ConfirmScreen(
                "Discard this draft?",
                "The form goes back to the profile's values; what was typed here is lost.",
            ),
            answered,
        )

    @work(exclusive=True, group="draft-discard", exit_on_error=False)
    async def discard_draft(self) -> None:
        if self.profile is None or self.drafts is None:
            return
        await asyncio.to_thread(self.drafts.discard)
        self._draft_restored = None
        texts = dict(self._base_texts)
        await self._build(texts, self._profile_toggles())
        self._show_header()
        self.notify("draft discarded: the form shows the profile again", timeout=4)
        self.validated = False
        self.validate()

    def on_unmount(self) -> None:
        self.flush_draft()
        if self.drafts is not None:
            self.drafts.release()
