"""`verl-tui submit | jobs | stop`: Ray jobs through the head's Jobs API, over the tunnel."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tui.cluster.dashboard import check_job_id
from tui.cluster.ray_cluster import RayCluster
from tui.commands import Command
from tui.commands.jobs_table import jobs_table, running_stalls
from tui.commands.output import json_text
from tui.commands.present import fail, fail_with
from tui.commands.ray import _run, _with_cluster
from tui.commands.submit_output import submit_through_flow
from tui.config.hosts import Inventory
from tui.config.yamlfile import ConfigError
from tui.errors import VerlTuiError
from tui.jobs.flow import Mode, Request
from tui.jobs.history import JobHistory
from tui.jobs.secrets import MissingSecret, resolve
from tui.jobs.service import TERMINAL, list_jobs, stop_job
from tui.jobs.submit import Submission, env_sources, raw_submission
from tui.logs.retriable import help_text as retriable_help
from tui.sanitize import one_line
from tui.supervisor.policy import RetryPolicy, parse_policy


def parse_env(pairs: list[str]) -> dict[str, str]:
    """--env NAME=VALUE, or --env NAME: the value of $NAME here (a secret then never appears
    on a command line)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if (
            not key
            or not (key[0].isalpha() or key[0] == "_")
            or not key.replace("_", "a").isalnum()
        ):
            raise ConfigError(f"--env {pair!r}: expected NAME=VALUE or NAME")
        if not sep:
            if key not in os.environ:
                raise ConfigError(f"--env {key}: ${key} is not set in this environment")
            value = os.environ[key]
        out[key] = value
    return out


def run_submit_raw(
    inv: Inventory,
    command: list[str],
    *,
    env: Mapping[str, str],
    working_dir: str | None,
    excludes: list[str],
    submission_id: str | None,
    dry_run: bool,
    as_json: bool,
    queue: bool = False,
    priority: int = 0,
    retry_policy: RetryPolicy | None = None,
) -> int:
    if submission_id is not None:
        check_job_id(submission_id, "--submission-id")
    try:
        sub = raw_submission(
            command,
            env={**inv.ray.env, **env},
            working_dir=working_dir,
            excludes=excludes,
            submission_id=submission_id,
            secret_extra=inv.secret_env,
            env_sources=env_sources(inv, None, env),
            python=inv.head.python,
        )
    except ValueError as exc:  # the command's own arguments (its env, working_dir)
        return fail_with("verl-tui submit", str(exc), kind="bad_input")
    # A raw command: no size known, a queued one waits only for its turn; a dry run needs no
    # host, a queued one the head (the cluster's queue is there).
    request = Request(
        sub,
        mode=_mode(dry_run, queue),
        priority=priority,
        retry_policy=retry_policy.to_json() if retry_policy else None,
    )
    return submit_through_flow(inv, request, as_json=as_json, cluster=not dry_run)


def _mode(dry_run: bool, queue: bool) -> Mode:
    return "dry_run" if dry_run else "queue" if queue else "send"


def run_jobs(inv: Inventory, *, as_json: bool, owner: str | None = None) -> int:
    """`owner`: only that owner's jobs (`mine`: this account's; None: everyone's)."""
    from tui.jobs.owner import owner_filter

    only = owner_filter(owner)

    async def body(cluster: RayCluster) -> int:
        history = JobHistory(inv.cluster)
        try:
            rows = await list_jobs(cluster, history)
        except VerlTuiError as exc:
            return fail(exc, "verl-tui jobs")
        if only is not None:
            rows = [r for r in rows if r.owner == only]
        for problem in history.problems:  # damaged records: listed without, each named once
            print(f"verl-tui jobs: warning: {problem}", file=sys.stderr)
        stalls = running_stalls(inv.cluster, rows, warn=sys.stderr)
        if as_json:  # Ray's status stays the job's status; a stall is its own object
            from tui.supervisor.health_duty import health_shown  # training-health alerts

            health = health_shown(inv.cluster, rows, warn=sys.stderr)
            docs = [
                {**r.to_json(), "stall": stalls.get(r.submission_id)}
                | {"health": health.get(r.submission_id, [])}
                for r in rows
            ]
            print(json_text({"jobs": docs}, inv))
        else:
            print(jobs_table(rows, stalls))
        return 0

    return _run(_with_cluster(inv, body))


