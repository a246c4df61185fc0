"""Command palette entries (ctrl+p), built from the key bindings themselves so the palette lists
every action a key reaches and cannot drift from them; plus a few parameterised actions that
have no key of their own (sort by a given column, reconnect every host)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.dom import DOMNode

from tui.sanitize import one_line
from tui.screens.cluster import ClusterScreen
from tui.screens.help import key_label, node_title, offered
from tui.widgets.gpu_table import SORT_KEYS

# The palette's own key: listing it inside the palette is noise.
_SKIP_ACTIONS = {"command_palette"}


@dataclass(frozen=True)
class Command:
    name: str
    callback: Callable[[], object]
    help: str


def binding_commands(node: DOMNode, where: str) -> Iterator[tuple[Binding, Command]]:
    """One command per binding of `node` that has a description (its action run on `node`)."""
    for b in node.BINDINGS:
        binding = b if isinstance(b, Binding) else Binding(*b)
        if not binding.description or binding.action in _SKIP_ACTIONS:
            continue
        if not offered(node, binding):  # hidden, as in the footer
            continue
        run = partial(node.app.run_action, binding.action, node)
        yield binding, Command(binding.description, run, f"{where} ({key_label(binding.key)})")


def cluster_base(node: DOMNode) -> ClusterScreen | None:
    """The Cluster screen at the base of the stack (the cockpit's; None in another app)."""
    stack = node.app.screen_stack
    return stack[0] if stack and isinstance(stack[0], ClusterScreen) else None


def palette_sources(screen: DOMNode) -> list[tuple[str, DOMNode]]:
    """Where commands come from: the app, the screen the palette was opened on, our widgets on
    it, and — for its Ray/Doctor/host-log keys — the Cluster screen at the base of the stack."""
    app = screen.app
    sources: list[tuple[str, DOMNode]] = [("Everywhere", app), (node_title(screen), screen)]
    sources += [
        (node_title(w), w)
        for w in screen.query("*")
        if getattr(w, "BINDINGS", None) and type(w).__module__.startswith("tui.")
    ]
    base = cluster_base(screen)
    if base is not None and base is not screen:
        sources.append((node_title(base), base))
    return sources


def commands_for(screen: DOMNode) -> list[Command]:
    app = screen.app
    cmds: list[Command] = []
    seen: set[str] = set()

    def add(cmd: Command) -> None:
        if cmd.name not in seen:
            seen.add(cmd.name)
            cmds.append(cmd)

    base = cluster_base(screen)
    for where, node in palette_sources(screen):
        for binding, cmd in binding_commands(node, where):
            # Off the Cluster screen, only its keys that act on the whole cluster (app.*
            # actions, the host's logs) make sense: filter/sort act on a hidden table.
            if (
                node is base
                and node is not screen
                and not (binding.action.startswith("app.") or binding.action == "node_logs")
            ):
                continue
            add(cmd)
    if base is not None and base is screen:
        for key in SORT_KEYS:
            add(Command(f"Sort by {key}", partial(base.set_sort, key), "Cluster screen"))
    if base is not None and base.fleet is not None:
        add(Command("Reconnect every host now", partial(base.fleet.reconnect, None), "Fleet"))
    if base is not None:  # the cockpit: its Jobs screen and job form
        add(
            Command(
                "New job from profile",
                partial(app.run_action, "new_job"),  # through the read-only gate
                "Pick a profile, edit it in the job form, submit",
            )
        )
    return cmds


class CockpitCommands(Provider):
    def _commands(self) -> list[Command]:
        return commands_for(self.screen)

    async def discover(self) -> Hits:
        for cmd in self._commands():
            yield DiscoveryHit(one_line(cmd.name), cmd.callback, help=one_line(cmd.help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for cmd in self._commands():
            score = matcher.match(cmd.name)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(one_line(cmd.name)),
                    cmd.callback,
                    help=one_line(cmd.help),
                )
