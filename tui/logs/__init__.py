"""Job logs without UI: a disk-backed line store and the failure signatures it recognises."""

from tui.logs.signatures import ERROR, HINT, TRACEBACK, WARNING, Hint
from tui.logs.store import LogStore, Query

__all__ = ["ERROR", "HINT", "TRACEBACK", "WARNING", "Hint", "LogStore", "Query"]
