"""The supervisor: one loop, run by the cockpit while it is open and by `verl-tui watch`
headless, that acts on the cluster's jobs (retry failed runs from their last complete checkpoint,
start queued jobs, notify). Only one supervisor acts per cluster (a lease on the head).

Duties (tui/supervisor/duty.py) are the pluggable parts: each tick the supervisor calls every
registered duty with one SupervisorContext and hands each Decision it returns to `ctx.notify`.
"""

from tui.supervisor.duty import Duty, SupervisorContext
from tui.supervisor.events import KINDS, Decision
from tui.supervisor.submitting import SubmitRejected

__all__ = ["KINDS", "Decision", "Duty", "SubmitRejected", "SupervisorContext"]
