#!/usr/bin/env python3
"""Keys on the Cluster screen while N simulated 8-GPU hosts stream telemetry at 1 Hz.

Issue 16 asks that sort, filter, fold and scroll be answered with p95 ≤100 ms while the cockpit
follows 1,024 hosts. Per size this runs the real cockpit (VerlTuiApp, headless, 200×50) in its
own process pinned to one CPU, the simulator (bench/simhosts.py) pinned to the other, waits
until every host has drawn a sample (+ --warmup s), then presses --presses keys through
Textual's pilot, one every 150–300 ms (uniform), in episodes a person would type:

  scroll  down/up (1–6 in a row), pagedown/pageup, end/home (only where the cursor can move)
  sort    s (next sort key, also the metric sorts that re-order ~1 Hz under load), S (reverse)
  filter  / (open the box), 3–5 typed characters of a host or GPU name, backspace, enter (keep);
          a kept filter is later cleared with escape
  fold    enter (fold/unfold the cursor's host), z (fold/unfold all hosts)

What is timed, per press: from just before the key is handed to the pilot (the same
driver.send_message path a terminal's input thread uses) until the end of the first frame
that shows the key's whole effect, encoded for the terminal:
  * the effect: the handler the key reaches is wrapped (GpuTable's cursor/page/jump/fold
    actions, ClusterScreen's sort/filter actions, set_filter, the filter box's submit); when
    it moved the cursor, the effect ends with the details pane's refresh that the table's
    Selected message causes (where the screen handles that message; a table that calls the
    screen back at once ends the effect with the cursor's move). A sort's toast is not
    waited for.
  * the frame: every widget the effect left dirty (repaint/layout/scroll flags; class and
    focus changes restyle at once in Textual 8, so the filter box shown/hidden is among them)
    must reach the screen and be drawn. Screen._compositor_refresh is wrapped; a widget
    counts as drawn by the first frame that begins after its request was delivered (no flag
    left, no Update/Layout message for it still in the screen's queue) and that renders it
    (among the frame's dirty widgets or a full repaint; a layout reflow for a widget that
    asked only for layout).
  * the encoding: headless Textual builds the frame's strips but skips turning them into
    terminal bytes; this bench does that work too (App._display wrapped: render_segments,
    output dropped), so a frame costs here what it costs in a terminal.
For comparison each press also records `car_ms`: until an app.call_after_refresh callback
queued at the end of the effect ran (Textual's own "after the next refresh"; it can run
before a widget's Update reached the screen, so it is a lower bound).

Pilot and harness overhead: every size is measured twice, `static` first: the same
inventory and the same table (every host's hello and 20 samples fed through the monitor's
ingest, links marked up) with nothing streaming (no SSH, no telemetry, no Ray polling), then
`stream`: the real SSH streams at 1 Hz. `static` is the cost of the keys themselves at that
table size plus the pilot's (its idle waits run beside, not in, the timed path; the pilot
posts keys as a terminal driver does, so the press→handler time is ~1 ms, `handled_ms`);
stream − static is what the telemetry load adds. The app's gc.freeze after warm-up happens
in both; the supervisor (VERL_TUI_SUPERVISE) is off in both.

Also reported: the cockpit's CPU while pressing (getrusage, % of one core), the simulator's,
the sample→screen latency of the telemetry while the keys were pressed, presses that had to
wait for the previous one (slower than the 150–300 ms rhythm), timeouts (none expected), and
per press: `net_ms` (drawn less the time the cockpit's thread sat runnable while another
process had its CPU, /proc/thread-self/schedstat: on a shared 2-core box that is most of the
noise), and the time inside rebuild / the telemetry frame / summary / details / draw /
ingest / the garbage collector (`spent_ms`; per class the slowest tenth's mean, which says
what the tail is made of), the collector's tracked objects and full-pass cost after warm-up.

    .venv/bin/python bench/keys_under_load.py [--hosts 128,1024] [--presses 360]
                                              [--modes static,stream] [--pyspy PATH]
keys_under_load-device-*.json: the same on the device machine (16 cores, nothing else
running), with .dev/site.tar.xz (bench/device_bringup.sh pack) unpacked on PYTHONPATH and
--hosts 1024 --presses 200, from a copy of tui/ at the commit named in the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import code_version, pct, pin, run_child, self_cpu_s
from telemetry_fanin import sim_pids, sims_cpu_s, start_sim, stop_sim

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
GPUS = 8
GOAL_HOSTS, GOAL_P95_MS = 1024, 100.0  # issue 16: keys answered p95 ≤100 ms at 1,024 hosts
CLASSES = ("sort", "filter", "fold", "scroll")
WEIGHTS = {"scroll": 0.4, "sort": 0.2, "filter": 0.2, "fold": 0.2}
TRACE = os.environ.get("KEYS_TRACE") == "1"
STATIC_SAMPLES = 20  # samples fed per host in the static baseline (sparklines have history)


# ------------------------------------------------------------------------------------------
# what a press is and how it is timed


@dataclass
class Press:
    cls: str
    key: str
    t0: float  # perf_counter just before the pilot got the key
    t_effect: float | None = None  # the key's handler began
    t_terminal: float | None = None  # the last step of the effect ended
    t_drawn: float | None = None  # the frame that shows it all was encoded
    t_car: float | None = None  # app.call_after_refresh after the effect ran
    await_selected: bool = False
    terminal: bool = False
    targets: dict = field(default_factory=dict)  # widget -> it asked for a repaint
    frames: int = 0
    late: bool = False  # waited for the previous press (beyond the rhythm's gap)
    sched0: tuple[int, int] = (0, 0)  # this thread's (on-CPU, run-queue wait) ns at t0
    sched1: tuple[int, int] | None = None  # ... when drawn
    left: list = field(default_factory=list)  # on a timeout: what was never drawn
    trace: list = field(default_factory=list)  # KEYS_TRACE=1: per frame, drawn and left
    spent: dict = field(default_factory=dict)  # seconds inside the hot paths while pending
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def row(self) -> dict:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.t0) * 1000, 2)

        cpu = wait = None
        if self.sched1 is not None and self.sched0 != (0, 0):
            cpu = round((self.sched1[0] - self.sched0[0]) / 1e6, 2)
            wait = round((self.sched1[1] - self.sched0[1]) / 1e6, 2)
        drawn = ms(self.t_drawn)
        return {
            "cls": self.cls,
            "key": self.key,
            "drawn_ms": drawn,
            # drawn less the time this thread sat runnable while another process had the CPU
            # (/proc/thread-self/schedstat): the latency on a CPU of its own
            "net_ms": None if drawn is None or wait is None else round(drawn - wait, 2),
            "cpu_ms": cpu,
            "wait_ms": wait,
            "handled_ms": ms(self.t_effect),
            "effect_ms": ms(self.t_terminal),
            "car_ms": ms(self.t_car),
            "frames": self.frames,
            "late": self.late,
            "spent_ms": {
                k: v if k.endswith("_runs") else round(v * 1000, 2)
                for k, v in sorted(self.spent.items())
            },
            **({"left": self.left} if self.left else {}),
            **({"trace": self.trace} if self.trace else {}),
        }


def _sched() -> tuple[int, int]:
    """This thread's time on a CPU and time runnable but waiting for one, ns (Linux)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return (0, 0)


