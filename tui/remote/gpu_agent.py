#!/usr/bin/env python3
"""verl-tui GPU telemetry agent: streams host + GPU samples as JSON lines on stdout.

Shipped to cluster hosts as ``python3 -u -c SOURCE --interval 1.0``: SOURCE is this module
joined with its parts (gpu_common, amd_cards, gpu_nvml, gpu_amd) into one self-contained text by
the loader (tui/remote/__init__.py): stdlib + pynvml / amdsmi (optional), Python 3.8+, no
imports from ``tui`` once joined.
Protocol: one ``{"type":"hello",...}`` line, then one ``{"type":"sample",...}`` line per interval
(with ``--delta``, ``{"type":"delta",...}`` lines between full samples: gpu_common.DeltaEncoder;
with ``--compact`` too, those packed: ``B1 ...`` lines, gpu_common.compact_delta, and the full
sample due every 10 s, when it repeats its base's names, uuids and processes, a ``B2 ...`` line;
a stdin line ``full`` sends the next sample whole: the cockpit lost its base);
on an unexpected failure one ``{"type":"error","error":"..."}`` line, then exit status 1.
The cockpit validates every field (tui/cluster/agent_schema.py): keep types and names in step.
Relay (above ~64 hosts, tui/cluster/relay_plan.py): a stdin line ``relay HOST PORT INDEX TOKEN
KEY`` sends the following lines through that relay (relay_wire.py), ``direct`` back to stdout;
each change is announced on stdout as ``{"type":"route","via":"relay"|"direct",...}``.
It exits (status 0) when stdin reaches EOF -- the SSH channel closing is how the cockpit stops
it, since a remote process without a PTY gets no signal -- and on SIGTERM, SIGHUP or a broken pipe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import sys
import threading
import time

# Parts of this program (tui/remote/__init__.py BUNDLES): the loader joins them after this
# text and drops these imports, so their names are used only inside functions here.
from tui.remote.gpu_amd import _open_amd_backend
from tui.remote.gpu_common import DeltaEncoder, wire_line
from tui.remote.gpu_nvml import NO_LIBRARY, NoneBackend, NvmlBackend, _open_nvidia_backend
from tui.remote.relay_wire import RelayLink

AGENT_PROTOCOL = 1


class HostStats:
    """CPU% from /proc/stat deltas between sweeps, load and memory; None where unknown."""

    def __init__(self):
        self.ncpu = self._ncpu()
        self.prev = self._cpu_times()

    @staticmethod
    def _ncpu():
        try:  # the CPUs this process may use (containers, taskset), as Ray counts them
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1

    @staticmethod
    def _cpu_times():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        # user nice system idle iowait irq softirq steal; guest time is already in user.
        return sum(fields), fields[3] + fields[4]

    def _cpu_percent(self):
        cur = self._cpu_times()
        if cur is None or self.prev is None:
            return None
        if cur[0] - self.prev[0] <= 0:  # window shorter than a jiffy (first sample)
            time.sleep(0.1)
            cur = self._cpu_times() or cur
        total, idle = cur[0] - self.prev[0], cur[1] - self.prev[1]
        self.prev = cur
        return round(100.0 * (total - idle) / total, 1) if total > 0 else None

    def sample(self):
        try:
            load1 = round(os.getloadavg()[0], 2)
        except (AttributeError, OSError):
            load1 = None
        mem = {}
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    mem[key] = int(rest.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        total, avail = mem.get("MemTotal"), mem.get("MemAvailable")
        return {
            "cpu_percent": self._cpu_percent(),
            "load1": load1,
            "mem_used_bytes": total - avail if total and avail is not None else None,
            "mem_total_bytes": total,
            "ncpu": self.ncpu,
        }


class MixedBackend:
    """NVIDIA and AMD GPUs on one host: NVIDIA first with NVML's indexes, AMD after them."""

    def __init__(self, nvidia, amd):
        self.nvidia, self.amd = nvidia, amd
        self.error = None

    @property
    def source(self):
        return f"{self.nvidia.source}+{self.amd.source}"

    @property
    def driver(self):
        return self.nvidia.driver

    @property
    def nvml_version(self):
        return self.nvidia.nvml_version

    def sweep(self):
        nvidia = self.nvidia.sweep()
        for gpu in nvidia:
            gpu["vendor"] = "nvidia"
        offset = max((g["index"] for g in nvidia), default=-1) + 1
        amd = self.amd.sweep()
        for gpu in amd:
            gpu["index"] += offset
        errors = [b.error for b in (self.nvidia, self.amd) if b.error]
        self.error = "; ".join(errors) or None
        return nvidia + amd

    def close(self):
        self.nvidia.close()
        self.amd.close()


def _nvidia_absent(backend):
    """No NVIDIA stack at all here (not: a driver that fails), so the host is AMD-only."""
    return isinstance(backend, NoneBackend) or (
        isinstance(backend, NvmlBackend) and not backend.ok and backend.error == NO_LIBRARY
    )


def _open_backend(interval, once):
    """NVIDIA (NVML, else nvidia-smi) and AMD (sysfs, else amd-smi/rocm-smi), as present."""
    nvidia = _open_nvidia_backend(interval, once)
    amd = _open_amd_backend(interval, once)
    if amd is None:
        return nvidia
    if _nvidia_absent(nvidia):
        nvidia.close()
        return amd
    return MixedBackend(nvidia, amd)


