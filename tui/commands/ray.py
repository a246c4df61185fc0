"""`verl-tui up | down | status | tunnel`: Ray across the hosts, headless."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tui.commands import Command
from tui.commands.output import json_text
from tui.commands.present import fail, fail_with
from tui.errors import VerlTuiError
from tui.fmt import GIB, plural
from tui.sanitize import one_line

if TYPE_CHECKING:  # the services are imported where used: `verl-tui up --help` stays light
    from tui.cluster.probe import HostFacts
    from tui.cluster.ray_cluster import ClusterStatus, RayCluster, StepEvent
    from tui.config.hosts import Inventory

_MARK = {"ok": "✓", "skip": "·", "fail": "✗", "running": "…"}


def _printer(t0: float) -> Callable[[StepEvent], None]:
    def show(ev: StepEvent) -> None:
        who = ev.host or "cluster"
        print(
            f"[{ev.at - t0:6.1f}s] {_MARK.get(ev.status, ' ')} {who:<16} {ev.phase:<8} "
            f"{ev.message}",
            flush=True,
        )

    return show


def facts_table(inv: Inventory, facts: dict[str, HostFacts]) -> str:
    head = (
        f"{'HOST':<16} {'ROLE':<7} {'PYTHON':<9} {'RAY':<8} {'VERL':<8} {'DEBUGPY':<8} "
        f"{'GPUS':>4} {'CPUS':>4} {'MEM GiB':>8}  INTERPRETER"
    )
    from tui.cluster.probe import interpreter_label

    rows = [head]
    for h in inv.hosts:
        f = facts.get(h.name)
        if f is None or not f.ok:
            rows.append(f"{h.name:<16} {h.role:<7} -- {f.error if f and f.error else 'no answer'}")
            continue
        gpus = h.num_gpus if h.num_gpus is not None else (f.gpu_count or 0)
        mem = f"{(f.mem_total_bytes or 0) / GIB:.0f}"
        rows.append(
            f"{h.name:<16} {h.role:<7} {f.python_version or '-':<9} "
            f"{f.ray_version or '-':<8} {f.verl_version or '-':<8} "
            f"{f.debugpy_version or '-':<8} {gpus:>4} {f.cpu_count or 0:>4} {mem:>8}  "
            f"{one_line(interpreter_label(h, f))}"
        )
    return "\n".join(rows)


def laptop_forward_argv(inv: Inventory) -> list[str]:
    """The `ssh -L` a laptop runs to reach the head's dashboard: through this machine (the
    one verl-tui runs on, which reaches the head) and the host's own jump, if any."""
    import getpass
    import socket

    from tui.shellcmd import ssh_target

    head, port = inv.head, inv.ray.dashboard_port
    here = ssh_target(getpass.getuser(), socket.getfqdn())
    argv = ["ssh", "-N", "-L", f"{port}:127.0.0.1:{port}"]
    if head.transport == "local":
        return [*argv, here]
    jumps = [here, *([head.ssh.jump] if head.ssh.jump else [])]
    argv += ["-J", ",".join(jumps)]
    if head.ssh.port not in (None, 22):
        argv += ["-p", str(head.ssh.port)]
    return [*argv, ssh_target(head.ssh.user, head.address)]


def dashboard_lines(st: ClusterStatus, inv: Inventory) -> list[str]:
    """Where the dashboard is, and for how long: the URL this command prints is its own
    tunnel, gone when it exits (its port differs each run)."""
    from tui.shellcmd import copy_line

    port = inv.ray.dashboard_port
    return [
        f"dashboard: {st.dashboard or '-'} (this command's tunnel: it closes when the "
        "command exits)",
        f"  from a laptop: {copy_line(laptop_forward_argv(inv))}, then http://127.0.0.1:{port}",
        "  from this machine: verl-tui tunnel HOSTS serves it to a browser until Ctrl-C",
    ]


