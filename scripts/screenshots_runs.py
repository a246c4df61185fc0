"""Screenshot scenes of runs on the real namespace Ray cluster, for scripts/screenshots.py:
three runs printing verl's own console-logger lines compared (Jobs: space marks, c compares);
a raw job that fails like an NCCL watchdog timeout and is resubmitted by the cockpit's own
supervisor (↻ attempt 2/3); a real queue (`submit --queue`, `sweep`) behind a job whose
placement group holds every GPU, one entry BLOCKED on a secret the cockpit does not have; the
job form's Queue switch and its sweep builder (ctrl+g); GPU health flags from the fake NVML."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
LR = "actor_rollout_ref.actor.optim.lr"
BATCH = "data.train_batch_size"
STEPS = 30

# Which of the four hosts' GPUs report trouble in the health scene: (host index, gpu) -> fields.
FAULTS: dict[tuple[int, int], dict[str, Any]] = {
    (2, 3): {"ecc_uncorrected": (2, 2), "ecc_corrected": (14, 14)},
    (0, 5): {"clock_reasons": 0x8},  # NVML's HW slowdown bit
    (1, 7): {"pcie_width": (8, 16)},
}

# The compare runs' training loop: curves shaped by the learning rate and the batch size (a
# higher lr learns faster and drifts further from the reference; a small batch is noisier and
# steps faster), printed by verl's own formatter.
COMPARE_TAIL = """
import random
args = dict(a.split("=", 1) for a in sys.argv[1:])
lr = float(args["actor_rollout_ref.actor.optim.lr"])
steps = int(args["trainer.total_training_steps"])
batch = int(args.get("data.train_batch_size", 1024))
rng = random.Random(f"{lr}/{batch}")
small = batch < 512
k = lr * 8e4 * (1.3 if small else 1.0)
print(f"Total training steps: {steps}", flush=True)
for s in range(1, steps + 1):
    learned = 1 - math.exp(-k * s)
    noise = rng.gauss(0, 0.03 if small else 0.012)
    metrics = {
        "critic/score/mean": np.float64(0.2 + 0.65 * learned + noise),
        "actor/kl_loss": np.float64(lr * 400 * s * (1 + rng.gauss(0, 0.08))),
        "actor/entropy": 0.35 + 0.55 * math.exp(-lr * 1.5e4 * s) + rng.gauss(0, 0.01),
        "response_length/mean": 180 + 120 * learned + rng.gauss(0, 4),
        "perf/throughput": (870.0 if small else 1150.0) + rng.gauss(0, 15),
        "timing_s/step": 6 + 38 * batch / 1024 + rng.gauss(0, 0.8),
        "training/global_step": s,
    }
    print(fmt(metrics, step=s), flush=True)
    time.sleep(0.2)
"""

# A stand-in for a verl run that dies like a multi-node job whose NCCL watchdog fired: its first
# attempt logs 8 steps in verl's console format, then the watchdog; the supervisor's retry (the
# same command: a raw job is retried as is) finds the marker file and finishes.
HEAL_TAIL = """
marker = Path(sys.argv[1])
first = not marker.exists()
start = 1 if first else 9
print(f"Total training steps: 16", flush=True)
for s in range(start, start + 8):
    print(fmt({"critic/score/mean": 0.3 + 0.03 * s, "actor/kl_loss": 0.001 * s,
               "timing_s/step": 0.5, "training/global_step": s}, step=s), flush=True)
    time.sleep(0.2)
if first:
    marker.touch()
    sys.stdout.write(Path(sys.argv[2]).read_text())
    sys.exit(1)