def run_stop(inv: Inventory, job: str, *, wait: float = 30.0, force: bool = False) -> int:
    check_job_id(job, "SUBMISSION_ID")  # before anything is sent: bad id → exit 2

    async def body(cluster: RayCluster) -> int:
        from tui.jobs.owner import me, owner_of_metadata

        try:
            if not force:
                client = await cluster.dashboard()
                owner = owner_of_metadata((await client.job_info(job)).get("metadata"))
                if owner is not None and owner != me():
                    return fail_with(
                        "verl-tui stop",
                        f"{job} was submitted by {owner}, not you ({me()})",
                        kind="refused",
                        title="not your job",
                        hint="--force stops it anyway",
                    )
            status = await stop_job(cluster, job, JobHistory(inv.cluster), wait=wait)
        except VerlTuiError as exc:
            return fail(exc, "verl-tui stop")
        print(f"{job}: {status}")
        return 0 if status in TERMINAL else 1

    return _run(_with_cluster(inv, body))


def resolve_working_dir(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ConfigError(f"--working-dir {value}: not a directory")
    return str(path.resolve())


DRY_RUN_RAY_WAIT_S = 10.0


def run_submit_profile(
    inv: Inventory,
    profile_path: Path,
    *,
    sets: list[str],
    env: Mapping[str, str],
    working_dir: str | None,
    excludes: list[str],
    submission_id: str | None,
    post_mortem: bool,
    legacy_debug: bool,
    dry_run: bool,
    as_json: bool,
    print_config: bool = False,
    queue: bool = False,
    priority: int = 0,
    retry_policy: RetryPolicy | None = None,
    skip_preflight: bool = False,
) -> int:
    """Through the one submission flow (tui/jobs/flow.py), like the form. A dry run asks Ray
    too, so what it prints carries the sizes the cluster gives; without Ray it says so and
    checks without the cluster. The job preflight runs for a direct submit, a queued one and a
    dry run alike (whose exit status then says whether the real submit would go)."""
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.profiles import load_profile, resolve_profile
    from tui.jobs.verl_source import select_verl_sync

    if submission_id is not None:
        check_job_id(submission_id, "--submission-id")
    profile_path, note = resolve_profile(profile_path)  # a file, or a preset's name
    if note:
        print(f"verl-tui submit: {note}", file=sys.stderr)
    profile = load_profile(profile_path)  # ConfigError: one line, exit 2 (cli.main)
    # --retries wins over the profile's retries: key (both validated where they were read).
    retry_policy = retry_policy or policy_of_profile(profile, profile_path)
    # The job composes with the cluster's own verl (read from the head, cached by version);
    # SchemaError (exit 2) when neither the cluster nor this Python has verl.
    source = select_verl_sync(inv)
    if source.note:
        print(f"verl-tui submit: warning: {source.note}", file=sys.stderr)
    spec = JobSpec(
        profile,
        sets=list(sets),
        env=dict(env),
        working_dir=working_dir,
        excludes=list(excludes),
        post_mortem=post_mortem or None,
        legacy_debug=legacy_debug or None,
        print_config=print_config,
        submission_id=submission_id,
    )
    request = Request(
        spec,
        mode=_mode(dry_run, queue),
        skip_preflight=skip_preflight,
        profile_path=str(profile_path.resolve()),
        priority=priority,
        retry_policy=retry_policy.to_json() if retry_policy else None,
        ray_wait_s=DRY_RUN_RAY_WAIT_S,
    )
    return submit_through_flow(inv, request, as_json=as_json, profile_path=profile_path)


def policy_of_profile(profile: Any, path: Path) -> RetryPolicy | None:
    """A profile's `retries:` / `retry_on:` as a policy (ConfigError naming the file)."""
    try:
        return parse_policy(
            getattr(profile, "retries", None), getattr(profile, "retry_on", None), where=str(path)
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def resubmission(
    inv: Inventory,
    job: str,
    *,
    submission_id: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[Submission, str | None]:
    """A recorded job again, as (Submission, profile_path): its exact entrypoint and env, each
    secret taken from the current environment (or the file it came from); ConfigError (one
    line, naming the variable) when a secret is set nowhere."""
    from tui.jobs.submit import readable_id

    check_job_id(job, "--resubmit")
    rec = JobHistory(inv.cluster).get(job)
    if rec is None:
        raise ConfigError(
            f"--resubmit {job}: not in this machine's job history of "
            f"{inv.cluster} (verl-tui jobs lists them)"
        )
    rt = rec.runtime_env if isinstance(rec.runtime_env, dict) else {}
    fallback = dict(inv.ray.env)
    if rec.profile_path:
        try:
            from tui.jobs.profiles import load_profile

            fallback.update(
                {
                    k: str(v)
                    for k, v in load_profile(Path(rec.profile_path)).runtime_env.env_vars.items()
                }
            )
        except ConfigError:
            pass  # the profile is gone or broken: the environment must hold its secrets
    env_vars = rt.get("env_vars")
    recorded: dict[str, Any] = env_vars if isinstance(env_vars, dict) else {}
    try:
        env = resolve(recorded, environ, fallback)
    except MissingSecret as exc:
        names = ", ".join(f"${n}" for n in exc.names)
        raise ConfigError(
            f"--resubmit {job}: secret {names} is not set in this environment "
            "(export it and run again)"
        ) from None
    try:
        argv = shlex.split(rec.entrypoint)
    except ValueError:
        raise ConfigError(f"--resubmit {job}: its recorded entrypoint cannot be read") from None
    wd = rt.get("working_dir")
    if wd is not None and not (isinstance(wd, str) and Path(wd).is_dir()):
        raise ConfigError(
            f"--resubmit {job}: its working_dir {one_line(str(wd), 200)} is not a directory here"
        )
    excludes = [str(x) for x in rt.get("excludes") or []]
    sources = {
        r["name"]: r["from"]
        for r in recorded.values()
        if isinstance(r, dict) and isinstance(r.get("name"), str)
    }
    stem = rec.profile or (Path(argv[0]).name if argv else "job")
    sid = check_job_id(submission_id, "--submission-id") if submission_id else readable_id(stem)
    sub = Submission(
        submission_id=sid,
        entrypoint_argv=argv,
        env_vars=env,
        working_dir=wd,
        excludes=excludes,
        metadata={
            k: str(v)
            for k, v in {
                "verl_tui": None,
                "profile": rec.profile,
                "config_hash": rec.config_hash,
                "resubmit_of": job,
            }.items()
            if v is not None
        },
        profile=rec.profile,
        overrides=list(rec.overrides),
        config_hash=rec.config_hash,
        secret_extra=tuple(inv.secret_env),
        env_sources={k: sources.get(k, "env") for k in env},
    )
    from tui import __version__

    sub.metadata["verl_tui"] = __version__
    return sub, rec.profile_path


def run_resubmit(
    inv: Inventory,
    job: str,
    *,
    submission_id: str | None,
    dry_run: bool,
    as_json: bool,
    skip_preflight: bool = False,
) -> int:
    sub, profile_path = resubmission(inv, job, submission_id=submission_id)
    # A dry run runs the same preflight as the real resubmit (it needs SSH, not Ray).
    request = Request(
        sub, mode=_mode(dry_run, False), skip_preflight=skip_preflight, profile_path=profile_path
    )
    return submit_through_flow(inv, request, as_json=as_json)


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _submit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "profile",
        nargs="?",
        type=Path,
        metavar="PROFILE",
        help="a profile file or a preset's name (verl-tui profile list)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a verl config key (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="environment variable for the job (repeatable; K alone takes $K)",
    )
    p.add_argument("--working-dir", metavar="DIR", help="local directory to upload")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="working_dir exclude pattern (repeatable)",
    )
    p.add_argument(
        "--submission-id", metavar="ID", help="the job's submission id (default: Ray picks one)"
    )
    p.add_argument(
        "--resubmit",
        metavar="SUBMISSION_ID",
        help="submit a job from the local history again (its secrets from this environment)",
    )
    p.add_argument(
        "--post-mortem",
        action="store_true",
        help="RAY_DEBUG_POST_MORTEM=1: failing tasks wait for a debugger",
    )
    p.add_argument(
        "--legacy-debug",
        action="store_true",
        help="RAY_DEBUG=legacy: breakpoint() waits for `verl-tui debug`'s pdb",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the equivalent `ray job submit` command and run the job preflight, submit "
        "nothing; exit 1 when the real submit would be refused",
    )
    p.add_argument(
        "--skip-preflight",
        action="store_true",
        help="send a verl job although the job preflight (data, model, imports, host limits "
        "on every host) fails; with --dry-run: do not run it (said on stderr)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="run main_ppo --cfg job: the cluster's verl prints the composed config "
        "and exits (no GPU needed)",
    )
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--queue",
        action="store_true",
        help="validate now, then wait in the local queue until the GPUs are free "
        "(a supervisor submits it: the cockpit or `verl-tui watch`)",
    )
    p.add_argument(
        "--retries",
        metavar="N",
        help="retry a failed run up to N times when its log shows a cluster failure, from its "
        "latest complete checkpoint (a supervisor does it: the cockpit or `verl-tui watch`)",
    )
    p.add_argument(
        "--retry-on",
        metavar="SIG,...",
        help=f"only these failures are retried (default: all): {retriable_help()}",
    )
    p.add_argument(
        "--priority",
        type=int,
        default=0,
        metavar="N",
        help="with --queue: higher goes first (default 0; equal: first come first)",
    )


