"""The cockpit: a Textual app over the fleet and its live telemetry."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from tui.cluster.ray_cluster import BringUpError, RayCluster, StepEvent
from tui.cluster.ray_monitor import RayMonitor, RayView
from tui.cluster.telemetry import TelemetryMonitor
from tui.config.hosts import Inventory
from tui.errors import VerlTuiError, hint_of, title_of
from tui.jobs.history import JobHistory
from tui.palette import CockpitCommands
from tui.sanitize import clean, markup, one_line
from tui.screens.cluster import ClusterScreen
from tui.screens.confirm import ConfirmScreen
from tui.screens.error import ErrorScreen, Failed, WorkerFailed, failure_title
from tui.screens.help import HelpScreen, collect_bindings
from tui.screens.ray_progress import RAY_UP_RETRY, RayProgressScreen, ray_up_outcome
from tui.screens.services import Services
from tui.transport.fleet import Fleet
from tui.transport.types import Forward
from tui.widgets import terminal_guard
from tui.widgets.banner import InsecureBanner

if TYPE_CHECKING:
    from tui.supervisor.core import Supervisor

FRAME_S = 0.1  # coalesce telemetry into at most ~10 screen updates a second
# Above this many hosts, 5 updates a second: each host still changes once a second, a frame
# costs the same whatever it carries, and sample -> screen stays well under 300 ms (p95).
MANY_HOSTS, MANY_HOSTS_FRAME_S = 256, 0.2
GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections once warmed up (700)
SUPERVISE_S = 10.0  # the cockpit's supervisor: one pass (and lease heartbeat) every 10 s
FRESH_TOAST_S = 2.0  # a toast raised this recently is about what the new screen shows
ERROR_TOAST_S = 12.0  # every error toast (report): long enough to read a hint


class VerlTuiApp(App):
    TITLE = "verl-tui"
    COMMANDS = App.COMMANDS | {CockpitCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("1", "show_cluster", "Cluster"),
        Binding("2", "show_jobs", "Jobs"),
        Binding("3", "node_logs", "Node logs"),
        Binding("4", "debugger", "Debugger"),
        Binding("5", "checkpoints", "Checkpoints"),
        Binding("ctrl+p", "command_palette", "Commands", show=False),
        Binding("ctrl+r", "reload_hosts", "Reload hosts.yaml", show=False),
        # Reached only while Ray cannot start here (check_action): u / R say why and the fix.
        Binding("u,R", "ray_missing", "Ray up: not installed here (the fix)", show=False),
    ]

    def __init__(
        self, inventory: Inventory, *, interval: float | None = None, read_only: bool = False
    ):
        terminal_guard.install()  # before anything is drawn
        super().__init__()
        self.inventory = inventory
        # Shows everything, changes nothing: every mutating action refused (run_action).
        self.read_only = read_only or inventory.readonly
        self._interval = interval
        self._dirty: set[str] = set()
        # Benchmarks watch when samples reach the screen; nothing in normal use sets this.
        self.frame_observer: Callable[[set[str], float], None] | None = None
        # Made with the default screen (get_default_screen), before any key or command runs.
        self._services: Services | None = None
        self._cluster_screen: ClusterScreen | None = None
        self._gc_before: tuple[int, int, int] | None = None  # set once the GC is tuned
        self._frame_timer: Timer | None = None
        # Set when a host on this machine has no Ray in its interpreter (local_ray): `u` and
        # `R` are not offered then, and say this line (the pinned fix) when pressed.
        self.ray_missing: str | None = None
        self.local_ray_asked = False

    def get_default_screen(self) -> ClusterScreen:
        # The Cluster screen is the base of the stack, so nothing pushed early lands under it.
        inv = self.inventory
        fleet = Fleet(inv)
        telemetry = TelemetryMonitor(fleet, inv, interval=self._interval)
        telemetry.add_listener(self._mark_dirty)
        ray = RayCluster(fleet, inv)
        self._services = Services(
            inventory=inv,
            fleet=fleet,
            telemetry=telemetry,
            ray=ray,
            ray_monitor=RayMonitor(ray, self._on_ray_view),
            history=JobHistory(inv.cluster),
        )
        roles = [inv.head.name] + [h.name for h in inv.hosts if not h.is_head]
        self._cluster_screen = ClusterScreen(
            inv.cluster,
            telemetry.hosts,
            inv.insecure_hosts,
            history_s=telemetry.interval * inv.telemetry.history,
            roles=roles,
            fleet=fleet,
        )
        return self._cluster_screen

    # What get_default_screen made, typed (the screens are handed `services` itself).

    @property
    def services(self) -> Services:
        assert self._services is not None, "made by get_default_screen"
        return self._services

    @property
    def cluster_screen(self) -> ClusterScreen:
        assert self._cluster_screen is not None, "made by get_default_screen"
        return self._cluster_screen

    @property
    def fleet(self) -> Fleet:
        return self.services.fleet

    @property
    def monitor(self) -> TelemetryMonitor:
        return self.services.telemetry

    @property
    def ray(self) -> RayCluster:
        return self.services.ray

    @property
    def ray_monitor(self) -> RayMonitor:
        return self.services.ray_monitor

    @property
    def supervisor(self) -> Supervisor | None:
        return self.services.supervisor

    def on_mount(self) -> None:
        frame_s = MANY_HOSTS_FRAME_S if len(self.inventory.hosts) > MANY_HOSTS else FRAME_S
        self._frame_timer = self.set_interval(frame_s, self._flush_telemetry)
        if self.inventory.insecure_hosts:
            # One red line on every screen, whichever pushes it: installed here, not per screen.
            self.screen_change_signal.subscribe(self, self._add_banner)
            self._add_banner(self.screen)
        self.start_telemetry()
        self.screen_change_signal.subscribe(self, self._drop_stale_toasts)
        self.check_local_ray()
        if self.read_only:  # a supervisor submits, retries and stops: not from here
            self.sub_title = "read-only"
        elif os.environ.get("VERL_TUI_SUPERVISE", "1") != "0":
            self.run_supervisor()
        if self.inventory.prometheus:
            self.run_exporter(self.inventory.prometheus)

    def _drop_stale_toasts(self, _screen: Screen[Any]) -> None:
        """A toast about the screen left behind goes with it (it would cover the new screen's
        details pane for its whole timeout); one just raised ("submitted …") and warnings stay.
        Textual has no public call to drop one toast: its own notification list is used."""
        now = time.time()
        for note in list(self._notifications):
            if note.severity == "information" and now - note.raised_at > FRESH_TOAST_S:
                self._unnotify(note, refresh=False)
        self._refresh_notifications()

    @work(
        exclusive=True,
        group="local-ray",
        exit_on_error=False,
        description="Looking for Ray on this machine",
    )
    async def check_local_ray(self) -> None:
        from tui.cluster.local_ray import local_ray_missing

        if not any(h.transport == "local" for h in self.inventory.hosts):
            return
        self.ray_missing = await local_ray_missing(self.fleet, self.inventory)
        self.local_ray_asked = True
        self.refresh_bindings()

    async def run_action(
        self, action: Any, default_namespace: Any = None, namespaces: Any = None
    ) -> bool:
        """Every key binding and palette entry comes here: the read-only gate is this one
        check (tui/screens/readonly.py declares which actions change anything)."""
        if self.read_only:
            from tui.screens.readonly import refusal

            target, name, _params = self._parse_action(
                action, self if default_namespace is None else default_namespace, namespaces
            )
            why = refusal(target, name)
            if why is not None:
                self.notify(markup(why), severity="warning", timeout=6)
                return True
        return await super().run_action(action, default_namespace, namespaces)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("ray_up", "ray_restart"):
            return self.ray_missing is None  # not offered (hidden) while Ray cannot start
        if action == "ray_missing":
            return self.ray_missing is not None
        return True

    def action_ray_missing(self) -> None:
        self.notify(markup(self.ray_missing or ""), severity="warning", timeout=12)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Textual's own "Quit" would stand next to ours (q) in the palette: one is enough.
        return (c for c in super().get_system_commands(screen) if c.title != "Quit")

    @work(
        exclusive=True,
        group="supervisor",
        exit_on_error=False,
        description="The cockpit's supervisor",
    )
    async def run_supervisor(self) -> None:
        """The same loop as `verl-tui watch`; while another supervisor holds the cluster this
        one stands by (the Jobs screen says who) and takes over when that one's lease ends."""
        from tui.state import state_dir
        from tui.supervisor.core import Supervisor
        from tui.supervisor.duty import SupervisorContext
        from tui.supervisor.notify import install
        from tui.supervisor.stall_duty import use_telemetry

        services = self.services
        ctx = SupervisorContext(self.inventory, self.ray, services.history, state_dir())
        supervisor = services.supervisor = Supervisor(ctx, interval=SUPERVISE_S)
        use_telemetry(ctx, self.monitor)  # the stall check's GPU evidence: the telemetry shown

        def show(line: str, severity: str) -> None:
            self.notify(markup(line), severity=severity, timeout=8)  # type: ignore[arg-type]

        install(ctx, show=show, bell=self.bell)
        try:
            await supervisor.run()
        finally:
            await supervisor.close()

    @work(
        exclusive=True,
        group="prometheus",
        exit_on_error=False,
        description="The Prometheus endpoint",
    )
    async def run_exporter(self, listen: str) -> None:
        """hosts.yaml `prometheus:`: serve what `verl-tui export` serves while the cockpit runs."""
        from tui.config.listen import parse_listen
        from tui.export.prometheus import Exporter

        exporter = Exporter(self.ray, self.services.history, self.monitor)
        try:
            exporter.serve(*parse_listen(listen))
        except OSError as exc:
            self.report(exc, title=f"prometheus: cannot listen on {listen}")
            return
        try:
            await exporter.run()
        finally:
            exporter.close()

    def _add_banner(self, screen) -> None:
        if not screen.query(InsecureBanner):
            screen.mount(InsecureBanner(self.inventory.insecure_hosts))

    def start_telemetry(self) -> None:
        # Fleet and monitor are asyncio tasks that never block the loop; they live as long
        # as the app and are closed (agents told to exit) before the loop goes away.
        self.fleet.start()
        self.monitor.start()
        self.ray_monitor.start()
        self.freeze_after_warm_up()

    @work(
        exclusive=True,
        group="gc-freeze",
        exit_on_error=False,
        description="Waiting for the first samples",
    )
    async def freeze_after_warm_up(self) -> None:
        """Once every host has answered, what exists (Textual, the connections, the hosts'
        state) lives as long as the app: gc.freeze() keeps it out of the collector's full
        passes (at 1,024 hosts each one paused the screen for 0.2-0.35 s, about every 20 s),
        and young passes come less often."""
        await self.monitor.wait_first(timeout=120)
        gc.freeze()
        # The live samples (~30 tracked objects per host, each replaced every second) would
        # still set off a young pass every ~700 allocations and a full one every few seconds,
        # landing inside key frames (bench/keys_under_load.py, 1,024 hosts: GC time halved,
        # no full pass in a minute). Cyclic garbage, which the cockpit makes little of, waits
        # longer to be freed.
        self._gc_before = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)

    async def on_unmount(self) -> None:
        if self._frame_timer is not None:  # no frame may touch widgets being torn down
            self._frame_timer.stop()
        if self._gc_before is not None:  # the process as we found it (tests run many apps)
            gc.unfreeze()
            gc.set_threshold(*self._gc_before)
            self._gc_before = None
        services = self._services
        if services is None:  # never got as far as the default screen
            return
        for forward in services.kept_forwards:
            forward.close()
        if services.supervisor is not None:  # its lease goes back while the head is reachable
            await services.supervisor.close()
        await services.ray_monitor.close()
        await services.ray.close()
        await services.telemetry.close()
        await services.fleet.close()

    def _flush_telemetry(self) -> None:
        screen = self._cluster_screen
        if not self._dirty or screen is None or not screen.is_mounted:
            return
        changed, self._dirty = self._dirty, set()
        screen.apply_changes(changed)
        if self.frame_observer is not None:
            stamp = time.time()
            self.call_after_refresh(self.frame_observer, changed, stamp)

    def _mark_dirty(self, host: str) -> None:
        self._dirty.add(host)

    def _on_ray_view(self, view: RayView) -> None:
        self.cluster_screen.apply_ray(view)

    # -- Ray lifecycle -----------------------------------------------------------------------

    def action_ray_up(self) -> None:
        self.run_ray("up")

    def action_ray_restart(self) -> None:
        self._restart_naming_owners()

    @work(
        exclusive=True,
        group="ray-check",
        exit_on_error=False,
        description="Checking whether Ray is running",
    )
    async def _restart_naming_owners(self) -> None:
        from tui.jobs.owner import others_running, their_jobs_line

        detail = "Running jobs are killed; Ray is stopped and started again."
        owners = await others_running(self.ray)
        if owners:
            detail += f" {their_jobs_line(owners)}."
        self._confirm_then("Restart Ray on every host?", detail, "restart")

    def action_ray_down(self) -> None:
        self._ray_down_if_running()

    @work(
        exclusive=True,
        group="ray-check",
        exit_on_error=False,
        description="Checking whether Ray is running",
    )
    async def _ray_down_if_running(self) -> None:
        # Ask only when there is something to stop: Ray never started (or already stopped)
        # on every host answers at once, without a question and a "stopped" that did nothing.
        running = await self.ray.ray_processes()
        unknown = sorted(h for h, procs in running.items() if procs is None)
        if not unknown and not any(running.values()):
            n = len(running)
            self.notify(
                f"Ray is not running on {'the host' if n == 1 else f'any of {n} hosts'}:"
                " nothing to stop",
                timeout=5,
            )
            return
        from tui.jobs.owner import others_running, their_jobs_line

        detail = "Workers first, then the head; running jobs are killed."
        owners = await others_running(self.ray)
        if owners:
            detail += f" {their_jobs_line(owners)}."
        if unknown:
            detail += f" Not reachable (cannot tell): {one_line(', '.join(unknown))}."
        self._confirm_then("Stop Ray on every host?", detail, "down")

    def _confirm_then(self, question: str, detail: str, kind: str) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.run_ray(kind)

        self.push_screen(ConfirmScreen(question, detail), answered)

    @work(exclusive=True, group="ray", exit_on_error=False, description="Ray up/down")
    async def run_ray(self, kind: str) -> None:
        if kind != "down" and self.ray_missing is not None:  # from the palette
            self.action_ray_missing()
            return
        titles = {"up": "Ray up", "restart": "Ray restart", "down": "Ray down"}
        screen = RayProgressScreen(f"{titles[kind]} — {self.inventory.cluster}")
        await self.push_screen(screen)

        def progress(ev: StepEvent) -> None:
            if screen.is_mounted:
                screen.add_event(ev)

        self.ray_monitor.pause()
        self.ray.set_progress(progress)
        try:
            if kind == "down":
                try:
                    report = await self.ray.tear_down()
                    bad = {**report.failures, **report.leftover}
                    message = (
                        "Ray stopped; no Ray process left"
                        if not bad
                        else "; ".join(f"{h}: {why}" for h, why in bad.items())
                    )
                    ok = not bad
                except BringUpError as exc:  # ClusterBusy: another up/down/restart runs
                    ok, message = False, one_line(exc)
            else:
                try:
                    status = await self.ray.bring_up(restart=kind == "restart")
                    ok, message = True, ray_up_outcome(status)
                except BringUpError as exc:
                    # What to do next, as the success line says it: the step's own line above
                    # names the host and what Ray printed.
                    ok, message = False, f"{one_line(exc)} — {RAY_UP_RETRY}"
            if screen.is_mounted:
                screen.finish(ok, message)
            else:
                self.notify(markup(message), severity="information" if ok else "error", timeout=8)
        finally:
            self.ray.set_progress(None)
            self.ray_monitor.resume()

    # -- hosts.yaml read again (tui/cluster/reload.py) -----------------------------------------

    def action_reload_hosts(self) -> None:
        self.reload_hosts()

    @work(
        exclusive=True,
        group="reload-hosts",
        exit_on_error=False,
        description="Reading hosts.yaml again",
    )
    async def reload_hosts(self) -> None:
        """Changed hosts reconnect, removed ones close, added ones connect, the rest keep their
        connection; screens and drafts stay. A file that does not load keeps the old inventory
        and says file:line in one line."""
        import asyncio

        from tui.cluster.reload import apply_inventory, read_inventory, summary
        from tui.config.yamlfile import ConfigError

        old, path = self.inventory, self.inventory.source
        if path is None:
            self.notify("no hosts file was given: nothing to reload", severity="warning")
            return
        try:
            inv = await asyncio.to_thread(read_inventory, path, old)
        except ConfigError as exc:
            self.report(exc, title="hosts.yaml not reloaded")
            return
        change = await apply_inventory(self.fleet, self.monitor, self.ray, inv)
        self.inventory = self.services.inventory = inv
        if self.supervisor is not None:
            self.supervisor.ctx.inv = inv
        screen = self.cluster_screen
        screen.roles = [inv.head.name] + [h.name for h in inv.hosts if not h.is_head]
        screen.insecure = inv.insecure_hosts
        if screen.is_mounted:
            screen.table.set_hosts(screen.hosts)  # the monitor's dict, followed in place
            screen.apply_changes(set(screen.hosts))
        self.notify(markup(summary(change, path, old, inv)), timeout=10)

    def action_show_cluster(self) -> None:
        while len(self.screen_stack) > 1:
            self.pop_screen()

    def action_show_jobs(self) -> None:
        from tui.screens.jobs.screen import JobsScreen

        if isinstance(self.screen, JobsScreen):
            return
        self.action_show_cluster()
        self.push_screen(JobsScreen(self.services))

    def action_new_job(self) -> None:
        """The Jobs screen, then the profile picker (→ the job form)."""
        from tui.screens.jobs.screen import JobsScreen

        self.action_show_jobs()
        screen = self.screen
        if isinstance(screen, JobsScreen):
            screen.action_new_job()

    def _push_on_cluster(self, screen_type: type, make: Callable[[], Screen[Any]]) -> None:
        """Show a top-level screen (the Cluster screen under it), not a stack of copies."""
        if isinstance(self.screen, screen_type):
            return
        self.action_show_cluster()
        self.push_screen(make())

    def action_node_logs(self, host: str | None = None) -> None:
        from tui.screens.logs.node_logs import NodeLogsScreen

        hosts = [h.name for h in self.inventory.hosts]
        fleet = self.fleet
        self._push_on_cluster(NodeLogsScreen, lambda: NodeLogsScreen(fleet, hosts, host=host))

    def action_debugger(self) -> None:
        from tui.screens.debugger import DebuggerScreen

        self._push_on_cluster(DebuggerScreen, lambda: DebuggerScreen(self.ray, self.keep_forward))

    def action_checkpoints(self, root: str | None = None) -> None:
        from tui.screens.checkpoints import CheckpointsScreen

        fleet = self.fleet
        self._push_on_cluster(
            CheckpointsScreen, lambda: CheckpointsScreen(fleet, self.inventory, root)
        )

    def keep_forward(self, forward: Forward) -> None:
        self.services.kept_forwards.append(forward)

    def action_doctor(self) -> None:
        from tui.screens.doctor import DoctorScreen

        self.push_screen(DoctorScreen(self.fleet, self.inventory))

    def reconnect(self, host: str | None = None) -> None:
        self.fleet.reconnect(host)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(collect_bindings(self.screen)))

    # -- errors: one presenter ---------------------------------------------------------------

    def report(self, err: BaseException, *, title: str | None = None) -> None:
        """Present any error, one way: ours (a VerlTuiError: a host, a file, a refusal the user
        can act on) and the system's (an OSError: a full disk, a permission) as a toast with
        its title, its one line and its hint, for ERROR_TOAST_S; anything else is a bug and
        opens the error modal (the message, never a traceback). `title` is what failed (a
        worker's description, a screen's "not stopped"), when the caller knows: it leads the
        error's own title."""
        if isinstance(err, (VerlTuiError, OSError)):  # an OSError: a file, a full disk
            hint = hint_of(err)
            text = markup(err, 400) + (f"\n{markup(hint, 300)}" if hint else "")
            # A family's title ("dashboard", "cannot connect") after what did not happen; the
            # base's own ("error") adds nothing to it.
            own = title_of(err)
            heading = (
                title
                if title and own == VerlTuiError.title
                else ": ".join(t for t in (title, own) if t)
            )
            self.notify(text, title=markup(heading, 160), severity="error", timeout=ERROR_TOAST_S)
            return
        self.push_screen(
            ErrorScreen(title or "Something failed", f"{type(err).__name__}: {clean(err)}")
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # The app's own workers; a screen's come as WorkerFailed (ReportsWorkerFailures).
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.report(event.worker.error, title=failure_title(event.worker))

    def on_failed(self, message: Failed) -> None:
        self.report(message.error, title=message.heading)

    def on_worker_failed(self, message: WorkerFailed) -> None:
        error = message.worker.error
        if error is not None:
            self.report(error, title=failure_title(message.worker))
