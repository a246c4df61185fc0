"""A real Slurm (Debian's slurmctld + slurmd + munge) over the namespace hosts of `NsCluster`.

One ``munged`` and ``slurmctld -D -i`` run in the root namespace; one ``slurmd -D -N nodeI`` per
host runs *inside* that host (nsenter into its net+uts+pid+mount namespaces, like
`NsCluster.exec_in`): jobs then see the host's hostname, its private /tmp/ray and /dev/shm, and
die with the host. Not `ip netns exec`: it remounts /sys, hides the cgroup mounts and slurmd
dies ("No filesystem mounted on /sys/fs/cgroup").

Everything lives under one work dir (config, state, spool, logs, the munge key and socket), the
controller listens on a free port and the cluster name is unique, so two runs on one machine do
not meet. Slurm that cannot start raises `HarnessError` with its logs: tests fail, never skip.

Each node declares ``Gres=gpu:N`` backed by ``gres.conf`` ``File=`` character devices made with
mknod (major 195, NVIDIA's): without File= slurmd reports 0 GPUs and the node is drained.
``SlurmdParameters=config_overrides`` lets each node claim more CPUs than this machine has.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from harness.nshosts import HarnessError, NsCluster, _children, _pid_alive, _tail

__all__ = ["SLURM_PACKAGES", "SlurmCluster", "cleanup_stale"]

SLURM_PACKAGES = ("slurmctld", "slurmd", "munge", "slurm-client")
# One file per running SlurmCluster: its owner's pid and the root-namespace daemons it started.
# A test run killed before its atexit (SIGKILL, OOM) leaves slurmctld/munged behind; the next
# start kills those of dead owners (slurmd dies with its namespace host anyway).
OWNERS = Path("/tmp/vt-slurm-owners")
_TOOLS = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "scancel", "sinfo")


def _free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def cleanup_stale() -> list[int]:
    """Kill the slurmctld/munged of SlurmClusters whose owning process is dead; their pids."""
    killed: list[int] = []
    for record in OWNERS.glob("*.json") if OWNERS.is_dir() else []:
        try:
            data = json.loads(record.read_text())
            owner, pids, marker = int(data["owner"]), data["pids"], str(data["marker"])
        except (OSError, ValueError, KeyError, TypeError):
            record.unlink(missing_ok=True)
            continue
        if _pid_alive(owner):
            continue
        for pid in pids:
            try:  # only a process that is still ours: its command line names our work dir
                cmdline = Path(f"/proc/{int(pid)}/cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError):
                continue
            if marker in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
        record.unlink(missing_ok=True)
    return killed


class SlurmCluster:
    """Slurm over `ns` (already started): node names are the hosts' names (node1..nodeN)."""

    def __init__(
        self,
        ns: NsCluster,
        workdir: Path,
        *,
        gpus_per_node: int = 4,
        cpus_per_node: int = 16,
        start_timeout: float = 60.0,
    ) -> None:
        if not ns.hosts or ns.bridge_ip is None:
            raise HarnessError("start the NsCluster before the SlurmCluster")
        self.ns = ns
        self.workdir = Path(workdir).resolve()
        self.gpus_per_node = gpus_per_node
        self.cpus_per_node = cpus_per_node
        self.start_timeout = start_timeout
        self.name = f"vt{uuid.uuid4().hex[:10]}"  # ClusterName: unique per fixture
        self.conf = self.workdir / "etc" / "slurm.conf"
        self.munge_socket = self.workdir / "munge" / "munge.socket"
        self.port: int | None = None
        self._munged: subprocess.Popen | None = None
        self._ctld: subprocess.Popen | None = None
        self._slurmd: dict[str, subprocess.Popen] = {}
        self.startup_seconds: float | None = None
        self._started = self._stopped = False

    # ------------------------------------------------------------------ public

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment whose Slurm commands talk to this cluster."""
        return {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}

    def run(
        self, *argv: str, timeout: float = 30, check: bool = True
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise HarnessError(
                f"{' '.join(argv)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    def sbatch(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        """Submit; the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=self.env(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise HarnessError(f"sbatch {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()
        if out:
            return out
        # Gone from the queue: ask the controller (kept MinJobAge seconds after the end).
        show = self.run("scontrol", "show", "job", job_id, check=False).stdout
        m = re.search(r"\bJobState=(\S+)", show)
        return m[1] if m else "UNKNOWN"

    def wait_state(self, job_id: str, states: tuple[str, ...], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"job {job_id} is {state}, not {'/'.join(states)} after {timeout:g} s\n"
                    + self.run("scontrol", "show", "job", job_id, check=False).stdout
                    + self.logs()
                )
            time.sleep(0.3)

    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job and wait until the queue is empty (slurmstepd outlives slurmd, so
        this comes before the daemons stop)."""
        ids = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if ids:
            self.run("scancel", *ids, check=False)
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
            if time.monotonic() > deadline:
                raise HarnessError("jobs still in the queue after scancel\n" + self.logs())
            time.sleep(0.3)

    def logs(self, lines: int = 25) -> str:
        paths = [self.workdir / "log" / "slurmctld.log", self.workdir / "log" / "munged.log"]
        paths += [self.workdir / "log" / f"slurmd.{h.name}.log" for h in self.ns.hosts]
        return "\n".join(_tail(p, lines) for p in paths)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._started:
            return
        missing = [t for t in _TOOLS if shutil.which(t) is None]
        if missing:
            raise HarnessError(
                f"{', '.join(missing)}: not found (apt-get install {' '.join(SLURM_PACKAGES)};"
                " ./run-tests installs them)"
            )
        cleanup_stale()
        self._started = True
        atexit.register(self.stop)
        t0 = time.monotonic()
        try:
            self._write_files()
            self._start_munged()
            self._start_ctld()
            self._record_owner()
            for host in self.ns.hosts:
                self._start_slurmd(host.name)
            self._wait_nodes_idle()
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """scancel, then slurmd, slurmctld, munged. Idempotent."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        atexit.unregister(self.stop)
        errors = []
        if self._ctld is not None and self._ctld.poll() is None:
            try:
                self.cancel_all()
            except (HarnessError, subprocess.TimeoutExpired) as exc:
                errors.append(str(exc))
        for name, proc in self._slurmd.items():
            for pid in _children(proc.pid) if proc.poll() is None else []:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            self._reap(proc, f"slurmd {name}", errors)
        for proc, what in ((self._ctld, "slurmctld"), (self._munged, "munged")):
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                self._reap(proc, what, errors)
        self._owner_file.unlink(missing_ok=True)
        if errors:
            raise HarnessError(f"slurm {self.name}: " + "; ".join(errors))

    # ------------------------------------------------------------------ internals

    @property
    def _owner_file(self) -> Path:
        return OWNERS / f"{os.getpid()}-{self.name}.json"

    def _record_owner(self) -> None:
        OWNERS.mkdir(mode=0o700, exist_ok=True)
        pids = [p.pid for p in (self._ctld, self._munged) if p is not None]
        record = {"owner": os.getpid(), "pids": pids, "marker": str(self.workdir)}
        self._owner_file.write_text(json.dumps(record))

    @staticmethod
    def _reap(proc: subprocess.Popen, what: str, errors: list[str]) -> None:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            errors.append(f"{what} ignored SIGTERM: killed")
            for pid in _children(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait(timeout=5)

    def _write_files(self) -> None:
        assert self.ns.bridge_ip is not None
        for sub in ("etc", "munge", "state", "spool", "log", "dev"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir / "munge", 0o700)
        key = self.workdir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        # GPUs for gres.conf: character devices with NVIDIA's major number (slurmd stats them).
        devs = []
        for i in range(self.gpus_per_node):
            dev = self.workdir / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o600 | 0o020000, os.makedev(195, i))
            devs.append(dev)
        self.port = _free_port(self.ns.bridge_ip)
        log, spool = self.workdir / "log", self.workdir / "spool"
        nodes = [
            f"NodeName={h.name} NodeAddr={h.address} CPUs={self.cpus_per_node} "
            f"RealMemory=4000 Gres=gpu:{self.gpus_per_node} State=UNKNOWN"
            for h in self.ns.hosts
        ]
        self.conf.write_text(
            "\n".join(
                [
                    f"# test cluster {self.name}, written by tests/harness/slurm.py",
                    f"ClusterName={self.name}",
                    f"SlurmctldHost={socket.gethostname()}({self.ns.bridge_ip})",
                    f"SlurmctldPort={self.port}",
                    "SlurmdPort=6818",  # one per host's own network namespace: no clash
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={self.workdir / 'state'}",
                    f"SlurmdSpoolDir={spool}/%n",
                    f"SlurmctldPidFile={self.workdir / 'slurmctld.pid'}",
                    f"SlurmdPidFile={spool}/slurmd.%n.pid",
                    f"SlurmctldLogFile={log / 'slurmctld.log'}",
                    f"SlurmdLogFile={log}/slurmd.%n.log",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "SwitchType=switch/none",
                    "MpiDefault=none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "GresTypes=gpu",
                    "SlurmdParameters=config_overrides",
                    "ReturnToService=2",
                    "SlurmdTimeout=60",
                    "MessageTimeout=20",
                    "KillWait=5",
                    "MinJobAge=300",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    *nodes,
                    "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                ]
            )
            + "\n"
        )
        # gres.conf sits next to slurm.conf (Slurm looks there).
        files = f"{self.workdir / 'dev'}/nvidia[0-{self.gpus_per_node - 1}]"
        (self.conf.parent / "gres.conf").write_text(f"Name=gpu File={files}\n")

    def _popen(self, argv: list[str], log_name: str) -> subprocess.Popen:
        with (self.workdir / "log" / log_name).open("ab") as out:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,  # a Ctrl-C meant for pytest does not reach Slurm
                close_fds=True,
            )

    def _start_munged(self) -> None:
        m = self.workdir / "munge"
        self._munged = self._popen(
            [
                "munged",
                "--foreground",
                "--force",  # root, and key/socket under a test dir
                f"--socket={self.munge_socket}",
                f"--key-file={m / 'munge.key'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--seed-file={m / 'munged.seed'}",
                f"--log-file={self.workdir / 'log' / 'munged.log'}",
            ],
            "munged.out",
        )
        self._wait(lambda: self.munge_socket.exists(), self._munged, "munged")

    def _start_ctld(self) -> None:
        self._ctld = self._popen(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")

        def up() -> bool:
            return "UP" in self.run("scontrol", "ping", check=False, timeout=10).stdout

        self._wait(up, self._ctld, "slurmctld")

    def _start_slurmd(self, name: str) -> None:
        host = self.ns.host(name)
        if host.sshd_pid is None:
            raise HarnessError(f"{name} is not running")
        (self.workdir / "spool" / name).mkdir(parents=True, exist_ok=True)
        # The host's /sys is the fresh sysfs `ip netns exec` mounted: no cgroup tree, and
        # slurmd refuses to start without one ("No filesystem mounted on /sys/fs/cgroup"). A
        # tmpfs there, in the host's own mount namespace, satisfies its check (proctrack/
        # linuxproc and task/none use no cgroup); the root namespace is untouched.
        enter = ["nsenter", f"--target={host.sshd_pid}", "--mount", "--"]
        mounts = subprocess.run(
            [*enter, "findmnt", "-n", "-o", "FSTYPE", "/sys/fs/cgroup"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if not mounts.stdout.strip():
            # cgroup v1's plugin also stats the name=systemd hierarchy: mount that one (the
            # machine's own hierarchy, shared, as in the root namespace).
            script = (
                "mount -t tmpfs -o mode=755 vt-cgroup /sys/fs/cgroup && "
                "mkdir /sys/fs/cgroup/systemd && "
                "mount -t cgroup -o none,name=systemd vt-systemd /sys/fs/cgroup/systemd"
            )
            done = subprocess.run(
                [*enter, "sh", "-c", script],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if done.returncode != 0:
                raise HarnessError(f"{name}: cannot mount a cgroup tree: {done.stderr}")
        argv = [
            "nsenter",
            f"--target={host.sshd_pid}",
            "--net",
            "--uts",
            "--pid",
            "--mount",
            "--",
            "slurmd",
            "-D",
            "-N",
            name,
            "-f",
            str(self.conf),
        ]
        self._slurmd[name] = self._popen(argv, f"slurmd.{name}.out")

    def _wait_nodes_idle(self) -> None:
        names = {h.name for h in self.ns.hosts}

        def idle() -> bool:
            for proc in self._slurmd.values():
                if proc.poll() is not None:
                    raise HarnessError(f"a slurmd exited (status {proc.returncode})\n{self.logs()}")
            out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.split("\n")
            states = dict(line.split(None, 1) for line in out if " " in line)
            return all(states.get(n, "").strip() == "idle" for n in names)

        self._wait(idle, self._ctld, "slurmd (nodes idle)")

    def _wait(self, ready, proc: subprocess.Popen | None, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise HarnessError(f"{what} exited (status {proc.returncode})\n{self.logs()}")
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"{what} not ready within {self.start_timeout:g} s\n{self.logs()}"
                )
            time.sleep(0.2)
