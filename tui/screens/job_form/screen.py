"""The job form: a profile's overrides as fields grouped like verl's config, checked against the
cluster as you type (debounced), autosaved as a draft, submitted like `verl-tui submit`.

A screen only: the check and the submission are tui/jobs/pipeline.py's (the same as the CLI's),
the draft writer is formstate.DraftSaver, the widgets live in tui/widgets/jobform/. Nothing
here blocks the loop: verl's config is composed and Hydra values are parsed in threads; Ray is
reached only through RayCluster / the jobs service.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Button, Checkbox, Input, Static

from tui.config.yamlfile import ConfigError
from tui.fmt import plural
from tui.jobs.catalog import GROUPS, CatalogItem, catalog
from tui.jobs.formstate import (
    Draft,
    DraftLock,
    DraftSaver,
    Toggles,
    load_draft,
    overrides_from_texts,
    texts_from_profile,
    texts_from_sets,
)
from tui.jobs.pipeline import (
    JobSpec,
    debug_toggles,
    prepare_submission,
    working_dir_size,
)
from tui.jobs.profiles import Profile, entry_note, load_profile, resolve_profile
from tui.jobs.rules import ClusterResources, Problem
from tui.jobs.schema import KeyInfo, SchemaError, VerlSource, key_catalog, unknown_key_message
from tui.jobs.submit import Submission
from tui.jobs.validate import Report, cluster_shape
from tui.jobs.verl_source import select_verl
from tui.sanitize import clean, markup, one_line, styled
from tui.screens.confirm import ConfirmScreen
from tui.screens.error import ReportsWorkerFailures, report
from tui.screens.job_form import errors
from tui.screens.job_form.cluster import RAY_NOT_RUNNING, ClusterShape
from tui.screens.job_form.draft_busy import DraftBusyScreen
from tui.screens.job_form.queue import FormSweep, queue_label, queue_switch
from tui.screens.job_form.retry import retries_input, retry_policy
from tui.screens.job_form.submit import FormSubmission, failures, refusal_bar
from tui.screens.job_form.sweep_builder import SweepBuilderScreen, SweepRequest
from tui.screens.services import Services
from tui.widgets.footer import KeysFooter
from tui.widgets.jobform import AddKey, AddKeyBox, FormField, FormToggles, SecretFields
from tui.widgets.jobform.summary import (
    loose_text,
    place_problems,
    show_field_problems,
    summary_text,
)

if TYPE_CHECKING:
    from tui.jobs.flow import Outcome, Step

__all__ = ["RAY_NOT_RUNNING", "DraftBusyScreen", "JobFormScreen"]

NOT_SENT = "not submitted"  # the title of every refusal to send
SWEEP_REFUSED = "sweep not queued"
DEBOUNCE_S = 0.3  # re-validate / autosave this long after the last keystroke
RAY_WATCH_S = 1.0  # how often the form looks at the cockpit's Ray monitor (no request)

_GROUP_TITLES = {
    "data": "Data",
    "actor": "Actor & model",
    "rollout": "Rollout",
    "ref": "Reference policy",
    "critic": "Critic",
    "algorithm": "Algorithm",
    "trainer": "Trainer",
}


@dataclass
class _Loaded:
    profile: Profile | None
    error: str | None
    items: list[CatalogItem] = field(default_factory=list)
    infos: dict[str, KeyInfo] = field(default_factory=dict)
    draft: Draft | None = None
    wd_bytes: int | None = None
    texts: dict[str, str] = field(default_factory=dict)  # the profile's, then initial_sets
    draft_notes: list[str] = field(default_factory=list)  # a damaged draft moved aside


def _norm(key: str | None) -> str | None:
    return key.lstrip("+~") if key else key


class JobFormScreen(ReportsWorkerFailures, Screen[str | None]):
    """One profile's overrides as fields: checked, autosaved as a draft, submitted or queued.

    The screen holds the form's state and renders it; its collaborators are plain objects
    given what they need: ClusterShape (what the check runs against), DraftSaver (the draft
    file and its lock), FormSubmission and FormSweep (the one submission flow), and the
    functions of errors.py (which keys have errors)."""

    # None of these is an Input's own editing key (ctrl+a/e/d/k/u/w/x/c/v stay the field's);
    # the one that throws work away (discard) asks first. The footer shows the few used most.
    BINDINGS = [
        Binding("ctrl+s", "submit", "Submit", priority=True),
        Binding("ctrl+n,f8", "next_error", "Next error", priority=True),
        Binding("ctrl+b,shift+f8", "previous_error", "Previous error", priority=True, show=False),
        Binding("ctrl+l", "toggle_queue", "Queue on/off", priority=True),
        Binding("ctrl+g", "sweep", "Sweep", priority=True),  # a grid of values, all queued
        # ctrl+r reloads hosts.yaml as everywhere (the refusals say so), then checks again
        Binding("ctrl+r", "revalidate", "Reload hosts.yaml, re-check", priority=True, show=False),
        Binding("ctrl+o", "resume_from", "Resume from a checkpoint", priority=True, show=False),
        Binding("ctrl+t", "discard_draft", "Discard draft (asks first)", priority=True, show=False),
        Binding("escape", "back", "Back (draft kept)", show=False),
    ]
    HELP_FIELD_KEYS = True  # help (?) lists a field's own editing keys too

    DEFAULT_CSS = """
    JobFormScreen #form-title { height: auto; background: $panel; padding: 0 1; }
    JobFormScreen #form-problems { height: auto; max-height: 8; padding: 0 1; }
    JobFormScreen #form-body { height: 1fr; }
    JobFormScreen .group-title {
        height: 1; margin: 1 0 0 0; padding: 0 1; background: $boost; text-style: bold;
        color: $accent;
    }
    JobFormScreen #form-bar { height: 4; border-top: solid $primary 50%; }
    JobFormScreen #form-summary { width: 1fr; padding: 1 1 0 1; }
    JobFormScreen #submit { margin: 0 1; }
    JobFormScreen #form-retries { width: 14; }
    """

    def __init__(
        self,
        services: Services,
        profile_path: Path,
        *,
        initial_sets: list[str] | None = None,
        secret_refs: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__()
        # A resubmitted job's secrets given on its command line: names only (the history keeps
        # no values); each is taken from this environment or typed into its field.
        self.secret_names = [
            r["name"]
            for r in secret_refs or []
            if isinstance(r, dict)
            and isinstance(r.get("name"), str)
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", r["name"])
        ]
        self.services = services
        self.cluster = services.ray
        self.history = services.history
        try:  # a file, or a preset's name
            self.profile_path, self.profile_note = resolve_profile(profile_path)
        except ConfigError:  # neither: the load says so
            self.profile_path, self.profile_note = Path(profile_path).expanduser(), None
        self.verl: VerlSource | None = None  # the verl the form is built from (shown on top)
        self.initial_sets = list(initial_sets or [])
        self.profile: Profile | None = None
        self.fields: dict[str, FormField] = {}
        self.infos: dict[str, KeyInfo] = {}
        self.shape = ClusterShape(services.ray, services.ray_monitor, services.telemetry)
        self.wd_bytes: int | None = None
        self.report: Report | None = None
        self.validated = False  # a report for the current texts is shown
        self.latencies: list[float] = []  # seconds per check run (for benchmarks)
        self.drafts: DraftSaver | None = None
        self._draft_restored: str | None = None
        self._debounce: Timer | None = None
        self._base_texts: dict[str, str] = {}
        self._items: list[CatalogItem] = []
        self._submitting = False
        self.submission = FormSubmission(services.ray, services.history)
        self.sweeps = FormSweep(
            services.ray,
            services.history,
            self.notify,
            lambda why: report(self, why, title=SWEEP_REFUSED),
        )

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(
            Text(f" New job — {one_line(self.profile_path.name)}", "bold"), id="form-title"
        )
        yield Static("", id="form-problems")
        with VerticalScroll(id="form-body"):
            yield Static("loading verl's config…", id="form-loading")
        with Horizontal(id="form-bar"):
            yield Static("checking…", id="form-summary")
            yield queue_switch()
            yield retries_input()
            yield Button("Submit (ctrl+s)", id="submit", variant="success", disabled=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.shape.from_monitor()  # at once: what the cockpit already knows about Ray
        self._show_header()
        self.load()
        self.set_interval(RAY_WATCH_S, self._watch_ray)

    @property
    def cluster_name(self) -> str:
        return self.cluster.inv.cluster

    # What the check runs against (ClusterShape's), as the header and tests read it.

    @property
    def resources(self) -> ClusterResources | None:
        return self.shape.resources

    @resources.setter
    def resources(self, resources: ClusterResources | None) -> None:
        self.shape.resources = resources

    @property
    def resources_from(self) -> str | None:
        return self.shape.source

    @property
    def cluster_note(self) -> str | None:
        return self.shape.note

    def _load_sync(self) -> _Loaded:
        from tui.jobs.hydra_values import warm_up

        warm_up()  # Hydra's parser imported here, off the UI loop
        try:
            profile = load_profile(self.profile_path)
        except ConfigError as exc:
            return _Loaded(None, str(exc))
        try:
            items = catalog()
            infos = key_catalog()
        except SchemaError as exc:
            return _Loaded(profile, str(exc))
        draft_notes: list[str] = []
        draft = (
            None if self.initial_sets else load_draft(self.cluster_name, profile.name, draft_notes)
        )
        try:
            wd_bytes = working_dir_size(JobSpec(profile))[0]
        except OSError:
            wd_bytes = None
        texts = texts_from_profile(profile)
        texts |= texts_from_sets(self.initial_sets)
        return _Loaded(profile, None, items, infos, draft, wd_bytes, texts, draft_notes)

    @work(
        exclusive=True, group="form-load", exit_on_error=False, description="Opening the job form"
    )
    async def load(self) -> None:
        # The head's own verl (read over SSH, cached by version); when neither the cluster
        # nor this Python has verl, the load below shows the one-line SchemaError.
        with contextlib.suppress(SchemaError):
            self.verl = await select_verl(self.cluster.fleet, self.cluster.inv)
        loaded = await asyncio.to_thread(self._load_sync)
        self.profile = loaded.profile
        self.infos = loaded.infos
        self.wd_bytes = loaded.wd_bytes
        if loaded.profile is None or loaded.error:
            self._show_header()
            self.query_one("#form-loading", Static).update(
                Text(f"cannot open this profile: {clean(loaded.error)}", "bold red")
            )
            self.query_one("#form-summary", Static).update(Text("not submittable", "red"))
            return
        profile = loaded.profile
        if not await self._claim_draft(profile):
            return
        self._base_texts = loaded.texts
        texts, toggles = dict(loaded.texts), self._profile_toggles()
        if loaded.draft is not None:
            texts, toggles = dict(loaded.draft.texts), loaded.draft.toggles
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(loaded.draft.saved_at))
            if not self.read_only:
                self._draft_restored = f"draft restored (saved {stamp}) — ctrl+t discards it"
            self.notify(markup(self.draft_note or ""), timeout=6)
        for note in loaded.draft_notes:
            self.notify(markup(note), severity="warning", timeout=12)
        self._items = loaded.items
        await self._build(texts, toggles)
        self._show_header()
        self.fetch_cluster()
        self.validate()

    def _profile_toggles(self) -> Toggles:
        assert self.profile is not None
        post_mortem, legacy = debug_toggles(self.profile)
        return Toggles(post_mortem=post_mortem, legacy_debug=legacy)

    async def _build(self, texts: dict[str, str], toggles: Toggles) -> None:
        body = self.query_one("#form-body", VerticalScroll)
        await body.remove_children()
        self.fields = {}
        widgets: list[Any] = [Static("Run", classes="group-title"), FormToggles(toggles)]
        if self.secret_names:
            widgets += [Static("Secrets", classes="group-title"), SecretFields(self.secret_names)]
        by_group: dict[str, list[CatalogItem]] = {g: [] for g in GROUPS}
        for item in self._items:
            by_group.setdefault(item.group, []).append(item)
        for group, items in by_group.items():
            widgets.append(Static(markup(_GROUP_TITLES.get(group, group)), classes="group-title"))
            for item in items:
                f = FormField(item.key, item.label, item.info, texts.get(item.key, ""))
                self.fields[item.key] = f
                widgets.append(f)
        widgets.append(Static("Extra keys", classes="group-title", id="extra-title"))
        for key in (k for k in texts if k not in self.fields):
            f = FormField(key, "", self.infos.get(_norm(key) or key), texts[key], removable=True)
            self.fields[key] = f
            widgets.append(f)
        widgets.append(AddKeyBox(AddKey(self.infos, id="add-key")))
        await body.mount_all(widgets)

    def _show_header(self) -> None:
        p = self.profile
        t = Text()
        t.append(f" {p.name if p else self.profile_path.stem}", "bold")
        t.append(f"   {self.profile_path}{entry_note(p)}", "dim")
        if self.shape.resources is not None:
            t.append(f"   {self.cluster_name}: {self.shape.text()}", "bold cyan")
        if self.verl is not None:
            t.append(f"   {self.verl.label}", "bold green")
        if p and p.description:
            t.append(f"\n {p.description}", "italic")
        if self.shape.note:
            t.append(f"\n ! {self.shape.note}", "yellow")
        for note in (self.verl.note if self.verl else None, self.profile_note):
            if note:
                t.append(f"\n ! {note}", "yellow")
        if self.draft_note:
            t.append(f"\n {self.draft_note}", "cyan")
        # Profile names, paths, descriptions and notes come from files: cleaned, styles kept.
        self.query_one("#form-title", Static).update(styled(t))

    # -- state ---------------------------------------------------------------------------

    @property
    def toggles(self) -> Toggles:
        try:
            return self.query_one(FormToggles).value
        except Exception:  # not built yet
            return Toggles()

    def texts(self) -> dict[str, str]:
        """Every overridden key → its text, in the profile's order, then the form's."""
        current = {k: f.text for k, f in self.fields.items() if f.text}
        order = [k for k in self._base_texts if k in current]
        order += [k for k in current if k not in order]
        return {k: current[k] for k in order}

    def spec_of(
        self,
        texts: dict[str, str],
        toggles: Toggles,
        removed_unknown: list[str],
        env: dict[str, str] | None = None,
    ) -> tuple[JobSpec, dict[str, str]]:
        """(the pipeline's input, key → problem of this form's own). Parses: call in a thread."""
        assert self.profile is not None
        overrides, local = overrides_from_texts(texts)
        for key in removed_unknown:
            local[key] = unknown_key_message(key)
        profile = self.profile.model_copy(update={"overrides": overrides})
        return JobSpec(
            profile,
            env=env or {},
            post_mortem=toggles.post_mortem,
            legacy_debug=toggles.legacy_debug,
            print_config=toggles.print_config,
        ), local

    def empty_unknown(self) -> list[str]:
        return [
            k
            for k, f in self.fields.items()
            if f.removable and not f.text and k not in self.infos and not k.startswith(("+", "~"))
        ]

    def current_profile(self) -> tuple[Profile, dict[str, str]]:
        spec, local = self.spec_of(self.texts(), self.toggles, self.empty_unknown())
        return spec.profile, local

    def _changed(self) -> None:
        self._clear_submission()
        self.validated = False
        if self.drafts is not None:
            self.drafts.changed()
        self._update_submit()
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self._settle)

    def _settle(self) -> None:
        self._debounce = None
        self.save_draft()
        self.validate()

    @on(FormField.Changed)
    def _field_changed(self, _event: FormField.Changed) -> None:
        self._changed()

    @on(FormField.Remove)
    async def _field_removed(self, event: FormField.Remove) -> None:
        self.fields.pop(event.field.key, None)
        await event.field.remove()
        self._changed()

    @on(Checkbox.Changed)
    def _toggle_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        if event.checkbox.id == "form-queue":
            event.checkbox.label = markup(queue_label(event.value))  # on/off in words
            return  # not part of the job: nothing to check or save
        if event.checkbox.id == "toggle-post-mortem" and event.value:
            self.probe_debugpy()
        self._changed()

    @on(AddKey.Add)
    async def _add_key(self, event: AddKey.Add) -> None:
        key, text = event.key, event.text
        if key in self.fields:
            f = self.fields[key]
            if text:
                f.set_text(text)
                self._changed()
            f.scroll_visible()
            f.focus()
            return
        f = FormField(key, "", self.infos.get(_norm(key) or key), text, removable=True)
        self.fields[key] = f
        body = self.query_one("#form-body", VerticalScroll)
        await body.mount(f, before=self.query_one(AddKeyBox))
        f.scroll_visible()
        self._changed()

    # -- the cluster checked against (ClusterShape) ------------------------------------------

    def _watch_ray(self) -> None:
        """Ray started or stopped while the form is open (u, D), or its nodes changed: ask
        again."""
        if self.profile is not None and self.shape.ray_changed():
            self.fetch_cluster()

    @work(
        exclusive=True,
        group="form-cluster",
        exit_on_error=False,
        description="Asking Ray for the cluster's shape",
    )
    async def fetch_cluster(self) -> None:
        await self.shape.fetch(want_debugpy=self.toggles.post_mortem)
        self._show_header()
        self.validate()

    @work(
        exclusive=True,
        group="form-probe",
        exit_on_error=False,
        description="Looking for debugpy on the hosts",
    )
    async def probe_debugpy(self) -> None:
        await self.shape.probe_debugpy()
        self.validate()

    # -- validation ----------------------------------------------------------------------

    def _check_sync(
        self,
        texts: dict[str, str],
        toggles: Toggles,
        unknown: list[str],
        resources: ClusterResources | None,
    ) -> tuple[Submission | None, Report, dict[str, str]]:
        spec, local = self.spec_of(texts, toggles, unknown)
        try:
            sub, report = prepare_submission(
                self.cluster.inv, spec, resources, working_dir_bytes=self.wd_bytes
            )
        except (SchemaError, ConfigError, ValueError) as exc:
            sub, report = None, Report([Problem(None, str(exc))], None)
        return sub, report, local

    async def check(self) -> Submission | None:
        """The pipeline on what the form shows now (the CLI's `submit` runs the same); the
        report lands on the fields. The Submission when there is no error."""
        texts, toggles, unknown = self.texts(), self.toggles, self.empty_unknown()
        t0 = time.perf_counter()
        sub, report, local = await asyncio.to_thread(
            self._check_sync, texts, toggles, unknown, self.shape.resources
        )
        self.latencies.append(time.perf_counter() - t0)
        self.show_report(report, local)
        return None if local else sub

    def show_again(self) -> None:
        """The last report again (with the preflight's rows as they stand now)."""
        if self.report is not None and self.is_mounted:
            self._apply(self.report, {})

    def show_report(self, report: Report, local: dict[str, str]) -> None:
        for key, f in self.fields.items():
            f.local_problem = local.get(key)
        self.report = report
        self.validated = True
        self._apply(report, local)

    @work(exclusive=True, group="validate", exit_on_error=False, description="Checking the job")
    async def validate(self) -> None:
        if self.profile is None or not self.fields:
            return
        await self.check()

    def _apply(self, report: Report, local: dict[str, str]) -> None:
        # The last submit's preflight rows stay shown until something changes or ctrl+r.
        problems = [*report.problems, *self.submission.shown]
        placed, loose = place_problems(problems, self.fields)
        show_field_problems(self.fields, placed)
        for key, f in self.fields.items():  # what the cluster filled in is shown, marked
            f.show_from_cluster(report.from_cluster.get(key))
        text = loose_text(loose)
        box = self.query_one("#form-problems", Static)
        box.update(text)
        box.display = bool(text.plain)
        self._update_submit()

    @property
    def can_submit(self) -> bool:
        """The last check found no error. A check still pending does not turn it off (no
        flicker while typing): submitting checks again and refuses on any error."""
        return (
            self.profile is not None
            and self.report is not None
            and self.error_count == 0
            and self.report.config is not None
            and not self._submitting
        )

    def _update_submit(self) -> None:
        try:
            button = self.query_one("#submit", Button)
            summary = self.query_one("#form-summary", Static)
        except Exception:
            return
        button.disabled = not self.can_submit
        if self.profile is None:
            return
        if not self.validated or self.report is None:
            summary.update(Text("checking…", "dim"))
            return
        refusal = self.submission.refusal
        if refusal is not None and self.error_count == 0:  # until changed or re-checked
            summary.update(refusal_bar(refusal))
            return
        summary.update(
            summary_text(
                self.error_count,
                len(self.report.warnings),
                against_ray=self.shape.source == "ray",
                latency_s=self.latencies[-1] if self.latencies else None,
                error_keys=self.error_keys(),
            )
        )

    async def action_revalidate(self) -> None:
        if self.services.inventory.source is not None:  # hosts.yaml read again, as everywhere
            await self.app.run_action("app.reload_hosts", self)
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        self.save_draft()
        self._clear_submission()
        self.validated = False
        self._update_submit()
        self.fetch_cluster()  # fresh shape, then validates

    def action_back(self) -> None:
        self.flush_draft()
        if self.profile is not None and self.texts() != self._base_texts:
            self.notify("draft kept: open this profile again to continue", timeout=4)
        self.dismiss(None)

    # -- errors, found without scrolling (errors.py) ----------------------------------------

    @property
    def error_count(self) -> int:
        return errors.error_count(self.fields, self.report)

    def error_keys(self) -> list[str]:
        return errors.error_keys(self.fields, self.report)

    def errors_named(self) -> str:
        return errors.errors_named(self.fields, self.report)

    def _field_of_focus(self) -> FormField | None:
        node = self.app.focused
        while node is not None and not isinstance(node, FormField):
            node = node.parent  # type: ignore[assignment]
        return node

    def focus_error(self, step: int = 1, *, first: bool = False) -> bool:
        """Focus the next (`step` 1) or previous (-1) field with an error after the focused
        one, wrapping; `first`: the first one. An error no field owns scrolls the form to the
        list above it. False when there is no error to go to."""
        with_error = errors.error_fields(self.fields, self.report)
        if not with_error:  # only errors no field owns: they are listed above the form
            return bool(self.query_one("#form-problems", Static).display)
        here = None if first else self._field_of_focus()
        errors.next_error(self.fields, with_error, here, step).focus_editor()
        return True

    def action_next_error(self) -> None:
        self._go_to_error(1)

    def action_previous_error(self) -> None:
        self._go_to_error(-1)

    def _go_to_error(self, step: int) -> None:
        if not self.focus_error(step):
            self.notify("no errors", timeout=2)
        elif not errors.error_fields(self.fields, self.report):  # say where they are
            self.notify(f"{markup(self.errors_named())} — listed above the form", timeout=4)

    # -- the draft (formstate.DraftSaver writes it) -------------------------------------------

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

    @work(thread=True, group="draft", exit_on_error=False, description="Saving the draft")
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

    @work(
        exclusive=True,
        group="draft-discard",
        exit_on_error=False,
        description="Discarding the draft",
    )
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

    # -- resume from a checkpoint (ctrl+o) ----------------------------------------------------

    def _int_text(self, key: str) -> int | None:
        f = self.fields.get(key)
        text = f.text.strip() if f is not None else ""
        return int(text) if text.isdigit() else None

    def action_resume_from(self) -> None:
        """Pick a complete checkpoint under trainer.default_local_dir; sets resume_mode and
        resume_from_path, and warns when its world size is not this job's."""
        from tui.ckpt.resume import resume_values, world_size_warning
        from tui.ckpt.scan import StepState
        from tui.screens.ckpt_picker import CheckpointPickerScreen

        f = self.fields.get("trainer.default_local_dir")
        root = (f.text if f is not None else "").strip().strip("'\"")
        if not root and self.profile is not None:
            root = str(self.profile.overrides.get("trainer.default_local_dir", ""))
        if not root.startswith("/"):
            self.notify(
                "set trainer.default_local_dir to an absolute folder first: that is "
                "where the checkpoints are",
                severity="warning",
                timeout=6,
            )
            return
        resources = self.shape.resources
        nnodes, per_node = cluster_shape(resources) if resources is not None else (1, 1)
        nnodes = self._int_text("trainer.nnodes") or nnodes
        per_node = self._int_text("trainer.n_gpus_per_node") or per_node

        def picked(step: StepState | None) -> None:
            if step is None:
                return
            path = f"{root.rstrip('/')}/global_step_{step.step}"
            for key, text in resume_values(path).items():
                self.post_message(AddKey.Add(key, text))
            warn = world_size_warning(step.world_size, nnodes, per_node)
            self.notify(
                markup(warn or f"resuming from global_step_{step.step}"),
                severity="warning" if warn else "information",
                timeout=10,
            )

        self.app.push_screen(
            CheckpointPickerScreen(
                self.cluster.fleet, self.cluster.inv, root, nnodes=nnodes, gpus_per_node=per_node
            ),
            picked,
        )

    # -- the queue switch and sweeps (queue.py) -----------------------------------------------

    def action_toggle_queue(self) -> None:
        """ctrl+l from any field: the switch is last in the tab order, behind ~45 fields."""
        box = self.query_one("#form-queue", Checkbox)
        box.value = not box.value  # its Changed message updates the label
        self.notify(
            "Queue on: submit waits in the local queue for free GPUs"
            if box.value
            else "Queue off: submit sends the job to Ray now",
            timeout=3,
        )

    @property
    def queue_wanted(self) -> bool:
        try:
            return self.query_one("#form-queue", Checkbox).value
        except Exception:  # not built yet
            return False

    def action_sweep(self) -> None:
        if self.profile is None:
            self.notify("still loading", timeout=2)
            return
        keys = [k for k in self.fields if self.fields[k].text][:3]

        def done(req: SweepRequest | None) -> None:
            if req is not None:
                self.run_sweep(req)

        self.app.push_screen(SweepBuilderScreen(self.profile.name, keys), done)

    @work(exclusive=True, group="form-sweep", exit_on_error=False, description="Queueing the sweep")
    async def run_sweep(self, req: SweepRequest) -> None:
        """Every combination through the one submission flow against the live cluster."""
        from tui.jobs.sweep import parse_grid

        resources = self.shape.resources
        if not self.shape.live or resources is None:
            report(
                self,
                "sweeps are checked against the live cluster: bring Ray up first (u on Cluster)",
                title=SWEEP_REFUSED,
            )
            return
        env = self._secret_values()
        if env is None:
            return
        texts, toggles, unknown = self.texts(), self.toggles, self.empty_unknown()
        try:
            grids = tuple(parse_grid(g, "sweep") for g in req.grids)
            spec, local = await asyncio.to_thread(self.spec_of, texts, toggles, unknown, env)
        except (ConfigError, ValueError) as exc:
            report(self, exc, title=SWEEP_REFUSED)
            return
        if local:
            key, why = next(iter(local.items()))
            report(self, f"{key}: {why}", title=SWEEP_REFUSED)
            return
        first = await self.sweeps.run(
            req.name,
            spec,
            grids,
            resources,
            profile_path=str(self.profile_path.resolve()),
            working_dir_bytes=self.wd_bytes,
        )
        if first is not None:
            self.dismiss(first)

    # -- submit (submit.py runs the one flow; its steps and outcome are shown here) -----------

    @on(Button.Pressed, "#submit")
    def _submit_pressed(self) -> None:
        self.action_submit()

    def action_submit(self) -> None:
        if self._submitting:
            return
        if self.report is None or (self.validated and not self.can_submit):
            self.refused("still checking" if self.report is None else None)
            return
        self.submit()

    def refused(self, why: str | None = None) -> None:
        """Submit refused: say which keys to fix and put the cursor on the first of them."""
        what = why or self.errors_named() or "fix the problems shown"
        if why is None and self.focus_error(first=True):
            what += " — the cursor is on the first; ctrl+n next error"
        self.notify(f"not submitted: {markup(what)}", severity="warning", timeout=8)

    @work(
        exclusive=True, group="form-submit", exit_on_error=False, description="Submitting the job"
    )
    async def submit(self) -> None:
        assert self.profile is not None
        if self._debounce is not None:  # what is pending is checked here, now
            self._debounce.stop()
            self._debounce = None
        self.save_draft()
        self._submitting = True
        try:
            await self._submit()
        finally:
            self._submitting = False
            if self.is_mounted:
                self._update_submit()

    def _secret_values(self) -> dict[str, str] | None:
        """The resubmitted job's secrets: typed here, else from this environment; None (and
        a message naming it) when one is in neither."""
        if not self.secret_names:
            return {}
        values, missing = self.query_one(SecretFields).values()
        if missing:
            report(self, f"secret ${missing[0]} is not set here: fill its field", title=NOT_SENT)
            return None
        return values

    def _retries_text(self) -> str:
        try:
            return self.query_one("#form-retries", Input).value
        except Exception:  # not built yet
            return ""

    def _clear_submission(self) -> None:
        """Something changed (or ctrl+r): the last preflight's rows and refusal go."""
        if self.submission.clear():
            self.show_again()

    async def _submit(self) -> None:
        summary = self.query_one("#form-summary", Static)
        summary.update(Text("submitting…", "bold cyan"))
        secrets = self._secret_values()
        if secrets is None:
            return
        try:
            policy = retry_policy(self.profile, self._retries_text())
        except ValueError as exc:
            report(self, exc, title=NOT_SENT)
            return
        texts, toggles, unknown = self.texts(), self.toggles, self.empty_unknown()
        spec, local = await asyncio.to_thread(self.spec_of, texts, toggles, unknown, secrets)
        if local:  # a field's own parse problem: fixed here first
            self.show_report(self.report or Report([], None), local)
            self.refused()
            return
        self._clear_submission()
        done = await self.submission.run(
            spec,
            queue=self.queue_wanted,
            profile_path=str(self.profile_path.resolve()),
            policy=policy,
            working_dir_bytes=self.wd_bytes,
            on_step=self._submit_step,
        )
        await self._submit_done(done)

    def _submit_step(self, step: Step) -> None:
        from tui.jobs.flow import Checked, Checking, ClusterRead, PreflightSkipped

        if isinstance(step, ClusterRead) and step.resources is not None:
            self.shape.set_live(step.resources, probed_debugpy=self.toggles.post_mortem)
            self._show_header()
        elif isinstance(step, Checked) and step.reports[0] is not None:
            self.show_report(step.reports[0], {})
        elif isinstance(step, Checking) and step.stage == "preflight":
            text = f"job preflight: asking {plural(step.hosts, 'host')}…"
            self.query_one("#form-summary", Static).update(Text(text, "bold cyan"))
        elif isinstance(step, PreflightSkipped):
            self.notify("sent without the job preflight (submit pressed again)", severity="warning")

    async def _submit_done(self, done: Outcome) -> None:
        from tui.jobs.flow import Queued, Refusal, Refused, Submitted

        if isinstance(done, (Submitted, Queued)):
            if self.drafts is not None:
                await asyncio.to_thread(self.drafts.discard)
            if isinstance(done, Queued):
                (run,) = done.placed
                sid, needs = run.sub.submission_id, run.entry.needs.describe()
                what = f"queued {markup(sid)} at position {run.position:d} (needs {markup(needs)})"
            else:
                sid = done.submission_id
                what = f"submitted {markup(sid)}"
            self.notify(what, timeout=6)
            self.dismiss(sid)
            return
        assert isinstance(done, Refused)
        if done.kind is Refusal.INVALID:
            if done.report is not None:
                self.show_report(done.report, {})
            self.refused()
        elif done.kind is Refusal.PREFLIGHT:  # the rows are FormSubmission's: shown again
            self.show_again()
            bad = plural(failures(done.findings), "problem")
            said = f"the job preflight found {bad} (shown in the form)"
            report(self, f"{said}; submit again to send it anyway", title=NOT_SENT)
        elif done.kind is Refusal.RAY_DOWN:
            self.shape.use_planned(RAY_NOT_RUNNING)
            self._show_header()
            report(self, RAY_NOT_RUNNING, title=NOT_SENT)
        elif done.kind is Refusal.OUTCOME_UNKNOWN:  # sent, no answer: the form stays
            self.notify(markup(done.reason), severity="warning", timeout=15)
        else:
            lead = "not queued" if done.kind is Refusal.NOT_QUEUED else NOT_SENT
            why = done.text() if done.kind is Refusal.UNREACHABLE else done.detail
            report(self, why, title=lead)
