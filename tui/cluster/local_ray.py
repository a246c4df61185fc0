"""Whether the interpreter of each host on this machine (local transport: the localhost
inventory) has Ray, asked before `u` is offered: without it Ray cannot start there, and the fix
is one pinned pip command (verl-tui's `ray` extra, the pin it declares)."""

from __future__ import annotations

import importlib.metadata
import re

from tui.config.hosts import Inventory
from tui.shellcmd import copy_line
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

# find_spec, not import: it answers in milliseconds and runs none of Ray's code.
_HAS_RAY = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('ray') else 3)"
_FALLBACK_PIN = "ray[default]"


def ray_requirement() -> str:
    """Ray as verl-tui's `ray` extra pins it (pyproject.toml, e.g. ``ray[default]==2.60.0``)."""
    try:
        requires = importlib.metadata.requires("verl-tui") or []
    except importlib.metadata.PackageNotFoundError:
        return _FALLBACK_PIN
    for req in requires:
        spec, _, marker = req.partition(";")
        if re.search(r"""extra\s*==\s*["']ray["']""", marker):
            return spec.strip().replace(" ", "")
    return _FALLBACK_PIN


def install_hint(python: str) -> str:
    """The pinned command that gives `python` Ray (what the `ray` extra installs)."""
    return copy_line([python, "-m", "pip", "install", ray_requirement()])


async def local_ray_missing(fleet: Fleet, inv: Inventory) -> str | None:
    """One line naming the first local host whose interpreter has no Ray, with the fix; None
    when each has it, or when there is no local host, or it could not be asked (the bring-up's
    own probe then says what is wrong)."""
    for host in inv.hosts:
        if host.transport != "local":
            continue
        python = host.python or "python3"
        try:
            transport = await fleet.ready(host.name, 20)
            res = await transport.run([python, "-c", _HAS_RAY], timeout=20)
        except (TransportError, OSError):
            continue
        if res.exit_status == 3:
            return (
                f"Ray is not installed in {python} ({host.name}, this machine): "
                f"{install_hint(python)} (verl-tui's [ray] extra), then u starts it"
            )
    return None
