"""Regenerate screenshots/ from a real run: the cockpit over real OpenSSH hosts in network
namespaces (the test harness), each host's agent reading a fake libnvidia-ml.so.1 whose values
change while we watch; Ray brought up and down on them from the cockpit; jobs submitted to it,
a real verl checkpoint spread over two hosts, a second process holding a form's draft, and a
small tmpfs over the drafts folder that fills up (the error modal). Needs root (namespaces,
mounts), sshd, gcc and rsvg-convert (librsvg2-bin) for the PNGs. Exit 1 when a picture could
not be taken (each named on stderr); the others are still written.

    .venv/bin/python scripts/screenshots.py

    .venv/bin/python scripts/screenshots.py stall

shoots only the stall scene: the GPU table's optional columns, a real deadlocked job flagged
STALLED by the cockpit's supervisor, and its stacks.

The real-GPU screenshot (cluster_real_gpus.*) comes from scripts/real_gpu_check.py on a GPU
machine; this script only converts it to PNG if the SVG is present.

    .venv/bin/python scripts/screenshots.py rollouts

shoots only the rollouts scene: a job logging and dumping through verl's own code, its phase
chart, the Rollouts screen and one prompt in two steps.

    .venv/bin/python scripts/screenshots.py cluster_mixed_amd

shoots only the mixed NVIDIA + AMD cluster: two NVIDIA hosts (fake NVML) and two MI300X hosts
whose fake amdgpu sysfs tree (tests/fakeamd) is mounted over /sys/class/drm in each host's own
mount namespace, one of them also carrying NVIDIA GPUs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakeamd.fakeamd import FakeAmdGpu, mount_over_sys_class_drm, write_tree  # noqa: E402
from fakenvml.fakenvml import MIB, FakeGpu, build_fake_nvml, write_state  # noqa: E402
from harness.nshosts import NsCluster  # noqa: E402
from screenshots_runs import shoot_only_runs, shoot_runs, until  # noqa: E402

from tui.app import VerlTuiApp  # noqa: E402
from tui.cluster.ray_monitor import RayState  # noqa: E402
from tui.config.hosts import load_inventory  # noqa: E402
from tui.jobs.formstate import draft_path  # noqa: E402
from tui.screens.doctor import DoctorScreen  # noqa: E402
from tui.screens.ray_progress import RayProgressScreen  # noqa: E402

OUT = ROOT / "screenshots"
SIZE = (160, 46)
CLUSTER = "grpo-qwen3-32b"
NOT_SHOT: list[str] = []  # pictures the run could not take, and why


def gpus_at(host_i: int, step: int) -> list[FakeGpu]:
    out = []
    for g in range(8):
        wave = 0.5 + 0.5 * math.sin((step + 5 * g + 11 * host_i) / 4.0)
        idle = host_i == 1 and g == 5
        out.append(
            FakeGpu(
                util=2 if idle else int(55 + 44 * wave),
                mem_util=int(30 * wave),
                memory_used=(80_900 if (host_i == 2 and g == 3) else int(40_000 + 30_000 * wave))
                * MIB,
                temperature=86 if (host_i == 0 and g == 6) else int(50 + 18 * wave),
                power_mw=75_000 if idle else int(200_000 + 450_000 * wave),
                processes=[]
                if idle
                else [(4000 + 10 * host_i + g, int(38_000 + 30_000 * wave) * MIB)],
            )
        )
    return out


class Scenario:
    """Three GPU hosts whose load moves, one that will die, and one that never answers."""

    def __init__(self, work: Path):
        self.lib = build_fake_nvml(work / "nvml")
        self.states = {f"node{i}": work / f"node{i}.nvml" for i in range(1, 5)}
        for i, path in enumerate(self.states.values()):
            write_state(path, gpus_at(i, 0))
        env = {
            name: {"LD_LIBRARY_PATH": str(self.lib), "FAKE_NVML_STATE": str(path)}
            for name, path in self.states.items()
        }
        self.cluster = NsCluster(4, work / "hosts", host_env=env)
        self.stop = threading.Event()
        self.work = work
        self.faults: dict[tuple[int, int], dict] = {}  # (host, gpu) -> FakeGpu health fields

    def start(self) -> None:
        self.cluster.start()
        threading.Thread(target=self._animate, daemon=True).start()

    def hosts_file(self, path: Path, *, with_unreachable: bool, extra: str = "") -> Path:
        c = self.cluster
        lines = [
            *extra.splitlines(),
            f"cluster: {CLUSTER}",
            f"python: {sys.executable}",
            "ssh:",
            "  user: root",
            f"  identity_file: {c.client_key}",
            f"  known_hosts: {c.known_hosts}",
            "  config: ''",
            "  connect_timeout: 3",
            # Four Ray nodes share this one machine: keep each small.
            "ray:",
            "  memory: 1000000000",
            "  object_store_memory: 100000000",
            "  num_cpus: 32",  # verl's 3 CPUs a GPU, so the queue's preset jobs fit
            "hosts:",
        ]
        names = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"]
        for name, h in zip(names, c.hosts, strict=True):
            lines += [f"  - name: {name}", f"    address: {h.address}"]
        if with_unreachable:
            lines += ["  - name: gpu-a05", f"    address: {c.unused_address()}"]
        path.write_text("\n".join(lines) + "\n")
        return path

    def _animate(self) -> None:
        step = 0
        while not self.stop.wait(0.25):
            step += 1
            for i, path in enumerate(self.states.values()):
                gpus = gpus_at(i, step)
                for (host, g), fields in self.faults.items():
                    if host == i:
                        gpus[g] = dataclasses.replace(gpus[g], **fields)
                write_state(path, gpus)

    def close(self) -> None:
        self.stop.set()
        self.cluster.stop()


def saver(shots: list[Path]) -> Callable[[VerlTuiApp, str], None]:
    """`save(app, name)`: the app's screen as screenshots/NAME.svg, listed in `shots`."""

    def save(app: VerlTuiApp, name: str) -> None:
        path = OUT / f"{name}.svg"
        app.save_screenshot(str(path))
        shots.append(path)

    return save