def _flags(w: Any) -> bool:
    return bool(w._repaint_required or w._layout_required or w._scroll_required)


class KeyProbe:
    """Class-level wrappers report to the current probe; installed by measure() and taken
    out again when it ends (a test process goes on with the classes as they were)."""

    current: KeyProbe | None = None
    saved: list[tuple[type, str, Any]] = []
    details_by_message = True

    def __init__(self, app: Any) -> None:
        self.app = app
        self.press: Press | None = None
        self.depth = 0
        self.in_layout = 0
        self.encode = True
        self._gc_t0 = 0.0
        self.window = False
        self.gc_window = [0.0, 0, 0, 0]  # seconds in the collector; runs of gen 0, 1, 2
        KeyProbe.current = self
        KeyProbe.install()

    def gc_clock(self, phase: str, info: dict) -> None:
        """gc.callbacks: the cyclic collector's time counts as "gc" for the pending press."""
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        if not self._gc_t0:
            return
        took = time.perf_counter() - self._gc_t0
        if self.window:
            self.gc_window[0] += took
            self.gc_window[1 + min(info.get("generation", 0), 2)] += 1
        if self.press is not None:
            spent = self.press.spent
            spent["gc"] = spent.get("gc", 0.0) + took
            if info.get("generation") == 2:
                spent["gc2_runs"] = spent.get("gc2_runs", 0) + 1

    # -- the effect ----------------------------------------------------------------------

    @property
    def table(self) -> Any:
        return self.app.cluster_screen.table

    def _pending_in_queue(self, screen: Any) -> set:
        from textual import messages

        pending: set = set()
        with contextlib.suppress(AttributeError):
            for m in [screen._pending_message, *screen._message_queue._queue]:
                if isinstance(m, (messages.Update, messages.Layout)):
                    pending.add(m.widget)
                elif isinstance(m, messages.UpdateScroll):
                    pending.add(screen)
        return pending

    def capture(self, p: Press) -> None:
        """Whatever is dirty now must be drawn before the press counts as answered."""
        screen = self.app.screen
        for w in screen.walk_children(with_self=True):
            if _flags(w):
                p.targets[w] = p.targets.get(w, False) or bool(w._repaint_required)

    def set_terminal(self, p: Press) -> None:
        p.terminal = True
        p.t_terminal = time.perf_counter()
        self.app.call_after_refresh(self._car, p)
        self._maybe_done(p)

    def _car(self, p: Press) -> None:
        if p.t_car is None:
            p.t_car = time.perf_counter()

    def _maybe_done(self, p: Press) -> None:
        if p.terminal and not p.targets and p.t_drawn is None:
            p.t_drawn = time.perf_counter()
            p.sched1 = _sched()
            p.done.set()

    # -- the frame -----------------------------------------------------------------------

    def frame(self, screen: Any, draw: Any) -> None:
        p = self.press
        if p is None or screen is not self.app.screen:
            draw()
            return
        rendered = set(screen._dirty_widgets)
        repaint_all = screen in rendered
        layout = self.in_layout > 0
        queued = self._pending_in_queue(screen)
        done = []
        for w, repaint in p.targets.items():
            if w is screen:  # its own layout/scroll flags are consumed by this very frame
                if layout or repaint_all:
                    done.append(w)
            elif _flags(w) or w in queued:
                continue  # its request has not reached the screen yet
            elif repaint_all or w in rendered or not w.display or (layout and not repaint):
                done.append(w)
        draw()
        p.frames += 1
        for w in done:
            del p.targets[w]
        if TRACE:
            p.trace.append(
                (
                    round((time.perf_counter() - p.t0) * 1000, 1),
                    sorted(type(w).__name__ for w in rendered),
                    sorted(type(w).__name__ for w in p.targets),
                )
            )
        self._maybe_done(p)

    # -- wrappers ------------------------------------------------------------------------

    @classmethod
    def install(cls) -> None:
        if cls.saved:
            return
        from textual.app import App
        from textual.screen import Screen

        from tui.screens.cluster import ClusterScreen
        from tui.widgets.gpu_table import GpuTable

        def effect(fn):
            @functools.wraps(fn)
            def wrapped(self, *a, **kw):
                probe = cls.current
                p = probe.press if probe is not None else None
                if p is None or p.terminal or probe.depth:
                    return fn(self, *a, **kw)
                table = probe.table
                before = table.cursor
                if p.t_effect is None:
                    p.t_effect = time.perf_counter()
                if TRACE:
                    p.trace.append(fn.__name__)
                probe.depth += 1
                try:
                    return fn(self, *a, **kw)
                finally:
                    probe.depth -= 1
                    probe.capture(p)
                    if TRACE:
                        p.trace.append(sorted(type(w).__name__ for w in p.targets))
                    if table.cursor != before and cls.details_by_message:
                        p.await_selected = True  # the details pane follows the cursor
                    else:
                        probe.set_terminal(p)

            return wrapped

        def patch(owner: type, name: str, wrapper: Any) -> None:
            cls.saved.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, wrapper)

        for name in (
            "action_cursor",
            "action_page",
            "action_jump",
            "action_toggle_host",
            "action_toggle_all",
        ):
            patch(GpuTable, name, effect(getattr(GpuTable, name)))
        for name in (
            "action_sort",
            "action_reverse_sort",
            "action_filter",
            "set_filter",
            "on_input_submitted",
        ):
            patch(ClusterScreen, name, effect(getattr(ClusterScreen, name)))

        # Where the details pane follows the cursor through the table's Selected message, the
        # effect ends in the screen's handler; where it is called at once (a table hook),
        # the cursor's move is the end.
        selected = ClusterScreen.__dict__.get("on_gpu_table_selected")
        cls.details_by_message = selected is not None
        if selected is not None:

            @functools.wraps(selected)
            def on_selected(self, message):
                result = selected(self, message)
                probe = cls.current
                p = probe.press if probe is not None else None
                if p is not None and p.await_selected and not p.terminal:
                    probe.capture(p)
                    probe.set_terminal(p)
                return result

            patch(ClusterScreen, "on_gpu_table_selected", on_selected)

        compositor_refresh = Screen._compositor_refresh

        @functools.wraps(compositor_refresh)
        def frame(self):
            probe = cls.current
            if probe is None:
                return compositor_refresh(self)
            probe.frame(self, lambda: compositor_refresh(self))

        patch(Screen, "_compositor_refresh", frame)

        refresh_layout = Screen._refresh_layout

        @functools.wraps(refresh_layout)
        def layout(self, *a, **kw):
            probe = cls.current
            if probe is None:
                return refresh_layout(self, *a, **kw)
            probe.in_layout += 1
            try:
                return refresh_layout(self, *a, **kw)
            finally:
                probe.in_layout -= 1

        patch(Screen, "_refresh_layout", layout)

        display = App._display

        @functools.wraps(display)
        def encode(self, screen, renderable):
            display(self, screen, renderable)
            probe = cls.current
            if (
                probe is not None
                and probe.encode
                and self.is_headless
                and renderable is not None
                and not self._batch_count
                and hasattr(renderable, "render_segments")
            ):
                # What a terminal driver would write (headless Textual skips it).
                renderable.render_segments(self.console)

        patch(App, "_display", encode)

        # Where a press's time went: wall time inside these while it was pending (inclusive:
        # "frame" holds the telemetry frame's rebuild when a metric sort re-sorts).
        from tui.cluster.telemetry import TelemetryMonitor

        spots = (
            ("rebuild", GpuTable, "rebuild"),
            ("frame", ClusterScreen, "apply_changes"),
            ("summary", ClusterScreen, "_refresh_summary"),
            ("details", ClusterScreen, "_refresh_details"),
            ("draw", Screen, "_compositor_refresh"),
            ("ingest", TelemetryMonitor, "_ingest"),
        )

        def timed(name: str, fn: Any) -> Any:
            @functools.wraps(fn)
            def wrapped(*a, **kw):
                probe = cls.current
                p = probe.press if probe is not None else None
                if p is None:
                    return fn(*a, **kw)
                t0 = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    p.spent[name] = p.spent.get(name, 0.0) + time.perf_counter() - t0

            return wrapped

        for name, owner, attr in spots:
            if attr in owner.__dict__:  # the lead may rename a hot path: then it goes untimed
                patch(owner, attr, timed(name, owner.__dict__[attr]))

    @classmethod
    def uninstall(cls) -> None:
        for owner, name, original in reversed(cls.saved):
            setattr(owner, name, original)
        cls.saved.clear()
        if cls.current is not None and cls.current.gc_clock in gc.callbacks:
            gc.callbacks.remove(cls.current.gc_clock)
        cls.current = None