print("training done", flush=True)
"""

# Holds every GPU of the four hosts (8 each) until stopped, as a long verl run would.
HOLD = """
import time, ray
from ray.util.placement_group import placement_group
ray.init()
pg = placement_group([{"GPU": 8, "CPU": 1}] * 4, strategy="STRICT_SPREAD")
ray.get(pg.ready())
print("HELD", flush=True)
time.sleep(900)
"""


async def until(pilot, predicate: Callable[[], Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("screen did not reach the expected state")
        await pilot.pause(0.2)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tui", *args]
    for attempt in range(8):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
        # Ray's dashboard can drop a connection while it is still busy starting (2 cores).
        if out.returncode == 0 or "unreachable" not in out.stderr or attempt == 7:
            break
        time.sleep(5)
    if out.returncode:
        raise RuntimeError(f"verl-tui {args[0]} {args[-1]}: {(out.stdout + out.stderr).strip()}")
    return out


async def acli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return await asyncio.to_thread(cli, *args, env=env)


def job_files(folder: Path) -> tuple[Path, Path, Path]:
    """The compare job (tests/test_archive_cluster.py's: verl's concat_dict_to_str compiled
    from verl's source), the healing job (same formatter) and the GPU holder, as files the
    hosts can run (they share this machine's filesystem)."""
    from test_archive_cluster import JOB

    job = textwrap.dedent(JOB)
    folder.mkdir(parents=True, exist_ok=True)
    compare, heal, hold = folder / "grpo_job.py", folder / "heal_job.py", folder / "hold.py"
    head = job.split("fmt = verl_formatter()")[0]
    compare.write_text(head + "fmt = verl_formatter()\n" + COMPARE_TAIL)
    heal.write_text(head + "fmt = verl_formatter()\n" + HEAL_TAIL)
    hold.write_text(HOLD)
    return compare, heal, hold


async def shoot_runs(app, pilot, save, hosts: Path, scenario, open_form) -> list[str]:
    """Every scene here, in the cockpit `app` (Ray up, on the Cluster screen); returns what
    could not be shot and why (the others are still saved)."""
    from tui.screens.jobs.screen import JobsScreen

    not_shot: list[str] = []
    compare_py, heal_py, hold_py = job_files(hosts.parent / "runs")
    py = sys.executable
    runs = {
        "grpo-lr1e-6": [f"{LR}=1e-6"],
        "grpo-lr3e-6": [f"{LR}=3e-6"],
        "grpo-lr1e-6-b128": [f"{LR}=1e-6", f"{BATCH}=128"],
    }
    from test_supervisor import NCCL_TIMEOUT_LOG

    nccl_log = hosts.parent / "runs" / "nccl_timeout.log"
    nccl_log.write_text(NCCL_TIMEOUT_LOG)
    # Submitted together: they run while the healing job does.
    await asyncio.gather(
        *(
            acli(
                "submit",
                str(hosts),
                "--submission-id",
                sid,
                "--",
                py,
                str(compare_py),
                f"trainer.total_training_steps={STEPS}",
                *over,
            )
            for sid, over in runs.items()
        ),
        acli(
            "submit",
            str(hosts),
            "--submission-id",
            "grpo-multinode",
            "--retries",
            "2",
            "--",
            py,
            str(heal_py),
            str(hosts.parent / "runs" / "attempt1.done"),
            str(nccl_log),
        ),
    )
    await pilot.press("2")
    await until(pilot, lambda: isinstance(app.screen, JobsScreen), 10)
    jobs = app.screen
    table = jobs.query_one("DataTable")

    def status(sid: str) -> str | None:
        return next((r.status for r in jobs.rows if r.submission_id == sid), None)

    for scene in (shoot_compare, shoot_retry):
        try:
            await scene(app, pilot, save, jobs, table, status, runs)
        except RuntimeError as exc:
            not_shot.append(f"{scene.__name__}: {exc}")
            await back_to(app, pilot, jobs)
    try:
        await shoot_queue(app, pilot, save, jobs, table, hosts, hold_py, open_form)
    except RuntimeError as exc:
        not_shot.append(f"queue: {exc}")
    await back_to(app, pilot, jobs)
    await pilot.press("escape")
    try:
        await shoot_health(app, pilot, save, scenario)
    except RuntimeError as exc:
        not_shot.append(f"cluster_health: {exc}")
    scenario.faults = {}  # also when the scene failed
    return not_shot


async def back_to(app, pilot, screen) -> None:
    for _ in range(5):
        if app.screen is screen:
            return
        await pilot.press("escape")
        await pilot.pause(0.4)


async def shoot_compare(app, pilot, save, jobs, table, status, runs) -> None:
    from tui.screens.compare import CompareScreen

    await until(pilot, lambda: all(status(s) == "SUCCEEDED" for s in runs), 180)
    await pilot.pause(1.0)
    for sid in runs:
        table.move_cursor(row=table.get_row_index(sid))
        await pilot.press("space")
        await pilot.pause(0.3)
    await pilot.press("c")
    await until(pilot, lambda: isinstance(app.screen, CompareScreen), 60)
    await pilot.pause(1.5)
    save(app, "compare")
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is jobs, 10)
    for sid in runs:  # unmark
        table.move_cursor(row=table.get_row_index(sid))
        await pilot.press("space")


async def shoot_retry(app, pilot, save, jobs, table, status, runs) -> None:
    retry = "grpo-multinode-retry1"
    await until(pilot, lambda: status(retry) == "SUCCEEDED", 180)
    await until(pilot, lambda: "supervised by" in str(jobs.query_one("#jobs-title").render()), 30)
    table.move_cursor(row=table.get_row_index("grpo-multinode"))
    await pilot.pause(1.5)
    save(app, "jobs_retry")


async def shoot_queue(app, pilot, save, jobs, table, hosts: Path, hold_py: Path, open_form):
    """A job whose placement group holds all 32 GPUs; behind it two queued runs (one with
    priority 5), a sweep of four, and a run BLOCKED: its secret ($WANDB_API_KEY, given to
    the CLI that queued it) is not in the cockpit's environment, where the supervisor runs."""
    from textual.widgets import Checkbox, Input

    from tui.screens.job_form.sweep_builder import SweepBuilderScreen

    h = str(hosts)
    await acli(
        "submit", h, "--submission-id", "grpo-32gpu-long", "--", sys.executable, str(hold_py)
    )
    # Held once its placement group is ready (RUNNING comes before that): only then would the
    # supervisor see no free GPU and keep the queue waiting.
    deadline = time.monotonic() + 120
    while "HELD" not in (await acli("logs", h, "grpo-32gpu-long")).stdout:
        if time.monotonic() > deadline:
            raise RuntimeError("the GPU holder's placement group was never ready")
        await pilot.pause(1.0)
    # The preflight would refuse the preset here (no vllm, no gsm8k data on these hosts): the
    # entries only wait in this scene, they are cancelled before the GPUs are freed.
    queue = ("submit", h, str(PRESET), "--queue", "--skip-preflight")
    with_key = {**os.environ, "WANDB_API_KEY": "wandb-demo-0123456789"}
    await acli(*queue, "--submission-id", "gsm8k-lr2e-6", "--priority", "5", "--set", f"{LR}=2e-6")
    # First in line (priority 9), so the supervisor judges it: BLOCKED, the rest go on waiting.
    await acli(
        *queue,
        "--submission-id",
        "gsm8k-wandb",
        "--priority",
        "9",
        "--env",
        "WANDB_API_KEY",
        env=with_key,
    )
    await acli(
        "sweep",
        h,
        str(PRESET),
        "--skip-preflight",
        "--grid",
        f"{LR}=1e-6,3e-6",
        "--grid",
        f"{BATCH}=64,128",
        "--name",
        "lr-bs",
    )
    await acli(*queue, "--submission-id", "gsm8k-epochs3", "--set", "trainer.total_epochs=3")

    def queued() -> dict[str, Any]:
        return {e.submission_id: e for e in getattr(jobs, "queued", [])}

    try:
        await until(
            pilot,
            lambda: (
                len(queued()) == 7
                and queued()["gsm8k-wandb"].blocked
                and bool(queued()["gsm8k-lr2e-6"].reason)
            ),
            90,
        )
    except RuntimeError:
        got = [(e.submission_id, e.state, e.blocked, e.reason) for e in queued().values()]
        raise RuntimeError(f"the queue never showed 7 waiting entries: {got}") from None
    await pilot.pause(1.0)
    table.move_cursor(row=table.get_row_index("queued:gsm8k-lr2e-6"))
    await pilot.pause(1.0)
    save(app, "jobs_queue")

    form = await open_form(app, pilot)
    form.query_one("#form-queue", Checkbox).value = True
    await pilot.pause(0.8)
    save(app, "job_form_queue")
    await pilot.press("ctrl+g")
    await until(pilot, lambda: isinstance(app.screen, SweepBuilderScreen), 10)
    sweep = app.screen
    for i, (key, values) in enumerate(((LR, "1e-6,2e-6,3e-6"), (BATCH, "64,128"))):
        sweep.query_one(f"#sweep-key-{i}", Input).value = key
        sweep.query_one(f"#sweep-values-{i}", Input).value = values
    sweep.query_one("#sweep-name", Input).value = "lr-x-batch"
    await pilot.pause(0.8)
    save(app, "sweep_builder")
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is form, 10)
    await pilot.press("ctrl+t", "y")  # leave no draft behind (discard asks first)
    await pilot.pause(0.5)
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is jobs, 10)
    # Nothing of this may start later (the cockpit supervises): the queue emptied, GPUs freed.
    for sid in queued():
        await acli("queue", h, "--cancel", sid)
    await acli("stop", h, "grpo-32gpu-long")