def _submit(args: argparse.Namespace) -> int:
    inv = args.inventory
    try:
        policy = parse_policy(args.retries, args.retry_on, where="--retries")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if (args.retries or args.retry_on) and (args.resubmit or args.dry_run):
        raise ConfigError("--retries goes with a PROFILE or a command, not --resubmit/--dry-run")
    if args.priority and not args.queue:
        raise ConfigError("--priority goes with --queue")
    if args.queue and (args.resubmit or args.dry_run):
        raise ConfigError("--queue goes with a PROFILE or a command, not --resubmit/--dry-run")
    if args.resubmit:
        if args.command or args.profile is not None:
            raise ConfigError("give --resubmit ID alone, not with a PROFILE or a command")
        return run_resubmit(
            inv,
            args.resubmit,
            submission_id=args.submission_id,
            dry_run=args.dry_run,
            as_json=args.json,
            skip_preflight=args.skip_preflight,
        )
    if args.command:
        if args.profile is not None:
            raise ConfigError("give either a PROFILE or a command after --, not both")
        return run_submit_raw(
            inv,
            args.command,
            env=parse_env(args.env),
            working_dir=resolve_working_dir(args.working_dir),
            excludes=args.exclude,
            submission_id=args.submission_id,
            dry_run=args.dry_run,
            as_json=args.json,
            queue=args.queue,
            priority=args.priority,
            retry_policy=policy,
        )
    if args.profile is None:
        raise ConfigError("nothing to submit: give a PROFILE or -- COMMAND ARGS...")
    return run_submit_profile(
        inv,
        args.profile,
        sets=args.set,
        env=parse_env(args.env),
        working_dir=resolve_working_dir(args.working_dir),
        excludes=args.exclude,
        submission_id=args.submission_id,
        post_mortem=args.post_mortem,
        legacy_debug=args.legacy_debug,
        dry_run=args.dry_run,
        as_json=args.json,
        print_config=args.print_config,
        queue=args.queue,
        priority=args.priority,
        retry_policy=policy,
        skip_preflight=args.skip_preflight,
    )


