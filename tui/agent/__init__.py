"""Code that runs ON cluster hosts, shipped over SSH as source text (nothing is installed there).

``gpu_agent.py`` is self-contained (stdlib + pynvml): never import it from ``tui`` code paths that
assume a package context on the host; send ``agent_argv(...)`` as the remote command instead.
"""

from __future__ import annotations

import functools
import importlib.resources


@functools.cache
def agent_source() -> str:
    """The text of ``gpu_agent.py``, read once from the installed package."""
    return importlib.resources.files("tui.agent").joinpath("gpu_agent.py").read_text(
        encoding="utf-8"
    )


def agent_argv(python: str, interval: float, once: bool = False) -> list[str]:
    """argv that runs the GPU agent with ``python`` on a host: ``python -u -c SOURCE ...``.

    Quote it with ``shlex.join`` for a remote shell; the source travels inline, so the host
    needs nothing but the interpreter.
    """
    argv = [python, "-u", "-c", agent_source(), "--interval", str(float(interval))]
    if once:
        argv.append("--once")
    return argv
