#!/usr/bin/env python3
"""Simulated GPU hosts for benchmarks: N in-process asyncssh servers on 127.0.0.1.

Each host listens on its own port with one shared generated host key and accepts one generated
client key (strict host keys stay on: a real known_hosts file is written). Any exec command:

* ``PYTHON -u -c SOURCE --interval X [--delta [--compact]]`` (the cockpit's agent command,
  recognised by `` -u -c ``): a "hello" line, then one agent-format "sample" line per interval
  (8 GPUs, varying values, ``"t": time.time()`` at send) until stdin EOF or the channel closes;
  with ``--delta`` through the agent's own DeltaEncoder (delta lines between full samples, as
  the agent sends; with ``--compact``, packed as its compact_delta packs them).
  Its stdin takes the cockpit's relay commands (``relay HOST PORT INDEX TOKEN KEY``, ``direct``):
  samples then go to that relay as the real agent sends them (relay_wire.py), with the same
  ``route`` lines.
* the telemetry relay (tui/remote/gpu_relay.py, recognised by its docstring): the real relay's
  code, run here in-process on 127.0.0.1 (``--bind`` is ignored), its output on the channel.
* ``nvidia-smi ...``: 8 CSV rows in ``--format=csv,noheader,nounits`` order, exit 0.
* anything else: exit 127.

Writes DIR/hosts.yaml, DIR/known_hosts, DIR/id_ed25519, prints ``ready DIR/hosts.yaml`` and runs
until SIGTERM/SIGINT or stdin EOF, then prints one ``stats {...}`` JSON line.

    python bench/simhosts.py --hosts 128 --dir /tmp/sim [--interval 1.0] [--gpus 8] [--cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tui.remote.gpu_common import DeltaEncoder  # the agent's own encoder

MIB = 1024 * 1024
GPU_NAME = "NVIDIA H100 80GB HBM3"
MEM_TOTAL_MIB = 81559
POWER_LIMIT_W = 700.0

STATS = {
    "agent_streams": 0,
    "samples_sent": 0,
    "delta_lines": 0,
    "smi_execs": 0,
    "other_execs": 0,
    "connections": 0,
    "real_execs": 0,
    "replayed": 0,
    "emulated": 0,  # commands answered here as the program would (_tcp_connect)
    "relays": 0,
    "relayed_lines": 0,
}


def gpu_values(host: int, gpu: int, now: float) -> dict:
    """Smoothly varying, host/GPU-dependent values (so every frame really changes)."""
    phase = host * 0.37 + gpu * 0.91
    util = max(0.0, min(100.0, 55 + 40 * math.sin(now / 7.0 + phase) + random.uniform(-3, 3)))
    mem_mib = int(MEM_TOTAL_MIB * (0.45 + 0.4 * (0.5 + 0.5 * math.sin(now / 31.0 + phase))))
    return {
        "util": round(util),
        "mem_util": round(util * 0.6),
        "mem_used_mib": mem_mib,
        "temp": round(45 + util * 0.35),
        "power": round(90 + util * 5.6 + random.uniform(-5, 5), 2),
    }


def agent_sample(host: int, ngpus: int, seq: int, hostname: str) -> dict:
    now = time.time()
    gpus = []
    for i in range(ngpus):
        v = gpu_values(host, i, now)
        gpus.append(
            {
                "index": i,
                "name": GPU_NAME,
                "uuid": f"GPU-{host:04d}{i:04d}-sim",
                "util_percent": float(v["util"]),
                "mem_util_percent": float(v["mem_util"]),
                "memory_used_bytes": v["mem_used_mib"] * MIB,
                "memory_total_bytes": MEM_TOTAL_MIB * MIB,
                "temperature_c": float(v["temp"]),
                "power_w": v["power"],
                "power_limit_w": POWER_LIMIT_W,
                "processes": [
                    {
                        "pid": 10000 + i,
                        "name": "python",
                        "memory_bytes": v["mem_used_mib"] * MIB - 512 * MIB,
                    }
                ],
                "error": None,
            }
        )
    return {
        "type": "sample",
        "seq": seq,
        "t": round(now, 6),
        "source": "nvml",
        "error": None,
        "host": {
            "cpu_percent": round(30 + 20 * math.sin(now / 11 + host), 1),
            "load1": round(20 + 5 * math.sin(now / 13 + host), 2),
            "mem_used_bytes": 600 * 1024 * MIB,
            "mem_total_bytes": 2048 * 1024 * MIB,
            "ncpu": 192,
        },
        "gpus": gpus,
    }


def gpu_health(gpu: int) -> dict:
    """A healthy H100's health object, as the NVML agent adds to a sample every 10 s
    (tui/remote/nvml_health.py read_health); only the benches that ask for it send one."""
    return {
        "ecc_mode": True,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "retired_pages_pending": None,
        "remap_corrected": 0,
        "remap_uncorrected": 0,
        "remap_pending": False,
        "remap_failure": False,
        "clock_reasons": ["idle"] if gpu % 4 == 3 else [],
        "clock_reasons_mask": 1 if gpu % 4 == 3 else 0,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "persistence": True,
        "xid_count": 0,
        "xid_last": None,
    }


def smi_rows(host: int, ngpus: int) -> str:
    now = time.time()
    rows = []
    for i in range(ngpus):
        v = gpu_values(host, i, now)
        rows.append(
            f"{i}, {GPU_NAME}, GPU-{host:04d}{i:04d}-sim, {v['util']}, {v['mem_util']}, "
            f"{v['mem_used_mib']}, {MEM_TOTAL_MIB}, {v['temp']}, {v['power']:.2f}, "
            f"{POWER_LIMIT_W:.2f}"
        )
    return "\n".join(rows) + "\n"


class _Server(asyncssh.SSHServer):
    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        STATS["connections"] += 1

    def begin_auth(self, username: str) -> bool:
        return True  # authentication required: the authorized client key

    def password_auth_supported(self) -> bool:
        return False


def _agent_args(command: str) -> list[str]:
    """The agent's own arguments: the words after its quoted source. Only this tail is split:
    shlex.split of the whole ~57 KB command costs ~25-50 ms of this process's one core per
    exec, which made the simulator, not the cockpit, the limit of a 128-host `check`."""
    return command.rsplit("'", 1)[-1].split() if "'" in command else shlex.split(command)


def _interval_arg(words: list[str], default: float) -> float:
    try:
        return float(words[words.index("--interval") + 1])
    except (ValueError, IndexError):
        return default


async def _agent(
    process: asyncssh.SSHServerProcess,
    host: int,
    ngpus: int,
    interval: float,
    delta: bool,
    once: bool = False,
    compact: bool = False,
) -> None:
    STATS["agent_streams"] += 1
    hostname = f"sim{host:03d}"
    stop = asyncio.Event()
    out = process.stdout
    route = _Route(out)

    async def watch_stdin() -> None:
        with contextlib.suppress(Exception):
            while line := await process.stdin.readline():
                await route.command(line)
        stop.set()

    watcher = asyncio.create_task(watch_stdin())
    try:
        out.write(
            json.dumps(
                {
                    "type": "hello",
                    "agent": 1,
                    "hostname": hostname,
                    "pid": 4242,
                    "python": "3.11.0",
                    "source": "nvml",
                    "driver": "550.54.15",
                    "nvml_version": "12.550.54.15",
                    "error": None,
                    "ncpu": 192,
                },
                separators=(",", ":"),
            )
            + "\n"
        )
        # Every host has its own phase, as real agents started at different moments would.
        start = time.monotonic() + random.uniform(0, interval)
        slot, seq = 0, 0
        encoder = _encoder(compact)
        route.on_full = getattr(encoder, "want_full", None)
        encode = encoder.encode if delta else (lambda sample: sample)
        text_of = _wire_line(compact)  # the agent's lines (--compact: packed)
        if once:  # `--once` (the doctor's health read): one full sample at once, then exit
            out.write(json.dumps(agent_sample(host, ngpus, 0, hostname)) + "\n")
            STATS["samples_sent"] += 1
            stop.set()
        while not stop.is_set():
            delay = start + slot * interval - time.monotonic()
            if delay > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
            line = encode(agent_sample(host, ngpus, seq, hostname))
            route.emit(text_of(line))
            STATS["samples_sent"] += 1
            STATS["delta_lines"] += line["type"] in ("delta", "repeat")
            seq += 1
            slot = max(slot + 1, int((time.monotonic() - start) / interval) + 1)
    except (OSError, asyncssh.Error):
        pass
    finally:
        watcher.cancel()
        route.close()
        with contextlib.suppress(Exception):
            process.exit(0)


def _encoder(compact: bool) -> DeltaEncoder:
    """The agent's encoder (with --compact, its repeats where this tree has them)."""
    try:
        return DeltaEncoder(repeats=compact)
    except TypeError:  # a tree before repeats (bench/telemetry_ab.sh runs older trees)
        return DeltaEncoder()


