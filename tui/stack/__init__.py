"""Stack dumps of a job's processes on every host (py-spy over SSH), grouped by stack, with
Ray's view of the job beside them: `dump_job_stacks` (tui/stack/dump.py) is the one way a dump
is taken (`verl-tui stack`, the stack screen, the supervisor's dump on a stall)."""

from tui.stack.dump import JobNotRunning, dump_job_stacks
from tui.stack.model import Problem, StackGroup, StackReport, Target

__all__ = ["JobNotRunning", "Problem", "StackGroup", "StackReport", "Target", "dump_job_stacks"]
