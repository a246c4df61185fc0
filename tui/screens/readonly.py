"""The read-only cockpit's one gate (`--read-only`, or `readonly: true` in hosts.yaml): it shows
everything and changes nothing, for a shared screen or a teammate looking in.

Every cockpit action (a key binding, a palette entry: both run through `App.run_action`) is
declared here by the class that defines its `action_*` method: MUTATES (it changes the
cluster, its jobs, the shared queue or the state the cockpit keeps) or VIEWS (it only shows,
moves the cursor or asks the hosts). `VerlTuiApp.run_action` asks `refusal` once per action:
in a read-only cockpit a mutating action, and one of ours declared in neither set (a key added
without a declaration), is refused with one line. Textual's own widget actions (cursor keys,
text editing) change nothing outside the screen and pass. tests/test_team_readonly.py walks
every binding and palette entry and fails on an action declared nowhere.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.dom import DOMNode

from tui.sanitize import one_line

MUTATES: dict[str, frozenset[str]] = {
    "VerlTuiApp": frozenset({"ray_up", "ray_restart", "ray_down", "new_job"}),
    "CheckpointsScreen": frozenset({"collect", "merge"}),
    "DapSessionScreen": frozenset({"prompt", "continue", "disconnect"}),
    "DebuggerScreen": frozenset({"attach", "vscode"}),
    "DraftBusyScreen": frozenset({"choose"}),
    "JobFormScreen": frozenset({"submit", "discard_draft"}),
    "JobsScreen": frozenset(
        {"new_job", "edit_job", "stop", "delete", "queue_cancel", "queue_up", "queue_down"}
    ),
    "SweepBuilderScreen": frozenset({"queue_all"}),
}

VIEWS: dict[str, frozenset[str]] = {
    "VerlTuiApp": frozenset(
        {
            "ray_missing",
            "reload_hosts",
            "show_cluster",
            "show_jobs",
            "node_logs",
            "debugger",
            "checkpoints",
            "doctor",
            "help",
        }
    ),
    "CheckpointsScreen": frozenset({"root", "host", "rescan", "back"}),
    "CheckpointPickerScreen": frozenset({"cancel"}),
    "ClusterScreen": frozenset(
        {"filter", "clear_filter", "columns", "sort", "reverse_sort", "node_logs", "reconnect"}
    ),
    "CompareScreen": frozenset({"pick_metric", "reset_layout", "back"}),
    # Reached only through an action the gate let through.
    "ConfirmScreen": frozenset({"answer"}),
    "DapSessionScreen": frozenset({"back"}),
    "DebuggerScreen": frozenset({"refresh", "back"}),
    "DoctorScreen": frozenset({"recheck", "toggle_problems", "back"}),
    "JobFormScreen": frozenset(
        {
            "revalidate",
            "back",
            "next_error",
            "previous_error",
            "toggle_queue",
            "sweep",
            "resume_from",
        }
    ),
    "JobLogsScreen": frozenset({"toggle_tab", "stacks", "back"}),
    "JobsScreen": frozenset(
        {
            "logs",
            "metrics",
            "stacks",
            "checkpoints",
            "refresh",
            "back",
            "filter",
            "clear_filter",
            "sort",
            "reverse_sort",
            "owners",
            "rollouts",
            "mark",
            "compare",
        }
    ),
    "JobTable": frozenset({"first", "last"}),
    "NodeLogsScreen": frozenset(
        {"open", "grep_all", "refresh", "only_host", "switch_focus", "back"}
    ),
    "GrepPrompt": frozenset({"cancel"}),
    "PdbConsoleScreen": frozenset({"back"}),
    "ProfilePickerScreen": frozenset({"cancel"}),
    "RayProgressScreen": frozenset({"jobs", "close"}),
    # A py-spy dump reads the processes' stacks; the dump is kept in this account's folder.
    "StackScreen": frozenset({"dump", "native", "back"}),
    "SweepBuilderScreen": frozenset({"cancel"}),
    "GpuTable": frozenset({"cursor", "page", "jump", "toggle_host", "toggle_all"}),
    "_Prompt": frozenset({"cancel"}),
    # Saving a log writes a file the viewer names, in their own account.
    "LogPane": frozenset({"search", "save"}),
    "LogView": frozenset(
        {
            "page_down",
            "page_up",
            "next_match",
            "next_error",
            "next_hint",
            "toggle_filter",
            "toggle_wrap",
            "follow",
            "top",
            "bottom",
        }
    ),
    "MetricPicker": frozenset({"move", "cancel"}),
    "RolloutsScreen": frozenset(
        {"back", "reload", "reverse", "search", "sort", "compare", "page", "open"}
    ),
    "CompareStepsScreen": frozenset({"back", "other"}),
    "SampleScreen": frozenset({"back"}),
    "MetricsPanel": frozenset({"pick_metric", "toggle_phases", "reset_layout"}),
}


def owner_class(node: object, action: str) -> type | None:
    """The class that defines `action_<action>` for `node` (an instance or a class)."""
    for cls in (node if isinstance(node, type) else type(node)).__mro__:
        if f"action_{action}" in vars(cls) or f"_action_{action}" in vars(cls):
            return cls
    return None


def declared(node: object, action: str) -> bool | None:
    """True: it mutates; False: it only views; None: declared nowhere (or not ours)."""
    cls = owner_class(node, action)
    if cls is None:
        return None
    if action in MUTATES.get(cls.__name__, ()):
        return True
    if action in VIEWS.get(cls.__name__, ()):
        return False
    return None


def ours(node: object, action: str) -> bool:
    """Whether verl-tui defines the action (Textual's own widgets' actions are not gated)."""
    cls = owner_class(node, action)
    return cls is not None and cls.__module__.startswith("tui.")


def _label(node: DOMNode, action: str) -> str:
    for b in getattr(node, "BINDINGS", ()):
        binding = b if isinstance(b, Binding) else Binding(*b)
        if binding.action == action and binding.description:
            return f"{binding.description} ({binding.key.split(',')[0]})"
    return action.replace("_", " ")


def refusal(node: DOMNode, action: str) -> str | None:
    """The one line refusing `action` on `node` in a read-only cockpit; None when it may run."""
    if not ours(node, action) or declared(node, action) is False:
        return None
    return one_line(
        f"read-only cockpit: {_label(node, action)} would change the cluster or its jobs; "
        "start verl-tui without --read-only (and readonly: in hosts.yaml) to act",
        300,
    )