# ------------------------------------------------------------------------------------------
# what is pressed


class Planner:
    """Episodes of keys a person would type, chosen against the table's current state (no
    press that cannot change anything: home at the top, up on the first row)."""

    def __init__(self, rng: random.Random, host_names: list[str]) -> None:
        self.rng = rng
        self.names = host_names
        self.counts = dict.fromkeys(CLASSES, 0)
        self.filter_kept = False

    def next_class(self) -> str:
        # The class furthest below its share so far (ties at random): a balanced mix.
        total = sum(self.counts.values()) or 1
        lag = {c: WEIGHTS[c] - self.counts[c] / total for c in CLASSES}
        best = max(lag.values())
        return self.rng.choice([c for c in CLASSES if lag[c] >= best - 1e-9])

    def episode(self, table: Any) -> list[tuple[str, str]]:
        cls = self.next_class()
        rng = self.rng
        keys: list[str]
        if cls == "scroll":
            n, cur = len(table.rows), table.cursor
            choices = []
            if cur < n - 1:
                choices += ["down", "pagedown", "end"]
            if cur > 0:
                choices += ["up", "pageup", "home"]
            kind = rng.choice(choices or ["down"])
            keys = [kind] * (rng.randint(1, 6) if kind in ("down", "up") else 1)
            if kind in ("pagedown", "pageup"):
                keys = [kind] * rng.randint(1, 2)
        elif cls == "sort":
            keys = ["s"] if rng.random() < 0.75 else ["S"]
        elif cls == "filter":
            if self.filter_kept:
                keys, self.filter_kept = ["escape"], False
            else:
                if rng.random() < 0.7:
                    word = rng.choice(self.names)[: rng.randint(4, 5)]
                else:
                    word = f"gpu{rng.randint(0, GPUS - 1)}"
                keys = ["slash", *word]
                if rng.random() < 0.4:
                    keys += ["backspace"]
                keys += ["enter"]
                self.filter_kept = True
        else:
            keys = ["enter"] if rng.random() < 0.6 else ["z"]
            keys = keys * rng.randint(1, 2)
        self.counts[cls] += len(keys)
        return [(cls, k) for k in keys]


