"""`verl-tui` command line: the cockpit by default, headless subcommands for scripts.

Heavy modules (Textual, asyncssh) are imported only by the command that needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tui import __version__

SUBCOMMANDS = ("gpus", "check", "up", "down", "status", "tunnel")
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
    raise KeyError(name)


def _load(path: Path | None):
    from tui.config.hosts import load_inventory, local_inventory

    return local_inventory() if path is None else load_inventory(path)


def _dispatch(name: str, args: argparse.Namespace, inventory) -> int:
    if name == "gpus":
        from tui.commands.gpus import run_gpus

        return run_gpus(inventory, once=args.once, as_json=args.json,
                        interval=args.interval, timeout=args.timeout)
    if name == "check":
        from tui.commands.check import run_check

        return run_check(inventory, as_json=args.json, timeout=args.timeout)
    from tui.commands import ray

    if name == "up":
        return ray.run_up(inventory, restart=args.restart)
    if name == "down":
        return ray.run_down(inventory)
    if name == "status":
        return ray.run_status(inventory, as_json=args.json)
    return ray.run_tunnel(inventory)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    from tui.config.yamlfile import ConfigError

    try:
        if args_list and args_list[0] in SUBCOMMANDS:
            name = args_list[0]
            args = build_subparser(name).parse_args(args_list[1:])
            inventory = _load(args.hosts)
            return _dispatch(name, args, inventory)
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
