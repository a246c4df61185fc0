"""`verl-tui ckpt`: a job's checkpoints on every host; collect a step onto one host; merge it.

Exit status: 0 — done (listing: every host answered; collect: the step is complete on the
target; merge: the merger succeeded); 1 — it did not; 2 — bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail, fail_with
from tui.commands.ray import _run
from tui.config.yamlfile import ConfigError
from tui.fmt import human_size
from tui.sanitize import one_line, raw

if TYPE_CHECKING:  # the services are imported where used: `verl-tui ckpt --help` stays light
    from tui.ckpt.collect import CollectReport, CopyProgress
    from tui.ckpt.scan import CheckpointIndex
    from tui.config.hosts import Inventory
    from tui.transport.fleet import Fleet

_ROLE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}\Z")


def resolve_root(directory: str | None, profile: Path | None) -> str:
    """The checkpoint root from --dir, or the profile's trainer.default_local_dir (ConfigError,
    one line, when neither gives an absolute folder)."""
    from tui.ckpt.resume import profile_root
    from tui.ckpt.scan import check_root

    if directory is not None and profile is not None:
        raise ConfigError("give --dir or --profile, not both")
    if directory is None and profile is None:
        raise ConfigError(
            "give --dir DIR (the job's trainer.default_local_dir) or --profile PROFILE.yaml"
        )
    where = "--dir"
    if profile is not None:
        from tui.jobs.profiles import load_profile

        prof = load_profile(profile)
        value = profile_root(prof.overrides)
        if value is None:
            raise ConfigError(
                f"{profile}: no trainer.default_local_dir (verl's default is "
                "relative to the job's working directory): give --dir"
            )
        if not isinstance(value, str) or "${" in value:
            raise ConfigError(
                f"{profile}: trainer.default_local_dir must be a plain absolute "
                "path here (no interpolation): give --dir"
            )
        directory, where = value, f"{profile}: trainer.default_local_dir"
    try:
        return check_root(str(directory))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_args(
    inv: Inventory,
    *,
    collect_step: int | None,
    to: str | None,
    role: str | None,
    merge_step: int | None,
    on: str | None,
    target: str | None,
) -> None:
    """ConfigError (one line) for a combination of options that cannot work."""
    from tui.ckpt.scan import check_root

    names = [h.name for h in inv.hosts]
    if collect_step is not None and merge_step is not None:
        raise ConfigError("give --collect or --merge, not both")
    if collect_step is not None and not to:
        raise ConfigError("--collect STEP needs --to HOST")
    if to and collect_step is None:
        raise ConfigError("--to HOST goes with --collect STEP")
    if merge_step is not None and (not on or not target):
        raise ConfigError("--merge STEP needs --on HOST and --target DIR")
    if (on or target) and merge_step is None:
        raise ConfigError("--on / --target go with --merge STEP")
    for flag, host in (("--to", to), ("--on", on)):
        if host is not None and host not in names:
            raise ConfigError(f"{flag} {host!r}: not a host of {inv.cluster} ({', '.join(names)})")
    if role is not None and not _ROLE_RE.match(role):
        raise ConfigError(f"--role {role!r}: expected a folder name such as actor or critic")
    if target is not None:
        try:
            check_root(target)
        except ValueError as exc:
            raise ConfigError(f"--target: {exc}") from None


# -- output ------------------------------------------------------------------------------------


def rank_ranges(ranks: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 5) → "0-2,5"."""
    out: list[str] = []
    ranks = sorted(ranks)
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def _missing_text(missing: dict[str, dict[str, tuple[int, ...]]], multi_role: bool) -> str:
    parts = []
    for role, kinds in missing.items():
        for kind, ranks in kinds.items():
            parts.append(f"{role + ' ' if multi_role else ''}{kind} {rank_ranges(ranks)}")
    return "; ".join(parts)