# ------------------------------------------------------------------------------------------
# one run: the app, the warm-up, the presses


def _can_move(table: Any, key: str) -> bool:
    if key in ("down", "pagedown", "end"):
        return table.cursor < len(table.rows) - 1
    return table.cursor > 0


def _static_feed(app: Any) -> None:
    """The baseline's telemetry: every host's hello and STATIC_SAMPLES samples through the
    monitor's own ingest, links marked up; nothing connects, nothing streams afterwards."""
    import simhosts

    from tui.transport.types import HostState, LinkStatus

    monitor = app.monitor
    for i, name in enumerate(monitor.hosts):
        monitor.on_link_status(LinkStatus(name, HostState.UP))
        hostname = f"sim{i:03d}"
        hello = {"type": "hello", "agent": 1, "hostname": hostname, "source": "nvml"}
        monitor.ingest_line(name, json.dumps(hello))
        for seq in range(STATIC_SAMPLES):
            sample = simhosts.agent_sample(i, GPUS, seq, hostname)
            monitor.ingest_line(name, json.dumps(sample))
    freeze = getattr(app, "freeze_after_warm_up", None)
    if freeze is not None:  # what start_telemetry does once every host has answered
        freeze()


def _heap() -> dict:
    """How many objects the cyclic collector tracks, which kinds, and what a full
    collection of them costs (run once, here, before the window)."""
    objs = gc.get_objects()
    kinds: dict[str, int] = {}
    for o in objs:
        name = type(o).__name__
        kinds[name] = kinds.get(name, 0) + 1
    n = len(objs)
    del objs
    t0 = time.perf_counter()
    gc.collect()
    return {
        "tracked_objects": n,
        "full_collect_ms": round((time.perf_counter() - t0) * 1000, 1),
        "top_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:10]),
        "thresholds": list(gc.get_threshold()),
    }