async def down_from_cockpit(
    app: VerlTuiApp, pilot, save: Callable[[VerlTuiApp, str], None] | None = None
) -> None:
    """D on the Cluster screen, confirmed, until Ray is down; with `save`, the question shot."""
    await pilot.press("1")
    await pilot.pause(0.3)
    await pilot.press("D")
    await until(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen", 15)
    if save is not None:
        await pilot.pause(0.5)  # drawn (saved at once, the picture was empty at times)
        save(app, "confirm_ray_down")
    await pilot.press("y")
    await until(pilot, lambda: isinstance(app.screen, RayProgressScreen), 10)
    progress = app.screen
    await until(pilot, lambda: progress.finished, 120)
    await pilot.press("escape")


async def shoot(scenario: Scenario, drafts: Path) -> list[Path]:
    shots: list[Path] = []
    save = saver(shots)

    # 1. A healthy fleet: Ray brought up from the cockpit, the doctor, the keys.
    inv = load_inventory(scenario.hosts_file(scenario.work / "a.yaml", with_unreachable=False))
    app = VerlTuiApp(inv, interval=0.25)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.sleep(20)  # ~80 samples of history per GPU
        await pilot.press("u")
        await until(pilot, lambda: isinstance(app.screen, RayProgressScreen), 10)
        progress = app.screen
        await until(pilot, lambda: progress.finished, 180)
        save(app, "ray_up_progress")
        await pilot.press("escape")
        await until(pilot, lambda: app.ray_monitor.view.state == RayState.UP, 30)
        await pilot.press("j", "j")
        await pilot.pause(1.0)
        save(app, "cluster")
        await pilot.press("question_mark")
        await pilot.pause(0.5)
        save(app, "help")
        await pilot.press("escape", "s")
        await pilot.pause(0.5)
        await pilot.press("slash", *"a02")
        await pilot.pause(0.6)
        save(app, "filter_sort")
        await pilot.press("escape", "g")
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press(*"ray")
        await pilot.pause(0.6)
        save(app, "command_palette")
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DoctorScreen), 10)
        doctor = app.screen
        await until(pilot, lambda: not doctor.running and doctor.findings, 60)
        # Warnings and failures first when there are any; else every check, all ok.
        if any(f.status != "ok" for f in doctor.findings):
            await pilot.press("f")
        await pilot.press("down")
        await pilot.pause(0.5)
        save(app, "doctor")
        await pilot.press("escape")
        await pilot.pause(0.3)
        await shoot_job_form(app, pilot, save, drafts)
        await shoot_logs_and_debugger(app, pilot, save, scenario.work / "a.yaml")
        root = await shoot_checkpoints(app, pilot, save, scenario)
        await shoot_ckpt_picker(app, pilot, save, root)
        hosts = scenario.work / "a.yaml"
        NOT_SHOT.extend(await shoot_runs(app, pilot, save, hosts, scenario, open_form))
        await down_from_cockpit(app, pilot, save)

    # 2. Trouble: a host that never answers and one that dies while we watch.
    inv = load_inventory(scenario.hosts_file(scenario.work / "b.yaml", with_unreachable=True))
    app = VerlTuiApp(inv, interval=0.25)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.sleep(12)
        scenario.cluster.kill_host("node4")
        await asyncio.sleep(2.5)
        await pilot.press("G")
        await pilot.pause(0.5)
        save(app, "host_problems")
    return shots


