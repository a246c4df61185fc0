"""Real OpenSSH hosts in network namespaces, for the test suite.

Topology (all names carry a per-cluster prefix such as ``vt48213x0``, so two test runs on one
machine never collide)::

    root namespace                      namespace <prefix>-node1 (+ its own uts/pid/mount ns)
    bridge <prefix>br 10.201.X.1/24 ──  veth <prefix>h1  <──>  eth0 10.201.X.11/24, lo up
                                    ──  veth <prefix>h2  <──>  eth0 10.201.X.12/24 (node2) ...

No default route inside; hosts reach the root namespace and each other over the bridge. Each host
runs ``/usr/sbin/sshd -D`` as PID 1 of a fresh pid namespace (``unshare --fork --kill-child``), with
its own hostname and private tmpfs mounts on ``/tmp/ray`` and ``/dev/shm`` (so ``ray stop`` on one
host only touches that host). The rest of the filesystem is shared with the test process.

The root namespace has a permanent neighbour entry for every host (and for `unused_address`), so a
cut link or an absent host is a *silent* partition: packets vanish and connects time out, instead
of failing fast with "No route to host" after ARP gives up.

Everything needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). When namespaces cannot be made, `start` raises
`HarnessError` with the reason: tests that need hosts fail loudly, they never skip.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["HarnessError", "NsCluster", "NsHost", "cleanup_stale", "host_at"]

SSHD = "/usr/sbin/sshd"
START_TIMEOUT = 10.0
_IFNAMSIZ = 15
# Prefixes we allocate: vt<pid>x<n>. Anything matching, whose pid is dead, is stale and ours.
_OWNED_RE = re.compile(r"^vt(\d+)x(\d+)(?:br|h\d+|-.+)$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")

_lock = threading.RLock()
_counter = itertools.count()
_subnets_in_use: set[str] = set()
_running: weakref.WeakSet[NsCluster] = weakref.WeakSet()  # started, not stopped
_stale_cleaned = False


class HarnessError(RuntimeError):
    """The test harness could not build or drive its hosts; the message says why."""


@dataclass
class NsHost:
    name: str  # e.g. "node1" — also the UTS hostname inside
    netns: str  # network namespace name
    address: str  # e.g. 10.201.7.11
    workdir: Path  # per-host dir: sshd_config, host keys, logs
    host_key_pub: str  # "ssh-ed25519 AAAA..." (no comment)
    sshd_pid: int | None = None  # root-namespace PID of the sshd that is PID 1 of the host
    veth: str = ""  # root-namespace end of the host's veth pair (a bridge port)
    mac: str = ""  # MAC address of the host's eth0

    @property
    def sshd_config(self) -> Path:
        return self.workdir / "sshd_config"

    @property
    def sshd_log(self) -> Path:
        return self.workdir / "sshd.log"

    @property
    def wrapper_log(self) -> Path:
        """stdout/stderr of `ip netns exec … unshare … sh` (mount/unshare errors land here)."""
        return self.workdir / "wrapper.log"


# ----------------------------------------------------------------------------- small helpers


def _run(
    argv: list[str], *, check: bool = True, timeout: float = 30
) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise HarnessError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{shlex.join(argv)} timed out after {timeout} s") from None
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()
        raise HarnessError(f"{shlex.join(argv)} failed (exit {proc.returncode}): {msg}")
    return proc


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ppid_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ..." — comm may contain spaces and parentheses.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1])


def _children(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (/proc/PID/task/*/children needs CONFIG_PROC_CHILDREN)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _ppid_of(int(entry)) == pid:
            out.append(int(entry))
    return out


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path}: absent)"
    body = "\n".join(text.splitlines()[-lines:])
    return f"--- {path} (last {lines} lines) ---\n{body or '(empty)'}"


def _netns_names() -> set[str]:
    out = _run(["ip", "-j", "netns", "list"]).stdout.strip()
    return {entry["name"] for entry in json.loads(out)} if out else set()


def _link_names() -> set[str]:
    out = _run(["ip", "-j", "link", "show"]).stdout.strip()
    return {entry["ifname"] for entry in json.loads(out)} if out else set()


def _netns_pids(netns: str) -> list[int]:
    proc = _run(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _kill_netns_processes(netns: str, timeout: float = 5.0) -> None:
    """SIGKILL every process whose network namespace is `netns`; wait until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _netns_pids(netns)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise HarnessError(f"processes {pids} in netns {netns} survive SIGKILL")
        time.sleep(0.02)


