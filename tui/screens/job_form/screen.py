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
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.timer import Timer
from textual.widgets import Button, Checkbox, Footer, Static

from tui.cluster.ray_cluster import RayCluster
from tui.config.yamlfile import ConfigError
from tui.fmt import plural
from tui.jobs.catalog import GROUPS, CatalogItem, catalog
from tui.jobs.formstate import (
    Draft,
    DraftSaver,
    Toggles,
    load_draft,
    overrides_from_texts,
    texts_from_profile,
    texts_from_sets,
)
from tui.jobs.history import JobHistory
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
from tui.screens.job_form.cluster import ASKING, RAY_NOT_RUNNING, FormCluster
from tui.screens.job_form.draft_busy import DraftBusyScreen
from tui.screens.job_form.drafts import FormDrafts
from tui.screens.job_form.errors import FormErrors
from tui.screens.job_form.queue import FormQueue
from tui.screens.job_form.resume import FormResume
from tui.screens.job_form.retry import retries_input
from tui.screens.job_form.submit import FormSubmission, refusal_bar
from tui.widgets.jobform import AddKey, AddKeyBox, FormField, FormToggles, SecretFields
from tui.widgets.jobform.summary import (
    loose_text,
    place_problems,
    show_field_problems,
    summary_text,
)

__all__ = ["RAY_NOT_RUNNING", "DraftBusyScreen", "JobFormScreen"]

DEBOUNCE_S = 0.3  # re-validate / autosave this long after the last keystroke
RAY_WATCH_S = 1.0  # how often the form looks at the app's Ray monitor (no request)

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


class JobFormScreen(FormCluster, FormDrafts, FormResume, FormQueue, FormErrors):
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
        cluster: RayCluster,
        history: JobHistory,
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
        self.cluster = cluster
        self.history = history
        try:  # a file, or a preset's name
            self.profile_path, self.profile_note = resolve_profile(profile_path)
        except ConfigError:  # neither: the load says so
            self.profile_path, self.profile_note = Path(profile_path).expanduser(), None
        self.verl: VerlSource | None = None  # the verl the form is built from (shown on top)
        self.initial_sets = list(initial_sets or [])
        self.profile: Profile | None = None
        self.fields: dict[str, FormField] = {}
        self.infos: dict[str, KeyInfo] = {}
        self.resources: ClusterResources | None = None
        self.resources_from: str | None = None  # "ray" | "hosts.yaml" | None
        self.cluster_note: str | None = ASKING
        self.wd_bytes: int | None = None
        self.report: Report | None = None
        self.validated = False  # a report for the current texts is shown
        self.latencies: list[float] = []  # seconds per check run (for benchmarks)
        self.drafts: DraftSaver | None = None
        self._draft_restored: str | None = None
        self._debounce: Timer | None = None
        self._probed_debugpy = False
        self._base_texts: dict[str, str] = {}
        self._items: list[CatalogItem] = []
        self._submitting = False
        self._ray_seen: object = None  # the app's Ray monitor state last acted on
        self.submission = FormSubmission(self)  # the flow's steps and outcome, rendered

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
            yield self.queue_switch()
            yield retries_input()
            yield Button("Submit (ctrl+s)", id="submit", variant="success", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self._cluster_from_monitor()  # at once: what the app already knows about Ray
        self._show_header()
        self.load()
        self.set_interval(RAY_WATCH_S, self._watch_ray)

    @property
    def cluster_name(self) -> str:
        return self.cluster.inv.cluster

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

    @work(exclusive=True, group="form-load", exit_on_error=False)
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
        if self.resources is not None:
            t.append(f"   {self.cluster_name}: {self._shape_text()}", "bold cyan")
        if self.verl is not None:
            t.append(f"   {self.verl.label}", "bold green")
        if p and p.description:
            t.append(f"\n {p.description}", "italic")
        if self.cluster_note:
            t.append(f"\n ! {self.cluster_note}", "yellow")
        for note in (self.verl.note if self.verl else None, self.profile_note):
            if note:
                t.append(f"\n ! {note}", "yellow")
        if self.draft_note:
            t.append(f"\n {self.draft_note}", "cyan")
        # Profile names, paths, descriptions and notes come from files: cleaned, styles kept.
        self.query_one("#form-title", Static).update(styled(t))

    def _shape_text(self) -> str:
        """``3 Ray nodes × 1 GPU`` (every node alive has GPUs), else how many do."""
        assert self.resources is not None
        nnodes, per_node = cluster_shape(self.resources)
        total = len(self.resources.nodes)
        what = "Ray node" if self.resources_from == "ray" else "node"
        source = "" if self.resources_from == "ray" else f" ({self.resources_from})"
        if nnodes and nnodes == total:
            return f"{plural(total, what)} × {plural(per_node, 'GPU')}{source}"
        gpus = f"{nnodes} with ≥{per_node} GPU" if nnodes else "no GPUs"
        return f"{plural(total, what)}, {gpus}{source}"

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
        self.submission.clear()
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
            self.show_queue_state()
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
            self._check_sync, texts, toggles, unknown, self.resources
        )
        self.latencies.append(time.perf_counter() - t0)
        self.show_report(report, local)
        return None if local else sub

    def use_live(self, resources: ClusterResources, *, probed_debugpy: bool) -> None:
        self._set_live(resources)
        self._probed_debugpy = probed_debugpy
        self._show_header()

    def use_planned(self, note: str) -> None:
        self._use_planned(note)
        self._show_header()

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

    @work(exclusive=True, group="validate", exit_on_error=False)
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
                against_ray=self.resources_from == "ray",
                latency_s=self.latencies[-1] if self.latencies else None,
                error_keys=self.error_keys(),
            )
        )

    def action_revalidate(self) -> None:
        if getattr(getattr(self.app, "inventory", None), "source", None) is not None:
            self.app.action_reload_hosts()  # type: ignore[attr-defined]
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        self.save_draft()
        self.submission.clear()
        self.validated = False
        self._update_submit()
        self.fetch_cluster()  # fresh shape, then validates

    def action_back(self) -> None:
        self.flush_draft()
        if self.profile is not None and self.texts() != self._base_texts:
            self.notify("draft kept: open this profile again to continue", timeout=4)
        self.dismiss(None)

    # -- submit --------------------------------------------------------------------------

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

    @work(exclusive=True, group="form-submit", exit_on_error=False)
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
            self.notify(
                f"not submitted: secret ${markup(missing[0])} is not set here: fill its field",
                severity="error",
                timeout=8,
            )
            return None
        return values

    async def _submit(self) -> None:
        await self.submission.run()
