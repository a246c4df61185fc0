"""`verl-tui profile import|export`: a launch script into a profile, a profile into a launch
script (ray job submit, Slurm, dstack). Headless, one report, plain exit codes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from tui.commands import Command
from tui.config.yamlfile import ConfigError, read_text
from tui.jobs.exporter import DEFAULT_ADDRESS, EXPORTERS, to_dstack, to_ray_job_submit, to_sbatch
from tui.jobs.importer import ImportResult, ScriptLimitError, import_script
from tui.jobs.profiles import Profile, entry_note, load_profile, profile_to_yaml
from tui.state import StateError, write_output_file

EXIT_OK, EXIT_NO_COMMAND, EXIT_BAD_INPUT = 0, 1, 2


def format_report(result: ImportResult, script: Path, output: Path | None) -> str:
    """What mapped, every line that did not (`script:LINE: text — reason`), and every
    unresolved variable with where it came from."""
    p = result.profile
    rt = p.runtime_env
    out: list[str] = []
    if result.command_line is None:
        out.append(
            f"{script}: no `python -m verl.trainer.main_ppo` command found (nor another verl "
            "entry point)"
        )
    else:
        dest = f" → {output}" if output is not None else ""
        out.append(
            f"{script}:{result.command_line}: verl command imported as profile {p.name!r}{dest}"
        )
        out.append(f"  overrides: {len(p.overrides)}")
        if rt.env_vars:
            out.append(f"  env_vars: {', '.join(sorted(rt.env_vars))}")
        if rt.working_dir:
            excl = f" (excludes: {', '.join(rt.excludes)})" if rt.excludes else ""
            out.append(f"  working_dir: {rt.working_dir}{excl}")
        if p.python:
            out.append(f"  python: {p.python}")
        if entry_note(p):  # another entry point than main_ppo: the job runs it
            out.append(f"  entrypoint: -m {p.entrypoint}")
        if p.config_name or p.config_path:
            own = "the entry point's own" if entry_note(p) else "ppo_trainer"
            out.append(
                f"  config: {p.config_name or own}"
                + (f" in {p.config_path}" if p.config_path else "")
            )
    if result.refused:
        out.append(f"refused by verl as bash passes them ({len(result.refused)}):")
        out += [f"  {script}:{u.line}: {u.text} — {u.reason}" for u in result.refused]
    if result.assumed:
        out.append(f"assumed ({len(result.assumed)}):")
        out += [f"  {script}:{a.line}: {a.text} → {a.value} — {a.why}" for a in result.assumed]
    if result.unmapped:
        out.append(f"not imported ({len(result.unmapped)}):")
        out += [f"  {script}:{u.line}: {u.text} — {u.reason}" for u in result.unmapped]
    if result.unresolved_vars:
        out.append(
            f"unknown until the script runs, kept as written ({len(result.unresolved_vars)}): "
            "set these in the profile before submitting"
        )
        for name in result.unresolved_vars:
            note = result.var_notes.get(name, "")
            out.append(f"  {name}" + (f" — {note}" if note else ""))
    return "\n".join(out)


def run_import(
    script: Path,
    output: Path,
    *,
    force: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Import SCRIPT into the profile OUTPUT (written atomically; an existing OUTPUT only with
    `force`, and only a regular file). 0: written (warnings included), 1: the script has no
    verl command (nothing written), 2: unreadable input, an existing or unwritable output."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if os.path.lexists(output) and not force:  # said before any work; checked again at write
        print(f"{output}: exists already; pass --force to replace it", file=stderr)
        return EXIT_BAD_INPUT
    try:
        # The one safe reader: a FIFO/device/folder, a huge file, non-UTF-8 or control
        # characters end in one line naming the file (and line), never a hang.
        text = read_text(script)
    except ConfigError as exc:
        print(str(exc), file=stderr)
        return EXIT_BAD_INPUT
    with contextlib.suppress(OSError):
        if output.exists() and output.resolve() == script.resolve():
            print(f"{output}: is the script being imported; choose another output", file=stderr)
            return EXIT_BAD_INPUT
    # $(pwd) in a script is where it runs: taken as where the import runs (said in the report).
    try:
        result = import_script(text, source=str(script), cwd=os.getcwd())
    except ScriptLimitError as exc:  # nesting, size, integer bounds: one line with file:line
        print(str(exc), file=stderr)
        return EXIT_BAD_INPUT
    if result.command_line is None:
        print(format_report(result, script, None), file=stderr)
        return EXIT_NO_COMMAND
    try:
        write_output_file(output, profile_to_yaml(result.profile), replace=force)
    except StateError as exc:
        print(f"{exc}" + ("" if force else "; pass --force to replace it"), file=stderr)
        return EXIT_BAD_INPUT
    print(format_report(result, script, output), file=stdout)
    return EXIT_OK


def render(
    profile: Profile,
    kind: str,
    *,
    nodes: int,
    gpus_per_node: int,
    address: str = DEFAULT_ADDRESS,
    sbatch: dict[str, Any] | None = None,
) -> str:
    """The launch script of one kind (ray-job, sbatch, dstack) for a profile; `sbatch`: the
    Slurm options of to_sbatch (partition, time, account, cpus_per_task)."""
    if kind == "ray-job":
        return to_ray_job_submit(profile, address=address)
    if kind == "sbatch":
        return to_sbatch(profile, nodes=nodes, gpus_per_node=gpus_per_node, **(sbatch or {}))
    if kind == "dstack":
        return to_dstack(profile, nodes=nodes, gpus_per_node=gpus_per_node)
    raise ValueError(f"unknown format {kind!r}: choose one of {', '.join(EXPORTERS)}")


def run_export(
    profile_path: Path,
    kind: str,
    output: Path | None,
    *,
    nodes: int,
    gpus_per_node: int,
    address: str = DEFAULT_ADDRESS,
    sbatch: dict[str, Any] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Write the profile as a ray-job / sbatch / dstack launch file (stdout when no output).
    0: written, 2: bad profile or arguments (one line naming file:line or the argument)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if kind not in EXPORTERS:
        print(f"--format: {kind!r} is not one of {', '.join(EXPORTERS)}", file=stderr)
        return EXIT_BAD_INPUT
    if nodes < 1 or gpus_per_node < 1:
        print("--nodes and --gpus-per-node must be at least 1", file=stderr)
        return EXIT_BAD_INPUT
    try:
        profile = load_profile(profile_path)
    except ConfigError as exc:
        print(str(exc), file=stderr)
        return EXIT_BAD_INPUT
    try:
        text = render(
            profile, kind, nodes=nodes, gpus_per_node=gpus_per_node, address=address, sbatch=sbatch
        )
    except ValueError as exc:
        print(f"{profile_path}: {exc}", file=stderr)
        return EXIT_BAD_INPUT
    if output is None:
        stdout.write(text)
        return EXIT_OK
    try:
        # Executable for the scripts the user runs next.
        write_output_file(output, text, 0o777 if kind in ("ray-job", "sbatch") else 0o666)
    except StateError as exc:
        print(str(exc), file=stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {output} ({kind})", file=stderr)
    return EXIT_OK


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "script", type=Path, metavar="SCRIPT.sh", help="a shell script that runs verl's main_ppo"
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        metavar="PROFILE.yaml",
        help="the profile to write (atomically; a new file unless --force)",
    )
    p.add_argument(
        "--force", action="store_true", help="replace PROFILE.yaml when it exists already"
    )


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", type=Path, metavar="PROFILE.yaml", help="the profile file")
    p.add_argument(
        "--format",
        choices=tuple(EXPORTERS),
        default="ray-job",
        help="the launcher to write (default ray-job)",
    )
    p.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="where to write it (default: stdout)"
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes to allocate (sbatch, dstack: trainer.nnodes follows; default 1)",
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=8,
        help="GPUs per node to allocate (sbatch, dstack; default 8)",
    )
    for flag, what in (
        ("--partition", "Slurm partition (sbatch)"),
        ("--time", "Slurm time limit, e.g. 04:00:00 (sbatch)"),
        ("--account", "Slurm account (sbatch)"),
    ):
        p.add_argument(flag, help=what)
    p.add_argument(
        "--cpus-per-task",
        type=int,
        help="CPUs per node for Ray (sbatch; default max(8, 4 x GPUs per node))",
    )


def _sbatch_options(a: argparse.Namespace) -> dict[str, Any]:
    keys = ("partition", "time", "account", "cpus_per_task")
    return {k: getattr(a, k) for k in keys if getattr(a, k) is not None}


IMPORT = Command(
    _import_arguments,
    lambda a: run_import(a.script, a.output, force=a.force),
    description="Read a shell script that runs main_ppo into a profile: its "
    "overrides, environment and launcher settings, with a report of what was "
    "kept and what was not. Exit 0: written; 1: no verl command in the script; "
    "2: bad input.",
)
EXPORT = Command(
    _export_arguments,
    lambda a: run_export(
        a.profile,
        a.format,
        a.output,
        nodes=a.nodes,
        gpus_per_node=a.gpus_per_node,
        sbatch=_sbatch_options(a),
    ),
    description="Write a profile as a launch script: `ray job submit`, a Slurm "
    "sbatch file, or a dstack task. Exit 0: written; 2: bad input.",
)