PROFILE = "grpo-gsm8k-qwen2.5-0.5b"


async def open_picker(app: VerlTuiApp, pilot) -> None:
    """Jobs → n: the profile picker, its entries listed and the gsm8k preset highlighted."""
    from textual.widgets import OptionList

    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.profile_picker import ProfilePickerScreen

    if not isinstance(app.screen, JobsScreen):
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10)
    await pilot.press("n")
    await until(
        pilot, lambda: isinstance(app.screen, ProfilePickerScreen) and bool(app.screen.entries), 10
    )
    picker = app.screen
    picker.query_one(OptionList).highlighted = next(
        i for i, e in enumerate(picker.entries) if e.name == PROFILE
    )
    await pilot.pause(0.3)


async def open_form(app: VerlTuiApp, pilot):
    """Jobs → n → the gsm8k preset: the form, loaded and checked against the cluster."""
    from tui.screens.job_form.screen import JobFormScreen

    await open_picker(app, pilot)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, JobFormScreen), 10)
    form = app.screen
    await until(
        pilot, lambda: form.validated and bool(form.fields) and form.cluster_note is None, 60
    )
    return form


def fill_up(folder: Path) -> Path:
    """Write zeros into `folder` (a small tmpfs) until its file system is full."""
    filler = folder / ".filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(4096))
        except OSError:
            pass
    return filler


async def shoot_job_form(app: VerlTuiApp, pilot, save, drafts: Path) -> None:
    """The draft-busy dialog (another process holds the preset's draft), then Jobs → n → the
    gsm8k preset → a batch size the cluster cannot divide: inline error; then the error modal
    of a real failure: the drafts folder (a small tmpfs) full while the form saves a draft."""
    from textual.widgets import Input

    from tui.screens.error import ErrorScreen
    from tui.screens.job_form.draft_busy import DraftBusyScreen
    from tui.screens.jobs.screen import JobsScreen

    # A second real process holds the draft, as another cockpit's form would.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from tui.jobs.formstate import DraftLock\n"
            f"lock = DraftLock({app.inventory.cluster!r}, {PROFILE!r})\n"
            "assert lock.acquire()\n"
            "print('READY', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        if (await asyncio.to_thread(holder.stdout.readline)).strip() != "READY":
            raise RuntimeError("the draft holder did not take the draft")
        await open_picker(app, pilot)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DraftBusyScreen), 120)
        await pilot.pause(0.5)
        save(app, "draft_busy")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10)
    finally:
        holder.kill()
        holder.wait()

    form = await open_form(app, pilot)
    field = form.fields["data.train_batch_size"]
    inp = field.query_one(Input)
    inp.focus()
    inp.value = ""
    await pilot.press("7")
    await until(pilot, lambda: "divisible" in field.problem_text, 10)
    await pilot.pause(0.5)
    save(app, "job_form")

    filler = fill_up(drafts)
    try:
        name = form.fields["trainer.experiment_name"].query_one(Input)
        name.focus()
        await pilot.press("end", "minus", "2")
        await until(pilot, lambda: isinstance(app.screen, ErrorScreen), 15)
        await pilot.pause(0.5)
        save(app, "error_modal")
    except RuntimeError:
        # The modal comes from the app's one failure handler (screens hand their workers'
        # failures to it): if it does not come, say so instead of failing every other picture.
        NOT_SHOT.append("error_modal: a failed draft write (ENOSPC) showed no error modal")
    finally:
        filler.unlink()  # before the form's last draft write on the way out
    while isinstance(app.screen, ErrorScreen):
        await pilot.press("escape")
        await pilot.pause(0.3)
    await pilot.press("ctrl+t", "y")  # leave no draft behind (discard asks first)
    await pilot.pause(0.5)
    await pilot.press("escape")
    await pilot.pause(0.3)


