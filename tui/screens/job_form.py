"""The job form: a profile's overrides as fields grouped like verl's config, checked against the
live cluster as you type (debounced), autosaved as a draft, submitted like `verl-tui submit`.

Nothing here blocks the loop: verl's config is composed in a thread (`asyncio.to_thread` inside
exclusive grouped workers), Ray is reached only through RayCluster / the jobs service.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import Button, Checkbox, Footer, Input, Static

from tui.cluster.dashboard import DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.config.yamlfile import ConfigError
from tui.jobs.catalog import GROUPS, CatalogItem, catalog
from tui.jobs.formstate import (
    Draft,
    DraftLock,
    DraftOwner,
    Toggles,
    clear_draft,
    load_draft,
    overrides_from_texts,
    save_draft,
    texts_from_profile,
    texts_from_sets,
)
from tui.jobs.history import JobHistory
from tui.jobs.profiles import Profile, load_profile
from tui.jobs.rules import ClusterResources, NodeResources, Problem, is_truthy
from tui.jobs.schema import KeyInfo, SchemaError, key_catalog, unknown_key_message
from tui.jobs.validate import Report, check_profile, cluster_shape
from tui.jobs.workdir import WorkdirError, measure
from tui.sanitize import clean, markup, one_line, styled
from tui.transport.types import TransportError
from tui.widgets.jobform import AddKey, FormField

DEBOUNCE_S = 0.3  # re-validate / autosave this long after the last keystroke

_GROUP_TITLES = {"data": "Data", "actor": "Actor & model", "rollout": "Rollout",
                 "ref": "Reference policy", "critic": "Critic", "algorithm": "Algorithm",
                 "trainer": "Trainer"}


@dataclass
class _Loaded:
    profile: Profile | None
    error: str | None
    items: list[CatalogItem] = field(default_factory=list)
    infos: dict[str, KeyInfo] = field(default_factory=dict)
    draft: Draft | None = None
    wd_bytes: int | None = None


def _norm(key: str | None) -> str | None:
    return key.lstrip("+~") if key else key


class JobFormScreen(Screen[str | None]):
    BINDINGS = [
        Binding("ctrl+s", "submit", "Submit", priority=True),
        Binding("ctrl+r", "revalidate", "Re-validate now", priority=True),
        Binding("ctrl+d", "discard_draft", "Discard draft", priority=True),
        Binding("ctrl+k", "resume_from", "Resume from a checkpoint", priority=True),
        Binding("escape", "back", "Back (draft kept)"),
    ]

    DEFAULT_CSS = """
    JobFormScreen #form-title { height: auto; background: $panel; padding: 0 1; }
    JobFormScreen #form-problems { height: auto; max-height: 8; padding: 0 1; }
    JobFormScreen #form-body { height: 1fr; }
    JobFormScreen .group-title {
        height: 1; margin: 1 0 0 0; padding: 0 1; background: $boost; text-style: bold;
        color: $accent;
    }
    JobFormScreen #toggles { height: auto; padding: 0 1; }
    JobFormScreen #toggles Checkbox { width: 100%; border: none; height: 1; }
    JobFormScreen #add-key-box { height: auto; padding: 0 1; margin-bottom: 1; }
    JobFormScreen #form-bar { height: 4; border-top: solid $primary 50%; }
    JobFormScreen #form-summary { width: 1fr; padding: 1 1 0 1; }
    JobFormScreen #submit { margin: 0 1; }
    JobFormScreen .-ok { color: $success; }
    """

    def __init__(self, cluster: RayCluster, history: JobHistory, profile_path: Path, *,
                 initial_sets: list[str] | None = None,
                 secret_refs: list[dict[str, str]] | None = None) -> None:
        super().__init__()
        # A resubmitted job's secrets given on its command line: names only (the history keeps
        # no values); each is taken from this environment or typed into its field.
        self.secret_refs = [r for r in secret_refs or [] if isinstance(r, dict)
                            and isinstance(r.get("name"), str)
                            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", r["name"])]
        self.cluster = cluster
        self.history = history
        self.profile_path = Path(profile_path).expanduser()
        self.initial_sets = list(initial_sets or [])
        self.profile: Profile | None = None
        self.fields: dict[str, FormField] = {}
        self.infos: dict[str, KeyInfo] = {}
        self.resources: ClusterResources | None = None
        self.cluster_note: str | None = "asking Ray for the cluster's shape…"
        self.wd_bytes: int | None = None
        self.report: Report | None = None
        self.validated = False  # a report for the current texts is shown
        self.draft_note: str | None = None
        self.latencies: list[float] = []  # seconds per check_profile run (for benchmarks)
        self._debounce: Timer | None = None
        self._draft_dirty = False
        self._draft_seq = 0
        self._draft_lock = threading.Lock()
        self._probed_debugpy = False
        self._base_texts: dict[str, str] = {}
        self._extra_order: list[str] = []
        self._items: list[CatalogItem] = []
        self._submitting = False
        self.draft_lock: DraftLock | None = None
        self.read_only = False  # a copy of a draft open elsewhere: never written from here

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(Text(f" New job — {one_line(self.profile_path.name)}", "bold"),
                     id="form-title")
        yield Static("", id="form-problems")
        with VerticalScroll(id="form-body"):
            yield Static("loading verl's config…", id="form-loading")
        with Horizontal(id="form-bar"):
            yield Static("checking…", id="form-summary")
            yield Button("Submit (ctrl+s)", id="submit", variant="success", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @property
    def cluster_name(self) -> str:
        return self.cluster.inv.cluster

    def _load_sync(self) -> _Loaded:
        try:
            profile = load_profile(self.profile_path)
        except ConfigError as exc:
            return _Loaded(None, str(exc))
        try:
            items = catalog()
            infos = key_catalog()
        except SchemaError as exc:
            return _Loaded(profile, str(exc))
        draft = None if self.initial_sets else load_draft(self.cluster_name, profile.name)
        rt = profile.runtime_env
        wd_bytes = None
        if rt.working_dir:
            try:
                wd_bytes = measure(Path(rt.working_dir).expanduser(), rt.excludes)
            except OSError:
                wd_bytes = None
        return _Loaded(profile, None, items, infos, draft, wd_bytes)

    @work(exclusive=True, group="form-load", exit_on_error=False)
    async def load(self) -> None:
        loaded = await asyncio.to_thread(self._load_sync)
        self.profile = loaded.profile
        self.infos = loaded.infos
        self.wd_bytes = loaded.wd_bytes
        if loaded.profile is None or loaded.error:
            self._show_header()
            self.query_one("#form-loading", Static).update(
                Text(f"cannot open this profile: {clean(loaded.error)}", "bold red"))
            self.query_one("#form-summary", Static).update(Text("not submittable", "red"))
            return
        profile = loaded.profile
        if not await self._claim_draft(profile.name):
            return
        self._base_texts = texts_from_profile(profile)
        texts = dict(self._base_texts)
        texts.update(texts_from_sets(self.initial_sets))
        env = profile.runtime_env.env_vars
        toggles = Toggles(post_mortem=is_truthy(env.get("RAY_DEBUG_POST_MORTEM")),
                          legacy_debug=env.get("RAY_DEBUG") == "legacy")
        if loaded.draft is not None:
            texts, toggles = dict(loaded.draft.texts), loaded.draft.toggles
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(loaded.draft.saved_at))
            if not self.read_only:
                self.draft_note = f"draft restored (saved {stamp}) — ctrl+d discards it"
            self.notify(markup(self.draft_note or ""), timeout=6)
        self._items = loaded.items
        await self._build(texts, toggles)
        self._show_header()
        self.fetch_cluster()
        self.validate()

    def _secret_values(self) -> dict[str, str] | None:
        """The resubmitted job's secrets: typed here, else from this environment; None (and
        a message naming it) when one is in neither."""
        import os

        values: dict[str, str] = {}
        for r in self.secret_refs:
            name = r["name"]
            try:
                typed = self.query_one(f"#secret-{name}", Input).value
            except Exception:  # not built
                typed = ""
            value = typed or os.environ.get(name)
            if not value:
                self.notify(f"not submitted: secret ${markup(name)} is not set here: fill its "
                            "field",
                            severity="error", timeout=8)
                return None
            values[name] = value
        return values

    async def _claim_draft(self, name: str) -> bool:
        """This form's claim on the profile's draft; when another form has it open, the user
        chooses: take over, a read-only copy, or cancel (False: the form closes)."""
        lock = DraftLock(self.cluster_name, name)
        if await asyncio.to_thread(lock.acquire):
            self.draft_lock = lock
            return True
        other = lock.other
        choice = await self.app.push_screen_wait(DraftBusyScreen(other))
        if choice == "take":
            await asyncio.to_thread(lock.take_over)
            self.draft_lock = lock
            self.notify("draft taken over: the other form stops saving it", timeout=6)
            return True
        if choice == "copy":
            self.read_only = True
            self.draft_note = (f"read-only copy: the draft is open in another form "
                               f"({other.describe() if other else 'unknown'}); nothing typed "
                               "here is saved as a draft")
            return True
        self.dismiss(None)
        return False

    def _may_write_draft(self) -> bool:
        """Still this form's draft? A form whose draft was taken over turns read-only."""
        if self.read_only:
            return False
        if self.draft_lock is None or self.draft_lock.still_mine():
            return True
        owner = self.draft_lock.owner()
        self.read_only = True
        self.draft_note = (f"read-only: the draft was taken over by another form "
                           f"({owner.describe() if owner else 'unknown'})")
        return False

    def _draft_lost(self) -> None:
        if self.is_mounted:
            self._show_header()
            self.notify(markup(self.draft_note or "draft taken over elsewhere"),
                        severity="warning",
                        timeout=8)

    async def _build(self, texts: dict[str, str], toggles: Toggles) -> None:
        body = self.query_one("#form-body", VerticalScroll)
        await body.remove_children()
        self.fields = {}
        widgets: list[Any] = []
        widgets.append(Static("Run", classes="group-title"))
        widgets.append(FormToggles(toggles))
        if self.secret_refs:
            import os

            widgets.append(Static("Secrets", classes="group-title"))
            for r in self.secret_refs:
                name = r["name"]
                state = "set here" if name in os.environ else "not set here"
                widgets.append(Static(Text(f"secret: from ${one_line(name)} — {one_line(state)}"),
                                      classes="secret-label"))
                widgets.append(Input(password=True, id=f"secret-{name}",
                                     placeholder=(f"${name} is used" if name in os.environ
                                                  else f"type {name} (required)")))
        by_group: dict[str, list[CatalogItem]] = {g: [] for g in GROUPS}
        for item in self._items:
            by_group.setdefault(item.group, []).append(item)
        for group, items in by_group.items():
            widgets.append(Static(markup(_GROUP_TITLES.get(group, group)),
                                  classes="group-title"))
            for item in items:
                f = FormField(item.key, item.label, item.info, texts.get(item.key, ""))
                self.fields[item.key] = f
                widgets.append(f)
        widgets.append(Static("Extra keys", classes="group-title", id="extra-title"))
        self._extra_order = [k for k in texts if k not in self.fields]
        for key in self._extra_order:
            f = FormField(key, "", self.infos.get(_norm(key) or key), texts[key], removable=True)
            self.fields[key] = f
            widgets.append(f)
        box = AddKeyBox(AddKey(self.infos, id="add-key"))
        widgets.append(box)
        await body.mount_all(widgets)

    def _show_header(self) -> None:
        p = self.profile
        t = Text()
        t.append(f" {p.name if p else self.profile_path.stem}", "bold")
        t.append(f"   {self.profile_path}", "dim")
        if self.resources is not None:
            nnodes, per_node = cluster_shape(self.resources)
            t.append(f"   {self.cluster_name}: {nnodes} nodes × {per_node} GPUs", "bold cyan")
        if p and p.description:
            t.append(f"\n {p.description}", "italic")
        if self.cluster_note:
            t.append(f"\n ! {self.cluster_note}", "yellow")
        if self.draft_note:
            t.append(f"\n {self.draft_note}", "cyan")
        # Profile names, paths, descriptions and notes come from files: cleaned, styles kept.
        self.query_one("#form-title", Static).update(styled(t))

    # -- the cluster ---------------------------------------------------------------------

    @work(exclusive=True, group="form-cluster", exit_on_error=False)
    async def fetch_cluster(self) -> None:
        try:
            st = await self.cluster.status()
        except (DashboardError, TransportError, OSError) as exc:
            self.resources = None
            self.cluster_note = f"Ray is not reachable ({exc}): checked without the cluster"
        else:
            self.resources = ClusterResources(
                nodes=[NodeResources(n.host or n.node_ip, n.gpus, n.cpus)
                       for n in st.nodes if n.alive])
            self.cluster_note = None
            self._probed_debugpy = False
            if self.toggles.post_mortem:
                await self._probe_debugpy()
        self._show_header()
        self.validate()

    async def _probe_debugpy(self) -> None:
        from tui.cluster.probe import probe_all

        if self.resources is None or self._probed_debugpy or self.cluster.fleet is None:
            return
        facts = await probe_all(self.cluster.fleet, self.cluster.inv)
        self.resources.hosts_without_debugpy = [h for h, f in facts.items()
                                                if f.ok and not f.debugpy_version]
        self._probed_debugpy = True

    @work(exclusive=True, group="form-probe", exit_on_error=False)
    async def probe_debugpy(self) -> None:
        await self._probe_debugpy()
        self.validate()

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

    def current_profile(self) -> tuple[Profile, dict[str, str]]:
        assert self.profile is not None
        overrides, local = overrides_from_texts(self.texts())
        for key, f in self.fields.items():
            if f.removable and not f.text and key not in self.infos and \
                    not key.startswith(("+", "~")):
                local[key] = unknown_key_message(key)
        return self.profile.model_copy(update={"overrides": overrides}), local

    def _changed(self) -> None:
        self.validated = False
        self._draft_dirty = True
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
        key = event.field.key
        self.fields.pop(key, None)
        await event.field.remove()
        self._changed()

    @on(Checkbox.Changed)
    def _toggle_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
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

    @work(exclusive=True, group="validate", exit_on_error=False)
    async def validate(self) -> None:
        if self.profile is None or not self.fields:
            return
        profile, local = self.current_profile()
        for key, f in self.fields.items():
            f.local_problem = local.get(key)
        toggles = self.toggles
        t0 = time.perf_counter()
        try:
            report = await asyncio.to_thread(
                check_profile, profile, cluster=self.resources, working_dir_bytes=self.wd_bytes,
                post_mortem=toggles.post_mortem)
        except (SchemaError, ConfigError, ValueError) as exc:
            report = Report([Problem(None, str(exc))], None)
        self.latencies.append(time.perf_counter() - t0)
        self.report = report
        self.validated = True
        self._apply(report, local)

    def _apply(self, report: Report, local: dict[str, str]) -> None:
        placed: dict[str, list[Problem]] = {k: [] for k in self.fields}
        by_norm = {_norm(k): k for k in self.fields}
        loose: list[Problem] = []
        for p in report.problems:
            home = by_norm.get(_norm(p.key))
            if home is not None:
                placed[home].append(p)
            else:
                loose.append(p)
        for key, f in self.fields.items():
            f.show_problems([p for p in placed.get(key, []) if not (
                f.local_problem and p.message == f.local_problem)])
        t = Text()
        for p in loose[:8]:
            t.append("✗ " if p.level == "error" else "! ",
                     "bold red" if p.level == "error" else "bold yellow")
            t.append(f"{one_line(p.key or 'profile')}: ", "bold")
            t.append(clean(p.message) + "\n")
        if len(loose) > 8:
            t.append(f"… {len(loose) - 8} more\n", "dim")
        self.query_one("#form-problems", Static).update(t.rstrip() or "")
        self._update_submit()

    @property
    def error_count(self) -> int:
        n = sum(1 for f in self.fields.values() if f.local_problem)
        if self.report is not None:
            n += len(self.report.errors)
            if self.report.config is None and not self.report.errors:
                n += 1
        return n

    @property
    def can_submit(self) -> bool:
        """The last check found no error. A check still pending does not turn it off (no
        flicker while typing): submitting checks again and refuses on any error."""
        return (self.profile is not None and self.report is not None
                and self.error_count == 0 and self.report.config is not None
                and not self._submitting)

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
        errors, warns = self.error_count, len(self.report.warnings)
        t = Text()
        if errors:
            t.append(f"{errors:d} error{'s' * (errors != 1)}", "bold red")
            t.append(" — submit is off until they are fixed", "red")
            if warns:
                t.append(f", {warns} warning{'s' * (warns != 1)}", "yellow")
        elif warns:
            t.append("ready", "bold green")
            t.append(f" — {warns} warning{'s' * (warns != 1)}", "yellow")
        else:
            t.append("ready", "bold green")
        if self.resources is None:
            t.append("   (not checked against the cluster)", "yellow")
        if self.latencies:
            t.append(f"   checked in {self.latencies[-1] * 1000:.0f} ms", "dim")
        summary.update(t)

    def action_revalidate(self) -> None:
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        self.save_draft()
        self.validated = False
        self._update_submit()
        self.fetch_cluster()  # fresh shape, then validates

    # -- drafts --------------------------------------------------------------------------

    def _draft(self) -> Draft | None:
        if self.profile is None or not self.fields:
            return None
        texts = self.texts()
        values, _ = overrides_from_texts(texts)
        return Draft(profile_path=str(self.profile_path.resolve()), profile=self.profile.name,
                     texts=texts, values=values, toggles=self.toggles)

    def _take_draft(self) -> Draft | None:
        """The form's state to write, once per change (None when nothing is pending)."""
        if not self._draft_dirty:
            return None
        draft = self._draft()
        if draft is None:
            return None
        self._draft_dirty = False
        self._draft_seq += 1
        return draft

    def save_draft(self) -> None:
        draft = self._take_draft()
        if draft is not None:
            self._write_draft(draft, self._draft_seq)

    @work(thread=True, group="draft", exit_on_error=False)
    def _write_draft(self, draft: Draft, seq: int) -> None:
        with self._draft_lock:
            if seq != self._draft_seq:  # a newer state is queued behind this one
                return
            was = self.read_only
            if not self._may_write_draft():
                if not was:
                    self.app.call_from_thread(self._draft_lost)
                return
            save_draft(self.cluster_name, draft)

    def flush_draft(self) -> None:
        """Write a pending draft now (leaving the screen, the app closing)."""
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
        draft = self._take_draft()
        if draft is not None:
            with self._draft_lock:
                if self._may_write_draft():
                    save_draft(self.cluster_name, draft)

    async def action_discard_draft(self) -> None:
        if self.profile is None:
            return
        if self._may_write_draft():
            clear_draft(self.cluster_name, self.profile.name)
        self._draft_dirty = False
        self._draft_seq += 1  # a write still queued must not bring it back
        self.draft_note = None
        texts = dict(self._base_texts)
        texts.update(texts_from_sets(self.initial_sets))
        env = self.profile.runtime_env.env_vars
        await self._build(texts, Toggles(post_mortem=is_truthy(env.get("RAY_DEBUG_POST_MORTEM")),
                                         legacy_debug=env.get("RAY_DEBUG") == "legacy"))
        self._show_header()
        self.notify("draft discarded: the form shows the profile again", timeout=4)
        self.validated = False
        self.validate()

    def on_unmount(self) -> None:
        self.flush_draft()
        if self.draft_lock is not None:
            self.draft_lock.release()

    def _int_text(self, key: str) -> int | None:
        f = self.fields.get(key)
        text = f.text.strip() if f is not None else ""
        return int(text) if text.isdigit() else None

    def action_resume_from(self) -> None:
        """Pick a complete checkpoint under trainer.default_local_dir; sets resume_mode and
        resume_from_path, and warns when its world size is not this job's."""
        from tui.ckpt.resume import resume_values, world_size_warning
        from tui.screens.ckpt_picker import CheckpointPickerScreen

        f = self.fields.get("trainer.default_local_dir")
        root = (f.text if f is not None else "").strip().strip("'\"")
        if not root and self.profile is not None:
            root = str(self.profile.overrides.get("trainer.default_local_dir", ""))
        if not root.startswith("/"):
            self.notify("set trainer.default_local_dir to an absolute folder first: that is "
                        "where the checkpoints are", severity="warning", timeout=6)
            return
        nnodes, per_node = (cluster_shape(self.resources) if self.resources is not None
                            else (1, 1))
        nnodes = self._int_text("trainer.nnodes") or nnodes
        per_node = self._int_text("trainer.n_gpus_per_node") or per_node

        def picked(step) -> None:
            if step is None:
                return
            path = f"{root.rstrip('/')}/global_step_{step.step}"
            for key, text in resume_values(path).items():
                self.post_message(AddKey.Add(key, text))
            warn = world_size_warning(step.world_size, nnodes, per_node)
            self.notify(markup(warn or f"resuming from global_step_{step.step}"),
                        severity="warning" if warn else "information", timeout=10)

        self.app.push_screen(CheckpointPickerScreen(
            self.cluster.fleet, self.cluster.inv, root, nnodes=nnodes, gpus_per_node=per_node),
            picked)

    def action_back(self) -> None:
        self.flush_draft()
        if self.profile is not None and self.texts() != {**self._base_texts,
                                                         **texts_from_sets(self.initial_sets)}:
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
            what = (f"{self.error_count} error(s) to fix first" if self.report is not None
                    else "still checking")
            self.notify(f"not submitted: {markup(what)}", severity="warning", timeout=4)
            return
        self.submit()

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

    async def _submit(self) -> None:
        from tui.jobs.service import submit_and_record
        from tui.jobs.submit import env_sources, merged_env, verl_submission

        assert self.profile is not None
        self._update_submit()
        self.query_one("#form-summary", Static).update(Text("submitting…", "bold cyan"))
        inv = self.cluster.inv
        # What is validated is exactly what is submitted: a fresh check on the live cluster.
        try:
            st = await self.cluster.status()
        except (DashboardError, TransportError, OSError) as exc:
            self.notify(f"not submitted: Ray is not reachable: {markup(exc)}", severity="error",
                        timeout=8)
            self._update_submit()
            return
        self.resources = ClusterResources(nodes=[NodeResources(n.host or n.node_ip, n.gpus,
                                                               n.cpus)
                                                 for n in st.nodes if n.alive])
        toggles = self.toggles
        if toggles.post_mortem:
            self._probed_debugpy = False
            await self._probe_debugpy()
        profile, local = self.current_profile()
        report = await asyncio.to_thread(check_profile, profile, cluster=self.resources,
                                         working_dir_bytes=self.wd_bytes,
                                         post_mortem=toggles.post_mortem)
        self.report = report
        self.validated = True
        for key, f in self.fields.items():
            f.local_problem = local.get(key)
        self._apply(report, local)
        if local or not report.ok:
            self.notify("not submitted: fix the problems shown", severity="error", timeout=6)
            return
        rt = profile.runtime_env
        wd = str(Path(rt.working_dir).expanduser()) if rt.working_dir else None
        secrets = self._secret_values()
        if secrets is None:
            self._update_submit()
            return
        env = merged_env(inv, rt.env_vars, post_mortem=toggles.post_mortem,
                         legacy_debug=toggles.legacy_debug, extra=secrets)
        sub = verl_submission(inv, name=profile.name, overrides=report.overrides,
                              python=profile.python, env=env, working_dir=wd,
                              excludes=list(rt.excludes), composed=report.config,
                              print_config=toggles.print_config,
                              env_sources=env_sources(inv, rt.env_vars, secrets))
        try:
            sid = await submit_and_record(self.cluster, sub, self.history,
                                          profile_path=str(self.profile_path.resolve()))
        except (DashboardError, TransportError, WorkdirError, OSError) as exc:
            self.notify(f"not submitted: {markup(exc)}", severity="error", timeout=8)
            self._update_submit()
            return
        self._draft_dirty = False
        self._draft_seq += 1
        if self._may_write_draft():
            clear_draft(self.cluster_name, profile.name)
        self.notify(f"submitted {markup(sid)}", timeout=6)
        self.dismiss(sid)


