"""The Jobs screen over the recorded run, with jobs waiting in the local queue: one at the head
waiting for GPUs, two runs of a sweep, one that cannot start on this cluster."""

from snapshot_apps.replay import CLOCK, NOW, ScreenApp

from tui.jobs.queue import JobQueue, Needs, QueueEntry
from tui.screens.jobs.screen import JobsScreen


def entry(sid, ago, *, priority=0, group=None, grid=None, reason=None, blocked=False, needs=(1, 4)):
    return QueueEntry(
        submission_id=sid,
        cluster="grpo-demo",
        queued_at=NOW - ago,
        entrypoint_argv=["/opt/verl/.venv/bin/python3", "-m", "verl.trainer.main_ppo"],
        priority=priority,
        profile="grpo-gsm8k-qwen2.5-0.5b",
        overrides=["trainer.nnodes=1", "trainer.n_gpus_per_node=4"],
        needs=Needs(*needs),
        group=group,
        tags={"sweep": group, "grid": grid} if group else {},
        reason=reason,
        blocked=blocked,
    )


def make(app):
    queue = JobQueue("grpo-demo")
    queue.add(
        entry(
            "grpo-long-ctx",
            905,
            priority=5,
            reason="waiting for free resources: needs 1×4 GPU, 12 CPU/node; free now: "
            "node1 0 GPU/4 CPU, node2 0 GPU/4 CPU",
        )
    )
    for i, lr in enumerate(("1e-6", "2e-6")):
        queue.add(entry(f"lr-sweep-lr{lr}", 610 - i, group="lr-sweep", grid=f"actor.optim.lr={lr}"))
    queue.add(
        entry(
            "grpo-32b-2x8",
            3600,
            needs=(2, 8),
            blocked=True,
            reason="cannot start on this cluster now: needs 16 GPUs but Ray sees 8 on 2 nodes",
        )
    )
    return JobsScreen(app.services)


app = ScreenApp(make, patches=[("tui.screens.jobs.queue", "time", CLOCK)])