def _stats(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50": _r(pct(values, 0.50)),
        "p95": _r(pct(values, 0.95)),
        "max": _r(max(values) if values else None),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def summarize(rows: list[dict]) -> dict:
    """Per class and overall: drawn p50/p95/max; net (drawn less run-queue wait) the same;
    handled/effect/car/cpu/wait p95."""
    out: dict = {}
    for cls in (*CLASSES, "overall"):
        sel = [r for r in rows if cls == "overall" or r["cls"] == cls]
        drawn = [r["drawn_ms"] for r in sel if r["drawn_ms"] is not None]
        entry = _stats(drawn)
        entry["timeouts"] = sum(1 for r in sel if r["drawn_ms"] is None)
        net = [r["net_ms"] for r in sel if r["net_ms"] is not None]
        entry["net"] = _stats(net)
        for k in ("handled_ms", "effect_ms", "car_ms", "cpu_ms", "wait_ms"):
            vals = [r[k] for r in sel if r[k] is not None]
            entry[k.replace("_ms", "_p95_ms")] = _r(pct(vals, 0.95))
        keys: dict[str, list[float]] = {}
        for r in sel:
            if r["drawn_ms"] is not None and cls != "overall":
                typed = cls == "filter" and len(r["key"]) == 1
                keys.setdefault("char" if typed else r["key"], []).append(r["drawn_ms"])
        if keys:
            entry["by_key"] = {k: _stats(v) for k, v in sorted(keys.items())}
        # The tail's anatomy: mean time inside each hot path for the slowest tenth.
        cut = pct(drawn, 0.90)
        slow = [r for r in sel if r["drawn_ms"] is not None and cut is not None]
        slow = [r for r in slow if r["drawn_ms"] >= cut]
        if slow:
            names = sorted({k for r in slow for k in r["spent_ms"]})
            entry["slowest_tenth_spent_ms"] = {
                k: _r(sum(r["spent_ms"].get(k, 0.0) for r in slow) / len(slow)) for k in names
            }
            entry["slowest_tenth_drawn_ms"] = _r(sum(r["drawn_ms"] for r in slow) / len(slow))
        out[cls] = entry
    return out


async def measure(
    hosts_file: str,
    n_hosts: int,
    *,
    mode: str = "stream",
    presses: int = 360,
    gap: tuple[float, float] = (0.15, 0.30),
    warmup: float = 3.0,
    warmup_timeout: float = 120.0,
    seed: int = 16,
    encode: bool = True,
    interval: float | None = 1.0,
    sim_pid: str | None = None,
    timeout: float = 5.0,
    on_window: Any = None,
    gc_mode: str = "",
) -> dict:
    """Run the cockpit on `hosts_file`, press `presses` keys, return the per-class figures.

    mode: "stream" (telemetry over SSH from the hosts) or "static" (the same table fed once,
    nothing streaming: the baseline). on_window(start: bool) is called around the window
    (the CLI starts py-spy there). The supervisor is off while it runs (VERL_TUI_SUPERVISE)."""
    if mode not in ("stream", "static"):
        raise ValueError(f"mode is stream or static, not {mode!r}")
    import tui.app
    from tui.config.hosts import load_inventory

    inventory = load_inventory(hosts_file)
    before = os.environ.get("VERL_TUI_SUPERVISE")
    os.environ["VERL_TUI_SUPERVISE"] = "0"
    app = tui.app.VerlTuiApp(inventory, interval=interval)
    probe = KeyProbe(app)
    probe.encode = encode
    gc.callbacks.append(probe.gc_clock)
    if mode == "static":
        app.start_telemetry = lambda: _static_feed(app)  # type: ignore[method-assign]
    window = (presses, gap, warmup, warmup_timeout, seed, sim_pid, timeout, on_window, gc_mode)
    try:
        return await _measure(app, probe, n_hosts, mode, *window)
    finally:
        KeyProbe.uninstall()
        if before is None:
            os.environ.pop("VERL_TUI_SUPERVISE", None)
        else:
            os.environ["VERL_TUI_SUPERVISE"] = before


async def _measure(
    app: Any,
    probe: KeyProbe,
    n_hosts: int,
    mode: str,
    presses: int,
    gap: tuple[float, float],
    warmup: float,
    warmup_timeout: float,
    seed: int,
    sim_pid: str | None,
    timeout: float,
    on_window: Any,
    gc_mode: str,
) -> dict:
    seen: set[str] = set()
    lat: list[float] = []
    window = {"on": False}

    def observe(changed: set[str], stamp: float) -> None:
        now = time.time()
        hosts = app.monitor.hosts if app.monitor else {}
        for name in changed:
            ht = hosts.get(name)
            s = ht.latest if ht else None
            if s is None:
                continue
            seen.add(name)
            if window["on"] and mode == "stream":
                lat.append((now - s.t) * 1000)

    app.frame_observer = observe
    result: dict = {"mode": mode, "hosts": n_hosts, "gpus": GPUS, "presses_planned": presses}
    if gc_mode:
        result["gc_mode"] = gc_mode
    rng = random.Random(seed)
    t_start = time.monotonic()
    async with app.run_test(size=(200, 50)) as pilot:
        deadline = time.monotonic() + warmup_timeout
        while len(seen) < n_hosts:
            if time.monotonic() > deadline:
                result["error"] = f"warm-up timed out: {len(seen)} of {n_hosts} hosts drawn"
                return result
            await asyncio.sleep(0.2)
        result["all_drawn_after_s"] = round(time.monotonic() - t_start, 2)
        await asyncio.sleep(warmup)
        result["heap"] = _heap()
        if gc_mode == "freeze":
            # An experiment (bench only): what survived warm-up leaves the collector's scans
            # (the app does this itself since 1f6539f).
            gc.freeze()
        elif gc_mode.startswith("thresh:"):
            # An experiment (bench only): the collector's thresholds, e.g. thresh:10000,10,10
            # (young samples die when replaced, before a pass promotes them).
            a0, a1, a2 = (int(x) for x in gc_mode.split(":", 1)[1].split(","))
            gc.set_threshold(a0, a1, a2)
        screen = app.cluster_screen
        if app.screen is not screen:
            result["error"] = f"another screen is on top: {type(app.screen).__name__}"
            return result
        table = screen.table
        planner = Planner(rng, list(app.monitor.hosts))
        records: list[Press] = []
        tasks: list[asyncio.Task] = []
        queue: list[tuple[str, str]] = []
        if on_window:
            on_window(True)
        cpu0, wall0, sim0 = self_cpu_s(), time.monotonic(), sims_cpu_s(sim_pid)
        window["on"] = probe.window = True
        next_at = time.perf_counter()
        while len(records) < presses:
            if not queue:
                queue = planner.episode(table)
            cls, key = queue.pop(0)
            if cls == "scroll" and not _can_move(table, key):
                planner.counts[cls] -= 1  # at the edge already: a person would not press it
                queue = [q for q in queue if q[0] != "scroll"]
                continue
            now = time.perf_counter()
            late = bool(records) and now > next_at + 0.005
            if now < next_at:
                await asyncio.sleep(next_at - now)
            p = Press(cls, key, time.perf_counter(), late=late, sched0=_sched())
            probe.press = p
            tasks.append(asyncio.create_task(pilot.press(key)))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(p.done.wait(), timeout)
            probe.press = None
            if p.t_drawn is None:
                p.left = sorted(
                    f"{type(w).__name__}#{w.id}:{int(w._repaint_required)}{int(w._layout_required)}"
                    f"{int(w._scroll_required)}:{int(w.display)}"
                    for w in p.targets
                )
            records.append(p)
            if getattr(app, "_exception", None) is not None:
                break  # the app failed: run_test raises it on the way out
            next_at = p.t0 + rng.uniform(*gap)
        window["on"] = probe.window = False
        cpu1, wall1, sim1 = self_cpu_s(), time.monotonic(), sims_cpu_s(sim_pid)
        if on_window:
            on_window(False)
        await asyncio.gather(*tasks, return_exceptions=True)
        wall = wall1 - wall0
        rows = [p.row() for p in records]
        result.update(
            {
                "presses": len(rows),
                "seconds": round(wall, 1),
                "cpu_percent": round(100 * (cpu1 - cpu0) / wall, 1),
                "sim_cpu_percent": None
                if sim0 is None or sim1 is None
                else round(100 * (sim1 - sim0) / wall, 1),
                "gc_percent": round(100 * probe.gc_window[0] / wall, 1),
                "gc_runs": dict(zip(("gen0", "gen1", "gen2"), probe.gc_window[1:], strict=True)),
                "late_presses": sum(1 for p in records if p.late),
                "timeouts": sum(1 for p in records if p.t_drawn is None),
                "keys": summarize(rows),
                "telemetry_latency_ms": _stats(lat) if mode == "stream" else None,
                "rows_at_end": len(table.rows),
                "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "presses_detail": rows,
            }
        )
    return result


# ------------------------------------------------------------------------------------------
# worker and orchestrator


def run_worker(args: argparse.Namespace) -> int:
    spy: list[subprocess.Popen] = []

    def on_window(start: bool) -> None:
        if not args.pyspy:
            return
        if start:
            out = RESULTS / f"pyspy-keys-{args.worker_mode}-{args.worker_hosts}.txt"
            argv = [args.pyspy, "record", "--pid", str(os.getpid()), "--rate", "200"]
            argv += ["--nonblocking", "-f", "raw", "-o", str(out)]
            spy.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        elif spy:
            spy[0].send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy[0].wait(timeout=30)

    result = asyncio.run(
        measure(
            args.hosts_file,
            args.worker_hosts,
            mode=args.worker_mode,
            presses=args.presses,
            gap=(args.gap_min, args.gap_max),
            warmup=args.warmup,
            warmup_timeout=args.warmup_timeout,
            seed=args.seed,
            encode=not args.no_encode,
            sim_pid=args.sim_pid,
            on_window=on_window,
            gc_mode=args.gc,
        )
    )
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if "keys" in result else 1


def run_one(mode: str, n: int, hosts_yaml: str, sim_pid: str, args, cpu: int | None) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, str(n)]
    argv += ["--hosts-file", hosts_yaml, "--sim-pid", sim_pid]
    argv += ["--presses", str(args.presses), "--warmup", str(args.warmup)]
    argv += ["--warmup-timeout", str(args.warmup_timeout), "--seed", str(args.seed)]
    argv += ["--gap-min", str(args.gap_min), "--gap-max", str(args.gap_max)]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    if args.no_encode:
        argv.append("--no-encode")
    if args.gc:
        argv += ["--gc", args.gc]
    if args.pyspy:
        argv += ["--pyspy", args.pyspy]
    limit = args.warmup_timeout + args.warmup + args.presses * (args.gap_max + 1) + 120
    result: dict = {"mode": mode, "hosts": n}
    t0 = time.monotonic()
    got, err, rc = run_child(argv, timeout=limit)
    result = got or result
    result["worker_exit"] = rc
    result["worker_wall_s"] = round(time.monotonic() - t0, 1)
    if "keys" not in result and "error" not in result:
        result["error"] = f"worker gave no result (rc {rc}): {err.strip()[-600:]}"
    return result