def _sshd_listening(pid: int) -> bool:
    """Whether the network namespace of `pid` has a TCP socket listening on port 22."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[1].endswith(":0016") and fields[3] == "0A":
            return True
    return False


def _ssh_banner(address: str, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _setenv_word(key: str, value: str) -> str:
    """One `SetEnv` argument, quoted the way sshd_config's argv_split reads it."""
    if not _ENV_KEY_RE.match(key):
        raise ValueError(f"host_env: {key!r} is not an environment variable name")
    if "\n" in value or "\r" in value or "\0" in value:
        raise ValueError(f"host_env: value of {key} contains a newline or NUL")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{key}={escaped}"'


def _yaml_scalar(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9)
    text = text.removesuffix("\n").removesuffix("\n...")
    if "\n" in text:
        raise ValueError(f"{value!r} does not fit on one YAML line")
    return text


def _yaml_field(key: str, value: object, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, (dict, list)) and value:
        dumped = yaml.safe_dump(value, default_flow_style=False, sort_keys=False, width=10**9)
        return [f"{pad}{_yaml_scalar(key)}:"] + [f"{pad}  {line}" for line in dumped.splitlines()]
    return [f"{pad}{_yaml_scalar(key)}: {_yaml_scalar(value)}"]


def cleanup_stale() -> list[str]:
    """Delete namespaces and links of our `vt<pid>x<n>` family whose owning pid is dead.

    Returns the names removed. Objects of live processes (other test runs) are left alone.
    """
    removed = []
    for ns in sorted(_netns_names()):
        m = _OWNED_RE.match(ns)
        if m and not _pid_alive(int(m[1])):
            with contextlib.suppress(HarnessError):
                _kill_netns_processes(ns)
            if _run(["ip", "netns", "del", ns], check=False).returncode == 0:
                removed.append(ns)
    for link in sorted(_link_names()):
        m = _OWNED_RE.match(link)
        # A veth may already have gone with its peer's namespace: failures are fine.
        if (
            m
            and not _pid_alive(int(m[1]))
            and _run(["ip", "link", "del", link], check=False).returncode == 0
        ):
            removed.append(link)
    return removed


def host_at(address: str) -> tuple[NsCluster, NsHost]:
    """The running cluster and host of this process that have `address` (a hosts.yaml's)."""
    for cluster in list(_running):
        for host in cluster.hosts:
            if host.address == address:
                return cluster, host
    raise KeyError(f"no running namespace host has the address {address}")