def status_text(st: ClusterStatus, inv: Inventory) -> str:
    out = [
        f"{plural(st.nodes_alive, 'node')} alive   ray {st.ray_version}   "
        f"Python {st.python_version}",
        *dashboard_lines(st, inv),
        "",
        f"{'HOST':<16} {'NODE IP':<16} {'ROLE':<7} {'STATE':<6} {'GPUS':>5} {'CPUS':>5} "
        f"{'MEM GiB':>8}",
    ]
    for n in st.nodes:
        out.append(
            f"{n.host or '(not in file)':<16} {n.node_ip:<16} "
            f"{'head' if n.is_head else 'worker':<7} {'ALIVE' if n.alive else 'DEAD':<6} "
            f"{n.gpus:>5g} {n.cpus:>5g} {n.memory_bytes / GIB:>8.1f}"
        )
    for m in st.missing:
        out.append(f"{m:<16} {'-':<16} {'':<7} {'absent':<6}")
    return "\n".join(out)


async def _with_cluster(
    inv: Inventory,
    body: Callable[[RayCluster], Awaitable[int]],
    progress: Callable[[StepEvent], None] | None = None,
) -> int:
    task = asyncio.current_task()
    assert task is not None  # we run in one
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    from tui.cluster.ray_cluster import RayCluster
    from tui.transport.fleet import Fleet

    async with Fleet(inv) as fleet:
        cluster = RayCluster(fleet, inv, progress)
        try:
            return await body(cluster)
        finally:
            await cluster.close()


EXIT_GRACE_S = 15.0


def _finish_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What asyncio.run does after the main coroutine: cancel what is left, close async
    generators, join the default executor's threads."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())