async def shoot_ckpt_picker(app: VerlTuiApp, pilot, save, root: Path) -> None:
    """The job form's ctrl+o over the real checkpoint's folder: its steps on every host."""
    from textual.widgets import Input

    from tui.screens.ckpt_picker import CheckpointPickerScreen

    form = await open_form(app, pilot)
    field = form.fields["trainer.default_local_dir"].query_one(Input)
    field.focus()
    field.value = str(root)
    await pilot.pause(0.5)
    await pilot.press("ctrl+o")
    await until(
        pilot,
        lambda: isinstance(app.screen, CheckpointPickerScreen) and app.screen.index is not None,
        60,
    )
    await pilot.pause(0.5)
    save(app, "ckpt_picker")
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is form, 10)
    await pilot.press("ctrl+t", "y")
    await pilot.pause(0.5)
    await pilot.press("escape")
    await pilot.pause(0.3)


PM_JOB = """
import ray
ray.init()

@ray.remote
def compute_advantages(batch_size):
    scores = [0.25] * batch_size
    secret = batch_size * 7
    return sum(scores) / (batch_size - 64)

ray.get(compute_advantages.remote(64))
"""

LEGACY_JOB = """
import ray
ray.init()

@ray.remote
def reward_fn(x):
    breakpoint()
    return x + 1

print("result", ray.get(reward_fn.remote(41)))
"""


def submit(hosts: Path, sid: str, *command: str, env: list[str] = ()) -> None:
    argv = [sys.executable, "-m", "tui", "submit", str(hosts), "--submission-id", sid]
    for e in env:
        argv += ["--env", e]
    for attempt in range(8):
        out = subprocess.run([*argv, "--", *command], capture_output=True, text=True, timeout=120)
        # Ray's dashboard can drop a connection while it is still busy starting (2 cores).
        if out.returncode == 0 or "unreachable" not in out.stderr or attempt == 7:
            break
        time.sleep(5)
    if out.returncode:
        raise RuntimeError(f"submit {sid}: {out.stderr.strip()}")


