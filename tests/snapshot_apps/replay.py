"""Replay for the snapshot apps: the real cockpit and its real screens, with every answer from a
host, Ray's dashboard or a debugger replayed from recorded/*.json (record.py made most of it
from a real run; debugger.json was taken from scripts/screenshots.py's real run). Nothing
dials out and nothing reads the clock where a screen shows it, so a snapshot is the same on
every run.

The seams replayed are the ones the services already go through: DashboardClient._request (the
Jobs API), the Fleet's transports (`find`/`tail`/`cat` and the checkpoint helper), and, for the
doctor and the debugger screens, the one service call each makes (patched for the app's life
only, put back on unmount).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from snapshot_apps.steady import steady_input_cursor
from textual import events
from textual.screen import Screen

from tui.app import VerlTuiApp
from tui.cluster.dashboard import DashboardClient, DashboardError
from tui.cluster.ray_cluster import RayCluster
from tui.config.hosts import parse_inventory
from tui.jobs.history import JobHistory, JobRecord
from tui.transport.types import RunResult

RECORDED = Path(__file__).parent / "recorded"
REPO = Path(__file__).resolve().parents[2]


def fixed_presets() -> Path:
    """The repository's presets copied to one fixed folder: screens show a profile's path, and
    where a checkout lives differs between machines (CI clones elsewhere)."""
    dest = Path(tempfile.gettempdir()) / "verl-tui-snapshots" / "profiles"
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted((REPO / "profiles").glob("*.yaml")):
        data, target = src.read_bytes(), dest / src.name
        if not target.exists() or target.read_bytes() != data:
            # Parallel test workers read these while another writes them: never a half file.
            part = target.with_name(f".{src.name}.{os.getpid()}")
            part.write_bytes(data)
            os.replace(part, target)
    return dest


def load(name: str) -> Any:
    return json.loads((RECORDED / name).read_text())


DASH = load("dashboard.json")
_JOB = DASH["answers"]["/api/jobs/"][0]
# "Now" for every clock a screen shows: 95 s after the recorded job ended.
NOW = _JOB["end_time"] / 1000.0 + 95.0


def _nodes() -> list[dict]:
    return DASH["answers"]["/api/v0/nodes?limit=10000&detail=true"]["data"]["result"]["result"]


def recorded_inventory():
    """The recorded run's hosts.yaml: head first, as `verl-tui up` had them."""
    nodes = sorted(_nodes(), key=lambda n: not n["is_head_node"])
    lines = [
        "cluster: grpo-demo",
        "python: /opt/verl/.venv/bin/python3",
        "ssh: {user: root, known_hosts: ~/.ssh/known_hosts}",
        "hosts:",
    ]
    for i, n in enumerate(nodes, 1):
        lines.append(
            f"  - {{name: node{i}, address: {n['node_ip']}"
            + (", role: head}" if n["is_head_node"] else "}")
        )
    return parse_inventory("\n".join(lines) + "\n", "hosts.yaml")


class FrozenClock:
    """Stands in for the `time` module inside the screens and services that show a clock."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.mono = 1000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def perf_counter(self) -> float:
        return self.mono

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


CLOCK = FrozenClock(NOW)
CLOCK_USERS = [
    "tui.fmt",
    "tui.jobs.service",
    "tui.screens.debugger",
    "tui.screens.doctor",
    "tui.screens.job_form.screen",
]


# -- the dashboard ----------------------------------------------------------------------------


class ReplayDashboard(DashboardClient):
    """The real client; its HTTP round trip answered from the recorded GETs."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__("http://127.0.0.1:8265")
        self.answers = answers

    def _request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, **_: Any
    ) -> Any:
        if method == "GET" and path in self.answers:
            return self.answers[path]
        raise DashboardError(f"{method} {path}: HTTP 404 Not Found")


class ReplayRay(RayCluster):
    async def dashboard(self) -> DashboardClient:
        return ReplayDashboard(DASH["answers"])

    async def ray_processes(self) -> dict[str, str | None]:
        return {h.name: "" for h in self.inv.hosts}


