"""`verl-tui logs`: a job's log (or a host's Ray log file) printed here, optionally followed.

Exit status with --follow: 0 when the job SUCCEEDED, 1 when it failed or was stopped, so
scripts can wait on a job with it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.present import fail, fail_job, fail_with
from tui.commands.ray import _run, _with_cluster
from tui.config.yamlfile import ConfigError
from tui.errors import VerlTuiError
from tui.fmt import human_size

if TYPE_CHECKING:  # the services are imported where used: `verl-tui logs --help` stays light
    from tui.cluster.ray_cluster import RayCluster
    from tui.config.hosts import Inventory


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def run_job_logs(inv: Inventory, job: str, *, follow: bool) -> int:
    from tui.archive.follow import archived_log_chunks
    from tui.archive.store import ArchiveStore
    from tui.cluster.dashboard import check_job_id
    from tui.cluster.job_logs import JobLogEnd
    from tui.sanitize import one_line

    check_job_id(job, "JOB")  # before anything is sent: bad id → exit 2
    store = ArchiveStore(inv.cluster)  # a bad VERL_TUI_ARCHIVE_MAX: exit 2 here

    async def body(cluster: RayCluster) -> int:
        ends: list[JobLogEnd] = []
        try:
            # The head's Jobs API (archived as it streams), else the run archive, else the
            # head's old session directory (a job from before a Ray restart).
            async for chunk in archived_log_chunks(
                cluster, job, follow=follow, ends=ends, store=store
            ):
                _write(chunk)
        except VerlTuiError as exc:
            looked = "on the head, in the run archive, nor its log in an old session"
            return fail_job(exc, "verl-tui logs", job, looked=looked)
        finally:
            for warning in store.take_warnings():
                print(f"verl-tui logs: {one_line(warning, 300)}", file=sys.stderr)
        end = ends[-1] if ends else JobLogEnd(None)
        if follow:
            print(
                f"--- {job}: {end.status}" + (f" ({end.message})" if end.message else ""),
                file=sys.stderr,
            )
            return 0 if end.status == "SUCCEEDED" else 1
        return 0

    return _run(_with_cluster(inv, body))


def run_node_logs(inv: Inventory, host: str, name: str | None, *, follow: bool) -> int:
    from tui.cluster.node_logs import follow_log, list_logs, log_path

    if host not in {h.name for h in inv.hosts}:
        raise ConfigError(
            f"--node {host!r}: not a host of {inv.cluster} ({', '.join(h.name for h in inv.hosts)})"
        )

    async def body(cluster: RayCluster) -> int:
        try:
            transport = await cluster.fleet.ready(host, 20)
            if name is None:
                for f in await list_logs(transport):
                    print(f"{human_size(f.size):>8}  {f.kind:<10} {f.name}")
                return 0
            files = {f.name for f in await list_logs(transport)}
            if name not in files:
                return fail_with(
                    "verl-tui logs",
                    f"{host} has no log file {name!r}",
                    title="no such log file",
                    hint=f"verl-tui logs HOSTS --node {host} lists them",
                )
            if not follow:
                res = await transport.run(["cat", "--", log_path(name)], timeout=300)
                _write(res.stdout)
                return 0 if res.ok else 1
            proc = await follow_log(transport, name)
            try:
                async for line in proc.lines():
                    _write(line + "\n")
            finally:
                await proc.close()
        except (VerlTuiError, ValueError) as exc:  # ValueError: a log name that is no file's
            return fail(exc, "verl-tui logs")
        return 0

    return _run(_with_cluster(inv, body))


def run_grep(inv: Inventory, hosts: list[str], pattern: str, *, ignore_case: bool) -> int:
    """Every host's Ray session logs searched there at once; `host:file:line: text` per match
    (hosts in the file's order); 0 when something matched, 1 when nothing did."""
    from tui.cluster.node_logs import grep_logs

    async def body(cluster: RayCluster) -> int:
        found = await grep_logs(cluster.fleet, hosts, pattern, ignore_case=ignore_case)
        matched = 0
        for result in found:
            for m in result.matches:
                print(m)
                matched += 1
            if result.error:
                print(f"verl-tui logs: {result.host}: {result.error}", file=sys.stderr)
            for note in result.notes:
                print(f"verl-tui logs: {result.host}: {note}", file=sys.stderr)
        searched = sum(r.files for r in found)
        print(
            f"verl-tui logs: {matched} matching line(s) in {searched} file(s) on "
            f"{len(hosts)} host(s)",
            file=sys.stderr,
        )
        return 0 if matched else 1

    return _run(_with_cluster(inv, body))


def _hosts_of(inv: Inventory, names: list[str]) -> list[str]:
    known = [h.name for h in inv.hosts]
    for name in names:
        if name not in known:
            raise ConfigError(f"--node {name!r}: not a host of {inv.cluster} ({', '.join(known)})")
    return names or known


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "job",
        nargs="?",
        metavar="JOB",
        help="submission id (or, with --node, a log file name; without one, the "
        "host's files are listed)",
    )
    p.add_argument(
        "--node",
        metavar="HOST",
        action="append",
        default=[],
        help="a host's Ray logs instead of a job's (with --grep: repeatable, default all)",
    )
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument(
        "--grep",
        metavar="PATTERN",
        help="search every host's Ray session logs for a Python regex (each file's newest "
        "16 MiB, 128 MiB a host): host:file:line: text",
    )
    p.add_argument("-i", "--ignore-case", action="store_true", help="with --grep: case-insensitive")


def _run_args(args: argparse.Namespace) -> int:
    if args.grep is not None:
        from tui.cluster.node_logs import BadPattern, check_pattern

        if args.job or args.follow:
            raise ConfigError("--grep PATTERN goes alone (with --node HOST and -i)")
        try:
            check_pattern(args.grep, ignore_case=args.ignore_case)  # one line, exit 2
        except BadPattern as exc:
            raise ConfigError(f"--grep: {exc}") from None
        hosts = _hosts_of(args.inventory, args.node)
        return run_grep(args.inventory, hosts, args.grep, ignore_case=args.ignore_case)
    if args.ignore_case:
        raise ConfigError("-i goes with --grep PATTERN")
    if len(args.node) > 1:
        raise ConfigError("--node: one host (several go with --grep PATTERN)")
    if args.node:
        host = _hosts_of(args.inventory, args.node)[0]
        return run_node_logs(args.inventory, host, args.job, follow=args.follow)
    if not args.job:
        raise ConfigError("give a JOB (verl-tui jobs lists them) or --node HOST")
    return run_job_logs(args.inventory, args.job, follow=args.follow)


LOGS = Command(
    _arguments,
    _run_args,
    hosts="required",
    intermixed=True,
    usage="verl-tui logs [-h] HOSTS.yaml JOB [-f | --follow]\n"
    "       verl-tui logs [-h] HOSTS.yaml --node HOST [FILE] [-f | --follow]\n"
    "       verl-tui logs [-h] HOSTS.yaml --grep PATTERN [-i] [--node HOST ...]",
    description="Print a job's driver log (through the head's Jobs API, archived on the "
    "way; for a job from before a Ray restart, from the run archive, else the head's old "
    "session directory over SSH), "
    "or list and "
    "print a host's Ray session log files (over SSH), or search every host's at once "
    "(--grep: exit 0 when a line matched, 1 when none did). With --follow and a job: exit "
    "0 when it SUCCEEDED, 1 otherwise.",
)