def _wire_line(compact: bool) -> Callable[[dict], str]:
    """The agent's lines for its messages: gpu_common.wire_line, where this tree has it."""
    from tui.remote import gpu_common

    wire_line = getattr(gpu_common, "wire_line", None)
    if wire_line is not None:
        return lambda msg: wire_line(msg, compact)
    pack = getattr(gpu_common, "compact_delta", None) if compact else None

    def text_of(msg: dict) -> str:
        text = pack(msg) if pack is not None and msg["type"] == "delta" else None
        return text or json.dumps(msg, separators=(",", ":"))

    return text_of


def _knows_relays() -> bool:
    """Whether this tree knows telemetry.relay (bench/telemetry_ab.sh runs older trees)."""
    from tui.config.hosts import TelemetryOptions

    return "relay" in TelemetryOptions.model_fields


class _Route:
    """The real agent's Route (gpu_agent.py), in asyncio: stdout, or a relay once told."""

    def __init__(self, out) -> None:
        self.out = out
        self.writer: asyncio.StreamWriter | None = None
        self.key, self.counter = b"", 0
        self.sign: Any = None  # relay_wire.sign, taken when a relay is asked for
        self.on_full: Callable[[], None] | None = None  # the cockpit's "full" (as the agent)

    def emit(self, text: str) -> None:
        writer = self.writer
        if writer is not None:
            if not writer.is_closing():
                self.counter += 1
                data = text.encode()
                sig = self.sign(self.key, self.counter, data)
                writer.write(b"%d %s %s\n" % (self.counter, sig, data))
                STATS["relayed_lines"] += 1
                return
            self._direct("relay connection lost")
        self.out.write(text + "\n")

    def _route(self, via: str, relay: str | None, error: str | None) -> None:
        self.out.write(
            json.dumps({"type": "route", "via": via, "relay": relay, "error": error}) + "\n"
        )

    def _direct(self, error: str | None) -> None:
        self.close()
        self._route("direct", None, error)

    async def command(self, line: str) -> None:
        words = line.split()
        if words == ["full"]:
            if self.on_full is not None:
                self.on_full()
        elif words == ["direct"]:
            self._direct(None)
        elif len(words) == 6 and words[0] == "relay":
            from tui.remote.relay_wire import sign  # (A/B bases lack it: only asked of new ones)

            self.sign = sign
            try:
                reader, writer = await asyncio.open_connection(words[1], int(words[2]))
                writer.write(f"HELLO {words[3]} {words[4]}\n".encode())
                if await asyncio.wait_for(reader.readline(), 5) != b"OK\n":
                    writer.close()
                    raise OSError("the relay refused this host")
            except (OSError, ValueError, asyncio.TimeoutError) as exc:
                self._direct(f"cannot reach relay {words[1]}:{words[2]}: {exc}")
                return
            self.close()
            self.writer, self.key, self.counter = writer, bytes.fromhex(words[5]), 0
            self._route("relay", f"{words[1]}:{words[2]}", None)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def _relay(process: asyncssh.SSHServerProcess, command: str) -> None:
    """The real relay (gpu_relay.Relay/serve) on 127.0.0.1, its output on this channel."""
    from tui.remote.gpu_relay import Relay, serve  # the relay's own code (A/B bases lack it)

    STATS["relays"] += 1
    words = _agent_args(command)
    try:
        leaves = int(words[words.index("--leaves") + 1])
        flush_ms = int(words[words.index("--flush-ms") + 1]) if "--flush-ms" in words else 100
        key = bytes.fromhex((await process.stdin.readline()).strip())
    except (ValueError, IndexError):
        process.exit(2)
        return
    stop = asyncio.Event()

    async def watch_stdin() -> None:
        with contextlib.suppress(Exception):
            while await process.stdin.read(4096):
                pass
        stop.set()

    watcher = asyncio.create_task(watch_stdin())
    out = process.stdout
    relay = Relay(key, leaves, lambda data: out.write(data.decode()), flush_ms / 1000)

    def ready(port: int) -> None:
        out.write(json.dumps({"type": "relay", "address": "127.0.0.1", "port": port}) + "\n")

    try:
        await serve(relay, "127.0.0.1", stop, ready)
    except (OSError, asyncssh.Error):
        pass
    finally:
        watcher.cancel()
        with contextlib.suppress(Exception):
            process.exit(0)