# -- hosts ------------------------------------------------------------------------------------


class ReplayStream:
    """`tail -F`: the recorded lines, then (as a followed file does) nothing more."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._closed = asyncio.Event()
        self.oversize_lines = 0

    async def lines(self) -> AsyncIterator[str]:
        for line in self.text.splitlines():
            yield line
        await self._closed.wait()

    async def stderr_tail(self) -> str:
        return ""

    async def close(self) -> None:
        self._closed.set()


class ReplayTransport:
    def __init__(self, host: str) -> None:
        self.host = host

    async def run(self, argv: list[str], *, timeout: float | None = None, **_: Any) -> RunResult:
        out = ""
        if argv[0] == "find":
            logs = load("node_logs.json")
            out = "".join(
                f"{f['size']}\t{f['mtime']}\t{f['name']}\n"
                for f in logs["files"].get(self.host, [])
            )
        elif argv[0] == "cat":
            out = load("debugger.json")["dap"]["sources"].get(argv[-1], "")
        elif "scan" in argv:
            out = json.dumps(load("checkpoints.json")["scans"][self.host]) + "\n"
        elif any('find_spec("verl")' in a for a in argv):
            # The job form reads the head's verl config: the recorded head ran this venv's
            # Python, so the same program runs here with it (verl 0.9.1).
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *argv[1:], stdout=asyncio.subprocess.PIPE
            )
            out = (await proc.communicate())[0].decode()
        return RunResult(tuple(argv), 0, out, "")

    async def stream(self, argv: list[str], **_: Any) -> ReplayStream:
        logs = load("node_logs.json")
        return ReplayStream(logs["text"] if argv[-1].endswith(logs["opened"][1]) else "")


class ReplayFleet:
    def __init__(self, inventory) -> None:
        self.inventory = inventory

    async def wait_up(self, name: str, timeout: float | None = None) -> ReplayTransport:
        return ReplayTransport(name)

    async def ready(self, name: str, timeout: float) -> ReplayTransport:
        return ReplayTransport(name)

    def reconnect(self, host: str | None = None) -> None:
        pass

    async def close(self) -> None:
        pass


# -- the app ----------------------------------------------------------------------------------


class ScreenApp(VerlTuiApp):
    """The cockpit over the recorded run's hosts, with one screen pushed on the Cluster screen.

    `make(app)` builds the screen from its public constructor; `patches` are (module, name,
    value) put in place for the app's life (the service call a screen makes, the clock)."""

    def __init__(
        self,
        make: Callable[[ScreenApp], Screen],
        patches: list[tuple[str, str, Any]] = (),
        after: Callable[[Screen], None] | None = None,
    ) -> None:
        super().__init__(recorded_inventory())
        self.animation_level = "none"  # scrolls land at once: a snapshot never catches one midway
        self.make = make
        self.after = after
        self.state_dir = tempfile.TemporaryDirectory(prefix="verl-tui-snap-")
        self.history = JobHistory("grpo-demo", root=Path(self.state_dir.name) / "history")
        for rec in DASH["history"].values():
            self.history.save(JobRecord(**rec))
        self._patches = [(m, "time", CLOCK) for m in CLOCK_USERS] + list(patches)
        self._saved: list[tuple[Any, str, Any]] = []
        self._env = contextlib.ExitStack()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        steady_input_cursor(event)

    def get_default_screen(self):
        screen = super().get_default_screen()
        services = self.services
        services.fleet = ReplayFleet(self.inventory)  # type: ignore[assignment]
        services.ray = ReplayRay(services.fleet, self.inventory)
        services.history = self.history
        return screen

    def start_telemetry(self) -> None:
        import importlib
        import os

        for mod_name, attr, value in self._patches:
            mod = importlib.import_module(mod_name)
            self._saved.append((mod, attr, getattr(mod, attr)))
            setattr(mod, attr, value)
        # Drafts and locks the job form writes go to a throwaway state dir.
        old = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = self.state_dir.name
        self._env.callback(
            lambda: (
                os.environ.__setitem__("XDG_STATE_HOME", old)
                if old
                else os.environ.pop("XDG_STATE_HOME", None)
            )
        )
        screen = self.make(self)
        self.push_screen(screen)
        if self.after is not None:
            self.call_after_refresh(self.after, screen)

    async def on_unmount(self) -> None:
        await super().on_unmount()
        for mod, attr, value in reversed(self._saved):
            setattr(mod, attr, value)
        self._env.close()
        self.state_dir.cleanup()


