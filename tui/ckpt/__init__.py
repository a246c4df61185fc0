"""Checkpoints of verl jobs across the hosts: scan, collect, merge, resume (no UI here)."""

from tui.ckpt.hostcmd import CkptError

__all__ = ["CkptError"]