async def shoot_logs_and_debugger(app: VerlTuiApp, pilot, save, hosts: Path) -> None:
    """A job's log (hint under an OOM), its metrics, the Debugger with a post-mortem worker and
    a legacy breakpoint, a DAP session, a pdb console, and a host's Ray logs."""
    from tui.screens.dap_session import DapSessionScreen
    from tui.screens.debugger import DebuggerScreen
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.logs.job_logs import JobLogsScreen
    from tui.screens.logs.node_logs import NodeLogsScreen
    from tui.screens.pdb_console import PdbConsoleScreen

    submit(
        hosts,
        "grpo-gsm8k-1122",
        sys.executable,
        str(ROOT / "scripts" / "demo_training_job.py"),
        "60",
    )
    # As files (the hosts share this machine's filesystem), so the debugger can show source.
    (hosts.parent / "advantages.py").write_text(PM_JOB)
    (hosts.parent / "reward.py").write_text(LEGACY_JOB)
    submit(
        hosts,
        "grpo-adv-debug",
        sys.executable,
        str(hosts.parent / "advantages.py"),
        env=["RAY_DEBUG_POST_MORTEM=1"],
    )
    submit(
        hosts,
        "grpo-reward-bp",
        sys.executable,
        str(hosts.parent / "reward.py"),
        env=["RAY_DEBUG=legacy"],
    )

    await pilot.press("2")
    await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10)
    jobs = app.screen
    sids = {"grpo-gsm8k-1122", "grpo-adv-debug", "grpo-reward-bp"}
    await until(pilot, lambda: sids <= {r.submission_id for r in jobs.rows}, 30)
    table = jobs.query_one("DataTable")
    table.move_cursor(row=table.get_row_index("grpo-gsm8k-1122"))
    await pilot.press("l")
    await until(pilot, lambda: isinstance(app.screen, JobLogsScreen), 10)
    logs = app.screen
    await until(pilot, lambda: logs.status is not None, 90)
    await pilot.pause(1.0)
    save(app, "job_log")
    await pilot.press("t")
    await pilot.pause(1.5)
    save(app, "job_metrics")
    # The Jobs list once the demo run has ended (its OOM) and the debug jobs run.
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is jobs, 10)
    want = {"grpo-gsm8k-1122": "FAILED", "grpo-adv-debug": "RUNNING", "grpo-reward-bp": "RUNNING"}
    await until(
        pilot,
        lambda: {r.submission_id: r.status for r in jobs.rows if r.submission_id in want} == want,
        60,
    )
    await pilot.pause(1.0)
    save(app, "jobs")
    await open_picker(app, pilot)
    save(app, "profile_picker")
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is jobs, 10)
    await pilot.press("escape")

    await pilot.press("4")
    await until(pilot, lambda: isinstance(app.screen, DebuggerScreen), 10)
    dbg = app.screen
    await until(pilot, lambda: bool(dbg.paused) and bool(dbg.breakpoints), 90)
    await pilot.pause(0.5)
    save(app, "debugger")
    table = dbg.query_one("DataTable")
    table.move_cursor(row=table.get_row_index(f"pm:{dbg.paused[0].worker_id}"))
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, DapSessionScreen), 10)
    session = app.screen
    await until(pilot, lambda: session.state == "paused", 30)
    await pilot.press("e", *"secret", "space", "asterisk", "space", "2", "enter")
    await pilot.pause(1.0)
    save(app, "dap_session")
    await pilot.press("escape", "c")
    await pilot.pause(1.0)
    await pilot.press("escape")
    await pilot.pause(0.5)
    table.move_cursor(row=table.get_row_index(f"bp:{dbg.breakpoints[0].key}"))
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, PdbConsoleScreen), 10)
    console = app.screen
    await until(pilot, lambda: console.console is not None, 30)
    for line in ("p x", "where"):
        await pilot.press(*[("space" if c == " " else c) for c in line], "enter")
        await pilot.pause(0.8)
    save(app, "pdb_console")
    await pilot.press("c", "enter")
    await until(pilot, lambda: console.console is None, 20)
    await pilot.press("escape", "escape")

    await pilot.press("3")
    await until(pilot, lambda: isinstance(app.screen, NodeLogsScreen), 10)
    nodes = app.screen
    table = nodes.query_one("DataTable")
    await until(pilot, lambda: table.row_count > 0, 30)
    table.move_cursor(row=table.get_row_index("gpu-a02\traylet.out"))
    await pilot.press("enter")
    await pilot.pause(2.0)
    save(app, "node_logs")
    await pilot.press("escape")


async def shoot_checkpoints(app: VerlTuiApp, pilot, save, scenario: Scenario) -> Path:
    """verl's real FSDP checkpoint (tests/ckpt: a tiny random Qwen2, world size 2, saved by
    verl's own checkpoint manager), rank 0's files on gpu-a01 and rank 1's on gpu-a02 behind
    one path: the Checkpoints screen lists it spread, collects it onto gpu-a01, merges it."""
    from ckpt.make_fsdp_checkpoint import files_by_writer, make_fsdp_checkpoint
    from textual.widgets import Input

    from tui.screens.checkpoints import CheckpointsScreen

    work = scenario.work / "ckpt"
    # In a thread so the app keeps drawing.
    made = await asyncio.to_thread(make_fsdp_checkpoint, work / "made" / "run", 120)
    root = work / "mnt" / "grpo-qwen" / "checkpoints"
    root.mkdir(parents=True)
    writers = files_by_writer(120)
    layout = {"node1": writers["rank0"] + writers["driver"], "node2": writers["rank1"]}
    for name, rels in layout.items():
        disk = work / "disks" / name
        for rel in rels:
            src, dst = made["out_dir"] / rel.rstrip("/"), disk / rel.rstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if rel.endswith("/") else shutil.copy2)(src, dst)
        scenario.cluster.exec_in(name, ["mount", "--bind", str(disk), str(root)])

    await pilot.press("5")
    await until(pilot, lambda: isinstance(app.screen, CheckpointsScreen), 10)
    screen = app.screen
    prompt = screen.query_one("#ckpt-prompt", Input)
    prompt.focus()  # the screen opens with the keys on its table
    prompt.value = str(root)
    await pilot.press("enter")
    await until(pilot, lambda: screen.current is not None, 60)
    await pilot.pause(0.5)
    save(app, "checkpoints")
    await pilot.press("c")
    await until(pilot, lambda: screen.current is not None and bool(screen.current.complete_on), 120)
    await pilot.press("m")
    screen.query_one("#ckpt-prompt", Input).value = str(work / "merged" / "global_step_120_hf")
    await pilot.press("enter")
    await until(
        pilot,
        lambda: any(
            "merged into" in str(line.text) for line in screen.query_one("#ckpt-output").lines
        ),
        180,
    )
    await pilot.pause(0.5)
    save(app, "checkpoints_merged")
    await pilot.press("escape")
    return root


