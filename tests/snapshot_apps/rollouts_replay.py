"""Rollouts: two steps that verl 0.9.1's own _dump_generations wrote (recorded/rollouts, made by
make_rollouts.py), read by the real remote reader through the local transport; the title
names the folder as the cluster would (node2:/data/rollouts), the files are read from here."""

import sys

from snapshot_apps.replay import RECORDED, ScreenApp

from tui.rollouts.reader import DumpDir
from tui.screens.rollouts.screen import RolloutsScreen
from tui.transport.local import LocalTransport


class ShownDump(DumpDir):
    where = "node2:/data/rollouts"  # type: ignore[assignment]


async def open_dump() -> DumpDir:
    return ShownDump(LocalTransport("node2"), sys.executable, "node2", str(RECORDED / "rollouts"))


app = ScreenApp(lambda app: RolloutsScreen(open_dump, "raysubmit_grpo_qwen05b"))
