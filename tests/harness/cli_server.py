"""The warm interpreter behind tests/harness/cli.py (run as a script: ``cli_server.py SOCKET``).

It imports the CLI's modules once, then forks one child per request; the child takes the
request's argv, environment, working directory and standard streams (passed as descriptors over
the Unix socket) and runs ``python -m tui`` as a fresh interpreter would, to its normal exit. The
server stays single-threaded (a fork copies only the calling thread: a helper thread's lock
could be held forever in the child), reaps its children from a SIGCHLD wake-up, and sends each
client its child's pid and then its raw wait status.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import pkgutil
import selectors
import signal
import socket
import sys
import threading
from typing import Any

# Modules a request's environment must not change: interpreter start-up read them already.
STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_", "LANG")


def _preload() -> list[str]:
    """Import every module of tui that a command may reach (not the remote programs, which run
    on hosts as scripts of their own); return the ones that failed to import, for the log."""
    import tui

    failed = []
    for info in pkgutil.walk_packages(tui.__path__, "tui."):
        if info.name.startswith(("tui.remote.", "tui.__main__")):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:  # a module that needs an optional part: the child imports it
            failed.append(f"{info.name}: {type(exc).__name__}")
    return failed


def _warm_compose() -> str | None:
    """Compose verl's config once (Hydra's first use, verl's config files read and cached):
    every child that checks, dry-runs or submits a profile starts from there instead of paying
    it again (~4-5 s of CPU a command). Returns why it could not, for the log."""
    try:
        from tui.jobs.verl_compose import compose_detailed

        compose_detailed(["trainer.total_epochs=1"])
    except Exception as exc:  # no verl here: each child reports that as it would
        return f"{type(exc).__name__}: {exc}"
    return None


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the command's process, then return to run it."""
    os.setsid()  # its own group: the client ends it and whatever it started together
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first


def serve(path: str) -> dict[str, Any] | None:
    """Serve requests until the client side closes; in a forked child, return its request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    owners: dict[int, socket.socket] = {}  # child pid -> its client's connection
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                if not msg:
                    conn.close()
                    continue
                request = json.loads(msg)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    for other in owners.values():
                        other.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(request, fds)
                    conn.close()
                    return request
                for fd in fds:
                    os.close(fd)
                owners[pid] = conn
                conn.sendall(f"pid {pid}\n".encode())
            elif key.data == "child":
                os.read(wake_r, 4096)
                while owners:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    conn = owners.pop(pid, None)
                    if conn is not None:
                        with contextlib.suppress(OSError):
                            conn.sendall(f"status {status}\n".encode())
                        conn.close()


def main() -> None:
    failed = _preload()
    cold = _warm_compose()
    if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("cli_server: a thread started while importing tui; forking is unsafe")
    if failed:
        print("cli_server: not preloaded: " + "; ".join(failed), file=sys.stderr)
    if cold:
        print(f"cli_server: verl's config not composed ahead: {cold}", file=sys.stderr)
    gc.freeze()  # the children share the imported heap; its pages are copied only where written
    request = serve(sys.argv[1])
    if request is None:
        return
    sys.argv = ["verl-tui", *request["argv"]]
    os._exit(_run_as_main())


def _run_as_main() -> int:
    """Run `python -m tui` and end as the interpreter would — threads joined, atexit handlers
    run, streams flushed — less its module teardown: with every module of tui loaded that takes
    ~2 s of CPU and does nothing a command shows."""
    import atexit
    import runpy

    try:
        runpy.run_module("tui", run_name="__main__", alter_sys=True)
        code: int = 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter does at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code & 0xFF


if __name__ == "__main__":
    main()
