"""Bring-up / teardown progress: one line per step and host, live, then the outcome."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import RichLog, Static

from tui.cluster.ray_cluster import ClusterStatus, StepEvent
from tui.fmt import plural
from tui.sanitize import clean, markup, one_line, pad
from tui.screens.error import ReportsWorkerFailures

TICK_S = 0.5  # the elapsed time shown while it runs
# A bring-up that failed: the keys that go on from here (its own lines name the host and why).
RAY_UP_RETRY = "u tries again, R restarts Ray, d runs the doctor"

_STYLE = {
    "ok": ("✓", "green"),
    "skip": ("·", "dim"),
    "fail": ("✗", "bold red"),
    "running": ("…", "cyan"),
}


def ray_up_outcome(status: ClusterStatus) -> str:
    """A bring-up's last line: what Ray offers jobs, and the keys to a first job (2 works from
    this view: it closes it). Ray offering no GPU is said here, before a form refuses the job,
    with the hosts.yaml key that declares them."""
    alive = [n for n in status.nodes if n.alive]
    gpus, cpus = sum(n.gpus for n in alive), sum(n.cpus for n in alive)
    offer = f"{plural(status.nodes_alive, 'node')} alive, Ray offers {gpus:g} GPUs, {cpus:g} CPUs"
    if gpus == 0:
        return (
            f"{offer}: a GPU job needs GPUs (hosts without any: num_gpus: under each host in "
            "hosts.yaml, then ctrl+r and R) — 2 Jobs, then n a job from a preset"
        )
    return f"{offer} — 2 Jobs, then n a job from a preset"


class RayProgressScreen(ReportsWorkerFailures, ModalScreen[None]):
    # A modal screen takes the keys: the app's 2 would not reach the Jobs screen from here, and
    # the outcome line names 2 as the next key.
    BINDINGS = [
        Binding("escape,enter,q", "close", "Close (when finished)"),
        Binding("2", "jobs", "Jobs"),
    ]

    DEFAULT_CSS = """
    RayProgressScreen { align: center middle; }
    RayProgressScreen > Vertical {
        width: 110; height: 80%; border: thick $primary; background: $surface; padding: 0 1;
    }
    RayProgressScreen #title { text-style: bold; height: 1; }
    RayProgressScreen RichLog { height: 1fr; }
    RayProgressScreen #outcome { height: auto; min-height: 1; }
    """

    def __init__(self, title: str):
        super().__init__()
        self.title_text = title
        self.started = time.monotonic()
        self.finished = False
        self._ticker: Timer | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(one_line(self.title_text), id="title", markup=False)
            yield RichLog(id="steps", wrap=True, markup=False)
            yield Static(markup(self._running_text()), id="outcome")

    def on_mount(self) -> None:
        # The first step line comes only once every host has answered the probe (seconds):
        # until then the view says what is happening, and the clock runs.
        first = Text("   0.0s ", style="dim")
        first.append("… ", style="cyan")
        first.append(
            f"{pad('cluster', 16)} {pad('start', 8)} taking the cluster's lock, then asking "
            "every host for its Python, Ray and ports…"
        )
        self.query_one(RichLog).write(first)
        if not self.finished:
            self._ticker = self.set_interval(TICK_S, self._tick)

    def _running_text(self) -> str:
        took = time.monotonic() - self.started
        return f"running… {took:.0f} s (the cockpit stays usable; esc closes once finished)"

    def _tick(self) -> None:
        if not self.finished:
            self.query_one("#outcome", Static).update(markup(self._running_text()))

    def add_event(self, ev: StepEvent) -> None:
        mark, style = _STYLE.get(ev.status, (" ", ""))
        line = Text(f"{ev.at - self.started:6.1f}s ", style="dim")
        line.append(f"{mark} ", style=style)
        line.append(f"{pad(ev.host or 'cluster', 16)} {pad(ev.phase, 8)} ")
        line.append(clean(ev.message), style=style if ev.status == "fail" else "")
        self.query_one(RichLog).write(line)

    def finish(self, ok: bool, message: str) -> None:
        self.finished = True
        if self._ticker is not None:
            self._ticker.stop()
        out = self.query_one("#outcome", Static)
        out.update(
            Text(clean(message) + "   (esc closes)", style="bold green" if ok else "bold red")
        )

    async def action_jobs(self) -> None:
        """The Jobs screen, which pops this one (a bring-up still running goes on, its outcome
        then comes as a toast)."""
        if not self.finished:
            self.notify("still running — it goes on in the background if you leave", timeout=2)
        await self.app.run_action("app.show_jobs", self)

    def action_close(self) -> None:
        if self.finished:
            self.dismiss(None)
        else:
            self.notify("still running — it goes on in the background if you leave", timeout=2)
            self.dismiss(None)