class Route:
    """Where the agent's lines go: stdout, or a relay (relay_wire.py) once the cockpit says so
    on stdin. Any relay failure sends this line and every later one to stdout again; each
    change of route is announced on stdout with a ``{"type":"route",...}`` line."""

    def __init__(self, out):
        self.out, self.link = out, None
        self.on_full = None  # called on the cockpit's "full" (it lost its deltas' base)
        self.lock = threading.Lock()  # stdin's thread switches routes while main() emits

    def emit(self, text):
        with self.lock:
            if self.link is not None:
                try:
                    self.link.send(text)
                    return
                except OSError as err:
                    self._direct(f"relay {self.link.address} failed: {_err_text(err)}")
            self.out.write(text + "\n")
            self.out.flush()

    def _direct(self, error):
        if self.link is not None:
            self.link.close()
            self.link = None
        self.out.write(_route_line("direct", None, error) + "\n")
        self.out.flush()

    def command(self, line):
        """One stdin line from the cockpit: ``relay HOST PORT INDEX TOKEN KEY``, ``direct``, or
        ``full`` (send the next sample whole)."""
        words = line.split()
        if words == ["full"]:
            if self.on_full is not None:
                self.on_full()
        elif words == ["direct"]:
            with self.lock:
                self._direct(None)
        elif len(words) == 6 and words[0] == "relay" and words[2].isdigit() and words[3].isdigit():
            try:
                key = bytes.fromhex(words[5])
                link = RelayLink(words[1], int(words[2]), int(words[3]), words[4], key)
            except (OSError, ValueError) as err:
                with self.lock:
                    self._direct(f"cannot reach relay {words[1]}:{words[2]}: {_err_text(err)}")
                return
            with self.lock:
                if self.link is not None:
                    self.link.close()
                self.link = link
                self.out.write(_route_line("relay", link.address, None) + "\n")
                self.out.flush()

    def close(self):
        with self.lock:
            if self.link is not None:
                self.link.close()
                self.link = None


def _err_text(err):
    return (str(err) or type(err).__name__)[:200]


def _route_line(via, relay, error):
    return json.dumps({"type": "route", "via": via, "relay": relay, "error": error})


def _watch_stdin(stop, done, route):
    """Set ``stop`` when stdin reaches EOF (the SSH channel closed); hand each line to
    ``route`` (the cockpit's relay commands)."""
    pending = b""
    try:
        fd = sys.stdin.fileno()
        while True:
            data = os.read(fd, 4096)  # unbuffered
            if not data:
                break
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                route.command(line.decode("ascii", "replace"))
            pending = pending[-4096:]  # a command is short: never hold more than this
    except (AttributeError, OSError, ValueError):
        return  # no usable stdin (closed, or replaced in-process): nothing to watch
    stop.set()
    # A call into a wedged driver can block for minutes; never outlive the cockpit by much.
    if not done.wait(5.0):
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_agent", description="verl-tui GPU telemetry")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--once", action="store_true", help="emit one sample, then exit")
    parser.add_argument(
        "--delta",
        action="store_true",
        help="between full samples, send only the values that change (delta lines)",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="with --delta: delta lines packed (gpu_common.compact_delta)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 0.0 < args.interval <= 86400.0:  # also rejects nan and inf
        parser.error("--interval must be a number of seconds in (0, 86400]")
    interval = max(0.05, args.interval)

    stop, done = threading.Event(), threading.Event()
    old_handlers = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            with contextlib.suppress(ValueError):  # main() called from a non-main thread
                old_handlers[signum] = signal.signal(signum, lambda *_: stop.set())
    route = Route(sys.stdout)
    if not args.once:
        threading.Thread(target=_watch_stdin, args=(stop, done, route), daemon=True).start()

    def emit(obj):
        route.emit(wire_line(obj, args.compact))

    host = HostStats()
    backend = _open_backend(interval, args.once)
    try:
        emit(
            {
                "type": "hello",
                "agent": AGENT_PROTOCOL,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "python": platform.python_version(),
                "source": backend.source,
                "driver": backend.driver,
                "nvml_version": backend.nvml_version,
                "error": backend.error,
                "ncpu": host.ncpu,
            }
        )
        start, slot, seq = time.monotonic(), 0, 0
        encoder = DeltaEncoder(repeats=args.compact)
        route.on_full = encoder.want_full
        encode = encoder.encode if args.delta and not args.once else None
        while not stop.is_set():
            t = time.time()
            gpus = backend.sweep()
            # driver rides along: NVML may come up after the hello (a driver loaded later).
            sample = {
                "type": "sample",
                "seq": seq,
                "t": round(t, 6),
                "source": backend.source,
                "driver": backend.driver,
                "error": backend.error,
                "host": host.sample(),
                "gpus": gpus,
            }
            emit(sample if encode is None else encode(sample))
            seq += 1
            if args.once:
                break
            # Fixed slots on the monotonic clock: no drift; an overrun skips to the next slot.
            now = time.monotonic()
            slot = max(slot + 1, int((now - start) / interval) + 1)
            stop.wait(max(0.0, start + slot * interval - now))
    except BrokenPipeError:
        # The reader is gone. Point stdout at /dev/null so the exit-time flush stays quiet.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:  # Ctrl-C when run by hand
        pass
    except Exception as err:  # a bug or a host we did not foresee: say why, in the protocol
        with contextlib.suppress(Exception):
            emit({"type": "error", "error": f"agent failed: {type(err).__name__}: {err}"})
        return 1
    finally:
        backend.close()
        route.close()
        done.set()
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