def amd_gpus_at(host_i: int, step: int) -> list[FakeAmdGpu]:
    out = []
    for g in range(8):
        wave = 0.5 + 0.5 * math.sin((step + 3 * g + 7 * host_i) / 4.0)
        out.append(
            FakeAmdGpu(
                pci=f"0000:{(0x0C, 0x22, 0x38, 0x5C, 0x9F, 0xAF, 0xBF, 0xDF)[g]:02x}:00.0",
                busy=int(60 + 39 * wave),
                mem_busy=int(25 * wave),
                vram_used=int(90_000 + 80_000 * wave) * MIB,
                temps={"junction": int(55_000 + 25_000 * wave), "mem": int(45_000 + 15_000 * wave)},
                power_input_uw=int(250_000_000 + 450_000_000 * wave),
            )
        )
    return out


async def shoot_mixed_amd(work: Path) -> Path:
    """NVIDIA and AMD hosts side by side: nv-01/nv-02 (fake NVML), mi300-01 (8 MI300X) and
    mixed-01 (2 NVIDIA + 8 MI300X), all read by the real agent over real SSH."""
    work.mkdir(parents=True, exist_ok=True)
    lib = build_fake_nvml(work / "nvml")
    states = {name: work / f"{name}.nvml" for name in ("node1", "node2", "node4")}
    env = {
        name: {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(path)}
        for name, path in states.items()
    }
    trees = {"node3": work / "amd3", "node4": work / "amd4"}
    cluster = NsCluster(4, work / "hosts", host_env=env)
    stop = threading.Event()

    def animate(step: int) -> None:
        for i, path in enumerate(states.values()):
            write_state(path, gpus_at(i, step)[: 2 if i == 2 else 8])
        for i, tree in enumerate(trees.values()):
            write_tree(tree, amd_gpus_at(i, step))

    def loop() -> None:
        step = 0
        while not stop.wait(0.25):
            step += 1
            animate(step)

    animate(0)
    cluster.start()
    try:
        for name, tree in trees.items():
            mount_over_sys_class_drm(cluster, name, tree / "drm")
        threading.Thread(target=loop, daemon=True).start()
        lines = [
            "cluster: mixed-nvidia-amd",
            f"python: {sys.executable}",
            "ssh:",
            "  user: root",
            f"  identity_file: {cluster.client_key}",
            f"  known_hosts: {cluster.known_hosts}",
            "  config: ''",
            "hosts:",
        ]
        for name, h in zip(("nv-01", "nv-02", "mi300-01", "mixed-01"), cluster.hosts, strict=True):
            lines += [f"  - name: {name}", f"    address: {h.address}"]
        (work / "mixed.yaml").write_text("\n".join(lines) + "\n")
        app = VerlTuiApp(load_inventory(work / "mixed.yaml"), interval=0.25)
        path = OUT / "cluster_mixed_amd.svg"
        path.unlink(missing_ok=True)
        try:
            async with app.run_test(size=SIZE) as pilot:
                await asyncio.sleep(15)  # some history per GPU
                await pilot.press("G", "enter")  # fold nv-02 (last by name) so the rest fits
                await pilot.press("g", "j")  # mi300-01's first GPU, in the details pane
                await pilot.pause(1.0)
                app.save_screenshot(str(path))
        except Exception as exc:  # the app failing as it closes: the picture is already taken
            if not path.exists():
                raise
            print(f"warning: the cockpit failed while closing: {exc!r}", file=sys.stderr)
        return path
    finally:
        stop.set()
        cluster.stop()