def print_run(r: dict) -> None:
    if "keys" not in r:
        print(f"{r['hosts']:>5} {r['mode']:<6} ERROR: {r.get('error')}")
        return
    k = r["keys"]
    cells = "  ".join(
        f"{c} {k[c]['p50']}/{k[c]['p95']}/{k[c]['max']} (n {k[c]['n']})"
        for c in (*CLASSES, "overall")
    )
    nets = "  ".join(
        f"{c} {k[c]['net']['p50']}/{k[c]['net']['p95']}" for c in (*CLASSES, "overall")
    )
    tel = r.get("telemetry_latency_ms") or {}
    print(
        f"{r['hosts']:>5} {r['mode']:<6} CPU {r['cpu_percent']:5.1f}%  "
        f"sim {r['sim_cpu_percent']}%  late {r['late_presses']}  timeouts {r['timeouts']}  "
        f"telemetry p95 {tel.get('p95', '-')} ms\n"
        f"      drawn ms p50/p95/max: {cells}\n"
        f"      net of run-queue wait, p50/p95: {nets}"
    )


def orchestrate(args: argparse.Namespace) -> int:
    import textual

    sizes = [int(x) for x in args.hosts.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cpu_sim: int | list[int] | None = None
    cpu_cockpit = None
    if len(allowed) >= 2 and not args.no_pin:
        # the cockpit on the first CPU, each simulator on one of the others (round-robin)
        cpu_cockpit, cpu_sim = allowed[0], allowed[1 : 1 + max(1, args.sims)]
    machine = {
        "cpu_count": os.cpu_count(),
        "cpus_allowed": allowed,
        "cpu_cockpit": cpu_cockpit,
        "cpu_sim": cpu_sim,
        "python": platform.python_version(),
        "textual": textual.__version__,
        "code": code_version(),
    }
    print(
        f"keys under load: sizes {sizes}, modes {modes}, {args.presses} presses each, gap "
        f"{args.gap_min}-{args.gap_max} s; cockpit on CPU {cpu_cockpit}, simulator on CPU "
        f"{cpu_sim}; code {machine['code']}",
        flush=True,
    )
    runs = []
    t_all = time.monotonic()
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"verl-tui-keys{n}-") as workdir:
            # telemetry as the product runs it at this size (relays from 64 hosts)
            sims = max(1, min(args.sims, n // 64 or 1))
            sim, hosts_yaml = start_sim(n, workdir, 1.0, cpu_sim, relay="auto", sims=sims)
            try:
                for mode in modes:
                    for rep in range(args.repeat):
                        r = run_one(mode, n, hosts_yaml, sim_pids(sim), args, cpu_cockpit)
                        r["repeat"] = rep
                        runs.append(r)
                        print_run(r)
            finally:
                stop_sim(sim)
    goal: dict[str, Any] = {}
    for r in runs:
        if r["hosts"] == GOAL_HOSTS and r["mode"] == "stream" and "keys" in r:
            goal.setdefault("p95_ms", []).append(
                {c: r["keys"][c]["p95"] for c in (*CLASSES, "overall")}
            )
    if goal:
        worst = {c: max(g[c] or 0 for g in goal["p95_ms"]) for c in (*CLASSES, "overall")}
        goal["worst_p95_ms"] = worst
        goal["ok"] = all(v <= GOAL_P95_MS for v in worst.values())
        print(
            f"\ngoal at {GOAL_HOSTS} hosts (stream): p95 per class {worst} "
            f"(≤{GOAL_P95_MS:g} ms: {'PASS' if goal['ok'] else 'FAIL'})"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / (args.out or "keys_under_load.json")
    out.write_text(
        json.dumps(
            {
                "machine": machine,
                "params": {
                    "sizes": sizes,
                    "modes": modes,
                    "presses": args.presses,
                    "gap_s": [args.gap_min, args.gap_max],
                    "repeat": args.repeat,
                    "warmup_s": args.warmup,
                    "screen": [200, 50],
                    "encode": not args.no_encode,
                    "seed": args.seed,
                },
                "runs": runs,
                "goal": goal,
                "total_wall_s": round(time.monotonic() - t_all, 1),
            },
            indent=1,
        )
        + "\n"
    )
    print(
        f"wrote {out.relative_to(ROOT)} ({time.monotonic() - t_all:.0f} s); code {machine['code']}"
    )
    return 0 if all("keys" in r for r in runs) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", default="128,1024", help="comma-separated host counts")
    p.add_argument("--modes", default="static,stream", help="static (baseline), stream")
    p.add_argument("--presses", type=int, default=360)
    p.add_argument("--gap-min", type=float, default=0.15)
    p.add_argument("--gap-max", type=float, default=0.30)
    p.add_argument("--repeat", type=int, default=1, help="runs per size and mode")
    p.add_argument(
        "--sims", type=int, default=1, help="simulator processes (one CPU each, round-robin)"
    )
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--warmup-timeout", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--no-encode", action="store_true", help="skip the terminal encoding")
    p.add_argument("--no-pin", action="store_true")
    p.add_argument(
        "--gc",
        default="",
        metavar="MODE",
        help="experiment after warm-up (bench only): freeze (gc.freeze()) or thresh:A,B,C "
        "(gc.set_threshold)",
    )
    p.add_argument("--pyspy", default="", metavar="PATH", help="py-spy over each window")
    p.add_argument("--out", default="", help="file name under bench/results")
    p.add_argument("--worker", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--hosts-file", help=argparse.SUPPRESS)
    p.add_argument("--sim-pid", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.worker_mode, args.worker_hosts = args.worker[0], int(args.worker[1])
        pin(args.cpu)
        sys.path.insert(0, str(ROOT))
        return run_worker(args)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