class DraftBusyScreen(ModalScreen[str]):
    """The profile's draft is open in another form: take over, read-only copy, or cancel."""

    BINDINGS = [
        Binding("t", "choose('take')", "Take over"),
        Binding("r", "choose('copy')", "Read-only copy"),
        Binding("c,escape", "choose('cancel')", "Cancel"),
    ]

    DEFAULT_CSS = """
    DraftBusyScreen { align: center middle; }
    DraftBusyScreen > Vertical {
        width: 76; height: auto; border: thick $warning; background: $surface; padding: 1 2;
    }
    DraftBusyScreen #draft-busy-question { text-style: bold; }
    DraftBusyScreen Horizontal { height: auto; margin-top: 1; }
    DraftBusyScreen Button { margin-right: 1; }
    """

    def __init__(self, other: DraftOwner | None) -> None:
        super().__init__()
        self.other = other

    def compose(self) -> ComposeResult:
        who = self.other.describe() if self.other else "another form (owner unknown)"
        with Vertical():
            yield Static(Text(f"this draft is open in another form: {one_line(who)}"),
                         id="draft-busy-question")
            yield Static(Text("Take over: this form saves the draft, the other stops saving. "
                              "Read-only copy: edit and submit here, nothing is saved."))
            with Horizontal():
                yield Button("Take over (t)", id="take", variant="warning")
                yield Button("Read-only copy (r)", id="copy")
                yield Button("Cancel (c)", id="cancel")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "cancel")

    def action_choose(self, what: str) -> None:
        self.dismiss(what)


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
        yield Checkbox("post-mortem debugging (RAY_DEBUG_POST_MORTEM=1)", t.post_mortem,
                       id="toggle-post-mortem")
        yield Checkbox("legacy ray debug (RAY_DEBUG=legacy)", t.legacy_debug,
                       id="toggle-legacy-debug")
        yield Checkbox("print config only (main_ppo --cfg job: verl composes and prints the "
                       "config on the cluster, no GPU)", t.print_config,
                       id="toggle-print-config")

    @property
    def value(self) -> Toggles:
        return Toggles(
            post_mortem=self.query_one("#toggle-post-mortem", Checkbox).value,
            legacy_debug=self.query_one("#toggle-legacy-debug", Checkbox).value,
            print_config=self.query_one("#toggle-print-config", Checkbox).value)


class AddKeyBox(Vertical):
    DEFAULT_CSS = """
    AddKeyBox { height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, add: AddKey) -> None:
        super().__init__()
        self._add = add

    def compose(self) -> ComposeResult:
        yield self._add