# -- replayed service calls -------------------------------------------------------------------


async def replay_doctor(fleet, inventory, *, progress=None, timeout: float = 60.0):
    from tui.cluster.doctor import Finding

    data = load("doctor.json")
    CLOCK.mono += data["elapsed_s"]  # the recorded run's duration, as the screen reports it
    return [Finding(**f) for f in data["findings"]]


def debug_data() -> SimpleNamespace:
    from tui.debug.targets import Breakpoint, PausedWorker

    d = load("debugger.json")
    paused = [PausedWorker(**p) for p in d["paused"]]
    bps = [
        Breakpoint(**{k: v for k, v in b.items() if k != "age_s"}, timestamp=NOW - b["age_s"])
        for b in d["breakpoints"]
    ]
    return SimpleNamespace(paused=paused, breakpoints=bps, raw=d)


async def replay_debug_targets(cluster, *, breakpoints: bool = True):
    from tui.debug.targets import DebugTargets

    d = debug_data()
    return DebugTargets(d.paused, d.breakpoints if breakpoints else [], [])


async def replay_open_debug_connection(cluster, target) -> tuple[None, None]:
    """The replayed clients below take the (reader, writer) pair and ignore it."""
    return None, None


class ReplayDap:
    """The DAP answers of the recorded post-mortem session."""

    def __init__(self, *_: Any) -> None:
        self.d = load("debugger.json")["dap"]

    async def attach_post_mortem(self, **_: Any):
        from tui.debug.dap import Stopped

        return Stopped(**self.d["stopped"])

    async def exception_info(self, thread_id, **_: Any):
        from tui.debug.dap import ExceptionInfo

        return ExceptionInfo(**self.d["exception"])

    async def stack_trace(self, thread_id, **_: Any):
        from tui.debug.dap import Frame

        return [Frame(**f) for f in self.d["frames"]]

    async def scopes(self, frame_id: int, **_: Any):
        from tui.debug.dap import Scope

        return [Scope(**s) for s in self.d["scopes"].get(str(frame_id), [])]

    async def variables(self, reference: int, **_: Any):
        from tui.debug.dap import Variable

        return [Variable(**v) for v in self.d["variables"].get(str(reference), [])]

    async def evaluate(self, expr: str, frame_id=None, **_: Any):
        from tui.debug.dap import DapError, Evaluation

        if expr not in self.d["evaluate"]:
            raise DapError(f"NameError: name {expr!r} is not defined")
        return Evaluation(**self.d["evaluate"][expr])

    async def close(self) -> None:
        pass


class ReplayPdb:
    """The recorded legacy pdb session: its banner and its replies by command."""

    def __init__(self) -> None:
        self.d = load("debugger.json")["pdb"]
        self.banner = self.d["banner"]
        self.closed = False

    @classmethod
    async def start(cls, *_: Any, **__: Any) -> ReplayPdb:
        return cls()

    async def send(self, line: str, **_: Any) -> str:
        return self.d["replies"].get(
            line.strip(), f"*** NameError: name '{line}' is not defined\r\n"
        )

    async def close(self) -> None:
        self.closed = True


async def wait_for(pilot, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """For snap_compare's run_before: wait until the screen has what it needs to show."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the replayed screen did not reach the expected state")
        await pilot.pause(0.05)
    await pilot.pause(0.2)