SUBMIT = Command(
    _submit_arguments,
    _submit,
    hosts="required",
    dashdash_command=True,
    usage="verl-tui submit [-h] HOSTS.yaml PROFILE [--set KEY=VALUE ...] [--env K=V ...]\n"
    "                [--working-dir DIR] [--exclude PATTERN ...] [--submission-id ID]\n"
    "                [--post-mortem] [--legacy-debug] [--print-config] [--dry-run] [--json]\n"
    "                [--skip-preflight]\n"
    "                [--queue [--priority N]] [--retries N [--retry-on SIG,...]]\n"
    "       verl-tui submit [-h] HOSTS.yaml [--env K=V ...] [--working-dir DIR]\n"
    "                [--exclude PATTERN ...] [--submission-id ID] [--dry-run] [--json]\n"
    "                -- COMMAND ARGS...\n"
    "       verl-tui submit [-h] HOSTS.yaml --resubmit SUBMISSION_ID [--submission-id ID]\n"
    "                [--dry-run] [--json] [--skip-preflight]",
    description="Submit a verl profile (a file or a preset's name), or any command given after "
    "--, as a Ray job through the head's Jobs API over SSH; --resubmit sends a job of the "
    "local history again. The profile is validated against verl's rules and the live cluster, "
    "and the job preflight asks every host for its data, model, verl's imports and limits "
    "first: exit 1 with the problems, nothing submitted.",
)


def _owner_arg(text: str) -> str:
    from tui.jobs.owner import check_owner

    try:
        return check_owner(text, "--owner")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _jobs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")
    who = p.add_mutually_exclusive_group()
    who.add_argument(
        "--mine", action="store_true", help="only the jobs this account (user@host) submitted"
    )
    who.add_argument(
        "--owner", type=_owner_arg, metavar="USER@HOST", help="only the jobs USER@HOST submitted"
    )


def _stop_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "job", metavar="SUBMISSION_ID", help="the job to stop (verl-tui jobs lists them)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="stop another user's job (refused without it: exit 3)",
    )


JOBS = Command(
    _jobs_arguments,
    lambda a: run_jobs(a.inventory, as_json=a.json, owner="mine" if a.mine else a.owner),
    hosts="required",
    description="Jobs on the cluster, every user's with its owner (user@host), with their "
    "profiles and configs from the local history.",
)
STOP = Command(
    _stop_arguments,
    lambda a: run_stop(a.inventory, a.job, force=a.force),
    hosts="required",
    description="Stop a job and wait until it stopped; another user's job only with --force.",
)
