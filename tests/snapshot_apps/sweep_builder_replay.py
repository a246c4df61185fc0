"""The job form's sweep builder over the Cluster screen: two keys, 3 × 2 values (6 runs)."""

from snapshot_apps.replay import ScreenApp
from textual.widgets import Input

from tui.screens.job_form.sweep_builder import SweepBuilderScreen

KEYS = ["actor_rollout_ref.actor.optim.lr", "data.train_batch_size", "trainer.total_epochs"]


def fill(screen) -> None:
    values = {
        "#sweep-name": "lr-bs",
        "#sweep-key-0": KEYS[0],
        "#sweep-values-0": "1e-6,2e-6,5e-6",
        "#sweep-key-1": KEYS[1],
        "#sweep-values-1": "64,128",
    }
    for selector, value in values.items():
        screen.query_one(selector, Input).value = value


app = ScreenApp(lambda app: SweepBuilderScreen("grpo-gsm8k-qwen2.5-0.5b", KEYS), after=fill)