def _run(coro: Awaitable[int]) -> int:
    """Run a command's coroutine; once it has its answer (and printed it), the process exits
    within EXIT_GRACE_S even if closing connections or joining worker threads stalls (seen
    once under heavy load: output complete, then no exit for 120 s)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    code = 1
    try:
        code = loop.run_until_complete(coro)
    except KeyboardInterrupt:
        code = 130
    except asyncio.CancelledError:
        code = 143
    finally:

        def give_up() -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

        watchdog = threading.Timer(EXIT_GRACE_S, give_up)
        watchdog.daemon = True
        watchdog.start()
        try:
            _finish_loop(loop)
        except KeyboardInterrupt:
            pass
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            watchdog.cancel()
    return code


async def _refused_for_others(cluster: RayCluster, what: str, force: bool) -> int | None:
    """`down`/`restart` while other users' jobs run: said in one line naming them and --force,
    and the exit status (3); None when it may go on."""
    from tui.jobs.owner import others_running, their_jobs_line

    owners = [] if force else await others_running(cluster)
    if not owners:
        return None
    return fail_with(
        f"verl-tui {what}",
        their_jobs_line(owners),
        kind="refused",
        title="others' jobs running",
        hint=f"--force {what}s anyway",
    )


def run_up(inv: Inventory, *, restart: bool, force: bool = False) -> int:
    from tui.cluster.ray_cluster import BringUpError, ClusterBusy

    t0 = time.monotonic()

    async def body(cluster: RayCluster) -> int:
        if restart and (refused := await _refused_for_others(cluster, "restart", force)):
            return refused
        try:
            # The lock first: a second up/down/restart is refused before it probes anything.
            async with cluster.lock("restart" if restart else "up"):
                facts = await cluster.probe_or_refuse()  # a host that cannot connect: at once
                print(facts_table(inv, facts), "\n", flush=True)
                status = await cluster.bring_up(restart=restart, facts=facts)
        except ClusterBusy as exc:  # refused before anything was probed: exit 3
            return fail(exc, "verl-tui up")
        except BringUpError as exc:
            print(file=sys.stderr)  # after the probe table
            return fail(exc, "verl-tui up")
        print("\n" + status_text(status, inv))
        print(f"\nup in {time.monotonic() - t0:.1f} s")
        return 0

    return _run(_with_cluster(inv, body, _printer(t0)))


def run_down(inv: Inventory, *, force: bool = False) -> int:
    from tui.cluster.ray_cluster import ClusterBusy

    t0 = time.monotonic()

    async def body(cluster: RayCluster) -> int:
        if refused := await _refused_for_others(cluster, "down", force):
            return refused
        try:
            report = await cluster.tear_down()
        except ClusterBusy as exc:
            return fail(exc, "verl-tui down")
        bad = {**report.failures, **report.leftover}
        if bad:
            for host, why in bad.items():
                print(f"verl-tui down: {host}: {why}", file=sys.stderr)
            return 1
        print(
            f"Ray stopped on {plural(len(report.stopped), 'host')} in "
            f"{time.monotonic() - t0:.1f} s; "
            "no Ray process left"
        )
        return 0

    return _run(_with_cluster(inv, body, _printer(t0)))


def run_status(inv: Inventory, *, as_json: bool) -> int:
    async def body(cluster: RayCluster) -> int:
        try:
            st = await cluster.status()
        except VerlTuiError as exc:
            msg = f"Ray is not reachable on the head ({inv.head.name}): {exc}"
            if as_json:
                print(
                    json_text({"nodes_alive": 0, "nodes": [], "dashboard": None, "error": msg}, inv)
                )
                return 1
            return fail_with("verl-tui status", msg, kind="unavailable", title="Ray not reachable")
        if as_json:
            print(json_text(st.to_json(), inv))
        else:
            print(status_text(st, inv))
        return 0 if not st.missing else 1

    return _run(_with_cluster(inv, body))


def run_tunnel(inv: Inventory) -> int:
    from tui.cluster.dashboard_gate import BrowserGate

    async def body(cluster: RayCluster) -> int:
        try:
            client = await cluster.dashboard()
            await client.alive_nodes()
        except VerlTuiError as exc:
            return fail(exc, "verl-tui tunnel")
        assert cluster.tunnel is not None  # opened by cluster.dashboard()
        gate = BrowserGate(cluster.tunnel.forward.path)
        try:
            await gate.start(inv.ray.dashboard_port)
        except OSError as exc:
            return fail_with("verl-tui tunnel", f"cannot listen on 127.0.0.1: {exc.strerror}")
        try:
            print(
                f"dashboard and jobs API: {gate.url}\n"
                f"  to {inv.head.name}'s 127.0.0.1:{inv.ray.dashboard_port}; Ctrl-C closes\n"
                "  protected: only a browser that opened this URL gets in (its token becomes an "
                "HttpOnly, SameSite=Strict cookie); any other request, from any user of this "
                "machine, gets 403 and never reaches Ray\n"
                f"  commands use the private socket {cluster.tunnel.forward.path} (a folder only "
                "you can enter)",
                flush=True,
            )
            if inv.head.transport == "local":
                # The head is this machine: Ray's own port is here, open to its users.
                print(
                    f"  note: the head is this machine, so Ray's own 127.0.0.1:"
                    f"{inv.ray.dashboard_port} is reachable by every user of it",
                    flush=True,
                )
            await asyncio.Event().wait()
        finally:
            gate.close()
        return 0

    return _run(_with_cluster(inv, body))


# ---- command line (registered in tui/commands/__init__.py) -----------------------------------


def _up_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--restart", action="store_true", help="stop Ray everywhere first, then start it"
    )
    _force_argument(p)


def _force_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="even while other users' jobs run (refused without it: exit 3)",
    )


def _no_arguments(p: argparse.ArgumentParser) -> None:
    pass


def _json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")


UP = Command(
    _up_arguments,
    lambda a: run_up(a.inventory, restart=a.restart, force=a.force),
    hosts="optional",
    description="Probe every host, check versions, start the Ray head, then all workers "
    "in parallel, and wait until every node is ALIVE. Exit 3 while another up/down "
    "holds the cluster's lock, or for --restart while other users' jobs run (--force).",
)
DOWN = Command(
    _force_argument,
    lambda a: run_down(a.inventory, force=a.force),
    hosts="optional",
    description="Stop Ray on every worker, then the head; check nothing is left. "
    "Exit 3 while another up/down holds the cluster's lock, or while other users' jobs run "
    "(--force).",
)
STATUS = Command(
    _json_argument,
    lambda a: run_status(a.inventory, as_json=a.json),
    hosts="optional",
    description="Nodes alive, their resources and versions (through the head's "
    "dashboard, over SSH). Exit 1 when a host's node is missing.",
)
TUNNEL = Command(
    _no_arguments,
    lambda a: run_tunnel(a.inventory),
    hosts="optional",
    description="Serve the head's loopback dashboard and Jobs API to your browser; print "
    "the URL (it carries a per-process token: other users of this machine get 403) and hold "
    "until Ctrl-C.",
)
