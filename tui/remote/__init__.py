"""Code that runs ON the hosts, shipped over SSH as source text to the host's own interpreter:
nothing is installed there.

Every program in this folder ships as ONE source text: stdlib only (the GPU agent may also use
pynvml/amdsmi, the probe pynvml; ``ray_pdb_keys`` runs with the head's Ray interpreter and uses
Ray's GCS client), Python 3.8+, no imports from ``tui``: it runs as ``python -u -c SOURCE
ARGS...`` where only its own text exists. ``tests/test_layers.py`` checks that. Services never
import these modules; they send them with :func:`python_argv`.

A program too long for one module is a bundle (:data:`BUNDLES`): the program's own module
first, then its parts, each a real module here (ruff and mypy read them, tests import them).
:func:`source` joins them into one text:

- the program's text, without its closing ``if __name__ == "__main__":`` block;
- each part in order, without its top-level ``from __future__`` and
  ``from tui.remote.<part> import …`` statements (in the joined text those names are already
  defined: the program's and the parts' top-level names never collide);
- the program's ``__main__`` block, last, so every part is defined when it runs.

So the program reaches its parts' names only inside functions (its top level runs before the
parts are defined), and a part uses another part's names at top level (a default value, a
base class) only when that part comes earlier in the bundle.
"""

from __future__ import annotations

import ast
import functools
import importlib.resources

# program -> the parts joined after it, in order (a part used at another's top level first).
BUNDLES: dict[str, tuple[str, ...]] = {
    "gpu_agent": ("gpu_common", "amd_cards", "gpu_nvml", "nvml_health", "gpu_amd", "relay_wire"),
    "gpu_relay": ("relay_wire",),
    "probe": ("amd_cards", "probe_gpus", "hf_cache", "tracing"),
    "job_preflight": ("hf_cache", "tracing", "startup_imports"),
    "stack_dump": ("tracing",),
    "head_lease": ("shared_files",),
    "head_state": ("shared_files",),
}


def parts() -> set[str]:
    """Modules that are parts of a bundle, not programs of their own."""
    return {p for names in BUNDLES.values() for p in names}


def _text(name: str) -> str:
    return importlib.resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")


def _spans(
    text: str, names: set[str], future: bool
) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """Line spans (0-based, end exclusive) of the top-level imports the join drops (``from
    tui.remote.<one of names>``, and ``from __future__`` when ``future``), and of the closing
    ``if __name__ …`` block (None when the module does not end with one)."""
    tree = ast.parse(text)
    drop = []
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (
                (future and node.module == "__future__")
                or (node.module or "").removeprefix("tui.remote.") in names
            )
        ):
            drop.append((node.lineno - 1, node.end_lineno or node.lineno))
    last = tree.body[-1] if tree.body else None
    main = None
    if (
        isinstance(last, ast.If)
        and isinstance(last.test, ast.Compare)
        and isinstance(last.test.left, ast.Name)
        and last.test.left.id == "__name__"
    ):
        main = (last.lineno - 1, last.end_lineno or last.lineno)
    return drop, main


def _without(lines: list[str], spans: list[tuple[int, int]]) -> str:
    gone = {i for a, b in spans for i in range(a, b)}
    return "".join(line for i, line in enumerate(lines) if i not in gone).strip("\n")


def join(program: str, names: tuple[str, ...]) -> str:
    """The one source text of ``program`` bundled with its parts ``names`` (see above)."""
    text = _text(program)
    lines = text.splitlines(keepends=True)
    drop, main = _spans(text, set(names), future=False)
    if main is None:
        raise ValueError(f"bundle {program!r}: the program must end with its __main__ block")
    chunks = [_without(lines[: main[0]], drop)]
    for name in names:
        part = _text(name)
        part_drop, part_main = _spans(part, set(names), future=True)
        if part_main is not None:
            raise ValueError(f"bundle {program!r}: part {name!r} has a __main__ block")
        chunks.append(
            f"# ---- {name}.py, joined by the loader (tui/remote/__init__.py)\n"
            + _without(part.splitlines(keepends=True), part_drop)
        )
    chunks.append("".join(lines[main[0] : main[1]]).strip("\n"))
    return "\n\n\n".join(chunks) + "\n"


@functools.cache
def source(name: str) -> str:
    """The text shipped for the program ``name``: ``tui/remote/<name>.py``, joined with its
    parts when it is a bundle; read once from the installed package."""
    if not name.isidentifier() or name.startswith("_") or name in parts():
        raise ValueError(f"not a remote program: {name!r}")
    if name in BUNDLES:
        return join(name, BUNDLES[name])
    return _text(name)


def python_argv(python: str, name: str, *args: str, site: bool = True) -> list[str]:
    """``[python, "-u", "-c", SOURCE, *args]``: runs the program ``name`` with ``python``.

    Unbuffered, so a streaming program's lines arrive as written. Quote with ``shlex.join``
    for a remote shell; the arguments are never parsed by a shell otherwise. ``site=False``
    adds ``-S`` for a stdlib-only program that runs on every host at once: no site-packages
    scan (an environment's .pth files), about half the interpreter's start-up.
    """
    return [python, "-u", *([] if site else ["-S"]), "-c", source(name), *args]