def _starts_ray(command: str) -> bool:
    """Whether a command runs `ray start/stop` (the words, not text inside a -c program)."""
    if "ray.scripts.scripts" not in command and not re.search(r"\bray\s+(start|stop)\b", command):
        return False  # cheap: most commands never mention it (shlex on 29 KB costs ~25 ms)
    try:
        words = shlex.split(command)
    except ValueError:
        return True  # unparsable: never run it
    for i, word in enumerate(words):
        if word == "ray.scripts.scripts" or (
            os.path.basename(word) == "ray" and words[i + 1 : i + 2] in (["start"], ["stop"])
        ):
            return True
    return False


_REPLIES: dict[str, asyncio.Future] = {}  # --cache-real: a command's first answer, replayed


async def _exec_real(process: asyncssh.SSHServerProcess, command: str, cache: bool) -> None:
    """Run the cockpit's command here, as the host would (probe, version checks, ...)."""
    STATS["real_execs"] += 1
    # A replayed command was checked when it first ran (the check splits the whole command,
    # ~31 ms for the probe's 57 KB: 127 replays of it were the simulator's bottleneck).
    if (not cache or command not in _REPLIES) and _starts_ray(command):  # never run here
        process.stderr.write("simhosts: Ray is never started or stopped on this machine\n")
        process.exit(126)
        return
    if cache and "verl-tui: can this host open a TCP connection" in command:
        await _tcp_connect(process, command)
        return
    if cache and ("verl-tui host probe" in command or "verl-tui: py-spy stack dumps" in command):
        # Real hosts run their probe on their own CPUs, in parallel; here they would all share
        # this machine's. The first host's answer stands for every host's.
        reply = _REPLIES.get(command)
        if reply is None:
            reply = _REPLIES[command] = asyncio.get_running_loop().create_future()
            out = await _run_here(process, capture=True)
            reply.set_result(out)
        else:
            STATS["replayed"] += 1
        stdout, stderr, status = await reply
        process.stdout.write(stdout)
        process.stderr.write(stderr)
        process.exit(status)
        return
    await _run_here(process, capture=False)


