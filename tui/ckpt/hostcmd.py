"""Running the checkpoint helper (tui/remote/ckpt_helper.py) with a host's interpreter."""

from __future__ import annotations

import json
from typing import Any

from tui.errors import VerlTuiError
from tui.remote import python_argv
from tui.transport.fleet import Fleet
from tui.transport.types import RunResult, Transport, TransportError

DEFAULT_TIMEOUT = 60.0


class CkptError(VerlTuiError, title="checkpoint"):
    """A checkpoint operation could not be done; the message is one line for the user."""


def script_argv(python: str, op: str, *args: str) -> list[str]:
    """``python -u -c SOURCE OP ARGS...``: tui/remote/ckpt_helper.py, inline."""
    return python_argv(python, "ckpt_helper", op, *args)


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if lines and lines[0].startswith("Traceback"):
        return lines[-1]
    return lines[0] if lines else ""


def parse_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            return data if isinstance(data, dict) else None
    return None


def answer(res: RunResult, host: str, python: str) -> dict[str, Any]:
    """The helper's JSON answer; CkptError (one line) for a missing interpreter or an error."""
    if res.exit_status == 127:
        raise CkptError(f"{host}: interpreter not found: {python}")
    if res.exit_status == 126:
        raise CkptError(f"{host}: interpreter not executable: {python}")
    data = parse_json_line(res.stdout)
    if data is None:
        why = first_line(res.stderr) or f"exit status {res.exit_status}, no answer"
        raise CkptError(f"{host}: {why}")
    if "error" in data:
        raise CkptError(f"{host}: {data['error']}")
    return data


async def host_transport(fleet: Fleet, name: str, timeout: float = 20.0) -> Transport:
    """The host's transport once it is up; a host that already failed to connect fails now."""
    return await fleet.ready(name, timeout)


async def run_op(
    fleet: Fleet, host: str, op: str, *args: str, timeout: float = DEFAULT_TIMEOUT
) -> dict[str, Any]:
    """Run one helper operation on a host; CkptError (one line) for any failure."""
    python = fleet.inventory.host(host).python
    try:
        transport = await host_transport(fleet, host)
        res = await transport.run(
            script_argv(python, op, *args), timeout=timeout, what=f"checkpoint {op}"
        )
    except TransportError as exc:
        raise CkptError(str(exc)) from None
    return answer(res, host, python)