def index_table(index: CheckpointIndex) -> str:
    latest = ", ".join(f"{h}={v if v is not None else '-'}" for h, v in index.latest.items())
    lines = [f"{index.root}   latest_checkpointed_iteration.txt: {latest or '-'}"]
    if not index.steps:
        lines.append("no global_step_N folder on any host")
    hosts = list(index.hosts)
    multi_role = any(set(s.roles) - {"actor"} for s in index.steps)
    width = {h: max(len(h), 5) for h in hosts}
    head = f"{'STEP':>6} {'W':>4}  {'ROLES':<13}" if multi_role else f"{'STEP':>6} {'W':>4} "
    head += f" {'COMPLETE':<9} {'SIZE':>8}  " + "  ".join(f"{h:<{width[h]}}" for h in hosts)
    if index.steps:
        lines.append(head + "  LATEST")
    notes = []
    for s in index.steps:
        holders = s.hosts
        cells = []
        for h in hosts:
            if not index.hosts[h].ok:
                cell = "down"
            elif h not in holders:
                cell = "-"
            else:
                cell = rank_ranges(holders[h]) or "·"
            cells.append(f"{cell:<{width[h]}}")
        w = s.world_size if s.world_size is not None else "?"
        row = f"{s.step:>6} {w!s:>4} "
        if multi_role:
            row += f" {','.join(s.roles) or '-':<13}"
        row += f" {'yes' if s.complete else 'no':<9} {human_size(s.size_bytes):>8}  "
        row += "  ".join(cells)
        row += "  " + ("latest" if s.latest_on else "")
        lines.append(row.rstrip())
        if s.complete and s.complete_on:
            notes.append(f"step {s.step}: whole on {', '.join(s.complete_on)}")
        elif s.missing:
            notes.append(f"step {s.step}: no host has {_missing_text(s.missing, multi_role)}")
        for role in s.roles.values():
            notes += [f"step {s.step} {role.role}: {p}" for p in role.problems]
        if s.truncated_on:
            notes.append(f"step {s.step}: listing cut short on {', '.join(s.truncated_on)}")
    for h, scan in index.hosts.items():
        if not scan.ok:
            notes.append(f"{h}: not scanned: {scan.error}")
        elif scan.partials:
            notes.append(
                f"{h}: {len(scan.partials)} leftover .verl-tui-partial file(s) "
                "of an interrupted collect"
            )
    if notes:
        lines.append("")
        lines += notes
    return "\n".join(lines)


