"""Code that runs ON the hosts, shipped over SSH as source text to the host's own interpreter:
nothing is installed there.

Every module in this folder is one self-contained program: stdlib only (the GPU agent may
also use pynvml; ``ray_pdb_keys`` runs with the head's Ray interpreter and uses Ray's GCS
client), Python 3.8+, no imports from ``tui``: it runs as ``python -u -c SOURCE ARGS...`` where
only its own text exists. ``tests/test_layers.py`` checks that. Services never import these
modules; they send them with :func:`python_argv`.
"""

from __future__ import annotations

import functools
import importlib.resources


@functools.cache
def source(name: str) -> str:
    """The text of ``tui/remote/<name>.py``, read once from the installed package."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"not a remote program: {name!r}")
    return importlib.resources.files(__name__).joinpath(f"{name}.py").read_text(
        encoding="utf-8")


def python_argv(python: str, name: str, *args: str) -> list[str]:
    """``[python, "-u", "-c", SOURCE, *args]``: runs the program ``name`` with ``python``.

    Unbuffered, so a streaming program's lines arrive as written. Quote with ``shlex.join``
    for a remote shell; the arguments are never parsed by a shell otherwise.
    """
    return [python, "-u", "-c", source(name), *args]