def _preflight(sshd: str) -> None:
    if os.geteuid() != 0:
        raise HarnessError("network-namespace hosts need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "sh"):
        if shutil.which(tool) is None:
            raise HarnessError(f"{tool}: command not found (needs iproute2, util-linux, openssh)")
    if not os.access(sshd, os.X_OK):
        raise HarnessError(f"{sshd}: not an executable (apt-get install openssh-server)")
    # sshd's privilege-separation directory; the filesystem is shared, so one for all hosts.
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod("/run/sshd", 0o755)


# ----------------------------------------------------------------------------- the cluster


class NsCluster:
    """`count` OpenSSH hosts named node1..nodeN, each in its own network/uts/pid/mount namespace.

    Call `start()` (or use the pytest fixtures in `harness.fixtures`), and `stop()` when done;
    `stop` is idempotent and also runs at interpreter exit.
    """

    def __init__(
        self,
        count: int,
        workdir: Path,
        *,
        host_env: dict[str, dict[str, str]] | None = None,
        bashrc: str = "",
        prefix: str | None = None,
        sshd: str = SSHD,
        start_timeout: float = START_TIMEOUT,
    ):
        if not 1 <= count <= 99:
            raise ValueError(f"count must be 1..99, not {count}")
        names = [f"node{i}" for i in range(1, count + 1)]
        host_env = {k: dict(v) for k, v in (host_env or {}).items()}
        unknown = sorted(set(host_env) - set(names))
        if unknown:
            raise ValueError(f"host_env names unknown hosts: {', '.join(unknown)}")
        for env in host_env.values():
            for key, value in env.items():
                _setenv_word(key, value)  # validate now, not in the middle of start()
        if prefix is None:
            prefix = f"vt{os.getpid()}x{next(_counter)}"
            self._owned_prefix = True
        else:
            if not _PREFIX_RE.match(prefix):
                raise ValueError(f"prefix {prefix!r}: lowercase letters and digits, max 12")
            self._owned_prefix = False
        too_long = [n for n in (f"{prefix}br", f"{prefix}h{count}") if len(n) > _IFNAMSIZ]
        if too_long:
            raise ValueError(f"interface names longer than {_IFNAMSIZ} chars: {too_long}")

        self.count = count
        self.workdir = Path(workdir).resolve()
        self.host_env = host_env
        self.bashrc = bashrc
        self.prefix = prefix
        self.sshd = sshd
        self.start_timeout = start_timeout
        self.bridge = f"{prefix}br"
        self.client_key = self.workdir / "client_ed25519"
        self.authorized_keys = self.workdir / "authorized_keys"
        self.known_hosts = self.workdir / "known_hosts"
        self.subnet: str | None = None  # "10.201.X", chosen by start()
        self.bridge_ip: str | None = None
        self.hosts: list[NsHost] = []
        self._names = names
        self._procs: dict[str, subprocess.Popen] = {}
        self._link_is_down: set[str] = set()
        self._lock = threading.RLock()
        self._started = False
        self._stopped = False

    def __repr__(self) -> str:
        return f"<NsCluster {self.prefix} {self.subnet}.0/24 hosts={self._names}>"

    def __enter__(self) -> NsCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bridge, namespaces, veths, keys and an sshd per host; returns once every sshd answers."""
        with self._lock:
            if self._stopped:
                raise HarnessError(f"{self.prefix}: a stopped cluster cannot be started again")
            if self._started:
                return
            _preflight(self.sshd)
            self._cleanup_stale_once()
            with _lock:
                clash = sorted(
                    n
                    for n in _netns_names() | _link_names()
                    if n == self.bridge
                    or n.startswith(f"{self.prefix}-")
                    or re.fullmatch(rf"{re.escape(self.prefix)}h\d+", n)
                )
                if clash:
                    raise HarnessError(f"prefix {self.prefix} already in use: {clash}")
                self.subnet = self._reserve_subnet()
            self.bridge_ip = f"{self.subnet}.1"
            self._started = True
            _running.add(self)
            atexit.register(self.stop)
            try:
                self._build()
            except BaseException:
                with contextlib.suppress(Exception):
                    self.stop()
                raise

    def stop(self) -> None:
        """Kill every host process, delete namespaces, veths and the bridge. Idempotent."""
        with self._lock:
            if self._stopped or not self._started:
                self._stopped = True
                return
            self._stopped = True
            _running.discard(self)
            atexit.unregister(self.stop)
            errors: list[str] = []
            for host in self.hosts:
                try:
                    self._kill(host)
                except HarnessError as exc:
                    errors.append(str(exc))
            for host in self.hosts:
                _run(["ip", "link", "del", host.veth], check=False)
                with contextlib.suppress(HarnessError):
                    _kill_netns_processes(host.netns)
                _run(["ip", "netns", "del", host.netns], check=False)
            _run(["ip", "link", "del", self.bridge], check=False)
            for proc in self._procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            with _lock:
                _subnets_in_use.discard(self.subnet or "")
            left = self.leftovers()
            if left:
                errors.append(f"still present after stop: {left}")
            if errors:
                raise HarnessError(f"{self.prefix}: " + "; ".join(errors))

    def leftovers(self, timeout: float = 3.0) -> list[str]:
        """Namespaces/links with our prefix, or host processes, that exist (waits up to
        `timeout` s for asynchronous netns teardown to finish). Empty after a clean stop."""
        deadline = time.monotonic() + timeout
        while True:
            names = _netns_names() | _link_names()
            left = sorted(
                n
                for n in names
                if n == self.bridge
                or n.startswith(f"{self.prefix}-")
                or re.fullmatch(rf"{re.escape(self.prefix)}h\d+", n)
            )
            left += [f"pid {p.pid}" for p in self._procs.values() if p.poll() is None]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    # ------------------------------------------------------------------ hosts

    def host(self, name: str) -> NsHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"{self.prefix}: no host named {name!r}")

    def kill_host(self, name: str) -> None:
        """SIGKILL the host's PID 1 (its sshd), so every process inside dies; wait until gone.

        The namespace and its link stay: connections to the address are then *refused*.
        """
        with self._lock:
            self._kill(self.host(name))

    def start_host(self, name: str) -> None:
        """(Re)start the host's sshd with the same host key and config; wait until it answers.

        A running host is killed first. /tmp/ray and /dev/shm come back empty, as after a reboot.
        """
        with self._lock:
            host = self.host(name)
            self._kill(host)
            self._spawn(host)
            self._wait_ready(host)

    def link_down(self, name: str) -> None:
        """Cut the host's network (its veth goes down) without touching its processes."""
        with self._lock:
            host = self.host(name)
            _run(["ip", "link", "set", host.veth, "down"])
            self._link_is_down.add(name)

    def link_up(self, name: str) -> None:
        with self._lock:
            host = self.host(name)
            _run(["ip", "link", "set", host.veth, "up"])
            self._link_is_down.discard(name)

    def link_is_up(self, name: str) -> bool:
        """False between `link_down(name)` and `link_up(name)`."""
        self.host(name)
        return name not in self._link_is_down

    def is_running(self, name: str) -> bool:
        host = self.host(name)
        return host.sshd_pid is not None and _pid_alive(host.sshd_pid)

    def unused_address(self) -> str:
        """An address in the subnet where nothing answers: connects to it time out silently."""
        self._require_started()
        return f"{self.subnet}.250"

    def exec_in(self, name: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run `argv` inside the host (nsenter into net+uts+pid+mount of its sshd).

        Keyword arguments go to subprocess.run; defaults: capture_output (unless stdout/stderr
        given), text=True, timeout=60. `cwd` works (the filesystem is shared).
        """
        host = self.host(name)
        if host.sshd_pid is None or not _pid_alive(host.sshd_pid):
            raise HarnessError(f"{name} is not running (kill_host'ed, or never started)")
        cwd = kw.pop("cwd", None) or os.getcwd()
        if "stdout" not in kw and "stderr" not in kw:
            kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        full = [
            "nsenter",
            f"--target={host.sshd_pid}",
            "--net",
            "--uts",
            "--pid",
            "--mount",
            f"--wd={cwd}",
            "--",
            *argv,
        ]
        return subprocess.run(full, **kw)

    def ssh_argv(
        self, name_or_address: str, *command: str, connect_timeout: float = 3
    ) -> list[str]:
        """The real OpenSSH client's argv for `command` on a host (by name, or an address)."""
        address = name_or_address
        with contextlib.suppress(KeyError):
            address = self.host(name_or_address).address
        return [
            "ssh",
            "-F",
            "none",
            "-i",
            str(self.client_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=none",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={connect_timeout:g}",
            "-o",
            "LogLevel=ERROR",
            f"root@{address}",
            *command,
        ]

    def ssh(
        self, name_or_address: str, *command: str, connect_timeout: float = 3, timeout: float = 30
    ) -> subprocess.CompletedProcess:
        """Run `command` (one shell line, or words that ssh joins with spaces) over real ssh."""
        return subprocess.run(
            self.ssh_argv(name_or_address, *command, connect_timeout=connect_timeout),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def write_hosts_yaml(
        self,
        path: Path,
        *,
        python: str,
        extra_host_fields: dict[str, dict] | None = None,
        names: list[str] | None = None,
        ssh_fields: dict[str, object] | None = None,
        top_fields: dict[str, object] | None = None,
    ) -> Path:
        """Write a hosts.yaml (the product's format) listing `names` (default: every host);
        `ssh_fields` adds keys to its `ssh:` section (e.g. connect_timeout), `top_fields`
        top-level sections (e.g. telemetry)."""
        self._require_started()
        extra = extra_host_fields or {}
        unknown = sorted(set(extra) - set(self._names))
        if unknown:
            raise KeyError(f"extra_host_fields names unknown hosts: {unknown}")
        lines = [
            f"cluster: {_yaml_scalar(self.prefix)}",
            f"python: {_yaml_scalar(python)}",
            "ssh:",
            "  user: root",
            "  port: 22",
            f"  identity_file: {_yaml_scalar(str(self.client_key))}",
            f"  known_hosts: {_yaml_scalar(str(self.known_hosts))}",
            *(ln for k, v in (ssh_fields or {}).items() for ln in _yaml_field(k, v, indent=2)),
            *(ln for k, v in (top_fields or {}).items() for ln in _yaml_field(k, v, indent=0)),
            "hosts:",
        ]
        for name in names if names is not None else self._names:
            host = self.host(name)
            lines.append(f"  - name: {_yaml_scalar(host.name)}")
            lines.append(f"    address: {_yaml_scalar(host.address)}")
            for key, value in extra.get(name, {}).items():
                lines += _yaml_field(key, value, indent=4)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    # ------------------------------------------------------------------ internals

    def _require_started(self) -> None:
        if not self._started or self._stopped or self.subnet is None:
            raise HarnessError(f"{self.prefix}: cluster is not running (call start())")

    @staticmethod
    def _cleanup_stale_once() -> None:
        global _stale_cleaned
        with _lock:
            if not _stale_cleaned:
                cleanup_stale()
                _stale_cleaned = True

    @staticmethod
    def _reserve_subnet() -> str:
        used = _run(["ip", "-o", "addr"]).stdout + _run(["ip", "route"]).stdout
        base = os.getpid() % 254
        for i in range(254):
            x = (base + i) % 254 + 1
            subnet = f"10.201.{x}"
            if subnet in _subnets_in_use:
                continue
            if re.search(rf"(?<![\d.]){re.escape(subnet)}\.", used):
                continue
            _subnets_in_use.add(subnet)
            return subnet
        raise HarnessError("no free 10.201.X.0/24 subnet")

    def _build(self) -> None:
        assert self.subnet is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        for path in (self.client_key, self.client_key.with_suffix(".pub")):
            path.unlink(missing_ok=True)
        _run(
            [
                "ssh-keygen",
                "-t",
                "ed25519",
                "-N",
                "",
                "-q",
                "-C",
                f"{self.prefix}-client",
                "-f",
                str(self.client_key),
            ]
        )
        self.authorized_keys.write_text(self.client_key.with_suffix(".pub").read_text())

        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge", "forward_delay", "0"])
        except HarnessError as exc:
            raise HarnessError(
                f"cannot create the test bridge (needs root with CAP_NET_ADMIN, "
                f"outside a restricted container): {exc}"
            ) from None
        _run(["ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        # A permanent neighbour with a MAC nobody has: connects to unused_address() time out.
        _run(
            [
                "ip",
                "neigh",
                "replace",
                self.unused_address(),
                "lladdr",
                self._mac(250),
                "dev",
                self.bridge,
                "nud",
                "permanent",
            ]
        )

        for i, name in enumerate(self._names, start=1):
            octet = 10 + i
            host = NsHost(
                name=name,
                netns=f"{self.prefix}-{name}",
                address=f"{self.subnet}.{octet}",
                workdir=self.workdir / name,
                host_key_pub="",
                veth=f"{self.prefix}h{i}",
                mac=self._mac(octet),
            )
            self.hosts.append(host)  # before creating anything, so stop() cleans up a half-made one
            self._make_host(host)
        self.known_hosts.write_text("".join(f"{h.address} {h.host_key_pub}\n" for h in self.hosts))
        for host in self.hosts:
            self._spawn(host)
        for host in self.hosts:
            self._wait_ready(host)

    def _mac(self, last_octet: int) -> str:
        assert self.subnet is not None
        octets = [10, 201, int(self.subnet.rsplit(".", 1)[1]), last_octet]
        return "02:42:" + ":".join(f"{o:02x}" for o in octets)

    def _make_host(self, host: NsHost) -> None:
        name = host.name
        host.workdir.mkdir(parents=True, exist_ok=True)
        try:
            _run(["ip", "netns", "add", host.netns])
        except HarnessError as exc:
            raise HarnessError(f"cannot create network namespace {host.netns}: {exc}") from None
        ns = ["ip", "-n", host.netns]
        _run(
            [
                "ip",
                "link",
                "add",
                host.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.netns,
            ]
        )
        _run([*ns, "link", "set", "eth0", "address", host.mac])
        _run([*ns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
        _run([*ns, "link", "set", "lo", "up"])
        _run([*ns, "link", "set", "eth0", "up"])
        _run(["ip", "link", "set", host.veth, "master", self.bridge])
        _run(["ip", "link", "set", host.veth, "up"])
        _run(
            [
                "ip",
                "neigh",
                "replace",
                host.address,
                "lladdr",
                host.mac,
                "dev",
                self.bridge,
                "nud",
                "permanent",
            ]
        )

        key = host.workdir / "ssh_host_ed25519_key"
        if not key.exists():
            _run(["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-C", name, "-f", str(key)])
        host.host_key_pub = " ".join(key.with_suffix(".pub").read_text().split()[:2])

        env = {"VERL_TUI_TEST_HOST": name, **self.host_env.get(name, {})}
        env["VERL_TUI_TEST_HOST"] = name
        setenv = " ".join(_setenv_word(k, v) for k, v in env.items())
        host.sshd_config.write_text(
            f"# {self.prefix}: test host {name}, written by tests/harness/nshosts.py\n"
            f"ListenAddress {host.address}:22\n"
            f"HostKey {key}\n"
            "PidFile none\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            # …and each account's own (a second OS user logging in as itself: team tests).
            f"AuthorizedKeysFile {self.authorized_keys} .ssh/authorized_keys\n"
            "MaxStartups 100:30:200\n"
            "MaxSessions 50\n"
            "PrintMotd no\n"
            "PrintLastLog no\n"
            "UseDNS no\n"
            "X11Forwarding no\n"
            "AllowTcpForwarding yes\n"
            "Subsystem sftp internal-sftp\n"
            "LogLevel VERBOSE\n"
            f"SetEnv {setenv}\n"
        )

    def _spawn(self, host: NsHost) -> None:
        # The host's root has a start-up file of its own, not this machine's: bash runs
        # ~/.bashrc for every command sshd starts, and this machine's (pyenv init, which
        # rehashes under a lock) made each SSH command wait seconds while others ran, up to
        # 19 s on the busy box. A test of a hostile start-up passes its own (`bashrc=`).
        blank = self.workdir / "host_bashrc"
        blank.write_text(
            "# a namespace test host's ~/.bashrc (tests/harness/nshosts.py)\n" + self.bashrc
        )
        script = (
            'set -e; hostname "$1"; shift; mount --make-rprivate /; mkdir -p /tmp/ray; '
            "mount -t tmpfs -o mode=1777 vt-ray /tmp/ray; "
            "mount -t tmpfs -o mode=1777 vt-shm /dev/shm; "
            'if [ -f /root/.bashrc ]; then mount --bind "$1" /root/.bashrc; fi; shift; '
            'exec "$@"'
        )
        argv = [
            "ip",
            "netns",
            "exec",
            host.netns,
            "unshare",
            "--uts",
            "--pid",
            "--mount",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "sh",
            "-c",
            script,
            "nshost",
            host.name,
            str(blank),
            self.sshd,
            "-D",
            "-f",
            str(host.sshd_config),
            "-E",
            str(host.sshd_log),
        ]
        with host.wrapper_log.open("ab") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} {shlex.join(argv)}\n".encode())
            log.flush()
            # A session of its own: a Ctrl-C meant for pytest does not reach the hosts.
            self._procs[host.name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        host.sshd_pid = None

    def _wait_ready(self, host: NsHost) -> None:
        proc = self._procs[host.name]
        deadline = time.monotonic() + self.start_timeout
        while True:
            rc = proc.poll()
            if rc is not None:
                host.sshd_pid = None
                raise HarnessError(
                    f"sshd of {host.name} exited with status {rc}\n"
                    f"{_tail(host.wrapper_log)}\n{_tail(host.sshd_log)}"
                )
            if host.sshd_pid is None:
                kids = _children(proc.pid)
                host.sshd_pid = kids[0] if kids else None
            if host.sshd_pid is not None:
                if host.name in self._link_is_down:
                    ready = _sshd_listening(host.sshd_pid)
                else:
                    ready = _ssh_banner(host.address)
                if ready:
                    return
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"sshd of {host.name} did not accept TCP on {host.address}:22 within "
                    f"{self.start_timeout:g} s\n{_tail(host.wrapper_log)}\n{_tail(host.sshd_log)}"
                )
            time.sleep(0.02)

    def _kill(self, host: NsHost) -> None:
        proc = self._procs.get(host.name)
        if host.sshd_pid is None and proc is not None and proc.poll() is None:
            kids = _children(proc.pid)
            host.sshd_pid = kids[0] if kids else None
        if host.sshd_pid is not None:
            # PID 1 of the pid namespace: when it dies the kernel kills everything inside.
            with contextlib.suppress(ProcessLookupError):
                os.kill(host.sshd_pid, signal.SIGKILL)
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()  # unshare --kill-child takes its child along
                proc.wait(timeout=5)
        # Stragglers that entered only the netns (e.g. a test's own `ip netns exec`).
        _kill_netns_processes(host.netns)
        host.sshd_pid = None
