"""One `verl-tui` command run in this process with its phases timestamped (bench/bringup_sim.py
`--phases`): where a CLI run's wall time goes besides the doctor's own work.

    cd TREE && python /path/to/bench/cli_phases.py check HOSTS.yaml
    cd TREE && python /path/to/bench/cli_phases.py up HOSTS.yaml

Imports tui from the working directory (a --tree copy), wraps a few functions with marks
(imports done, fleet started, the doctor's progress steps, head lock taken and released, fleet
closed) and prints one line ``phases {"t0": …, "marks": [[s, what], …], "rc": N}`` to stderr
at the end; ``t0`` is CLOCK_MONOTONIC at the first line (system-wide on Linux: the parent
subtracts its spawn time to get the interpreter's start-up, and its own end for the exit).
"""

from __future__ import annotations

import time

T0 = time.monotonic()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.getcwd())
MARKS: list[tuple[float, str]] = []


def mark(what: str) -> None:
    MARKS.append((round(time.monotonic() - T0, 3), what))


def _wrap_async(owner: object, name: str, before: str | None, after: str | None) -> None:
    orig = getattr(owner, name)

    async def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        if before:
            mark(before)
        out = await orig(*args, **kwargs)
        if after:
            mark(after)
        return out

    setattr(owner, name, wrapped)


def main() -> int:
    import tui.cli

    mark("cli imported")
    import tui.transport.fleet as fleet

    _wrap_async(fleet.Fleet, "__aenter__", "fleet start", None)
    _wrap_async(fleet.Fleet, "close", "fleet close", "fleet closed")
    if sys.argv[1:2] != ["up"]:
        _wrap_doctor()
    else:
        _wrap_up()
    mark("tracer set")
    rc = 1
    try:
        rc = tui.cli.main(sys.argv[1:])
    finally:
        mark("main returned")
        sys.stderr.write("phases " + json.dumps({"t0": T0, "marks": MARKS, "rc": rc}) + "\n")
        sys.stderr.flush()
    return rc


def _wrap_doctor() -> None:
    import tui.cluster.doctor as doctor

    orig = doctor.run_doctor

    async def run_doctor(*args, **kwargs):  # type: ignore[no-untyped-def]
        said = kwargs.get("progress")

        def progress(msg: str) -> None:
            mark(f"doctor: {msg}")
            if said is not None:
                said(msg)

        kwargs["progress"] = progress
        return await orig(*args, **kwargs)

    doctor.run_doctor = run_doctor


def _wrap_up() -> None:
    import tui.cluster.lock as lock
    import tui.cluster.ray_cluster as ray_cluster

    _wrap_async(ray_cluster, "acquire_head_lock", "head lock asked", "head lock held")
    _wrap_async(lock.HeadLock, "release", "head lock release", "head lock released")
    orig_emit = ray_cluster.RayCluster._emit

    def emit(self, host, phase, status, message):  # type: ignore[no-untyped-def]
        if status == "fail" or phase != "probe" or host is None:
            mark(f"event: {host or 'cluster'} {phase} {status}")
        orig_emit(self, host, phase, status, message)

    ray_cluster.RayCluster._emit = emit  # type: ignore[method-assign]


if __name__ == "__main__":
    sys.exit(main())