async def shoot_health(app, pilot, save, scenario) -> None:
    """ECC errors on gpu-a03's GPU 3, a HW slowdown on gpu-a01's GPU 5, gpu-a02's GPU 7 on a
    x8 link: flagged in the table; gpu-a03's details list the findings. Health readings ride
    on one agent sample every 10 s: the faults show (and clear) within that."""
    from tui.screens.cluster import ClusterScreen
    from tui.widgets.gpu_table import GpuTable, Row

    scenario.faults = FAULTS
    await until(pilot, lambda: isinstance(app.screen, ClusterScreen), 10)
    screen = app.screen
    screen.set_sort("name", False)  # the filter/sort scene left it sorted by utilization
    table = screen.query_one(GpuTable)

    def flags() -> str:
        lines = [table.render_line(y).text for y in range(table.size.height)]
        return "".join(c for ln in lines for c in ln if c in "✖▲")

    def details() -> str:
        return str(screen.query_one("#details").render())

    table.focus()
    await until(pilot, lambda: flags().count("✖") >= 2 and flags().count("▲") >= 4, 60)
    table.cursor = table.rows.index(Row("gpu-a03"))
    await until(pilot, lambda: "uncorrectable ECC errors since" in details(), 30)
    await pilot.pause(1.0)
    save(app, "cluster_health")
    scenario.faults = {}
    # Healthy again before the next pictures (the Ray-down confirmation is taken over it).
    await until(pilot, lambda: not flags(), 60)