# Small thresholds: the deadlocked job steps every second, so 10 s without one is a stall.
STALL_BLOCK = "stall:\n  factor: 2\n  min_s: 10\n  startup_s: 120\n"
DEADLOCK = ROOT / "tests" / "workloads" / "gloo_deadlock.py"


async def shoot_stall(scenario: Scenario) -> list[Path]:
    """The GPU table with its optional columns (c); a real deadlocked job (one rank never enters
    the all_reduce) flagged STALLED by the cockpit's own supervisor; its stacks (p)."""
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.stack import StackScreen

    shots: list[Path] = []
    save = saver(shots)

    hosts = scenario.hosts_file(scenario.work / "c.yaml", with_unreachable=False, extra=STALL_BLOCK)
    app = VerlTuiApp(load_inventory(hosts), interval=0.25)
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.sleep(8)  # a few samples of history per GPU
        await pilot.press("c")
        await pilot.pause(1.0)
        save(app, "cluster_columns")
        await pilot.press("c", "u")
        await until(pilot, lambda: isinstance(app.screen, RayProgressScreen), 10)
        progress = app.screen
        await until(pilot, lambda: progress.finished, 180)
        await pilot.press("escape")
        await until(pilot, lambda: app.ray_monitor.view.state == RayState.UP, 30)
        sid = "grpo-allreduce-hang"
        await asyncio.to_thread(
            submit, hosts, sid, sys.executable, str(DEADLOCK), "--step-s", "1", "--hang-at", "8"
        )
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10)
        jobs = app.screen
        await until(pilot, lambda: sid in jobs.stalls, 240)  # the supervisor: every 10 s
        table = jobs.query_one("DataTable")
        table.move_cursor(row=table.get_row_index(sid))
        await pilot.pause(1.0)
        save(app, "jobs_stalled")
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, StackScreen), 10)
        stack = app.screen
        await until(pilot, lambda: stack.report is not None, 90)
        await pilot.pause(1.0)
        save(app, "stack")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is jobs, 10)
        await down_from_cockpit(app, pilot)
    return shots


TRACKING = ROOT / "tests" / "workloads" / "verl_tracking.py"


async def shoot_rollouts(scenario: Scenario) -> list[Path]:
    """A Ray job that logs through verl 0.9.1's own Tracking (file + console) and dumps each
    step's generations through verl's own RayPPOTrainer._dump_generations (tests/workloads/
    verl_tracking.py --dump): the phase chart (p on its Metrics tab), the Rollouts screen (v on
    the job) and one prompt's answers in two steps side by side (c)."""
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.logs.job_logs import JobLogsScreen
    from tui.screens.rollouts.sample import CompareStepsScreen
    from tui.screens.rollouts.screen import RolloutsScreen

    shots: list[Path] = []
    save = saver(shots)
    hosts = scenario.hosts_file(scenario.work / "r.yaml", with_unreachable=False)
    dump = scenario.work / "rollouts"
    app = VerlTuiApp(load_inventory(hosts), interval=0.25)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("u")
        await until(pilot, lambda: isinstance(app.screen, RayProgressScreen), 10)
        progress = app.screen
        await until(pilot, lambda: progress.finished, 180)
        outcome = str(progress.query_one("#outcome").render())
        await pilot.press("escape")
        try:  # the monitor's next poll of the head (slow on a loaded 2-core box)
            await until(pilot, lambda: app.ray_monitor.view.state == RayState.UP, 120)
        except RuntimeError:
            raise RuntimeError(f"Ray up from the cockpit: {outcome}") from None
        sid = "grpo-gsm8k-rollouts"
        root = scenario.work / "tracking"
        command = [sys.executable, str(TRACKING), "--root", str(root), "--steps", "12"]
        await asyncio.to_thread(submit, hosts, sid, *command, "--dump", str(dump))
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10)
        jobs = app.screen
        await until(pilot, lambda: sid in {r.submission_id for r in jobs.rows}, 60)
        await until(pilot, lambda: (dump / "12.jsonl").exists(), 240)  # the hosts share files
        table = jobs.query_one("DataTable")
        table.move_cursor(row=table.get_row_index(sid))
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, JobLogsScreen), 10)
        logs = app.screen
        await until(pilot, lambda: logs.status is not None, 90)
        await pilot.press("t")
        await pilot.pause(3.0)  # the file logger's series read over SSH
        await pilot.press("p")
        await pilot.pause(1.5)
        save(app, "job_phases")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is jobs, 10)
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, RolloutsScreen), 10)
        rollouts = app.screen
        await until(pilot, lambda: rollouts.loaded, 60)
        await pilot.press("s")  # by score
        await pilot.pause(0.5)
        await until(pilot, lambda: rollouts.loaded and rollouts.sort == "score", 30)
        await pilot.press("down")  # a fine answer: step by step it changes
        await pilot.pause(1.0)
        save(app, "rollouts")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareStepsScreen), 10)
        compare = app.screen
        await until(pilot, lambda: compare.found is not None, 60)
        await pilot.pause(1.0)
        save(app, "rollouts_compare")
        await pilot.press("escape", "escape")
        await until(pilot, lambda: app.screen is jobs, 10)
        await down_from_cockpit(app, pilot)
    return shots


