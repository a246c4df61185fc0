"""What every headless command's output shares: the JSON writer (with the host-key mode) and
the insecure-host-keys warning."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: `verl-tui CMD --help` imports this module, not pydantic
    from tui.config.hosts import Inventory


def json_text(doc: dict[str, Any], inventory: Inventory | None, **dumps: Any) -> str:
    """A command's JSON document with `insecure_host_keys` (true while hosts.yaml turns host-key
    checking off for any host). ensure_ascii stays on: the output is printable ASCII, so no
    host's string can carry a control character to a terminal."""
    dumps.pop("ensure_ascii", None)
    insecure = bool(inventory is not None and inventory.insecure_hosts)
    return json.dumps({**doc, "insecure_host_keys": insecure}, **dumps)


def plain_json_text(doc: dict[str, Any], **dumps: Any) -> str:
    """A JSON document about no cluster (e.g. `explain` of a saved log): no host-key field."""
    return json.dumps(doc, **dumps)


def insecure_warning(inventory: Inventory) -> str | None:
    """One stderr line while host keys are not checked, or None."""
    hosts = inventory.insecure_hosts
    if not hosts:
        return None
    where = f" in {inventory.source}" if inventory.source else ""
    return (
        f"verl-tui: warning: host keys are NOT checked for {', '.join(hosts)} "
        f"(insecure_skip_host_key_check: true{where}): anyone on the path can pose as "
        "these hosts"
    )
