"""Merge: verl's model merger on one host, turning a step's sharded actor (or critic) into a
Hugging Face model folder — ``python -m verl.model_merger merge --backend fsdp|megatron
--local_dir GLOBAL_STEP/ROLE --target_dir DIR`` (verl/model_merger/base_model_merger.py).

The merger reads, on that host: FSDP — every ``model_world_size_W_rank_R.pt`` (W from
``fsdp_config.json``) and ``huggingface/`` (config, tokenizer); Megatron — ``model/dist_ckpt/``
and ``model/huggingface/``. It is refused, with a one-line reason, unless they are all there.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tui.ckpt.hostcmd import CkptError, host_transport, run_op
from tui.ckpt.scan import build_index, check_root, host_scan_from_json
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

BACKENDS = ("fsdp", "megatron")
# A constant script: the merger's stderr (logging, tqdm) joins its stdout, so the output is one
# live stream, and its exit status comes as a last line (whatever the transport reports); every
# user value stays a positional argument.
_EXIT_MARK = "verl-tui-merge-exit-status:"
_WRAPPER = f'"$@" 2>&1; s=$?; echo "{_EXIT_MARK}$s"; exit $s'


class MergeRefused(CkptError, title="merge refused"):
    """The merge was not started; the message says why (one line)."""


def merge_argv(python: str, local_dir: str, target_dir: str, *, backend: str = "fsdp") -> list[str]:
    """The merger's argv, exactly as verl's CLI takes it."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    return [
        python,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        backend,
        "--local_dir",
        local_dir,
        "--target_dir",
        target_dir,
    ]


@dataclass
class MergeResult:
    host: str
    exit_status: int | None
    target_dir: str
    files: list[tuple[str, int]] = field(default_factory=list)  # (path in target_dir, size)
    error: str | None = None  # one line: why it failed, if it did

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "exit_status": self.exit_status,
            "ok": self.ok,
            "target_dir": self.target_dir,
            "error": self.error,
            "files": [{"path": p, "size": s} for p, s in self.files],
        }


def _split_local_dir(local_dir: str) -> tuple[str, str, str]:
    """(root, "global_step_N", role) of ``ROOT/global_step_N/ROLE``; MergeRefused otherwise."""
    local_dir = check_root(local_dir)
    step_dir, role = posixpath.split(local_dir)
    root, step_name = posixpath.split(step_dir)
    if not step_name.startswith("global_step_") or not step_name[12:].isdigit() or not role:
        raise MergeRefused(f"{local_dir}: expected …/global_step_N/ROLE (e.g. …/actor)")
    return root, step_name, role


def refusal(listing: dict[str, Any], host: str, local_dir: str, backend: str | None) -> str | None:
    """Why the merger cannot run on ``host`` from this scan of its root (None: it can).
    ``backend`` None: whichever layout the folder holds."""
    root, step_name, role = _split_local_dir(local_dir)
    scan = host_scan_from_json(host, listing)
    step = build_index(root, [scan]).step(int(step_name[12:]))
    state = step.roles.get(role) if step else None
    if state is None:
        return f"{host} has no {local_dir}"
    if state.backend is None:
        return f"{host}: no checkpoint shards in {local_dir}"
    if backend is not None and state.backend != backend:
        return f"{local_dir} is a {state.backend} checkpoint, not {backend}"
    backend = state.backend
    missing = state.missing.get("model", ())
    if state.world_size is None:
        return f"{host}: {state.problems[0] if state.problems else 'world size unknown'}"
    if "model" not in state.kinds:
        return f"{host}: {local_dir} holds no model shards (saved without 'model')"
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" …" if len(missing) > 8 else "")
        return (
            f"{host} lacks model rank(s) {shown} of {state.world_size} in {local_dir}: "
            f"collect the step onto {host} first"
        )
    if backend == "fsdp" and host not in state.config_on:
        return f"{host} lacks {local_dir}/fsdp_config.json (written by rank 0): collect it first"
    if backend == "megatron" and "model" in state.metadata_missing:
        return f"{host} lacks model/dist_ckpt/.metadata in {local_dir}: collect it first"
    if host not in state.hf_on:
        hf = "huggingface" if backend == "fsdp" else "model/huggingface"
        return f"{host} lacks {local_dir}/{hf}/config.json (written by rank 0): collect it first"
    return None


def detect_backend(listing: dict[str, Any], host: str, local_dir: str) -> str | None:
    root, step_name, role = _split_local_dir(local_dir)
    step = build_index(root, [host_scan_from_json(host, listing)]).step(int(step_name[12:]))
    state = step.roles.get(role) if step else None
    return state.backend if state else None


async def merge(
    fleet: Fleet,
    host: str,
    local_dir: str,
    target_dir: str,
    *,
    backend: str | None = "fsdp",
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
) -> MergeResult:
    """Run the merger on ``host`` with live output (``on_line`` per line), then list what it
    wrote (``local_dir``: ``ROOT/global_step_N/actor``; ``backend`` None: the folder's layout).
    MergeRefused (one line) when the step's model shards, config or huggingface/ are not all on
    that host, or for a bad folder; CkptError when the host is down."""
    if backend is not None and backend not in BACKENDS:
        raise MergeRefused(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    root, _, _ = _split_local_dir(local_dir)
    local_dir = check_root(local_dir)
    try:
        target_dir = check_root(target_dir)
    except ValueError as exc:
        raise MergeRefused(f"--target: {exc}") from None
    if target_dir == local_dir or target_dir.startswith(local_dir + "/"):
        raise MergeRefused(f"{target_dir} is inside the checkpoint it merges: pick another folder")
    listing = await run_op(fleet, host, "scan", root)
    why = refusal(listing, host, local_dir, backend)
    if why:
        raise MergeRefused(why)
    backend = backend or detect_backend(listing, host, local_dir) or "fsdp"
    python = fleet.inventory.host(host).python
    argv = ["sh", "-c", _WRAPPER, "sh", *merge_argv(python, local_dir, target_dir, backend=backend)]
    try:
        transport = await host_transport(fleet, host)
        proc = await transport.stream(argv, env={"PYTHONUNBUFFERED": "1", **(env or {})})
    except TransportError as exc:
        raise CkptError(str(exc)) from None
    last = ""
    status: int | None = None
    try:
        async for line in proc.lines():
            if line.startswith(_EXIT_MARK) and line[len(_EXIT_MARK) :].isdigit():
                status = int(line[len(_EXIT_MARK) :])
                continue
            last = line.strip() or last
            if on_line is not None:
                on_line(line)
    finally:
        await proc.close()
    result = MergeResult(host=host, exit_status=status, target_dir=target_dir)
    if status != 0:
        result.error = (
            f"the merger exited with status {status}"
            if status is not None
            else "the connection was lost during the merge"
        ) + (f": {last}" if last else "")
        return result
    try:
        listing = await run_op(fleet, host, "ls", target_dir)
    except CkptError as exc:
        result.error = f"merged, but {target_dir} cannot be listed: {exc}"
        return result
    result.files = [(str(p), int(s)) for p, s in listing.get("files", [])]
    return result