def to_png(svg: Path) -> Path:
    # rsvg collapses runs of spaces unless told to keep them (Textual's SVG relies on them).
    text = svg.read_text().replace("<svg ", '<svg xml:space="preserve" ', 1)
    png = svg.with_suffix(".png")
    with tempfile.NamedTemporaryFile("w", suffix=".svg") as tmp:
        tmp.write(text)
        tmp.flush()
        subprocess.run(["rsvg-convert", tmp.name, "-o", str(png)], check=True)
    return png


def main() -> int:
    if not shutil.which("rsvg-convert"):
        print("needs rsvg-convert: apt-get install librsvg2-bin", file=sys.stderr)
        return 2
    OUT.mkdir(exist_ok=True)
    if sys.argv[1:] == ["cluster_mixed_amd"]:
        with tempfile.TemporaryDirectory() as tmp:
            svg = asyncio.run(shoot_mixed_amd(Path(tmp)))
        print(to_png(svg).relative_to(ROOT))
        return 0
    if sys.argv[1:] == ["runs"]:  # only screenshots_runs.py's scenes (while changing them)
        return shoot_only_runs(Scenario, open_form, to_png)
    if sys.argv[1:] == ["rollouts"]:  # only the rollouts scene: phases, Rollouts, compare
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
            scenario = Scenario(Path(tmp))
            try:
                scenario.start()
                shots = asyncio.run(shoot_rollouts(scenario))
            finally:
                scenario.close()
        for svg in shots:
            print(to_png(svg).relative_to(ROOT))
        return 0
    if sys.argv[1:] == ["stall"]:  # only the stall scene: optional columns, STALLED, stacks
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
            scenario = Scenario(Path(tmp))
            try:
                scenario.start()
                shots = asyncio.run(shoot_stall(scenario))
            finally:
                scenario.close()
        for svg in shots:
            print(to_png(svg).relative_to(ROOT))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        # Jobs submitted for the pictures go into a throwaway history, not the user's.
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        scenario = Scenario(Path(tmp))
        # The drafts folder is a small file system of its own, so the error modal's shot can
        # fill it (a real failure: the form's draft write meets ENOSPC).
        drafts = draft_path(CLUSTER, PROFILE).parent
        drafts.mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(drafts)], check=True
        )
        try:
            scenario.start()
            t0 = time.monotonic()
            shots = asyncio.run(shoot(scenario, drafts))
            shots += asyncio.run(shoot_stall(scenario))
            shots += asyncio.run(shoot_rollouts(scenario))
        finally:
            scenario.close()
            subprocess.run(["umount", "--lazy", str(drafts)], check=False)
        shots.append(asyncio.run(shoot_mixed_amd(Path(tmp) / "mixed")))
    real = OUT / "cluster_real_gpus.svg"
    if real.exists():
        shots.append(real)
    for svg in shots:
        print(to_png(svg).relative_to(ROOT), f"({time.monotonic() - t0:.0f} s)")
    for why in NOT_SHOT:
        print(f"not shot: {why}", file=sys.stderr)
    return 1 if NOT_SHOT else 0


if __name__ == "__main__":
    sys.exit(main())