def shoot_only_runs(scenario_cls, open_form, to_png) -> int:
    """`screenshots.py runs`: Ray up from the cockpit on a fresh scenario, then these scenes."""
    import tempfile

    from tui.app import VerlTuiApp
    from tui.cluster.ray_monitor import RayState
    from tui.config.hosts import load_inventory
    from tui.screens.ray_progress import RayProgressScreen

    out = ROOT / "screenshots"
    shots: list[Path] = []

    def save(app, name: str) -> None:
        path = out / f"{name}.svg"
        app.save_screenshot(str(path))
        shots.append(path)

    async def run(scenario) -> list[str]:
        hosts = scenario.hosts_file(scenario.work / "a.yaml", with_unreachable=False)
        app = VerlTuiApp(load_inventory(hosts), interval=0.25)
        async with app.run_test(size=(160, 46)) as pilot:
            await pilot.press("u")
            await until(pilot, lambda: isinstance(app.screen, RayProgressScreen), 10)
            progress = app.screen
            await until(pilot, lambda: progress.finished, 180)
            await pilot.press("escape")
            await until(pilot, lambda: app.ray_monitor.view.state == RayState.UP, 30)
            not_shot = await shoot_runs(app, pilot, save, hosts, scenario, open_form)
            await asyncio.to_thread(cli, "down", str(hosts))
        return not_shot

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        scenario = scenario_cls(Path(tmp))
        try:
            scenario.start()
            not_shot = asyncio.run(run(scenario))
        finally:
            scenario.close()
    for svg in shots:
        print(to_png(svg).relative_to(ROOT), f"({time.monotonic() - t0:.0f} s)")
    for why in not_shot:
        print(f"not shot: {why}", file=sys.stderr)
    return 1 if not_shot else 0