async def _tcp_connect(process: asyncssh.SSHServerProcess, command: str) -> None:
    """tui/remote/tcp_connect.py's connect, done here as that program does it (its answer:
    exit 0, or exit 1 and the reason on stdout). Every host runs it (`check`'s GCS reach
    from each worker), each on its own CPU: here 1,024 Python start-ups were ~40 s of the
    simulators' CPU on the device, the bench's bottleneck, and not the cockpit's cost."""
    STATS["emulated"] += 1
    try:
        address, port, timeout = shlex.split(command)[-3:]
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address, int(port)), float(timeout)
        )
        writer.close()
        status = 0
    except asyncio.TimeoutError:
        process.stdout.write("timed out\n")
        status = 1
    except (OSError, ValueError) as exc:
        process.stdout.write(f"{getattr(exc, 'strerror', None) or exc or type(exc).__name__}\n")
        status = 1
    process.exit(status)


async def _run_here(process: asyncssh.SSHServerProcess, capture: bool) -> tuple[str, str, int]:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        process.command or "",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

    async def pump_in() -> None:
        with contextlib.suppress(Exception):
            while data := await process.stdin.read(65536):
                proc.stdin.write(data.encode())
                await proc.stdin.drain()
        with contextlib.suppress(Exception):
            proc.stdin.close()

    got: dict[int, list[str]] = {1: [], 2: []}

    async def pump_out(reader: asyncio.StreamReader, writer, fd: int) -> None:
        while data := await reader.read(65536):
            text = data.decode("utf-8", "replace")
            if capture:
                got[fd].append(text)
            else:
                writer.write(text)

    feeder = asyncio.ensure_future(pump_in())
    await asyncio.gather(
        pump_out(proc.stdout, process.stdout, 1), pump_out(proc.stderr, process.stderr, 2)
    )
    status = await proc.wait()
    feeder.cancel()
    status = status if status >= 0 else 128 - status
    if not capture:
        process.exit(status)
    return "".join(got[1]), "".join(got[2]), status


