"""`verl-tui` command line: the cockpit by default, headless subcommands for scripts.

Heavy modules (Textual, asyncssh) are imported only by the command that needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tui import __version__

SUBCOMMANDS = ("gpus", "check", "up", "down", "status", "tunnel", "submit", "jobs", "stop",
               "logs", "debug", "profile", "ckpt", "explain")
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _hosts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("hosts", nargs="?", type=Path, metavar="HOSTS.yaml",
                   help="inventory file (default: this machine through a local transport)")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0.1 to 3600)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="verl-tui",
        description="Terminal cockpit for multi-node verl training on Ray. "
        "Without a subcommand, opens the cockpit.",
        epilog="headless subcommands: " + ", ".join(SUBCOMMANDS)
        + " (verl-tui SUBCOMMAND --help)",
    )
    parser.add_argument("--version", action="version", version=f"verl-tui {__version__}")
    _hosts_arg(parser)
    return parser


def build_subparser(name: str) -> argparse.ArgumentParser:
    if name == "gpus":
        p = _Parser(prog="verl-tui gpus",
                    description="Print every host's GPUs: utilization, memory, temperature, power.",
                    )
        _hosts_arg(p)
        p.add_argument("--once", action="store_true", help="print one snapshot and exit")
        p.add_argument("--json", action="store_true", help="JSON output (one object per line)")
        p.add_argument("--interval", type=_positive_float, default=None,
                       help="seconds between samples (default: hosts.yaml telemetry.interval)")
        p.add_argument("--timeout", type=_positive_float, default=20.0,
                       help="seconds to wait for every host's first sample (default 20)")
        return p
    if name == "check":
        p = _Parser(prog="verl-tui check",
                    description="Preflight checks that catch what makes multi-node verl hang. "
                    "Exit 0: nothing fails; 1: something fails; 2: bad input.")
        _hosts_arg(p)
        p.add_argument("--json", action="store_true", help="JSON output")
        p.add_argument("--timeout", type=_positive_float, default=60.0,
                       help="seconds for the whole check (default 60)")
        return p
    if name == "up":
        p = _Parser(prog="verl-tui up",
                    description="Probe every host, check versions, start the Ray head, then all "
                    "workers in parallel, and wait until every node is ALIVE.")
        _hosts_arg(p)
        p.add_argument("--restart", action="store_true",
                       help="stop Ray everywhere first, then start it")
        return p
    if name == "down":
        p = _Parser(prog="verl-tui down",
                    description="Stop Ray on every worker, then the head; check nothing is left.")
        _hosts_arg(p)
        return p
    if name == "status":
        p = _Parser(prog="verl-tui status",
                    description="Nodes alive, their resources and versions (through the head's "
                    "dashboard, over SSH).")
        _hosts_arg(p)
        p.add_argument("--json", action="store_true", help="JSON output")
        return p
    if name == "tunnel":
        p = _Parser(prog="verl-tui tunnel",
                    description="Forward the head's loopback dashboard and jobs API here; "
                    "print the URL and hold until Ctrl-C.")
        _hosts_arg(p)
        return p
    if name == "submit":
        p = _Parser(prog="verl-tui submit",
                    usage="verl-tui submit HOSTS.yaml PROFILE.yaml [--set KEY=VALUE ...] "
                    "[--dry-run] [--json]\n       verl-tui submit HOSTS.yaml [--env K=V ...] "
                    "[--working-dir DIR] -- COMMAND ARGS...",
                    description="Submit a verl profile, or any command (after --), as a Ray job "
                    "through the head's Jobs API over SSH.")
        p.add_argument("hosts", type=Path, metavar="HOSTS.yaml")
        p.add_argument("profile", nargs="?", type=Path, metavar="PROFILE.yaml",
                       help="a profile file or a preset's name (verl-tui profile list)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a verl config key (repeatable)")
        p.add_argument("--env", action="append", default=[], metavar="K=V",
                       help="environment variable for the job (repeatable)")
        p.add_argument("--working-dir", metavar="DIR", help="local directory to upload")
        p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                       help="working_dir exclude pattern (repeatable)")
        p.add_argument("--submission-id", metavar="ID")
        p.add_argument("--resubmit", metavar="SUBMISSION_ID",
                       help="submit a job from the local history again (its secrets from "
                       "this environment)")
        p.add_argument("--post-mortem", action="store_true",
                       help="RAY_DEBUG_POST_MORTEM=1: failing tasks wait for a debugger")
        p.add_argument("--legacy-debug", action="store_true", help="RAY_DEBUG=legacy")
        p.add_argument("--dry-run", action="store_true",
                       help="print the equivalent `ray job submit` command, submit nothing")
        p.add_argument("--print-config", action="store_true",
                       help="run main_ppo --cfg job: the cluster's verl prints the composed "
                       "config and exits (no GPU needed)")
        p.add_argument("--json", action="store_true", help="JSON output")
        return p
    if name == "jobs":
        p = _Parser(prog="verl-tui jobs", description="Jobs on the cluster, with their profiles "
                    "and configs from the local history.")
        p.add_argument("hosts", type=Path, metavar="HOSTS.yaml")
        p.add_argument("--json", action="store_true", help="JSON output")
        return p
    if name == "stop":
        p = _Parser(prog="verl-tui stop", description="Stop a job and wait until it stopped.")
        p.add_argument("hosts", type=Path, metavar="HOSTS.yaml")
        p.add_argument("job", metavar="SUBMISSION_ID")
        return p
    if name == "logs":
        p = _Parser(prog="verl-tui logs",
                    usage="verl-tui logs HOSTS.yaml JOB [--follow]\n"
                    "       verl-tui logs HOSTS.yaml --node HOST [FILE] [--follow]",
                    description="Print a job's driver log (through the head's Jobs API), or list "
                    "and print a host's Ray session log files (over SSH). With --follow and a "
                    "job: exit 0 when it SUCCEEDED, 1 otherwise.")
        p.add_argument("hosts", type=Path, metavar="HOSTS.yaml")
        p.add_argument("job", nargs="?", metavar="JOB",
                       help="submission id (or, with --node, a log file name)")
        p.add_argument("--node", metavar="HOST", help="a host's Ray logs instead of a job's")
        p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
        return p
    if name == "debug":
        p = _Parser(prog="verl-tui debug",
                    description="Workers paused by post-mortem debugging (RAY_DEBUG_POST_MORTEM) "
                    "and legacy pdb breakpoints (RAY_DEBUG=legacy) of running jobs.")
        p.add_argument("hosts", type=Path, metavar="HOSTS.yaml")
        p.add_argument("--json", action="store_true", help="JSON output")
        return p
    if name == "ckpt":
        p = _Parser(prog="verl-tui ckpt",
                    usage="verl-tui ckpt HOSTS.yaml (--dir DIR | --profile PROFILE.yaml) [--json]\n"
                    "       verl-tui ckpt HOSTS.yaml --dir DIR --collect STEP --to HOST "
                    "[--role ROLE]\n"
                    "       verl-tui ckpt HOSTS.yaml --dir DIR --merge STEP --on HOST "
                    "--target DIR [--backend fsdp|megatron] [--role actor]",
                    description="A job's checkpoints (trainer.default_local_dir) on every host: "
                    "each global_step_N, its world size, which ranks each host holds, whether "
                    "all exist somewhere. --collect copies a step's missing files onto one host "
                    "(relayed over SSH, sha256-checked, never overwriting); --merge runs verl's "
                    "model merger there.")
        _hosts_arg(p)
        p.add_argument("--dir", metavar="DIR", help="the checkpoint folder (absolute)")
        p.add_argument("--profile", type=Path, metavar="PROFILE.yaml",
                       help="take the folder from the profile's trainer.default_local_dir")
        p.add_argument("--collect", type=int, metavar="STEP", help="copy this step's missing "
                       "files onto --to HOST")
        p.add_argument("--to", metavar="HOST")
        p.add_argument("--role", metavar="ROLE", help="only this role's folder (collect: "
                       "default the whole step; merge: default actor)")
        p.add_argument("--merge", type=int, metavar="STEP", help="merge this step into a "
                       "Hugging Face model on --on HOST, written to --target DIR")
        p.add_argument("--on", metavar="HOST")
        p.add_argument("--target", metavar="DIR")
        p.add_argument("--backend", choices=("fsdp", "megatron"),
                       help="merger backend (default: the checkpoint's layout)")
        p.add_argument("--json", action="store_true", help="JSON output")
        return p
    if name == "profile":
        p = _Parser(prog="verl-tui profile",
                    description="Hyperparameter profiles: check, import from a shell script, "
                    "export as a launch script.")
        sub = p.add_subparsers(dest="action", required=True,
                               metavar="check|list|import|export", parser_class=_Parser)
        c = sub.add_parser("check", help="validate against verl's config and rules (and the "
                           "live cluster, with the cluster's verl, with --hosts)")
        c.add_argument("profile", type=Path, metavar="PROFILE",
                       help="a profile file or a preset's name (verl-tui profile list)")
        c.add_argument("--hosts", type=Path, metavar="HOSTS.yaml")
        c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        c.add_argument("--json", action="store_true")
        lst = sub.add_parser("list", help="the presets and your profiles: name, algorithm, "
                             "nodes×GPUs, description")
        lst.add_argument("--json", action="store_true")
        i = sub.add_parser("import", help="read a shell script that runs main_ppo")
        i.add_argument("script", type=Path, metavar="SCRIPT.sh")
        i.add_argument("-o", "--output", type=Path, required=True, metavar="PROFILE.yaml")
        e = sub.add_parser("export", help="write a ray job submit / sbatch / dstack launcher")
        e.add_argument("profile", type=Path, metavar="PROFILE.yaml")
        e.add_argument("--format", choices=("ray-job", "sbatch", "dstack"), default="ray-job")
        e.add_argument("-o", "--output", type=Path, metavar="FILE")
        e.add_argument("--nodes", type=int, default=1)
        e.add_argument("--gpus-per-node", type=int, default=8)
        return p
    if name == "explain":
        p = _Parser(prog="verl-tui explain",
                    description="Known failures in a saved log (a driver log, a worker's .err, a "
                    "Slurm output file): each finding with its line number, severity and hint, "
                    "from the same signatures as the log pane. Exit 0: no error found; 1: "
                    "errors found; 2: bad input (missing or unreadable file, a directory, a "
                    "FIFO).")
        p.add_argument("logfile", metavar="LOGFILE", help="the log file, or - for stdin")
        p.add_argument("--json", action="store_true",
                       help='JSON output: {"findings": [{"line", "text", "severity", "hint"}]}')
        return p
    raise KeyError(name)


def _load(path: Path | None):
    from tui.commands.output import insecure_warning
    from tui.config.hosts import load_inventory, local_inventory

    inventory = local_inventory() if path is None else load_inventory(path)
    warning = insecure_warning(inventory)
    if warning:  # every command that reads a hosts file says it, before anything else
        print(warning, file=sys.stderr, flush=True)
    return inventory


def _dispatch(name: str, args: argparse.Namespace, inventory) -> int:
    from tui.config.yamlfile import ConfigError

    if name == "gpus":
        from tui.commands.gpus import run_gpus

        return run_gpus(inventory, once=args.once, as_json=args.json,
                        interval=args.interval, timeout=args.timeout)
    if name == "check":
        from tui.commands.check import run_check

        return run_check(inventory, as_json=args.json, timeout=args.timeout)
    if name in ("submit", "jobs", "stop", "profile"):
        from tui.commands import jobs

        if name == "jobs":
            return jobs.run_jobs(inventory, as_json=args.json)
        if name == "stop":
            return jobs.run_stop(inventory, args.job)
        if args.resubmit:
            if args.command or args.profile is not None:
                raise ConfigError("give --resubmit ID alone, not with a PROFILE or a command")
            return jobs.run_resubmit(inventory, args.resubmit, submission_id=args.submission_id,
                                     dry_run=args.dry_run, as_json=args.json)
        if args.command:
            if args.profile is not None:
                raise ConfigError("give either a PROFILE or a command after --, not both")
            return jobs.run_submit_raw(
                inventory, args.command, env=jobs.parse_env(args.env),
                working_dir=jobs.resolve_working_dir(args.working_dir), excludes=args.exclude,
                submission_id=args.submission_id, dry_run=args.dry_run, as_json=args.json)
        if args.profile is None:
            raise ConfigError("nothing to submit: give a PROFILE.yaml or -- COMMAND ARGS...")
        return jobs.run_submit_profile(
            inventory, args.profile, sets=args.set, env=jobs.parse_env(args.env),
            working_dir=jobs.resolve_working_dir(args.working_dir), excludes=args.exclude,
            submission_id=args.submission_id, post_mortem=args.post_mortem,
            legacy_debug=args.legacy_debug, dry_run=args.dry_run, as_json=args.json,
            print_config=args.print_config)
    if name == "logs":
        from tui.commands.logs import run_job_logs, run_node_logs

        if args.node:
            return run_node_logs(inventory, args.node, args.job, follow=args.follow)
        if not args.job:
            raise ConfigError("give a JOB (verl-tui jobs lists them) or --node HOST")
        return run_job_logs(inventory, args.job, follow=args.follow)
    if name == "debug":
        from tui.commands.debug import run_debug

        return run_debug(inventory, as_json=args.json)
    if name == "ckpt":
        from tui.commands.ckpt import run_ckpt

        return run_ckpt(inventory, directory=args.dir, profile=args.profile, as_json=args.json,
                        collect_step=args.collect, to=args.to, role=args.role,
                        merge_step=args.merge, on=args.on, target=args.target,
                        backend=args.backend)
    from tui.commands import ray

    if name == "up":
        return ray.run_up(inventory, restart=args.restart)
    if name == "down":
        return ray.run_down(inventory)
    if name == "status":
        return ray.run_status(inventory, as_json=args.json)
    return ray.run_tunnel(inventory)


def _profile(args: argparse.Namespace) -> int:
    if args.action == "list":
        from tui.commands.profile import run_profile_list

        return run_profile_list(as_json=args.json)
    if args.action == "check":
        from tui.commands.profile import run_profile_check

        hosts = _load(args.hosts) if args.hosts else None
        return run_profile_check(args.profile, hosts=hosts, sets=args.set, as_json=args.json)
    from tui.commands import profile_io

    if args.action == "import":
        return profile_io.run_import(args.script, args.output)
    return profile_io.run_export(args.profile, args.format, args.output, nodes=args.nodes,
                                 gpus_per_node=args.gpus_per_node)


def _headless(args_list: list[str]) -> int:
    from tui.config.yamlfile import ConfigError
    from tui.interrupts import exit_code, report_crash
    from tui.jobs.schema import SchemaError

    try:
        name = args_list[0]
        rest, command = args_list[1:], []
        if name == "submit" and "--" in rest:  # everything after -- is the job's command
            cut = rest.index("--")
            rest, command = rest[:cut], rest[cut + 1:]
        sub = build_subparser(name)
        # `logs HOSTS --node HOST FILE`: a positional may come after an option.
        args = sub.parse_intermixed_args(rest) if name == "logs" else sub.parse_args(rest)
        args.command = command
        if name == "profile":
            return _profile(args)
        if name == "explain":  # a local file: no inventory
            from tui.commands.explain import run_explain

            return run_explain(args.logfile, as_json=args.json)
        inventory = _load(args.hosts)
        return _dispatch(name, args, inventory)
    except (ConfigError, SchemaError) as exc:  # bad input, or verl/Hydra missing here
        print(f"verl-tui: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return exit_code() or 130
    except Exception as exc:  # last resort: a bug gets one line (traceback saved), exit 1
        print(report_crash(exc), file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    from tui.config.yamlfile import ConfigError

    if args_list and args_list[0] in SUBCOMMANDS:
        from tui.interrupts import exit_code, headless_signals

        # SIGINT/SIGTERM: exit 130/143, nothing else printed (tui/interrupts.py).
        from tui.sanitize import safe_output

        # Text output is cleaned in one place: whatever a host, a file or Ray sent, nothing
        # printed acts on the terminal (tui/sanitize.py SafeWriter).
        with headless_signals(), safe_output():
            code = _headless(args_list)
            return exit_code() or code
    try:
        args = build_parser().parse_args(args_list)
        inventory = _load(args.hosts)
    except ConfigError as exc:
        print(f"verl-tui: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130

    from tui.app import VerlTuiApp

    VerlTuiApp(inventory).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