class _Bar:
    """A progress line on stderr: redrawn in place on a terminal, one line per file otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last_draw = 0.0

    def __call__(self, p: CopyProgress) -> None:
        if p.finished and not self.tty:
            print(
                f"  {p.files_done}/{p.files_total} {p.path} ({human_size(p.total)} from "
                f"{p.source})",
                file=sys.stderr,
                flush=True,
            )
            return
        now = time.monotonic()
        if not self.tty or (now - self.last_draw < 0.1 and not p.finished):
            return
        self.last_draw = now
        frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
        filled = int(frac * 30)
        rate = p.bytes_done / max(now - self.t0, 1e-6) / 1e6
        # The \r redraw is ours (raw stream, past the SafeWriter); the path is cleaned here.
        err = raw(sys.stderr)
        err.write(
            f"\r[{'#' * filled}{'.' * (30 - filled)}] {frac * 100:5.1f}% "
            f"{p.files_done}/{p.files_total} {rate:6.1f} MB/s  "
            f"{one_line(p.path)[-40:]:<40}"
        )
        err.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _report_text(report: CollectReport, after: CheckpointIndex) -> str:
    lines = [
        f"copied {len(report.copied)} file(s), {human_size(report.bytes_copied)} in "
        f"{report.copy_seconds:.1f} s ({report.mb_per_s:.1f} MB/s); "
        f"{len(report.present)} already there"
    ]
    lines += [f"conflict: {c.path}: {c.reason}" for c in report.conflicts]
    lines += [f"failed: {f.path} from {f.source}: {f.error}" for f in report.failed]
    step = after.step(report.step)
    whole = step is not None and report.target in step.complete_on
    lines.append(
        f"global_step_{report.step} is {'now' if whole else 'NOT'} complete on {report.target}"
    )
    return "\n".join(lines)


# -- commands ----------------------------------------------------------------------------------


async def _with_fleet(inv: Inventory, body: Callable[[Fleet], Awaitable[int]]) -> int:
    task = asyncio.current_task()
    assert task is not None  # we run in one
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    from tui.transport.fleet import Fleet

    async with Fleet(inv) as fleet:
        return await body(fleet)


def run_ckpt_list(inv: Inventory, root: str, *, as_json: bool) -> int:
    from tui.ckpt.scan import scan_fleet

    async def body(fleet: Fleet) -> int:
        index = await scan_fleet(fleet, inv, root)
        if as_json:
            print(json_text(index.to_json(), inv))
        else:
            print(index_table(index))
        return 1 if index.down else 0

    return _run(_with_fleet(inv, body))


def run_ckpt_collect(
    inv: Inventory, root: str, step: int, target: str, *, role: str | None, as_json: bool
) -> int:
    from tui.ckpt.collect import collect
    from tui.ckpt.hostcmd import CkptError
    from tui.ckpt.scan import scan_fleet

    async def body(fleet: Fleet) -> int:
        index = await scan_fleet(fleet, inv, root)
        if index.step(step) is None:
            have = ", ".join(str(s.step) for s in index.steps) or "none"
            return fail_with(
                "verl-tui ckpt",
                f"no global_step_{step} under {root} on any host (steps: {have})",
                kind="bad_input",
                title="no such step",
            )
        bar = _Bar()
        try:
            report = await collect(fleet, index, step, role, target, progress=bar)
        except CkptError as exc:
            return fail(exc, "verl-tui ckpt")
        finally:
            bar.end()
        after = await scan_fleet(fleet, inv, root)
        state = after.step(step)
        whole = state is not None and target in state.complete_on
        if as_json:
            print(json_text({**report.to_json(), "complete_on_target": whole}, inv))
        else:
            print(_report_text(report, after))
        return 0 if report.ok and whole else 1

    return _run(_with_fleet(inv, body))


def run_ckpt_merge(
    inv: Inventory,
    root: str,
    step: int,
    host: str,
    target_dir: str,
    *,
    role: str,
    backend: str | None,
    as_json: bool,
) -> int:
    from tui.ckpt.hostcmd import CkptError
    from tui.ckpt.merge import MergeRefused, merge

    local_dir = f"{root.rstrip('/')}/global_step_{step}/{role}"
    out = sys.stderr if as_json else sys.stdout

    async def body(fleet: Fleet) -> int:
        try:
            result = await merge(
                fleet,
                host,
                local_dir,
                target_dir,
                backend=backend,
                on_line=lambda line: print(line, file=out, flush=True),
            )
        except MergeRefused as exc:
            return fail_with("verl-tui ckpt", f"not merging: {exc}", title=exc.title)
        except CkptError as exc:
            return fail(exc, "verl-tui ckpt")
        if as_json:
            print(json_text(result.to_json(), inv))
        elif result.ok:
            print(f"\n{host}:{result.target_dir}:")
            for path, size in result.files:
                print(f"{human_size(size):>9}  {path}")
        if not result.ok:
            return fail_with("verl-tui ckpt", result.error or "merge failed", title="merge failed")
        return 0

    return _run(_with_fleet(inv, body))


def run_ckpt(
    inv: Inventory,
    *,
    directory: str | None,
    profile: Path | None,
    as_json: bool,
    collect_step: int | None = None,
    to: str | None = None,
    role: str | None = None,
    merge_step: int | None = None,
    on: str | None = None,
    target: str | None = None,
    backend: str | None = None,
) -> int:
    root = resolve_root(directory, profile)
    check_args(
        inv,
        collect_step=collect_step,
        to=to,
        role=role,
        merge_step=merge_step,
        on=on,
        target=target,
    )
    if collect_step is not None:
        assert to is not None
        return run_ckpt_collect(inv, root, collect_step, to, role=role, as_json=as_json)
    if merge_step is not None:
        assert on is not None and target is not None
        return run_ckpt_merge(
            inv,
            root,
            merge_step,
            on,
            target,
            role=role or "actor",
            backend=backend,
            as_json=as_json,
        )
    return run_ckpt_list(inv, root, as_json=as_json)


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", metavar="DIR", help="the checkpoint folder (absolute)")
    p.add_argument(
        "--profile",
        type=Path,
        metavar="PROFILE.yaml",
        help="take the folder from the profile's trainer.default_local_dir",
    )
    p.add_argument(
        "--collect", type=int, metavar="STEP", help="copy this step's missing files onto --to HOST"
    )
    p.add_argument("--to", metavar="HOST", help="the host --collect copies onto")
    p.add_argument(
        "--role",
        metavar="ROLE",
        help="only this role's folder (collect: default the whole step; merge: default actor)",
    )
    p.add_argument(
        "--merge",
        type=int,
        metavar="STEP",
        help="merge this step into a Hugging Face model on --on HOST, written to --target DIR",
    )
    p.add_argument("--on", metavar="HOST", help="the host --merge runs verl's merger on")
    p.add_argument(
        "--target", metavar="DIR", help="the folder --merge writes the model to, on that host"
    )
    p.add_argument(
        "--backend",
        choices=("fsdp", "megatron"),
        help="merger backend (default: the checkpoint's layout)",
    )
    p.add_argument("--json", action="store_true", help="JSON output")


def _run_args(a: argparse.Namespace) -> int:
    return run_ckpt(
        a.inventory,
        directory=a.dir,
        profile=a.profile,
        as_json=a.json,
        collect_step=a.collect,
        to=a.to,
        role=a.role,
        merge_step=a.merge,
        on=a.on,
        target=a.target,
        backend=a.backend,
    )


CKPT = Command(
    _arguments,
    _run_args,
    hosts="optional",
    usage="verl-tui ckpt [-h] [HOSTS.yaml] (--dir DIR | --profile PROFILE.yaml) [--json]\n"
    "       verl-tui ckpt [-h] [HOSTS.yaml] (--dir DIR | --profile PROFILE.yaml)\n"
    "                --collect STEP --to HOST [--role ROLE] [--json]\n"
    "       verl-tui ckpt [-h] [HOSTS.yaml] (--dir DIR | --profile PROFILE.yaml)\n"
    "                --merge STEP --on HOST --target DIR [--backend {fsdp,megatron}]\n"
    "                [--role ROLE] [--json]",
    description="A job's checkpoints (trainer.default_local_dir) on every host: each "
    "global_step_N, its world size, which ranks each host holds, whether all exist somewhere. "
    "--collect copies a step's missing files onto one host (relayed over SSH, sha256-checked, "
    "never overwriting); --merge runs verl's model merger there.",
)