def _handler(
    host: int, ngpus: int, interval: float, exec_real: bool = False, cache_real: bool = False
):
    async def handle(process: asyncssh.SSHServerProcess) -> None:
        command = process.command or ""
        # The cockpit wraps every command in a process-group prologue (tui/transport/pgroup.py):
        # the command itself follows the wrapper's " verl-tui " argv[0].
        command = command.split(" verl-tui ", 1)[-1]
        agent = " -u -c " in command and (not exec_real or "GPU telemetry agent" in command)
        if "GPU telemetry relay" in command:
            await _relay(process, command)
        elif exec_real and not agent and not command.startswith("nvidia-smi"):
            await _exec_real(process, command, cache_real)
        elif agent:
            words = _agent_args(command)  # the agent's own arguments follow its source
            await _agent(
                process,
                host,
                ngpus,
                _interval_arg(words, interval),
                "--delta" in words,
                "--once" in words,
                "--compact" in words,
            )
        elif command.startswith("nvidia-smi"):
            STATS["smi_execs"] += 1
            with contextlib.suppress(Exception):
                process.stdout.write(smi_rows(host, ngpus))
            process.exit(0)
        else:
            STATS["other_execs"] += 1
            with contextlib.suppress(Exception):
                process.stderr.write(f"sh: {command.split(' ', 1)[0]}: not found\n")
            process.exit(127)

    return handle


async def main_async(args: argparse.Namespace) -> None:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    key_path = out / "id_ed25519"
    if args.keys:  # shared by several simulator processes (one hosts.yaml for all of them)
        host_key = asyncssh.read_private_key(str(Path(args.keys) / "host_ed25519"))
        client_key = asyncssh.read_private_key(str(Path(args.keys) / "id_ed25519"))
    else:
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(str(key_path))
    os.chmod(key_path, 0o600)
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())
    host_pub = host_key.export_public_key().decode().split()[:2]

    servers = []
    for i in range(args.hosts):
        server = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_factory=_Server,
            server_host_keys=[host_key],
            authorized_client_keys=authorized,
            process_factory=_handler(i, args.gpus, args.interval, args.exec_real, args.cache_real),
            encoding="utf-8",
            keepalive_interval=0,
            backlog=128,
        )
        servers.append(server)
    ports = [s.get_port() for s in servers]

    known = out / "known_hosts"
    known.write_text("".join(f"[127.0.0.1]:{p} {host_pub[0]} {host_pub[1]}\n" for p in ports))
    lines = [
        f"cluster: sim-{args.hosts}",
        f"python: {args.python}",
        "ssh:",
        f"  identity_file: {key_path}",
        f"  known_hosts: {known}",
        "  config: ''",
        "  connect_timeout: 60",
        *([f"  keepalive_interval: {args.keepalive_interval}"] if args.keepalive_interval else []),
        *([f"  keepalive_count_max: {args.keepalive_count}"] if args.keepalive_count else []),
        "telemetry:",
        f"  interval: {args.interval}",
        *([f"  relay: {args.relay}"] if _knows_relays() else []),
        "hosts:",
    ]
    for i, p in enumerate(ports):
        lines += [
            f"  - name: {args.prefix}{i:03d}",
            "    address: 127.0.0.1",
            f"    ssh: {{port: {p}}}",
        ]
    for j in range(args.unreachable):  # a port that was free a moment ago: connection refused
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            free = sock.getsockname()[1]
        lines += [f"  - name: down{j:03d}", "    address: 127.0.0.1", f"    ssh: {{port: {free}}}"]
    hosts_yaml = out / "hosts.yaml"
    hosts_yaml.write_text("\n".join(lines) + "\n")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.exit_on_stdin_eof:
        loop.add_reader(sys.stdin.fileno(), lambda: os.read(sys.stdin.fileno(), 4096) or stop.set())
    print(f"ready {hosts_yaml}", flush=True)
    await stop.wait()
    for s in servers:
        s.close()
    print("stats " + json.dumps(STATS), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, required=True)
    p.add_argument("--dir", required=True, help="where hosts.yaml, known_hosts and the key go")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    p.add_argument("--exit-on-stdin-eof", action="store_true")
    p.add_argument(
        "--exec-real",
        action="store_true",
        help="run other commands here with /bin/sh (never `ray start/stop`): probes, checks",
    )
    p.add_argument("--prefix", default="sim", help="host names: PREFIX000, PREFIX001, ...")
    p.add_argument("--keys", help="a folder with host_ed25519 and id_ed25519 to use")
    p.add_argument("--python", default="python3", help="hosts.yaml python (exec_real runs it)")
    p.add_argument(
        "--cache-real",
        action="store_true",
        help="exec_real: run each distinct probe once, replay its answer for the other hosts",
    )
    p.add_argument("--relay", default="auto", choices=["auto", "on", "off"], help="telemetry.relay")
    p.add_argument("--unreachable", type=int, default=0, help="extra hosts nothing listens for")
    p.add_argument("--keepalive-interval", type=float, help="hosts.yaml ssh.keepalive_interval")
    p.add_argument("--keepalive-count", type=int, help="hosts.yaml ssh.keepalive_count_max")
    args = p.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {args.cpu})
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
